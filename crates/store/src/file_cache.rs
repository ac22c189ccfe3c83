//! The file behind tf.data's `cache(filename)`: one chunk file that exists only once a full
//! pass has been written.
//!
//! The first iteration writes every chunk it produces through a [`FileCacheWriter`]; later
//! iterations (in this process or another) find the file with [`FileCache::open`] and read
//! it instead of recomputing. The file at the cache path is always complete:
//!
//! - the writer writes to a temporary file beside the path (`<path>.tmp-<host>-<pid>-<random>`) and
//!   [`finish`](FileCacheWriter::finish) syncs it and publishes it with a hard link, which
//!   never replaces an existing file: when two writers race, the first to finish wins and the
//!   other drops its copy (reported as [`CacheFinished::Lost`], not an error);
//! - a writer dropped before `finish` (an iterator abandoned mid-pass, an error) removes its
//!   temporary file; a killed process leaves only the temporary file, which no reader opens
//!   and the next writer or reader removes (`publish::reclaim`).
//!
//! A cache file that is damaged later (a flipped byte, a truncation) is reported by the
//! reader as an [`Error::Data`](flumen_ir::Error::Data) naming the file and byte offset.

use std::io;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::Result;

use crate::chunk_file::{ChunkFileReader, ChunkFileWriter, FileSummary};
use crate::publish::{io_error, reclaim, TempFile};
use crate::Compression;

/// What [`FileCache::open`] found at a cache path.
pub enum FileCache {
    /// A complete cache file, opened at its first chunk.
    Complete(ChunkFileReader),
    /// No cache file: this pass must compute its chunks (and may write them).
    Missing,
}

impl FileCache {
    /// Looks for a complete cache file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<FileCache> {
        let path = path.as_ref();
        reclaim(path);
        match std::fs::metadata(path) {
            Ok(_) => Ok(FileCache::Complete(ChunkFileReader::open(path)?)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FileCache::Missing),
            Err(e) => Err(io_error(path, e)),
        }
    }
}

/// How [`FileCacheWriter::finish`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFinished {
    /// This writer's file is now the cache file.
    Published(FileSummary),
    /// Another writer published the cache file first; this writer's copy was dropped.
    Lost,
}

/// Writes one pass into a temporary file and publishes it at the cache path when the pass
/// is complete. Dropping the writer unfinished removes the temporary file.
pub struct FileCacheWriter {
    path: PathBuf,
    // Declared before `temp` so that an unfinished writer closes its file before the
    // temporary file is removed.
    writer: ChunkFileWriter,
    temp: TempFile,
}

impl FileCacheWriter {
    /// Starts a pass for the cache at `path` (whose directory must exist) with chunks of
    /// `schema`.
    pub fn create(path: impl AsRef<Path>, schema: SchemaRef, compression: Compression) -> Result<FileCacheWriter> {
        let path = path.as_ref().to_path_buf();
        let (temp, file) = TempFile::create(&path)?;
        let writer = ChunkFileWriter::from_file(file, temp.path().to_path_buf(), schema, compression)?;
        Ok(FileCacheWriter { path, temp, writer })
    }

    /// The cache path the file will be published at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one chunk of the pass.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch)
    }

    /// Ends the pass: completes and syncs the file, then publishes it unless another writer
    /// already has.
    pub fn finish(self) -> Result<CacheFinished> {
        let summary = self.writer.finish()?;
        if self.temp.publish_new(&self.path)? {
            Ok(CacheFinished::Published(summary))
        } else {
            Ok(CacheFinished::Lost)
        }
    }
}
