//! # flumen
//!
//! A compiled, columnar input-pipeline engine for machine learning with tf.data's semantics.
//! Describe how examples are read, transformed, shuffled and batched with [`Dataset`];
//! flumen type-checks the pipeline as a typed plan and runs it on Arrow `RecordBatch` chunks.
//!
//! ```
//! use flumen::prelude::*;
//!
//! let ds = Dataset::range(0, 10)?
//!     .map(MapFunction::with_fields([("y", col("value") * lit(2i64))]))?
//!     .filter(col("y").gt(lit(4i64)))?
//!     .batch(3)?;
//! let batches: Vec<_> = ds.iter().collect::<Result<_, _>>()?;
//! assert_eq!(batches.len(), 3); // y = 6..=18: 7 elements in batches of 3, 3, 1
//! # Ok::<(), flumen::Error>(())
//! ```

#![warn(missing_docs)]

mod cache_counts;
pub mod checkpoint;
pub mod dataset;
pub mod distribute;
pub mod explain;
pub mod format;
pub mod function;
pub mod options;
mod positions;
pub mod snapshot;

pub use checkpoint::{Checkpoint, ExternalState, SaveMode};
pub use dataset::{
    BucketOptions, CancelHandle, ChunkIter, Dataset, DatasetIterator, Iter, PaddedBatchOptions, Parallel,
};
pub use distribute::{SplitPolicy, WorkerSplit};
pub use explain::ExplainFormat;
pub use flumen_ir::{
    BlockShuffle, DType, ElementSpec, Error, FieldKind, FieldSpec, Plan, RecordCompression, Result, Tunable,
};
pub use flumen_sources::tfrecord::TfRecordWriter;
pub use flumen_udf::example::{
    serialize_example, Defaults as FeatureDefaults, FeatureKind, FeatureSpec, FeatureValues,
};
pub use flumen_udf::registry::{Callable, Registry};
pub use format::{AvroOptions, CsvOptions};
pub use function::{DatasetFunction, FileRead, MapFunction, PredicateFunction};
pub use options::Options;
pub use snapshot::{Compression, SnapshotOptions};

/// The crates flumen is made of, for users who need their full APIs.
pub mod crates {
    pub use flumen_ir as ir;
    pub use flumen_optimizer as optimizer;
    pub use flumen_runtime as runtime;
    pub use flumen_sources as sources;
    pub use flumen_udf as udf;
}

/// Everything a pipeline author needs: `use flumen::prelude::*`.
pub mod prelude {
    pub use crate::snapshot::Compression;
    pub use crate::{
        AvroOptions, BucketOptions, Checkpoint, CsvOptions, DType, Dataset, DatasetFunction, ElementSpec,
        ExplainFormat, ExternalState, FeatureDefaults, FeatureSpec, FieldSpec, FileRead, MapFunction, Options,
        PaddedBatchOptions, Parallel, PredicateFunction, RecordCompression, SaveMode, SnapshotOptions, Tunable,
    };
    pub use datafusion_expr::{cast, col, lit, when, Expr};
    pub use flumen_udf::functions::*;
}

/// The Rust snippets of the README and the user guide, run as doc tests so that they stay
/// true (`crates/python/tests/test_docs.py` runs the Python ones).
#[cfg(doctest)]
mod guide_snippets {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/guide/expressions.md")]
    struct Expressions;
    #[doc = include_str!("../docs/guide/state.md")]
    struct State;
}
