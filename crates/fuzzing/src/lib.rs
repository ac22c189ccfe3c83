//! # flumen-fuzzing
//!
//! The fuzz targets of flumen's decoders and parsers, each a function of arbitrary bytes
//! that panics when a property it must keep on any input fails ([`Target`], [`TARGETS`]):
//!
//! - no panic and no abort (a panic inside flumen that it turned into an error is fine: the
//!   input was bad; one that escapes is a crash);
//! - no allocation above a bound proportional to the input ([`alloc::CappedAlloc`], which the
//!   harnesses install: a larger one aborts, which the fuzzer records as a crash);
//! - for record formats, every record before the first corrupt byte comes out, and reading
//!   in chunks of one row and of a thousand gives the same items.
//!
//! Two harnesses run them: the libFuzzer targets of `fuzz/` (coverage-guided, the long
//! tier: `fuzz/README.md`), and the short tier in `cargo test` (`tests/short_tier.rs`: each
//! target's seed inputs ([`seeds`]), a few hundred deterministic mutations of them
//! ([`mutate`]) and the crashing inputs kept under `regressions/`).

pub mod alloc;
pub mod harness;
pub mod mutate;
pub mod seeds;
pub mod targets;

pub use targets::{Target, TARGETS};
