//! # flumen-sources
//!
//! Where a pipeline's elements come from. Every reader here implements
//! [`ChunkReader`]: it yields non-empty Arrow `RecordBatch` chunks whose
//! schema is exactly the Arrow schema of the source's output spec
//! ([`SourceDesc::output_spec`](flumen_ir::SourceDesc::output_spec)), one row per element.
//!
//! - [`reader`]: the [`ChunkReader`] trait and the default chunk size. Every reader can tell
//!   its position and seek to one (for exact checkpoints): a small JSON value tagged with the
//!   kind of reader, holding offsets (byte, row group, batch, row), never rows.
//! - [`range`], [`memory`]: `range(start, stop, step)` and in-memory Arrow data.
//! - [`files`]: glob listing of input files.
//! - [`csv`], [`parquet`], [`ipc`], [`text`], [`tfrecord`], [`avro`]: the file formats, with
//!   schema inference or schema reading for when a dataset is built, and projection where the
//!   format has it.
//! - [`checksum`]: CRC32C, fast for the short buffers of TFRecord framing.
//! - [`chunks`]: flumen's own chunk files (snapshot shards, file caches).
//! - [`split`]: units of parallel reading (a file, a Parquet row group, an Avro block) and the reader
//!   of a list of files.
//! - [`open`]: [`open_source`], the reader of a [`SourceDesc`](flumen_ir::SourceDesc).
//!
//! Errors name the file and the position in it (line, row group, batch): bad input is an
//! [`Error::Data`](flumen_ir::Error::Data), a file that cannot be opened an
//! [`Error::Io`](flumen_ir::Error::Io). A file whose schema does not match the one the plan
//! was built with is bad input too. Generators are not opened here: the runtime owns their
//! registry.

#![warn(missing_docs)]

pub mod avro;
pub mod checksum;
pub mod chunks;
mod conform;
pub mod csv;
pub mod files;
mod guard;
pub mod ipc;
pub mod memory;
pub mod open;
pub mod parquet;
mod position;
pub mod prune;
pub mod range;
pub mod reader;
pub mod split;
pub mod text;
pub mod tfrecord;

pub use open::open_source;
pub use reader::{BoxReader, ChunkReader, ReaderPosition, DEFAULT_CHUNK_ROWS};
