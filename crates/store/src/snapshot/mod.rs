//! tf.data snapshots (RFC 193): a pipeline's output persisted under its fingerprint, written
//! by one run and read by later runs, across processes.
//!
//! # Layout, format version 1
//!
//! ```text
//! <path>/<fingerprint>/snapshot.metadata            JSON, see SnapshotMetadata
//! <path>/<fingerprint>/<run_id>/00000000.shard      chunk files (crate::chunk_file), one per shard
//! <path>/<fingerprint>/<run_id>/00000001.shard
//! ```
//!
//! `run_id` is 16 random hex digits chosen by the writing run. The metadata names the run
//! that owns the snapshot, when it began (Unix milliseconds), and whether it is
//! **finalized**. There is no separate marker file: the `finalized` flag inside the metadata
//! is the finalized state, and every metadata change is atomic (a complete, synced temporary
//! file published by hard link or rename, see below), so a reader sees either the pending or
//! the finalized document, never a partial one.
//!
//! # State machine ([`begin`])
//!
//! - **no metadata** → **WRITE**: the run creates its run directory and shard files, then
//!   publishes pending metadata with a no-replace hard link (an exclusive create of a complete
//!   file): of several concurrent starters exactly one wins; the others re-read the metadata
//!   and go on as below (normally PASSTHROUGH).
//! - **finalized metadata** → **READ** the run it names ([`SnapshotReader`]).
//! - **pending metadata older than [`SnapshotOptions::pending_expiry`]** (default one day; its
//!   writer is presumed dead) → **WRITE**, taking the snapshot over: new pending metadata with
//!   a new `run_id` is renamed over the old.
//! - **pending metadata fresher than that** → **PASSTHROUGH**: another run is writing; this
//!   one computes its elements without touching the snapshot.
//!
//! A writing run ([`SnapshotWriter::finish`]) joins its shard threads, then re-reads the
//! metadata: only if it still names this run (and all its shard files exist) does it rename
//! finalized metadata (with the totals) over it and report [`Finished::Finalized`]; it then
//! removes the directories of other runs (losers, dead writers). Otherwise it lost the race
//! to a run that took over: it deletes its own run directory and reports [`Finished::Lost`].
//! A writer dropped unfinished stops its threads, deletes its run directory and removes the
//! metadata if it still names this run, unfinalized, so the next run can write at once. A
//! killed process leaves its pending metadata, which expires, and its run directory, which
//! the next finalizing run removes.
//!
//! As in the RFC, a writer that outlives the expiry can be overtaken mid-write; it then finds
//! the metadata naming the other run and reports `Lost`. In one narrow interleaving (the old
//! writer finalizing between the new one reading and replacing the metadata) the new run's
//! pending metadata replaces the just-finalized one: the old run reported `Finalized` but is
//! superseded, and the snapshot is written again (by the new run, or by the next run if the
//! new run's files went in the old run's clean-up). A run checks that its shard files still
//! exist before it finalizes, so finalized metadata does not name deleted files.
//!
//! # Writing and reading
//!
//! A [`SnapshotWriter`] runs one thread per shard, each fed through a bounded channel
//! ([`SnapshotOptions::buffer_chunks`] chunks), so memory stays bounded and encoding and
//! compression run in parallel. Chunks go round-robin (chunk `i` to shard `i % num_shards`)
//! unless [`SnapshotWriter::with_shard_fn`] installs the RFC's `writer_fn` as a shard
//! function. A [`SnapshotReader`] reads the shards with one thread each (prefetching
//! `buffer_chunks` chunks) and interleaves them round-robin, which yields exactly the
//! written order for round-robin snapshots. With [`SnapshotOptions::shuffle_on_read`] it
//! visits the shards in a seeded random order and shuffles chunks within a window of
//! [`SnapshotOptions::shuffle_window`] chunks (ChaCha8: the same order on every platform).
//! [`SnapshotReader::shard_paths`] hands the shard files to a custom `reader_fn` instead.
//! In-order readers report and [`seek`](SnapshotReader::seek) to a [`SnapshotPosition`] for
//! iterator checkpoints.

mod metadata;
mod reader;
mod writer;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use arrow::datatypes::SchemaRef;
use flumen_ir::{Error, Location, Result};

use crate::Compression;
pub use metadata::{ShardAssignment, SnapshotMetadata, FORMAT_VERSION};
pub use reader::{SnapshotPosition, SnapshotReader};
pub use writer::{Finished, SnapshotWriter};

/// The metadata file's name in a fingerprint directory.
pub const METADATA_FILE: &str = "snapshot.metadata";

/// A pending snapshot older than this is presumed abandoned (the RFC's default).
pub const DEFAULT_PENDING_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// How many times [`begin`] re-reads metadata that changed under it before passing through.
const BEGIN_ATTEMPTS: usize = 3;

/// How a snapshot is written and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Compression of the shard files (default LZ4).
    pub compression: Compression,
    /// Shard files (and writer threads) of a new snapshot; at least 1. Defaults to the number
    /// of cores, as tf.data's default `writer_fn`. Readers use the number the snapshot has.
    pub num_shards: usize,
    /// Age after which another run's pending snapshot is taken over (default one day).
    pub pending_expiry: Duration,
    /// Read in a shuffled order from this seed instead of the written order.
    pub shuffle_on_read: Option<u64>,
    /// Chunks the shuffled order draws from at a time (default 16; 0 counts as 1).
    pub shuffle_window: usize,
    /// Chunks queued per shard thread, writing or reading (default 2; 0 counts as 1).
    pub buffer_chunks: usize,
}

impl Default for SnapshotOptions {
    fn default() -> SnapshotOptions {
        SnapshotOptions {
            compression: Compression::default(),
            num_shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pending_expiry: DEFAULT_PENDING_EXPIRY,
            shuffle_on_read: None,
            shuffle_window: 16,
            buffer_chunks: 2,
        }
    }
}

/// What a run does with the snapshot at its start.
#[derive(Debug)]
pub enum Decision {
    /// A finalized snapshot exists: read it instead of computing the pipeline.
    Read(SnapshotReader),
    /// No usable snapshot: compute the pipeline and write every chunk through this writer.
    Write(SnapshotWriter),
    /// Another run is writing the snapshot: compute the pipeline, write nothing.
    Passthrough,
}

/// Decides, at time `now`, whether this run reads, writes or passes through the snapshot of
/// the pipeline with `fingerprint` (whose chunks have `schema`) under the directory `path`.
/// See the [module doc](self) for the state machine. `now` is a parameter so that expiry can
/// be tested; runs pass `SystemTime::now()`.
pub fn begin(
    path: impl AsRef<Path>,
    fingerprint: &str,
    schema: SchemaRef,
    options: &SnapshotOptions,
    now: SystemTime,
) -> Result<Decision> {
    check_fingerprint(fingerprint)?;
    if options.num_shards == 0 {
        return Err(Error::plan("snapshot", "num_shards must be at least 1"));
    }
    let dir = path.as_ref().join(fingerprint);
    std::fs::create_dir_all(&dir).map_err(|e| crate::publish::io_error(&dir, e))?;
    let metadata_path = dir.join(METADATA_FILE);
    for _ in 0..BEGIN_ATTEMPTS {
        let Some(current) = SnapshotMetadata::read(&metadata_path)? else {
            match SnapshotWriter::start(&dir, fingerprint, schema.clone(), options, now, false)? {
                Some(writer) => return Ok(Decision::Write(writer)),
                // Another run published first: decide again on what it published.
                None => continue,
            }
        };
        if current.fingerprint != fingerprint {
            return Err(Error::data(
                Location::source(metadata_path.display().to_string()),
                format!("the metadata is for fingerprint '{}', not '{fingerprint}'", current.fingerprint),
            ));
        }
        if current.finalized {
            return Ok(Decision::Read(SnapshotReader::open(&dir, current, schema, options)?));
        }
        if current.is_expired(now, options.pending_expiry) {
            if let Some(writer) = SnapshotWriter::start(&dir, fingerprint, schema.clone(), options, now, true)? {
                return Ok(Decision::Write(writer));
            }
            continue;
        }
        return Ok(Decision::Passthrough);
    }
    // The metadata kept changing under us: other runs are busy with the snapshot.
    Ok(Decision::Passthrough)
}

/// The path of shard `shard` of a run directory.
pub(crate) fn shard_path(run_dir: &Path, shard: usize) -> PathBuf {
    run_dir.join(format!("{shard:08}.shard"))
}

/// Whether `name` is a run directory's name: 16 lowercase hex digits.
pub(crate) fn is_run_id(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A fingerprint names a directory: it must be one plain path component.
fn check_fingerprint(fingerprint: &str) -> Result<()> {
    let plain = !fingerprint.is_empty()
        && fingerprint != "."
        && fingerprint != ".."
        && !fingerprint.contains(['/', '\\', '\0'])
        && !fingerprint.starts_with('.');
    if plain {
        Ok(())
    } else {
        Err(Error::plan("snapshot", format!("fingerprint '{fingerprint}' is not a plain directory name")))
    }
}
