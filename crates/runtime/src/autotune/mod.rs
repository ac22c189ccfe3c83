//! Autotuning: choosing `AUTOTUNE` parallelism and buffer sizes while the pipeline runs,
//! as tf.data does (tf.data paper, section 3.3.2).
//!
//! - [`model`]: the analytical model, a tree of nodes whose output latencies compose
//!   linearly for synchronous operators and through the M/M/1/k empty-buffer probability
//!   for asynchronous ones.
//! - [`optimize`]: hill climbing or gradient descent over the tunable parameters, under a
//!   CPU budget (total parallelism) and a RAM budget (buffered bytes).
//! - [`tuner`]: the background thread that builds the model from the live counters
//!   (`crate::metrics`), optimizes it and sets the operators' knobs.

pub mod model;
pub mod optimize;
pub mod tuner;

/// How the tuner searches (tf.data's `autotune.autotune_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Raise, one step at a time, the parameter that lowers the latency most (tf.data's default).
    #[default]
    HillClimb,
    /// Follow the numeric gradient of the latency, then round.
    GradientDescent,
}

/// Autotuning settings (tf.data's `Options.autotune`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AutotuneOptions {
    /// Tune `AUTOTUNE` parameters while running; off, they take fixed defaults.
    pub enabled: bool,
    /// The search algorithm.
    pub algorithm: Algorithm,
    /// The most parallelism the tuner hands out in total (default: the cores).
    pub cpu_budget: usize,
    /// The most bytes buffers may hold (default: half the available memory).
    pub ram_budget: u64,
}

impl Default for AutotuneOptions {
    fn default() -> Self {
        AutotuneOptions {
            enabled: true,
            algorithm: Algorithm::default(),
            cpu_budget: crate::context::cores(),
            ram_budget: crate::budget::default_ram_budget(),
        }
    }
}
