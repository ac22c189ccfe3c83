//! flumen-store's tests, one binary (arrow links once): the chunk-file format, the cache
//! file, snapshots in one process, and snapshots raced and killed across processes.

mod chunk_file;
mod common;
mod file_cache;
mod processes;
mod snapshot;
