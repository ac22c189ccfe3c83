//! Reading chunk files.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};
use serde::{Deserialize, Serialize};

use super::frame::{check_file_header, FrameHeader, FrameKind, END_PAYLOAD_LEN, FILE_HEADER_LEN, FRAME_HEADER_LEN};
use super::ipc::{decode_chunk, decode_schema};
use crate::compression::Decompressor;
use crate::Compression;

/// Large enough that frames of small chunks come in few system calls; payloads larger than
/// this are read straight into their own buffer.
const READ_BUFFER: usize = 256 * 1024;

/// Where a reader stands in a chunk file: the next frame and what came before it. A position
/// is a cheap checkpoint: [`ChunkFileReader::open_at`] resumes at it without reading the
/// frames before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ChunkPosition {
    /// Byte offset of the next frame (a chunk frame, or the end frame once all chunks have
    /// been read). `0`, as in `ChunkPosition::default()`, is the start of the file.
    pub offset: u64,
    /// Chunks before that frame: the index of the next chunk.
    pub chunks: u64,
    /// Rows before that frame.
    pub rows: u64,
}

/// Reads a chunk file front to back, an iterator of its chunks; see the
/// [module doc](super) for the layout and the errors.
///
/// Each chunk is checked (checksums, lengths, Arrow validation of the decoded arrays) and its
/// arrays share the buffer the payload was read or decompressed into: there is no per-row
/// work. After the first error the iterator ends.
pub struct ChunkFileReader {
    path: PathBuf,
    file: BufReader<File>,
    len: u64,
    /// The schema as the schema frame holds it: decoding needs its dictionary ids.
    file_schema: SchemaRef,
    /// The schema chunks are handed out with.
    schema: SchemaRef,
    first_chunk: u64,
    position: ChunkPosition,
    done: bool,
    decompressor: Decompressor,
    stored: Vec<u8>,
}

impl ChunkFileReader {
    /// Opens the file at `path` at its first chunk, checking its header and schema frame.
    pub fn open(path: impl AsRef<Path>) -> Result<ChunkFileReader> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| io_error(&path, e))?;
        let len = file.metadata().map_err(|e| io_error(&path, e))?.len();
        let mut file = BufReader::with_capacity(READ_BUFFER, file);
        if len < FILE_HEADER_LEN {
            return Err(data_error(&path, 0, format!("truncated: {len} bytes is shorter than the file header")));
        }
        let mut header = [0u8; FILE_HEADER_LEN as usize];
        file.read_exact(&mut header).map_err(|e| io_error(&path, e))?;
        check_file_header(&header).map_err(|m| data_error(&path, 0, m))?;
        // The schema frame is read with the reader's own frame checks, so the schemas start
        // as placeholders.
        let mut reader = ChunkFileReader {
            file_schema: Arc::new(arrow::datatypes::Schema::empty()),
            schema: Arc::new(arrow::datatypes::Schema::empty()),
            path,
            file,
            len,
            first_chunk: 0,
            position: ChunkPosition { offset: FILE_HEADER_LEN, chunks: 0, rows: 0 },
            done: false,
            decompressor: Decompressor::new(),
            stored: Vec::new(),
        };
        let at = FILE_HEADER_LEN;
        let frame = reader.read_header(at)?;
        if frame.kind != FrameKind::Schema {
            return Err(reader.data_error(at, format!("expected the schema frame, found a {:?} frame", frame.kind)));
        }
        let payload = reader.read_payload(at, &frame)?;
        let schema = Arc::new(decode_schema(&payload).map_err(|m| reader.data_error(at, m))?);
        reader.file_schema = schema.clone();
        reader.schema = schema;
        reader.first_chunk = at + FRAME_HEADER_LEN as u64 + frame.stored_len;
        reader.position.offset = reader.first_chunk;
        Ok(reader)
    }

    /// Opens the file at `path` at `position`, which an earlier reader of the same file
    /// reported with [`position`](ChunkFileReader::position). The offset must hold a chunk or
    /// end frame whose header checksum matches; anything else is an error naming the offset.
    /// `ChunkPosition::default()` opens at the first chunk.
    pub fn open_at(path: impl AsRef<Path>, position: ChunkPosition) -> Result<ChunkFileReader> {
        let mut reader = ChunkFileReader::open(path)?;
        if position.offset == 0 && position.chunks == 0 && position.rows == 0 {
            return Ok(reader);
        }
        let at = position.offset;
        if at < reader.first_chunk || at >= reader.len {
            return Err(reader.data_error(at, "not a frame of this file (resume position out of range)"));
        }
        reader.file.seek(SeekFrom::Start(at)).map_err(|e| io_error(&reader.path, e))?;
        let frame = reader.read_header(at).map_err(|e| match e {
            Error::Data { location, message } => {
                Error::Data { location, message: format!("resume position is not a frame start: {message}") }
            }
            other => other,
        })?;
        if frame.kind == FrameKind::Schema {
            return Err(reader.data_error(at, "resume position is the schema frame, not a chunk"));
        }
        // The header was only a check: the next read starts over at the frame.
        reader.file.seek_relative(-(FRAME_HEADER_LEN as i64)).map_err(|e| io_error(&reader.path, e))?;
        reader.position = position;
        Ok(reader)
    }

    /// Hands chunks out with `schema` (for example the exact `Arc` a pipeline operator
    /// outputs) instead of the schema decoded from the file. Its fields must equal the file's.
    pub fn with_schema(mut self, schema: SchemaRef) -> Result<ChunkFileReader> {
        if schema.fields() != self.file_schema.fields() {
            return Err(self.data_error(
                FILE_HEADER_LEN,
                format!(
                    "the file's fields {:?} differ from the expected fields {:?}",
                    self.file_schema.fields(),
                    schema.fields()
                ),
            ));
        }
        self.schema = schema;
        Ok(self)
    }

    /// The schema of the chunks.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the reader stands: the next frame to read. Once the iterator has ended without
    /// an error, its `chunks` and `rows` are the file's totals.
    pub fn position(&self) -> ChunkPosition {
        self.position
    }

    fn read_chunk(&mut self) -> Result<Option<RecordBatch>> {
        let at = self.position.offset;
        let frame = self.read_header(at)?;
        match frame.kind {
            FrameKind::Chunk => {
                let payload = self.read_payload(at, &frame)?;
                let mut batch = decode_chunk(&payload, &self.file_schema).map_err(|m| self.data_error(at, m))?;
                if batch.num_rows() != frame.rows as usize {
                    return Err(self.data_error(
                        at,
                        format!("the chunk has {} rows, its frame header says {}", batch.num_rows(), frame.rows),
                    ));
                }
                if !Arc::ptr_eq(&self.schema, &self.file_schema) {
                    batch = batch.with_schema(self.schema.clone()).map_err(|e| self.data_error(at, e.to_string()))?;
                }
                self.position.offset = at + FRAME_HEADER_LEN as u64 + frame.stored_len;
                self.position.chunks += 1;
                self.position.rows += u64::from(frame.rows);
                Ok(Some(batch))
            }
            FrameKind::End => {
                if frame.stored_len != END_PAYLOAD_LEN {
                    return Err(self.data_error(at, format!("an end frame of {} bytes", frame.stored_len)));
                }
                let payload = self.read_payload(at, &frame)?;
                let count = |i: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&payload[i..i + 8]);
                    u64::from_le_bytes(b)
                };
                let (chunks, rows) = (count(0), count(8));
                if (chunks, rows) != (self.position.chunks, self.position.rows) {
                    return Err(self.data_error(
                        at,
                        format!(
                            "count mismatch: the end frame says {chunks} chunks and {rows} rows, the file holds {} \
                             chunks and {} rows",
                            self.position.chunks, self.position.rows
                        ),
                    ));
                }
                let end = at + FRAME_HEADER_LEN as u64 + END_PAYLOAD_LEN;
                if end != self.len {
                    return Err(self.data_error(at, format!("{} bytes after the end frame", self.len - end)));
                }
                Ok(None)
            }
            FrameKind::Schema => Err(self.data_error(at, "a second schema frame")),
        }
    }

    /// Reads and checks the frame header at `at`, where the file cursor stands.
    fn read_header(&mut self, at: u64) -> Result<FrameHeader> {
        if at == self.len {
            return Err(self.data_error(
                at,
                format!("truncated: no end frame after {} chunks (the writer did not finish)", self.position.chunks),
            ));
        }
        if self.len - at < FRAME_HEADER_LEN as u64 {
            return Err(
                self.data_error(at, format!("truncated: the file ends {} bytes into a frame header", self.len - at))
            );
        }
        let mut bytes = [0u8; FRAME_HEADER_LEN];
        self.file.read_exact(&mut bytes).map_err(|e| self.read_error(at, e))?;
        FrameHeader::decode(&bytes).map_err(|m| self.data_error(at, m))
    }

    /// Reads, checks and decompresses the payload of the frame at `at`, whose header was just read.
    fn read_payload(&mut self, at: u64, frame: &FrameHeader) -> Result<Buffer> {
        let available = self.len - at - FRAME_HEADER_LEN as u64;
        if frame.stored_len > available {
            return Err(self.data_error(
                at,
                format!(
                    "truncated: a payload of {} bytes, only {available} bytes left in the file ({} bytes)",
                    frame.stored_len, self.len
                ),
            ));
        }
        let stored_len = usize::try_from(frame.stored_len).map_err(|_| {
            self.data_error(at, format!("a payload of {} bytes does not fit in memory", frame.stored_len))
        })?;
        if frame.codec == Compression::None {
            let mut payload = Vec::new();
            self.read_exact_into(at, &mut payload, stored_len)?;
            self.check_crc(at, frame, &payload)?;
            return Ok(Buffer::from_vec(payload));
        }
        let mut stored = std::mem::take(&mut self.stored);
        let result = self.read_exact_into(at, &mut stored, stored_len).and_then(|()| {
            self.check_crc(at, frame, &stored)?;
            self.decompressor.decompress(frame.codec, &stored, frame.raw_len).map_err(|m| self.data_error(at, m))
        });
        self.stored = stored;
        Ok(Buffer::from_vec(result?))
    }

    /// Replaces `buf`'s contents with the next `len` bytes, without zeroing them first.
    fn read_exact_into(&mut self, at: u64, buf: &mut Vec<u8>, len: usize) -> Result<()> {
        buf.clear();
        buf.try_reserve_exact(len).map_err(|e| self.data_error(at, format!("cannot allocate {len} bytes: {e}")))?;
        (&mut self.file).take(len as u64).read_to_end(buf).map_err(|e| self.read_error(at, e))?;
        if buf.len() != len {
            return Err(self.data_error(at, "truncated: the file shrank while being read"));
        }
        Ok(())
    }

    fn check_crc(&self, at: u64, frame: &FrameHeader, stored: &[u8]) -> Result<()> {
        if crc32fast::hash(stored) != frame.payload_crc {
            return Err(self.data_error(at, "bad frame payload (checksum mismatch)"));
        }
        Ok(())
    }

    fn read_error(&self, at: u64, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            self.data_error(at, "truncated: the file shrank while being read")
        } else {
            io_error(&self.path, e)
        }
    }

    fn data_error(&self, at: u64, message: impl Into<String>) -> Error {
        data_error(&self.path, at, message)
    }
}

impl Iterator for ChunkFileReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        if self.done {
            return None;
        }
        match self.read_chunk() {
            Ok(Some(batch)) => Some(Ok(batch)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn data_error(path: &Path, at: u64, message: impl Into<String>) -> Error {
    Error::data(Location::new(path.display().to_string(), format!("byte {at}")), message)
}

fn io_error(path: &Path, e: io::Error) -> Error {
    Error::io(path.display().to_string(), e)
}
