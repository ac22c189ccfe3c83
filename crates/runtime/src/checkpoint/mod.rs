//! Iterator checkpoints: the state of a running operator tree, saved between two pulls and
//! restored into a freshly built tree of the same plan, after which the remaining sequence
//! (elements and errors) is exactly what the uninterrupted iterator would have produced.
//!
//! - [`state`]: [`OpState`], the tree of operator states, and [`SaveMode`].
//! - [`saved_error`]: errors kept in operator buffers, as values that survive a round trip.
//! - [`rng`]: the exact position of a ChaCha random stream.
//! - [`replay`]: rewinding an input instead of storing the rest of its chunk.
//! - [`encode`]: the versioned binary checkpoint format (JSON tree + Arrow IPC blobs + CRC).
//!
//! Two modes, as in tf.data. [`SaveMode::Full`] stores every buffered element.
//! [`SaveMode::Symbolic`] stores positions, counters and random-stream positions, and
//! rebuilds large buffers by replaying the input on restore: a shuffle buffer is recorded as
//! the input position it was filled from plus the input index held by each slot, so a
//! checkpoint of `shuffle(100000)` is kilobytes. Operators that hold the unread rest of an
//! input chunk (row readers, the iterator's current output chunk, the rest after a failed
//! element, a chunk being unbatched, a partial batch) store instead their input's state
//! before that chunk and a row count ([`replay`]). What symbolic mode still stores as data:
//! a zip lane's read-ahead, a sliding window's span, the partial groups of `group_by_window`
//! and `bucket_by_sequence_length`, and, in the first symbolic checkpoint of an iterator
//! that did not ask for `Options::symbolic_checkpoint`, the rest of chunks being read.

pub mod encode;
pub mod replay;
pub mod rng;
pub mod saved_error;
pub mod state;

pub use encode::{Checkpoint, CHECKPOINT_VERSION};
pub use saved_error::SavedError;
pub use state::{OpState, SaveMode};
