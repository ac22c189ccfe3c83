//! `snapshot` and `cache_to` from the user's side: persisting a pipeline's output on disk.
//!
//! ```no_run
//! use flumen::prelude::*;
//!
//! let ds = Dataset::csv(&["examples/data/tabular/part-0.csv"], CsvOptions::default())?
//!     .map(MapFunction::with_fields([("x2", col("f0") * lit(2.0))]))?
//!     .snapshot("/tmp/snapshots", SnapshotOptions::default().with_compression(Compression::Zstd))?
//!     .shuffle(1000, Some(1))?;
//! // The first run computes the CSV + map and writes the snapshot; later runs read it.
//! for batch in ds.iter() { batch?; }
//! # Ok::<(), flumen::Error>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray, StringArray};
use datafusion_expr::Expr as DfExpr;
use flumen_ir::{ClosureKind, Error, FileFormat, Op, Result, SnapshotSpec};
use flumen_udf::lower::lower;
use flumen_udf::registry::Callable;

pub use flumen_ir::Compression;

use crate::dataset::Dataset;
use crate::function::{Closure, DatasetFunction, FileRead};

/// The function that reads a snapshot's shards (the RFC's `reader_fn`): given the dataset of
/// shard files (string field `shard`, in written order) and the function that reads one
/// shard file (for `flat_map` or `interleave`), the dataset of elements.
pub type SnapshotReaderFn = Arc<dyn Fn(Dataset, DatasetFunction) -> Result<Dataset> + Send + Sync>;

/// How a snapshot is written and read (the tf.data snapshot RFC's options).
#[derive(Clone, Default)]
pub struct SnapshotOptions {
    spec: SnapshotSpec,
    shard_by: Option<DfExpr>,
    reader: Option<(Option<String>, SnapshotReaderFn)>,
}

impl SnapshotOptions {
    /// Shard compression (default LZ4).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.spec.compression = compression;
        self
    }

    /// Shard files written in parallel and read interleaved (default 2).
    pub fn with_shards(mut self, shards: u64) -> Self {
        self.spec.shards = shards;
        self
    }

    /// Reads the shards and chunks in a random order drawn from `seed` (default: the written
    /// order). Such a read cannot be checkpointed.
    pub fn with_shuffle_on_read(mut self, seed: u64) -> Self {
        self.spec.shuffle_on_read = Some(seed);
        self
    }

    /// How old another run's unfinished snapshot must be before this run takes it over
    /// (default one day).
    pub fn with_pending_expiry(mut self, expiry: Duration) -> Self {
        self.spec.pending_expiry_secs = expiry.as_secs();
        self
    }

    /// Keys the snapshot by `name` instead of the upstream plan's fingerprint: runs of
    /// different pipelines that pin the same name share one snapshot. `name` is letters,
    /// digits, `-` and `_`.
    pub fn with_snapshot_fingerprint(mut self, name: &str) -> Self {
        self.spec.fingerprint = Some(name.to_string());
        self
    }

    /// Writes each element to shard `shard_by mod shards` (an int expression) instead of
    /// writing chunks to shards in turn (the RFC's `writer_fn`). The default reader then
    /// yields the shards' elements interleaved chunk by chunk, not in the original order.
    pub fn with_shard_by(mut self, shard_by: DfExpr) -> Self {
        self.shard_by = Some(shard_by);
        self
    }

    /// Reads the snapshot with `reader` (the RFC's `reader_fn`), e.g. shuffling the shards and
    /// interleaving them with the shard-reading function it is given. A named reader keeps
    /// the plan serializable.
    pub fn with_reader(
        mut self,
        name: Option<&str>,
        reader: impl Fn(Dataset, DatasetFunction) -> Result<Dataset> + Send + Sync + 'static,
    ) -> Self {
        self.reader = Some((name.map(str::to_string), Arc::new(reader)));
        self
    }
}

impl std::fmt::Debug for SnapshotOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotOptions")
            .field("spec", &self.spec)
            .field("shard_by", &self.shard_by)
            .field("reader", &self.reader.as_ref().map(|(n, _)| n))
            .finish()
    }
}

/// The shard files of a reader closure's element (`{shards: list<string>}`) as a dataset.
fn shard_dataset(element: &arrow::record_batch::RecordBatch) -> Result<Dataset> {
    let list = element
        .column_by_name("shards")
        .and_then(|c| c.as_list_opt::<i32>())
        .ok_or_else(|| Error::execution("snapshot", "a reader closure was called without the shard list"))?;
    let shards = list.value(0);
    let shards = shards.as_any().downcast_ref::<StringArray>().expect("shard paths are strings").clone();
    Dataset::from_arrays([("shard", Arc::new(shards) as Arc<dyn Array>)])
}

impl Dataset {
    /// Persists this dataset's elements under `path` and reads them back in later runs of
    /// the same pipeline (tf.data's `snapshot`). Each pass decides: READ a finalized snapshot
    /// of the same upstream fingerprint, WRITE one if there is none (or the pending one
    /// expired), or PASSTHROUGH while another run writes it. See `flumen_store::snapshot` for
    /// the layout and `flumen_runtime::ops::snapshot` for the pass's rules.
    pub fn snapshot(&self, path: &str, options: SnapshotOptions) -> Result<Dataset> {
        let mut spec = options.spec;
        spec.shard_by = options.shard_by.as_ref().map(lower).transpose()?;
        // Keyed by the plan as written, so optimizer changes do not orphan snapshots.
        if spec.fingerprint.is_none() {
            spec.fingerprint = Some(flumen_ir::fingerprint::fingerprint_without_seeds(self.plan()));
        }
        let mut registry = self.registry().clone();
        if let Some((name, reader)) = options.reader {
            let schema = self.element_spec().clone();
            let factory = move |element: &arrow::record_batch::RecordBatch| {
                let read = DatasetFunction::read_file(
                    "shard",
                    FileRead::Format(FileFormat::Chunks { schema: schema.clone() }),
                );
                let ds = reader(shard_dataset(element)?, read)?;
                Ok((ds.plan().clone(), ds.registry().clone()))
            };
            let closure = Closure::new(name.as_deref(), Callable::Dataset(Arc::new(factory)), ClosureKind::PerElement);
            spec.reader = Some(closure.register(&mut registry, "snapshot_reader")?);
        }
        Ok(self.then(Op::Snapshot { path: path.to_string(), options: spec })?.with_registry(registry))
    }

    /// Caches the elements of the first complete pass in the file `path` (tf.data's
    /// `cache(filename)`): later passes, in this process or another, read the file. The file
    /// appears only when a pass completes; concurrent writers each write their own copy and the
    /// first to finish publishes it.
    pub fn cache_to(&self, path: &str) -> Result<Dataset> {
        self.then(Op::Cache { path: Some(path.to_string()), count: None })
    }
}
