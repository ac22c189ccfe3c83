//! A chain of expression maps and filters compiled into one selecting kernel: one loop that
//! reads each input column once and writes each output only for the rows every filter
//! keeps.
//!
//! Run link by link, a chain materializes each map's columns and each filter's mask, and
//! the filter copies the rows it keeps before the next map reads them (w4's `map → filter
//! → map` made two kernels, a mask and a compacted copy per chunk, and computed the square
//! root twice, since map-filter fusion inlines the map into both the predicate and the map
//! above). Composed, the chain is one predicate and one expression per output over the
//! chain's input columns, and the kernel program computes their common sub-expressions once
//! ([`super::native`] compiles it selecting).
//!
//! The composition changes no value: each map output is substituted only where the
//! kernel's typing gives the composed expression the type the map declares. The kernel
//! computes every row, including those a filter drops, so an operation failing on any row
//! (an overflow, say) hands the chunk back, as do inputs with nulls; the caller then runs
//! the chain link by link, which gives the values, or the error and its row, exactly. A map
//! output that a later map drops without reading it is computed all the same (written for
//! the kept rows, then discarded): run link by link it is computed, and may fail.

use std::sync::OnceLock;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use flumen_ir::{BinaryOp, Expr, NamedExpr};

use super::program::{compile, Ty};
use super::Kernel;

/// Composed expressions larger than this many nodes stay links: substitution copies a map's
/// expression into each use, which a chain like `v := v * v` doubles per link.
const MAX_NODES: usize = 4096;

/// One link of a chain, given bottom first.
#[derive(Debug, Clone)]
pub enum Link {
    /// An expression map: `outputs`, keeping the input's fields when `keep_input`, into
    /// chunks of `schema`.
    Map {
        /// The computed fields.
        outputs: Vec<NamedExpr>,
        /// Whether the input's other fields are kept.
        keep_input: bool,
        /// The map's output schema.
        schema: SchemaRef,
    },
    /// An expression filter keeping the rows where `predicate` holds.
    Filter {
        /// The predicate.
        predicate: Expr,
    },
}

/// A chain of maps and filters as one selecting kernel (see the module overview).
#[derive(Debug)]
pub struct FusedChain {
    /// The conjunction of the filters' predicates over the chain's input.
    keep: Expr,
    /// The chain's output fields over its input, in the output schema's order.
    outputs: Vec<Expr>,
    /// Map outputs that later maps drop unread: computed only for their failures.
    checks: Vec<Expr>,
    out_schema: SchemaRef,
    /// Compiled on the first chunk; `None` where the program has no selecting native code.
    kernel: OnceLock<Option<Kernel>>,
}

impl FusedChain {
    /// The chain of `links` (bottom first) over chunks of `input`; `None` when it has no
    /// filter, when a map's output would change type composed, or when an expression is
    /// one kernels do not compute.
    pub fn new(input: &SchemaRef, links: &[Link]) -> Option<FusedChain> {
        // Nothing to select without a filter: compose nothing, the links stay.
        if !links.iter().any(|l| matches!(l, Link::Filter { .. })) {
            return None;
        }
        let mut fields: Vec<(String, Expr)> =
            input.fields().iter().map(|f| (f.name().clone(), Expr::col(f.name()))).collect();
        let mut keep: Option<Expr> = None;
        let mut checks: Vec<Expr> = Vec::new();
        let mut out_schema = input.clone();
        for link in links {
            let composed = |e: &Expr| {
                let sub = e.substitute(&|name| fields.iter().find(|(n, _)| n == name).map(|(_, e)| e.clone()));
                let mut nodes = 0;
                sub.visit(&mut |_| nodes += 1);
                (nodes <= MAX_NODES).then_some(sub)
            };
            match link {
                Link::Filter { predicate } => {
                    let p = composed(predicate)?;
                    keep = Some(match keep {
                        Some(k) => Expr::binary(BinaryOp::And, k, p),
                        None => p,
                    });
                }
                Link::Map { outputs, keep_input, schema } => {
                    let mut next = Vec::with_capacity(schema.fields().len());
                    for field in schema.fields() {
                        let expr = match outputs.iter().find(|o| o.name == *field.name()) {
                            Some(out) => {
                                let expr = composed(&out.expr)?;
                                let declared = Ty::of_arrow(field.data_type())?;
                                (kernel_type(&expr, input)? == declared).then_some(expr)?
                            }
                            None if *keep_input => fields.iter().find(|(n, _)| n == field.name())?.1.clone(),
                            None => return None,
                        };
                        next.push((field.name().clone(), expr));
                    }
                    // The fields this map drops or replaces without reading them.
                    let read: std::collections::BTreeSet<String> =
                        outputs.iter().flat_map(|o| o.expr.columns()).collect();
                    for (name, expr) in &fields {
                        let carried = next.iter().any(|(n, e)| n == name && e == expr);
                        if !carried
                            && !read.contains(name)
                            && !matches!(expr, Expr::Column(_))
                            && !checks.contains(expr)
                        {
                            checks.push(expr.clone());
                        }
                    }
                    fields = next;
                    out_schema = schema.clone();
                }
            }
        }
        let outputs = fields.into_iter().map(|(_, e)| e).collect();
        Some(FusedChain { keep: keep.expect("a filter"), outputs, checks, out_schema, kernel: OnceLock::new() })
    }

    /// The chain's output over `chunk`: the kept rows' output fields; `None` when the chunk
    /// is handed back (see the module overview), or the chain does not compile to selecting
    /// native code.
    pub fn evaluate(&self, chunk: &RecordBatch) -> Option<RecordBatch> {
        let kernel = self.kernel.get_or_init(|| {
            let exprs: Vec<&Expr> = std::iter::once(&self.keep).chain(&self.outputs).chain(&self.checks).collect();
            Kernel::compile_selecting(&exprs, chunk.schema_ref())
        });
        let mut columns = kernel.as_ref()?.run_selecting(chunk)?;
        columns.truncate(self.outputs.len());
        RecordBatch::try_new(self.out_schema.clone(), columns).ok()
    }
}

/// The type a kernel computes `expr` in over chunks of `schema`, where it compiles, and
/// where it has a column (a literal alone would adopt the type of whatever it meets).
fn kernel_type(expr: &Expr, schema: &Schema) -> Option<Ty> {
    if expr.columns().is_empty() {
        return None;
    }
    compile(&[expr], schema).map(|p| p.outputs[0].1)
}
