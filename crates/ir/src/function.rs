//! Descriptors of user functions as they appear in a plan.
//!
//! A plan never holds code: an expression UDF is its expression tree, and a Rust closure is
//! a [`ClosureRef`] naming an entry of the runtime's registry, with the output spec and the
//! properties (deterministic, stateless) that the optimizer's guards read. Built-in functions
//! the runtime implements natively (`parse_example`) are described by their arguments.

use serde::{Deserialize, Serialize};

use crate::example::FeatureSpec;
use crate::expr::Expr;
use crate::source::FileFormat;
use crate::spec::ElementSpec;

/// How a closure is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosureKind {
    /// Once per element: one element in (a 1-row `RecordBatch`), one element out.
    PerElement,
    /// Once per chunk: a `RecordBatch` of many elements in, as many out, in order.
    PerBatch,
    /// Once per chunk, like `PerBatch`, for a function whose rows do not depend on each
    /// other (a parser): when a chunk fails, it is called on each row to find the failing
    /// element, so that the error takes that element's place alone.
    PerBatchRowwise,
}

/// A reference to a registered Rust closure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosureRef {
    /// The name it is registered under. A part from the last `#` on is an instance number
    /// (the Python package registers each function it is given as `name#n`): fingerprints
    /// leave it out, so a pipeline built again has the fingerprint it had.
    pub name: String,
    /// How it is called.
    pub kind: ClosureKind,
    /// Same input, same output (no randomness, no dependence on call order).
    pub deterministic: bool,
    /// Keeps no state between calls.
    pub stateless: bool,
    /// Its calls take a process-wide lock (a Python function holds the GIL): calls on more
    /// threads wait for each other, so the optimizer adds no parallelism or read-ahead
    /// around it; parallelism the user writes stays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// True when the closure was given without a name: the plan cannot be serialized.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
}

impl ClosureRef {
    /// True when what a call returns may depend on the calls before it (declared stateful):
    /// flumen then calls it once per element, in element order, one call at a time, and only
    /// for the elements the pipeline asks for (see `ARCHITECTURE.md`, "Semantics worth
    /// knowing").
    pub fn keeps_state(&self) -> bool {
        !self.stateless
    }
}

/// A named output of an expression map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedExpr {
    /// The output field's name.
    pub name: String,
    /// Its value.
    pub expr: Expr,
}

/// The function of a `map`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum MapFn {
    /// Expressions computing named fields. With `keep_input`, the input's fields are kept
    /// (an output with an input's name replaces it in place; other outputs are appended);
    /// without it the element is exactly the outputs.
    Exprs {
        /// The outputs, in order.
        outputs: Vec<NamedExpr>,
        /// Keep the input's fields.
        keep_input: bool,
    },
    /// A registered closure with its declared output spec.
    Closure {
        /// The closure.
        closure: ClosureRef,
        /// The spec of the elements it returns.
        output: ElementSpec,
    },
    /// tf.data's `parse_example`: the serialized `tf.train.Example` in bytes field `field`
    /// parsed into one field per feature; the element becomes exactly those fields.
    ParseExample {
        /// The scalar bytes field holding the serialized record.
        field: String,
        /// The features, in output order.
        features: Vec<FeatureSpec>,
    },
}

impl MapFn {
    /// True when the function may be run on any thread in any order with the same result.
    pub fn is_stateless_and_deterministic(&self) -> bool {
        match self {
            MapFn::Exprs { .. } | MapFn::ParseExample { .. } => true,
            MapFn::Closure { closure, .. } => closure.stateless && closure.deterministic,
        }
    }

    /// True when the function's calls take a process-wide lock ([`ClosureRef::exclusive`]).
    pub fn is_exclusive(&self) -> bool {
        matches!(self, MapFn::Closure { closure, .. } if closure.exclusive)
    }

    /// True when an output draws random numbers ([`crate::Func::draws_random`]): its draws
    /// are keyed by each element's position in the map's input, which rewrites must then
    /// keep (no filter moved below the map, no filter fused into its stage).
    pub fn draws_random(&self) -> bool {
        matches!(self, MapFn::Exprs { outputs, .. } if outputs.iter().any(|o| o.expr.draws_random()))
    }
}

/// The boolean function of `filter` and `take_while`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Predicate {
    /// A boolean expression.
    Expr {
        /// The expression.
        expr: Expr,
    },
    /// A registered closure returning one bool per element.
    Closure {
        /// The closure.
        closure: ClosureRef,
    },
}

impl Predicate {
    /// True when the predicate may be run on any thread in any order with the same result.
    pub fn is_stateless_and_deterministic(&self) -> bool {
        match self {
            Predicate::Expr { .. } => true,
            Predicate::Closure { closure } => closure.stateless && closure.deterministic,
        }
    }

    /// True when the predicate's calls take a process-wide lock ([`ClosureRef::exclusive`]).
    pub fn is_exclusive(&self) -> bool {
        matches!(self, Predicate::Closure { closure } if closure.exclusive)
    }
}

/// The function of `flat_map` and `interleave`: an element in, a dataset out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DatasetFn {
    /// Read the file whose path is the string field `field`, in `format`.
    ReadFile {
        /// The field holding the path.
        field: String,
        /// How to read it; its schema is the output spec.
        format: FileFormat,
    },
    /// Read the split named by the element's `file` and `row_group` fields (the elements of
    /// a splits source), in `format`.
    ReadSplit {
        /// How to read it; its schema is the output spec.
        format: FileFormat,
    },
    /// `Dataset.from_tensor_slices(element)`: the element's leading dimension becomes elements.
    FromTensorSlices,
    /// A registered closure that returns a plan for each element.
    Closure {
        /// The closure.
        closure: ClosureRef,
        /// The spec of the datasets it returns.
        output: ElementSpec,
    },
}
