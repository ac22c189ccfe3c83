//! Writing chunk files.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};
use serde::{Deserialize, Serialize};

use super::frame::{file_header, FrameHeader, FrameKind, FILE_HEADER_LEN, FRAME_HEADER_LEN};
use super::ipc::Encoder;
use crate::compression::Compressor;
use crate::Compression;

/// Large enough that small chunks reach the disk in few system calls.
const WRITE_BUFFER: usize = 256 * 1024;

/// What a finished chunk file (or a finalized snapshot) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileSummary {
    /// Chunks written.
    pub chunks: u64,
    /// Rows written (elements: each row is one element).
    pub rows: u64,
    /// Bytes on disk, headers and schema included.
    pub bytes: u64,
}

/// Writes a chunk file front to back; see the [module doc](super) for the layout.
///
/// A writer dropped before [`finish`](ChunkFileWriter::finish) leaves a file without an end
/// frame, which every reader rejects as truncated.
pub struct ChunkFileWriter {
    path: PathBuf,
    file: BufWriter<File>,
    schema: SchemaRef,
    compression: Compression,
    encoder: Encoder,
    compressor: Compressor,
    raw: Vec<u8>,
    summary: FileSummary,
}

impl ChunkFileWriter {
    /// Creates (or truncates) the file at `path` for chunks of `schema`, writing the header
    /// and the schema frame.
    pub fn create(path: impl AsRef<Path>, schema: SchemaRef, compression: Compression) -> Result<ChunkFileWriter> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| Error::io(path.display().to_string(), e))?;
        ChunkFileWriter::from_file(file, path.to_path_buf(), schema, compression)
    }

    /// Starts a chunk file in `file`, an empty file opened for writing at `path`.
    pub(crate) fn from_file(
        file: File,
        path: PathBuf,
        schema: SchemaRef,
        compression: Compression,
    ) -> Result<ChunkFileWriter> {
        let encoder = Encoder::new(schema.clone())
            .map_err(|e| Error::execution("chunk file writer", format!("{}: {e}", path.display())))?;
        let schema_message = encoder.schema_message();
        let mut writer = ChunkFileWriter {
            path,
            file: BufWriter::with_capacity(WRITE_BUFFER, file),
            schema,
            compression,
            encoder,
            compressor: Compressor::new(),
            raw: Vec::new(),
            summary: FileSummary::default(),
        };
        writer.file.write_all(&file_header()).map_err(|e| io_error(&writer.path, e))?;
        let schema_frame = write_frame(
            &mut writer.file,
            &writer.path,
            FrameKind::Schema,
            Compression::None,
            0,
            schema_message.len(),
            &schema_message,
        )?;
        writer.summary.bytes = FILE_HEADER_LEN + schema_frame;
        Ok(writer)
    }

    /// The schema every chunk must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one chunk. Its fields must equal the file schema's (schema metadata may differ).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        check_schema(&self.schema, batch, &self.path)?;
        let rows = u32::try_from(batch.num_rows()).map_err(|_| {
            Error::execution(
                "chunk file writer",
                format!("{}: a chunk of {} rows is over the format's 2^32 - 1", self.path.display(), batch.num_rows()),
            )
        })?;
        self.encoder
            .encode(batch, &mut self.raw)
            .map_err(|e| Error::execution("chunk file writer", format!("{}: {e}", self.path.display())))?;
        let raw = std::mem::take(&mut self.raw);
        let result = self.write_chunk(rows, &raw);
        self.raw = raw;
        result?;
        self.summary.chunks += 1;
        self.summary.rows += u64::from(rows);
        Ok(())
    }

    fn write_chunk(&mut self, rows: u32, raw: &[u8]) -> Result<()> {
        let compressed = self.compressor.compress(self.compression, raw).map_err(|e| io_error(&self.path, e))?;
        // A codec that does not shrink the payload only costs time on every read.
        let (codec, stored) =
            if compressed.len() < raw.len() { (self.compression, compressed) } else { (Compression::None, raw) };
        self.summary.bytes +=
            write_frame(&mut self.file, &self.path, FrameKind::Chunk, codec, rows, raw.len(), stored)?;
        Ok(())
    }

    /// Writes the end frame, flushes and syncs the file to disk, and returns what it holds.
    pub fn finish(mut self) -> Result<FileSummary> {
        let mut end = [0u8; 16];
        end[..8].copy_from_slice(&self.summary.chunks.to_le_bytes());
        end[8..].copy_from_slice(&self.summary.rows.to_le_bytes());
        self.summary.bytes +=
            write_frame(&mut self.file, &self.path, FrameKind::End, Compression::None, 0, end.len(), &end)?;
        self.file.flush().map_err(|e| io_error(&self.path, e))?;
        self.file.get_ref().sync_all().map_err(|e| io_error(&self.path, e))?;
        Ok(self.summary)
    }
}

/// Writes one frame (header and `stored` payload) and returns the bytes written.
fn write_frame(
    file: &mut BufWriter<File>,
    path: &Path,
    kind: FrameKind,
    codec: Compression,
    rows: u32,
    raw_len: usize,
    stored: &[u8],
) -> Result<u64> {
    let header = FrameHeader {
        kind,
        codec,
        rows,
        stored_len: stored.len() as u64,
        raw_len: raw_len as u64,
        payload_crc: crc32fast::hash(stored),
    };
    file.write_all(&header.encode()).map_err(|e| io_error(path, e))?;
    file.write_all(stored).map_err(|e| io_error(path, e))?;
    Ok((FRAME_HEADER_LEN + stored.len()) as u64)
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(path.display().to_string(), e)
}

/// Checks that `batch` has the fields of `schema`, the schema of the file at `path`.
pub(crate) fn check_schema(schema: &SchemaRef, batch: &RecordBatch, path: &Path) -> Result<()> {
    if batch.schema_ref().fields() == schema.fields() {
        return Ok(());
    }
    Err(Error::execution(
        "chunk file writer",
        format!(
            "{}: a chunk with fields {:?} does not match the file's fields {:?}",
            path.display(),
            batch.schema_ref().fields(),
            schema.fields()
        ),
    ))
}
