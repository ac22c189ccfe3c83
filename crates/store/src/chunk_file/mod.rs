//! The chunk file: a checksummed sequence of Arrow `RecordBatch` chunks of one schema.
//!
//! This is the on-disk format of `cache(path)` files and of snapshot shards. It is written
//! once, front to back, by [`ChunkFileWriter`] and read front to back by [`ChunkFileReader`];
//! a reader can resume at a [`ChunkPosition`] it reported earlier.
//!
//! # Layout, format version 1
//!
//! All integers are little-endian.
//!
//! ```text
//! file   := header schema-frame chunk-frame* end-frame
//! header := magic "FLMCHUNK" (8 bytes) | version: u32 = 1 | reserved: u32 = 0     (16 bytes)
//! frame  := frame-header payload
//!
//! frame-header (32 bytes):
//!   0  kind: u8          1 = schema, 2 = chunk, 3 = end
//!   1  codec: u8         0 = none, 1 = LZ4 block, 2 = zstd (how the payload is stored)
//!   2  reserved: u16     0
//!   4  rows: u32         rows in the chunk (0 in schema and end frames)
//!   8  stored_len: u64   payload bytes on disk
//!  16  raw_len: u64      payload bytes once decompressed (= stored_len when codec is none)
//!  24  payload_crc: u32  CRC-32 (IEEE) of the stored payload bytes
//!  28  header_crc: u32   CRC-32 (IEEE) of header bytes 0..28
//! ```
//!
//! - The **schema frame** (first frame, codec none) holds the Arrow IPC `Schema` message (a
//!   flatbuffer), so every frame after it can be decoded without repeating the schema.
//! - A **chunk frame** holds, once decompressed, the chunk as Arrow IPC messages: zero or
//!   more `DictionaryBatch` messages (every dictionary the chunk uses, so each frame decodes
//!   on its own and a reader can start at any frame), then one `RecordBatch` message. Each
//!   message is `meta_len: u32 | flatbuffer Message | zero padding to a multiple of 8 |
//!   body (the Message's bodyLength bytes, padded to a multiple of 8)`, offsets counted
//!   from the start of the decompressed payload, so array buffers stay 8-byte aligned and
//!   are used in place.
//! - The **end frame** (codec none) holds `chunks: u64 | rows: u64`, the totals of the chunk
//!   frames before it, and must be the last bytes of the file. A writer killed mid-file leaves
//!   no end frame, so a truncated file is always detected; the totals catch frames lost or
//!   repeated.
//!
//! The writer stores a payload uncompressed (codec none) when its codec does not make it
//! smaller, so the codec is per frame while the file's [`Compression`] is a preference.
//!
//! # Errors
//!
//! Corrupt or truncated data (a bad magic or version, a frame header or payload whose
//! checksum does not match, a frame running past the end of the file, a missing end frame,
//! totals that disagree, a payload Arrow cannot decode) is an
//! [`Error::Data`](flumen_ir::Error::Data) whose location is the file and `byte N`, the
//! offset of the frame at fault. A reader ends after its first error.

mod frame;
mod ipc;
mod reader;
mod writer;

pub use reader::{ChunkFileReader, ChunkPosition};
pub(crate) use writer::check_schema;
pub use writer::{ChunkFileWriter, FileSummary};

#[cfg(doc)]
use crate::Compression;
