//! # flumen-ir
//!
//! The typed intermediate representation every other flumen crate speaks:
//!
//! - [`spec`]: element specs (fields with dtype, shape, dense/ragged/sparse; batch dims);
//!   [`sparse`]: the column layout of sparse fields.
//! - [`expr`]: the typed expression IR that expression UDFs are lowered into.
//! - [`function`], [`source`]: descriptors of user functions and data sources.
//! - [`op`], [`plan`]: plan operators with their typing rules, and DAGs of them.
//! - [`json`], [`fingerprint`]: the stable JSON form and fingerprints of plans.
//!
//! Nothing here touches files or threads: a plan is a description that type-checks.

#![warn(missing_docs)]

pub mod broadcast;
pub mod build;
pub mod cardinality;
pub mod display;
pub mod dtype;
pub mod error;
pub mod example;
pub mod expr;
pub mod fingerprint;
pub mod function;
pub mod image;
mod inline;
pub mod ipc_lengths;
pub mod json;
pub mod op;
pub mod plan;
pub mod source;
pub mod sparse;
pub mod spec;

pub use dtype::DType;
pub use error::{Error, Location, Result};
pub use expr::{BinaryOp, Expr, Func, Scalar, UnaryOp};
pub use function::{ClosureKind, ClosureRef, DatasetFn, MapFn, NamedExpr, Predicate};
pub use op::{Compression, Op, SnapshotSpec, Tunable};
pub use plan::{Plan, WeakPlan};
pub use source::{
    AvroFormat, BlockShuffle, CsvFormat, FileFormat, InlineData, ParquetFormat, RecordCompression, SourceDesc,
};
pub use spec::{ElementSpec, FieldKind, FieldSpec, DTYPE_METADATA, UNKNOWN};
