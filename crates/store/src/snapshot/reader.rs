//! Reading a finalized snapshot: one thread per shard, interleaved, in order or shuffled.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{self, JoinHandle};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use flumen_ir::{Error, Location, Result};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::metadata::SnapshotMetadata;
use super::{shard_path, SnapshotOptions, METADATA_FILE};
use crate::chunk_file::{ChunkFileReader, ChunkPosition};

/// Where an in-order [`SnapshotReader`] stands: a cheap checkpoint to
/// [`seek`](SnapshotReader::seek) back to, in this process or a later one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPosition {
    /// Per shard, the position of its next chunk (its end frame once it is exhausted).
    pub shards: Vec<ChunkPosition>,
    /// The shard the next chunk comes from.
    pub next_shard: usize,
}

/// Reads a finalized snapshot, an iterator of its chunks; see the [module doc](super).
///
/// Its shard threads start on the first `next`, so a runtime that only wants
/// [`shard_paths`](SnapshotReader::shard_paths) for a custom `reader_fn` starts none. A
/// corrupt or truncated shard is an error naming the shard file and byte offset; after
/// the first error the iterator ends.
pub struct SnapshotReader {
    metadata: SnapshotMetadata,
    metadata_path: PathBuf,
    schema: SchemaRef,
    shard_paths: Vec<PathBuf>,
    shuffle_seed: Option<u64>,
    shuffle_window: usize,
    prefetch: usize,
    positions: Vec<ChunkPosition>,
    next_shard: usize,
    state: State,
}

enum State {
    /// Threads start (at `positions`) on the next `next`.
    Idle,
    // Boxed: the shuffle generator's state is large, the other states are empty.
    Running(Box<Interleave>),
    Done,
}

impl SnapshotReader {
    /// Opens the finalized run `metadata` names in the fingerprint directory `dir`, checking
    /// that every shard file is there and holds chunks of `schema`.
    pub(crate) fn open(
        dir: &Path,
        metadata: SnapshotMetadata,
        schema: SchemaRef,
        options: &SnapshotOptions,
    ) -> Result<SnapshotReader> {
        let metadata_path = dir.join(METADATA_FILE);
        if metadata.num_shards == 0 || metadata.chunks.is_none() || metadata.rows.is_none() {
            return Err(Error::data(
                Location::source(metadata_path.display().to_string()),
                "finalized snapshot metadata without shards or totals",
            ));
        }
        let run_dir = dir.join(&metadata.run_id);
        let shard_paths: Vec<PathBuf> = (0..metadata.num_shards).map(|i| shard_path(&run_dir, i)).collect();
        for path in &shard_paths {
            ChunkFileReader::open(path)?.with_schema(schema.clone())?;
        }
        Ok(SnapshotReader {
            positions: vec![ChunkPosition::default(); shard_paths.len()],
            next_shard: 0,
            metadata,
            metadata_path,
            schema,
            shard_paths,
            shuffle_seed: options.shuffle_on_read,
            shuffle_window: options.shuffle_window.max(1),
            prefetch: options.buffer_chunks.max(1),
            state: State::Idle,
        })
    }

    /// The finalized metadata: run, shard count, compression, totals.
    pub fn metadata(&self) -> &SnapshotMetadata {
        &self.metadata
    }

    /// The schema of the chunks.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The shard files, in shard order: each a chunk file to open with
    /// [`ChunkFileReader::open`], for a custom `reader_fn`.
    pub fn shard_paths(&self) -> &[PathBuf] {
        &self.shard_paths
    }

    /// Where the reader stands, for an in-order reader; `None` when reading shuffled.
    pub fn position(&self) -> Option<SnapshotPosition> {
        if self.shuffle_seed.is_some() {
            return None;
        }
        Some(SnapshotPosition { shards: self.positions.clone(), next_shard: self.next_shard })
    }

    /// Makes the next chunk the one at `position`, which an in-order reader of this snapshot
    /// reported. Cheap: the shards are reopened at their offsets, nothing before is read.
    pub fn seek(&mut self, position: SnapshotPosition) -> Result<()> {
        if self.shuffle_seed.is_some() {
            return Err(Error::execution("snapshot reader", "a shuffled snapshot read cannot seek"));
        }
        if position.shards.len() != self.shard_paths.len() || position.next_shard >= self.shard_paths.len() {
            return Err(Error::execution(
                "snapshot reader",
                format!(
                    "a position over {} shards (next {}) does not fit a snapshot of {} shards",
                    position.shards.len(),
                    position.next_shard,
                    self.shard_paths.len()
                ),
            ));
        }
        self.positions = position.shards;
        self.next_shard = position.next_shard;
        // Dropping the running interleave stops its threads.
        self.state = State::Idle;
        Ok(())
    }

    fn start(&self) -> Result<Interleave> {
        let n = self.shard_paths.len();
        let mut active: Vec<usize> = (0..n).collect();
        let (cursor, shuffle) = match self.shuffle_seed {
            None => (self.next_shard, None),
            Some(seed) => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                active.shuffle(&mut rng);
                (0, Some(Shuffle { rng, window: self.shuffle_window, pending: Vec::new(), drained: false }))
            }
        };
        let mut streams = Vec::with_capacity(n);
        for (shard, path) in self.shard_paths.iter().enumerate() {
            let (sender, receiver) = sync_channel(self.prefetch);
            let (path, start, schema) = (path.clone(), self.positions[shard], self.schema.clone());
            let thread = thread::Builder::new()
                .name(format!("snapshot-read-{shard}"))
                .spawn(move || read_shard(path, start, schema, sender))
                .map_err(|e| Error::execution("snapshot reader", format!("cannot start a shard thread: {e}")))?;
            streams.push(ShardStream { receiver: Some(receiver), thread: Some(thread) });
        }
        Ok(Interleave { shards: Shards { streams, active, cursor }, shuffle })
    }

    /// Checks, once every shard has ended, that they held what the metadata says.
    fn check_totals(&self) -> Result<()> {
        let chunks: u64 = self.positions.iter().map(|p| p.chunks).sum();
        let rows: u64 = self.positions.iter().map(|p| p.rows).sum();
        if Some(chunks) == self.metadata.chunks && Some(rows) == self.metadata.rows {
            return Ok(());
        }
        Err(Error::data(
            Location::source(self.metadata_path.display().to_string()),
            format!(
                "count mismatch: the shards hold {chunks} chunks and {rows} rows, the metadata says {:?} and {:?}",
                self.metadata.chunks, self.metadata.rows
            ),
        ))
    }
}

impl Iterator for SnapshotReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        if matches!(self.state, State::Idle) {
            match self.start() {
                Ok(run) => self.state = State::Running(Box::new(run)),
                Err(e) => {
                    self.state = State::Done;
                    return Some(Err(e));
                }
            }
        }
        let State::Running(run) = &mut self.state else { return None };
        let item = match run.next(&mut self.positions) {
            Some(item) => Some(item),
            None => self.check_totals().err().map(Err),
        };
        if let State::Running(run) = &self.state {
            self.next_shard = run.shards.next_shard();
        }
        if !matches!(item, Some(Ok(_))) {
            self.state = State::Done;
        }
        item
    }
}

impl fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotReader")
            .field("metadata", &self.metadata)
            .field("shard_paths", &self.shard_paths)
            .field("shuffle_seed", &self.shuffle_seed)
            .finish()
    }
}

/// The running shard threads and the order chunks are taken from them.
struct Interleave {
    shards: Shards,
    shuffle: Option<Shuffle>,
}

impl Interleave {
    /// The next chunk, `None` once every shard has ended.
    fn next(&mut self, positions: &mut [ChunkPosition]) -> Option<Result<RecordBatch>> {
        match &mut self.shuffle {
            None => self.shards.pull(positions),
            Some(shuffle) => shuffle.next(&mut self.shards, positions),
        }
    }
}

/// The shards still producing, visited round-robin.
struct Shards {
    streams: Vec<ShardStream>,
    /// Shards not yet ended, in visiting order.
    active: Vec<usize>,
    /// Index in `active` of the shard the next chunk comes from.
    cursor: usize,
}

impl Shards {
    fn next_shard(&self) -> usize {
        self.active.get(self.cursor).copied().unwrap_or(0)
    }

    /// The next chunk round-robin, skipping ended shards; `None` once all have ended.
    fn pull(&mut self, positions: &mut [ChunkPosition]) -> Option<Result<RecordBatch>> {
        while let Some(&shard) = self.active.get(self.cursor) {
            let message = self.streams[shard].receiver.as_ref().and_then(|r| r.recv().ok());
            match message {
                Some(ShardMessage::Chunk(batch, position)) => {
                    positions[shard] = position;
                    self.cursor = (self.cursor + 1) % self.active.len();
                    return Some(Ok(batch));
                }
                Some(ShardMessage::End(position)) => {
                    positions[shard] = position;
                    self.active.remove(self.cursor);
                    if self.cursor == self.active.len() {
                        self.cursor = 0;
                    }
                }
                Some(ShardMessage::Failed(e)) => return Some(Err(e)),
                None => {
                    return Some(Err(Error::execution(
                        "snapshot reader",
                        format!("the thread reading shard {shard} stopped without a result"),
                    )))
                }
            }
        }
        None
    }
}

/// Shuffled reading: chunks are drawn at random from a window refilled from the shards.
struct Shuffle {
    rng: ChaCha8Rng,
    window: usize,
    pending: Vec<RecordBatch>,
    drained: bool,
}

impl Shuffle {
    fn next(&mut self, shards: &mut Shards, positions: &mut [ChunkPosition]) -> Option<Result<RecordBatch>> {
        while !self.drained && self.pending.len() < self.window {
            match shards.pull(positions) {
                Some(Ok(batch)) => self.pending.push(batch),
                Some(Err(e)) => return Some(Err(e)),
                None => self.drained = true,
            }
        }
        if self.pending.is_empty() {
            return None;
        }
        // Drawn as u64 so the sequence is the same on 32- and 64-bit platforms.
        let i = self.rng.random_range(0..self.pending.len() as u64) as usize;
        Some(Ok(self.pending.swap_remove(i)))
    }
}

/// What a shard thread sends: chunks with the position after each, then its end or error.
enum ShardMessage {
    Chunk(RecordBatch, ChunkPosition),
    End(ChunkPosition),
    Failed(Error),
}

/// One shard thread's channel; dropping it stops and joins the thread.
struct ShardStream {
    receiver: Option<Receiver<ShardMessage>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ShardStream {
    fn drop(&mut self) {
        // Closing the channel first makes a thread blocked on a full queue return.
        self.receiver = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A shard thread: reads the shard from `start` and sends its chunks until the end, an
/// error, or the reader hanging up.
fn read_shard(path: PathBuf, start: ChunkPosition, schema: SchemaRef, sender: SyncSender<ShardMessage>) {
    let mut reader = match ChunkFileReader::open_at(&path, start).and_then(|r| r.with_schema(schema)) {
        Ok(reader) => reader,
        Err(e) => {
            let _ = sender.send(ShardMessage::Failed(e));
            return;
        }
    };
    loop {
        let message = match reader.next() {
            Some(Ok(batch)) => ShardMessage::Chunk(batch, reader.position()),
            Some(Err(e)) => ShardMessage::Failed(e),
            None => ShardMessage::End(reader.position()),
        };
        let more = matches!(message, ShardMessage::Chunk(..));
        if sender.send(message).is_err() || !more {
            return;
        }
    }
}
