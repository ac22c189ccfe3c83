//! # flumen-optimizer
//!
//! Pipelines are optimized like queries. A plan is lowered into one egg language that
//! covers plan operators and the expressions inside their functions ([`language`]); an
//! analysis gives every e-class its IR meaning — element spec, function properties,
//! cardinality ([`analysis`]); rules grouped by concern rewrite it ([`rules`]: `eliminate`,
//! `fusion`, `pushdown`, `vectorize`, `parallelize`); staged runners saturate and extract
//! the cheapest plan under a cost model ([`optimizer`], [`cost`]); and a [`Report`] records
//! what fired, for `explain`.
//!
//! Every rule preserves the element sequence exactly: functions that are stateful,
//! random or able to fail are never fused, reordered or vectorized where that could change
//! what the pipeline yields.

#![warn(missing_docs)]

pub mod analysis;
pub mod compose;
pub mod cost;
pub mod language;
pub mod leaf;
pub mod lower;
pub mod optimizer;
pub mod rules;
pub mod simplify;
pub mod value;

/// The e-graph library the optimizer is built on, re-exported so that rules and cost models
/// written outside flumen use the same version (`egg::Id`, `egg::RecExpr`, ...).
pub use egg;

pub use analysis::{Facts, Graph, Notes, PlanAnalysis};
pub use cost::{Cost, CostModel, DefaultCost};
pub use language::Node;
pub use lower::to_rec_expr;
pub use optimizer::{default_stages, optimize, rule_names, Optimizer, OptimizerConfig, Report, Stage, StageReport};
pub use rules::{rule, Match, Rule};
pub use value::raise;
