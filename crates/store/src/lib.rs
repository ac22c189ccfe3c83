//! # flumen-store
//!
//! Persistent chunk storage: where a pipeline's chunks go when they outlive an iteration.
//! Everything here stores Arrow `RecordBatch` chunks of one schema (one row per element, as
//! everywhere in flumen) and reads them back fast: buffered, checksummed, decompressed into
//! buffers the arrays use in place, no per-row work.
//!
//! - [`chunk_file`]: the on-disk format (documented there, with its version): a header, the
//!   schema once, one checksummed and compressed frame per chunk, and an end frame with the
//!   totals, so truncation and corruption are always detected. [`ChunkFileWriter`] writes
//!   one, [`ChunkFileReader`] reads it (and resumes at a [`ChunkPosition`]).
//! - [`file_cache`]: the single file behind `cache(path)`: [`FileCache::open`] finds a
//!   complete one, or a pass writes one through [`FileCacheWriter`], published atomically
//!   only when the pass completes.
//! - [`snapshot`]: tf.data's snapshot (RFC 193): [`snapshot::begin`] decides READ, WRITE or
//!   PASSTHROUGH from `<path>/<fingerprint>/snapshot.metadata`; a [`SnapshotWriter`] writes
//!   sharded chunk files in parallel and finalizes only if it still owns the snapshot; a
//!   [`SnapshotReader`] reads them back in order or shuffled.
//! - [`publish`]: files written beside their final path and published in one step, so that
//!   no reader sees a partial file (also what `flumen run --output` writes through).
//! - [`Compression`]: none, LZ4 (the default) or zstd, per frame.
//!
//! ```no_run
//! # fn main() -> flumen_ir::Result<()> {
//! # let (schema, chunks): (arrow::datatypes::SchemaRef, Vec<arrow::record_batch::RecordBatch>) = todo!();
//! use flumen_store::snapshot::{self, Decision, SnapshotOptions};
//!
//! match snapshot::begin("/saved/data", "f-abc123", schema, &SnapshotOptions::default(), std::time::SystemTime::now())? {
//!     Decision::Read(reader) => for chunk in reader { let _chunk = chunk?; }
//!     Decision::Write(mut writer) => {
//!         for chunk in chunks { writer.write(chunk)?; }
//!         writer.finish()?;
//!     }
//!     Decision::Passthrough => { /* compute the chunks, store nothing */ }
//! }
//! # Ok(()) }
//! ```
//!
//! Errors are [`flumen_ir::Error`] values: bad data on disk is an `Error::Data` naming the file
//! and `byte N` of the frame at fault (or the metadata file), a failing file system call an
//! `Error::Io` naming the path; nothing here panics on bad input.

#![warn(missing_docs)]

pub mod chunk_file;
mod compression;
pub mod file_cache;
pub mod publish;
pub mod snapshot;

pub use chunk_file::{ChunkFileReader, ChunkFileWriter, ChunkPosition, FileSummary};
pub use compression::Compression;
pub use file_cache::{CacheFinished, FileCache, FileCacheWriter};
pub use snapshot::{Decision, Finished, SnapshotOptions, SnapshotPosition, SnapshotReader, SnapshotWriter};
