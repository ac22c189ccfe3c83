//! # flumen-runtime
//!
//! The executor: lowers a typed plan to physical operators (pull iterators of Arrow
//! `RecordBatch` chunks, one row per element) and runs them.
//!
//! - [`operator`]: the physical operator trait; [`rows`]: row-level access to chunk streams;
//!   [`resume`]: continuing after a failed element.
//! - [`mod@build`]: plan → operator tree; [`context`]: registry, settings, shared state, seeds.
//! - [`conform`]: fitting chunks and arrays to a declared schema, for every operator.
//! - [`ops`]: the operators, one module per concept; [`kernels`]: what they compute with;
//!   [`iter`]: what users iterate.
//! - [`checkpoint`]: saving and restoring a running operator tree (iterator checkpoints).
//! - [`pool`]: the iterator's thread pool; [`budget`]: the bytes its buffers may hold;
//!   [`cancel`]: asking a running pipeline to stop;
//!   [`metrics`]: live counters and tunable knobs; [`autotune`]: the model and the tuner;
//!   [`mod@analyze`]: `explain analyze`; [`stage`]: which maps and filters run as one operator;
//!   [`thread_cpu`]: the CPU time a worker used, against the time it took.

#![warn(missing_docs)]

pub mod analyze;
pub mod autotune;
pub mod budget;
pub mod build;
pub mod cancel;
pub mod checkpoint;
pub mod conform;
pub mod context;
pub mod iter;
pub mod kernels;
pub mod metrics;
pub mod operator;
pub mod ops;
pub mod physical;
pub mod pool;
pub mod resume;
pub mod rows;
pub mod stage;
pub mod thread_cpu;

pub use build::{build, build_root};
pub use context::{ExecContext, ExecOptions, SharedState};
pub use iter::{ChunkIterator, ElementIterator};
pub use operator::{BoxOperator, Operator};
