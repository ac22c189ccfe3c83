//! What the operators compute with, apart from the operators themselves: list kernels
//! (batching, padding and slicing Arrow list columns), function calls over chunks, row
//! filters and gathers, the grouping that `group_by_window` and bucketing share, and results
//! kept in order across a pool.
pub(crate) mod drawn_inputs;
pub mod filter_rows;
pub mod function;
pub mod gather;
pub(crate) mod grouping;
pub(crate) mod in_order;
pub mod list_kernels;
