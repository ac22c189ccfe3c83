//! flumen's own chunk files (`flumen_store::chunk_file`): snapshot shards and `cache(path)`
//! files, read as a file format, so a snapshot's custom reader can open its shards with
//! `read_file` like any other file.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{ElementSpec, Result};
use flumen_store::chunk_file::{ChunkFileReader, ChunkPosition};
use serde::{Deserialize, Serialize};

use crate::conform::with_schema;
use crate::position::{decode, encode};
use crate::reader::{ChunkReader, ReaderPosition};

/// The element spec of the chunk file at `path`.
pub fn chunks_schema(path: &str) -> Result<ElementSpec> {
    ElementSpec::from_arrow_schema(ChunkFileReader::open(path)?.schema().as_ref())
}

/// Reads a chunk file, chunk by chunk as written. A corrupt or truncated file is an error
/// naming the file and byte offset, after which the reader ends.
pub struct ChunksReader {
    path: String,
    reader: ChunkFileReader,
    schema: SchemaRef,
}

#[derive(Serialize, Deserialize)]
struct Position {
    chunk: ChunkPosition,
}

impl ChunksReader {
    /// Opens `path`, whose chunks must have the columns of `schema`.
    pub fn open(path: &str, schema: &ElementSpec) -> Result<Self> {
        let schema = schema.arrow_schema();
        let reader = ChunkFileReader::open(path)?;
        Ok(ChunksReader { path: path.to_string(), reader, schema })
    }
}

impl ChunkReader for ChunksReader {
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        match self.reader.next().transpose()? {
            Some(chunk) => Ok(Some(with_schema(self.schema.clone(), chunk.columns().to_vec(), chunk.num_rows())?)),
            None => Ok(None),
        }
    }

    fn position(&self) -> Result<ReaderPosition> {
        encode("chunks", &Position { chunk: self.reader.position() })
    }

    fn seek(&mut self, position: &ReaderPosition) -> Result<()> {
        let position: Position = decode("chunks", position)?;
        self.reader = ChunkFileReader::open_at(&self.path, position.chunk)?;
        Ok(())
    }
}
