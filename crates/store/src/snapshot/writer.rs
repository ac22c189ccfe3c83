//! Writing a snapshot run: one thread per shard, finalization, clean-up.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::SystemTime;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Result};

use super::metadata::{ShardAssignment, SnapshotMetadata};
use super::{is_run_id, shard_path, SnapshotOptions, METADATA_FILE};
use crate::chunk_file::{check_schema, ChunkFileWriter, FileSummary};
use crate::publish::io_error;

/// How [`SnapshotWriter::finish`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// This run's snapshot is finalized: later runs read it. Holds the totals of its shards.
    Finalized(FileSummary),
    /// Another run took the snapshot over while this one wrote; this run's files are deleted.
    Lost,
}

/// The RFC's `writer_fn`, reduced to what it decides: the shard of chunk `index`.
type ShardFn = Box<dyn Fn(u64, &RecordBatch) -> usize + Send>;

/// Writes one run of a snapshot: every chunk of the pipeline's output, through
/// [`write`](SnapshotWriter::write), then [`finish`](SnapshotWriter::finish).
///
/// Dropping it unfinished (an iterator abandoned mid-pass, an error) stops its threads,
/// deletes its run directory and withdraws its pending metadata.
pub struct SnapshotWriter {
    dir: PathBuf,
    run_dir: PathBuf,
    metadata: SnapshotMetadata,
    schema: SchemaRef,
    shards: Vec<ShardThread>,
    abort: Arc<AtomicBool>,
    next_chunk: u64,
    shard_fn: Option<ShardFn>,
    failed: bool,
    /// Finished or cleaned up: nothing left for `Drop` to do.
    closed: bool,
}

struct ShardThread {
    path: PathBuf,
    sender: Option<SyncSender<RecordBatch>>,
    thread: Option<JoinHandle<Result<FileSummary>>>,
}

impl SnapshotWriter {
    /// Starts a run in the fingerprint directory `dir`: creates its run directory and shard
    /// files, publishes its pending metadata (replacing an expired run's when `take_over`,
    /// else only if there is none) and starts the shard threads. `None` when another run
    /// published its metadata first.
    pub(crate) fn start(
        dir: &Path,
        fingerprint: &str,
        schema: SchemaRef,
        options: &SnapshotOptions,
        now: SystemTime,
        take_over: bool,
    ) -> Result<Option<SnapshotWriter>> {
        let run_id = format!("{:016x}", rand::random::<u64>());
        let run_dir = dir.join(&run_id);
        fs::create_dir(&run_dir).map_err(|e| io_error(&run_dir, e))?;
        let mut guard = RunDirGuard(Some(&run_dir));
        let files = (0..options.num_shards)
            .map(|i| ChunkFileWriter::create(shard_path(&run_dir, i), schema.clone(), options.compression))
            .collect::<Result<Vec<_>>>()?;
        let metadata = SnapshotMetadata::pending(fingerprint, run_id, options.compression, options.num_shards, now);
        let metadata_path = dir.join(METADATA_FILE);
        let temp = metadata.to_temp(&metadata_path)?;
        if take_over {
            temp.publish_replace(&metadata_path)?;
        } else if !temp.publish_new(&metadata_path)? {
            return Ok(None);
        }
        // The metadata names this run now: from here the writer's `Drop` cleans up.
        guard.0 = None;
        let mut writer = SnapshotWriter {
            dir: dir.to_path_buf(),
            run_dir: run_dir.clone(),
            metadata,
            schema,
            shards: Vec::with_capacity(files.len()),
            abort: Arc::new(AtomicBool::new(false)),
            next_chunk: 0,
            shard_fn: None,
            failed: false,
            closed: false,
        };
        for (i, file) in files.into_iter().enumerate() {
            let path = file.path().to_path_buf();
            let (sender, receiver) = sync_channel(options.buffer_chunks.max(1));
            let abort = writer.abort.clone();
            let thread = thread::Builder::new()
                .name(format!("snapshot-shard-{i}"))
                .spawn(move || write_shard(file, receiver, &abort))
                .map_err(|e| Error::execution("snapshot writer", format!("cannot start a shard thread: {e}")))?;
            writer.shards.push(ShardThread { path, sender: Some(sender), thread: Some(thread) });
        }
        Ok(Some(writer))
    }

    /// Installs the RFC's `writer_fn`: `f(chunk_index, &chunk)` returns the shard (below
    /// `num_shards`) of each chunk written after this call, instead of round-robin. Such a
    /// snapshot is marked [`ShardAssignment::Custom`]: reading it in order interleaves the
    /// shards round-robin, each in its written order, rather than restoring the written order.
    pub fn with_shard_fn(mut self, f: impl Fn(u64, &RecordBatch) -> usize + Send + 'static) -> SnapshotWriter {
        self.shard_fn = Some(Box::new(f));
        self
    }

    /// This run's id, the name of its run directory.
    pub fn run_id(&self) -> &str {
        &self.metadata.run_id
    }

    /// This run's directory of shard files.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Queues one chunk for its shard's thread, waiting while that shard's queue is full. An
    /// error (a shard that failed to write, a chunk of another schema, a shard function out
    /// of range) leaves the run unfinishable: drop the writer.
    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.failed {
            return Err(Error::execution("snapshot writer", "an earlier write failed"));
        }
        check_schema(&self.schema, &batch, &self.run_dir)?;
        let n = self.shards.len();
        let index = self.next_chunk;
        let shard = match &self.shard_fn {
            Some(f) => f(index, &batch),
            None => (index % n as u64) as usize,
        };
        if shard >= n {
            self.failed = true;
            return Err(Error::execution(
                "snapshot writer",
                format!("the shard function put chunk {index} in shard {shard}, but the snapshot has {n} shards"),
            ));
        }
        self.next_chunk += 1;
        let sent = self.shards[shard].sender.as_ref().is_some_and(|s| s.send(batch).is_ok());
        if !sent {
            // The thread stopped, which it only does on an error: report that error.
            self.failed = true;
            return Err(match self.shards[shard].join() {
                Err(e) => e,
                Ok(_) => Error::execution("snapshot writer", "a shard thread stopped early"),
            });
        }
        Ok(())
    }

    /// Ends the pass: waits for every shard file to be complete and synced, then finalizes
    /// the snapshot if the metadata still names this run, or deletes this run's files if
    /// another run took it over.
    pub fn finish(mut self) -> Result<Finished> {
        if self.failed {
            return Err(Error::execution("snapshot writer", "an earlier write failed"));
        }
        // Close every queue before joining any thread, so the shards finish in parallel.
        for shard in &mut self.shards {
            shard.sender = None;
        }
        let mut totals = FileSummary::default();
        for shard in &mut self.shards {
            let summary = shard.join()?;
            totals.chunks += summary.chunks;
            totals.rows += summary.rows;
            totals.bytes += summary.bytes;
        }
        let metadata_path = self.dir.join(METADATA_FILE);
        let current = SnapshotMetadata::read(&metadata_path)?;
        let ours = current.is_some_and(|m| m.run_id == self.metadata.run_id && !m.finalized);
        // A run that took over may have removed this run's directory as a dead run's.
        if !ours || !self.shards.iter().all(|s| s.path.exists()) {
            self.discard();
            return Ok(Finished::Lost);
        }
        let assignment = if self.shard_fn.is_some() { ShardAssignment::Custom } else { ShardAssignment::RoundRobin };
        self.metadata.finalized(assignment, totals).to_temp(&metadata_path)?.publish_replace(&metadata_path)?;
        self.closed = true;
        remove_other_runs(&self.dir, &self.metadata.run_id);
        Ok(Finished::Finalized(totals))
    }

    /// Deletes this run's directory and withdraws its metadata if still pending for this run.
    /// Best effort: what cannot be removed is left for expiry and the next finalizing run.
    fn discard(&mut self) {
        self.closed = true;
        let _ = fs::remove_dir_all(&self.run_dir);
        let metadata_path = self.dir.join(METADATA_FILE);
        if let Ok(Some(m)) = SnapshotMetadata::read(&metadata_path) {
            if m.run_id == self.metadata.run_id && !m.finalized {
                let _ = fs::remove_file(&metadata_path);
            }
        }
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.abort.store(true, Ordering::SeqCst);
        for shard in &mut self.shards {
            shard.sender = None;
        }
        for shard in &mut self.shards {
            let _ = shard.join();
        }
        self.discard();
    }
}

impl fmt::Debug for SnapshotWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotWriter")
            .field("run_dir", &self.run_dir)
            .field("num_shards", &self.shards.len())
            .field("chunks_written", &self.next_chunk)
            .finish()
    }
}

impl ShardThread {
    /// Closes the queue and waits for the thread's result.
    fn join(&mut self) -> Result<FileSummary> {
        self.sender = None;
        let Some(thread) = self.thread.take() else {
            return Err(Error::execution(
                "snapshot writer",
                format!("{}: the shard already failed", self.path.display()),
            ));
        };
        thread.join().unwrap_or_else(|_| {
            Err(Error::execution("snapshot writer", format!("the thread writing {} panicked", self.path.display())))
        })
    }
}

/// A shard thread: writes the chunks it is sent, then completes the file, unless aborted.
fn write_shard(mut file: ChunkFileWriter, chunks: Receiver<RecordBatch>, abort: &AtomicBool) -> Result<FileSummary> {
    for batch in chunks {
        if abort.load(Ordering::SeqCst) {
            break;
        }
        file.write(&batch)?;
    }
    if abort.load(Ordering::SeqCst) {
        // The files are about to be deleted: skip the end frame and the sync.
        return Err(Error::execution("snapshot writer", "aborted"));
    }
    file.finish()
}

/// Removes a run directory on drop, until disarmed.
struct RunDirGuard<'a>(Option<&'a Path>);

impl Drop for RunDirGuard<'_> {
    fn drop(&mut self) {
        if let Some(dir) = self.0 {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// Removes the run directories other than `keep`'s in the fingerprint directory `dir`: runs
/// that lost, were dropped or died. Best effort: a directory that cannot be removed now is
/// tried again by the next finalizing run.
fn remove_other_runs(dir: &Path, keep: &str) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_other_run = name.to_str().is_some_and(|n| n != keep && is_run_id(n));
        if is_other_run && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
