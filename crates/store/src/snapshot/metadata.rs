//! `snapshot.metadata`: the JSON document that says who is writing a snapshot and whether it
//! is finished.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use flumen_ir::{Error, Location, Result};
use serde::{Deserialize, Serialize};

use crate::chunk_file::FileSummary;
use crate::publish::{io_error, TempFile};
use crate::Compression;

/// The snapshot layout version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// How a writer spread chunks over shards, which decides the order an in-order read yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardAssignment {
    /// Chunk `i` went to shard `i % num_shards`: reading the shards round-robin restores the
    /// written order exactly.
    RoundRobin,
    /// A user shard function chose: reading round-robin keeps each shard's order, not the
    /// written order.
    Custom,
}

/// The contents of `<path>/<fingerprint>/snapshot.metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMetadata {
    /// The snapshot layout version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// The fingerprint of the pipeline the snapshot holds the output of.
    pub fingerprint: String,
    /// The run that wrote (or is writing) the snapshot, the name of its shard directory.
    pub run_id: String,
    /// When that run began, in milliseconds since the Unix epoch.
    pub creation_time_ms: u64,
    /// Whether the run finished: only a finalized snapshot is read.
    pub finalized: bool,
    /// The compression of the shard files.
    pub compression: Compression,
    /// How many shard files the run writes.
    pub num_shards: usize,
    /// How chunks were assigned to shards (final once finalized).
    pub shard_assignment: ShardAssignment,
    /// Chunks in all shards, once finalized.
    pub chunks: Option<u64>,
    /// Rows (elements: each row is one element) in all shards, once finalized.
    pub rows: Option<u64>,
    /// Bytes of all shard files, once finalized.
    pub bytes: Option<u64>,
}

impl SnapshotMetadata {
    /// The metadata of a run that begins at `now`.
    pub(crate) fn pending(
        fingerprint: &str,
        run_id: String,
        compression: Compression,
        num_shards: usize,
        now: SystemTime,
    ) -> SnapshotMetadata {
        SnapshotMetadata {
            version: FORMAT_VERSION,
            fingerprint: fingerprint.to_string(),
            run_id,
            creation_time_ms: unix_ms(now),
            finalized: false,
            compression,
            num_shards,
            shard_assignment: ShardAssignment::RoundRobin,
            chunks: None,
            rows: None,
            bytes: None,
        }
    }

    /// This metadata, finalized with the run's totals.
    pub(crate) fn finalized(&self, assignment: ShardAssignment, totals: FileSummary) -> SnapshotMetadata {
        SnapshotMetadata {
            finalized: true,
            shard_assignment: assignment,
            chunks: Some(totals.chunks),
            rows: Some(totals.rows),
            bytes: Some(totals.bytes),
            ..self.clone()
        }
    }

    /// Whether a pending run begun at `creation_time_ms` is older than `expiry` at `now`.
    pub(crate) fn is_expired(&self, now: SystemTime, expiry: std::time::Duration) -> bool {
        let age = unix_ms(now).saturating_sub(self.creation_time_ms);
        u128::from(age) >= expiry.as_millis()
    }

    /// Reads the metadata at `path`; `None` when there is none.
    pub(crate) fn read(path: &Path) -> Result<Option<SnapshotMetadata>> {
        // Every run reads the metadata first: it removes what killed writers left beside it.
        crate::publish::reclaim(path);
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(path, e)),
        };
        let metadata: SnapshotMetadata = serde_json::from_slice(&bytes).map_err(|e| {
            Error::data(
                Location::new(path.display().to_string(), format!("line {} column {}", e.line(), e.column())),
                format!("bad snapshot metadata: {e}"),
            )
        })?;
        if metadata.version != FORMAT_VERSION {
            return Err(Error::data(
                Location::source(path.display().to_string()),
                format!(
                    "snapshot format version {} is not supported (this build reads {FORMAT_VERSION})",
                    metadata.version
                ),
            ));
        }
        Ok(Some(metadata))
    }

    /// Writes this metadata to a synced temporary file beside `path`, ready to publish.
    pub(crate) fn to_temp(&self, path: &Path) -> Result<TempFile> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| Error::Serde(e.to_string()))?;
        TempFile::with_contents(path, &json)
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
