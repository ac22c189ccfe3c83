//! # flumen-udf
//!
//! The user functions of a flumen pipeline, from how they are written to how they run:
//!
//! - [`mod@lower`]: DataFusion logical expressions (`col("x") * lit(2.0)`) lowered into flumen's
//!   typed expression IR, which is what a plan stores.
//! - [`functions`]: builders for the math and string functions that `datafusion-expr` alone
//!   lacks (`sqrt`, `power`, `length`, ...), so users can write them without DataFusion's
//!   function crates.
//! - [`eval`]: evaluation of IR expressions over whole Arrow columns with Arrow's kernels,
//!   elementwise through batch dimensions; floats compare as IEEE 754 says (`ieee`), on
//!   this path as in the compiled kernels.
//! - [`closure`], [`registry`]: Rust closures as escape hatches, and the name → closure table
//!   a plan's closure references resolve against.
//! - [`example`]: `parse_example`, serialized `tf.train.Example`s into Arrow columns.
//! - [`fingerprint64`]: FarmHash `Fingerprint64`, the string hash of `hash_bucket`.
//! - [`short_varints`]: runs of 1 to 3 byte varints of a packed list, four at a time (SSSE3).

#![warn(missing_docs)]

pub mod bfloat16;
pub mod closure;
pub mod eval;
pub mod example;
pub mod fingerprint64;
mod floor_division;
pub mod functions;
mod ieee;
pub mod image;
pub mod kernel;
pub mod lower;
pub mod read_file;
pub mod registry;
pub mod short_varints;
mod tensor_ops;

pub use closure::guarded;
pub use eval::{evaluate, evaluate_map, evaluate_predicate, evaluate_with_batch_dims};
pub use lower::{lower, lower_named};
pub use registry::{Callable, Registry};
