//! Iterator checkpoints: the state of a running operator tree, saved between two pulls and
//! restored into a freshly built tree of the same plan, after which the remaining sequence
//! (elements and errors) is exactly what the uninterrupted iterator would have produced.
//!
//! - [`state`]: [`OpState`], the tree of operator states, and [`SaveMode`].
//! - [`saved_error`]: errors kept in operator buffers, as values that survive a round trip.
//! - [`rng`]: the exact position of a ChaCha random stream.
//! - [`encode`]: the versioned binary checkpoint format (JSON tree + Arrow IPC blobs + CRC).
//!
//! Two modes, as in tf.data. [`SaveMode::Full`] stores every buffered element.
//! [`SaveMode::Symbolic`] stores positions, counters and random-stream positions, and
//! rebuilds large buffers by replaying the input on restore: a shuffle buffer is recorded as
//! the input position it was filled from plus the input index held by each slot, so a
//! checkpoint of `shuffle(100000)` is kilobytes. What symbolic mode still stores as data is
//! bounded by one input chunk per operator (the rest of a chunk being unbatched, a partial
//! batch or window, a zip lane's read-ahead) plus the partial groups of grouping operators.

pub mod encode;
pub mod rng;
pub mod saved_error;
pub mod state;

pub use encode::{Checkpoint, CHECKPOINT_VERSION};
pub use saved_error::SavedError;
pub use state::{OpState, SaveMode};
