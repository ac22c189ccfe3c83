//! The cost model extraction minimizes.
//!
//! A plan's cost is the work per element the source produces: each operator pays a
//! per-element overhead, its function's operations (cheap when run over a chunk, plus a
//! dispatch per call when run per element — pfor's whole point), and the bytes it moves
//! (reading, copying into batches, compacting after a filter, shuffling). A batch divides
//! the number of calls a later per-element function makes; a filter is assumed to keep half
//! of its input. Parallel functions divide their work by the cores; a prefetch hides part
//! of its producer's latency from the consumer.

use egg::{CostFunction, Id, Language};
use flumen_ir::{ClosureKind, DType, ElementSpec, MapFn, Op, Tunable};

use crate::analysis::Graph;
use crate::language::Node;
use crate::value::{decode, Value};

/// The cost of a term: total work, and the shape of the stream it yields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Work per source element (for plans), or number of operations (for functions).
    pub total: f64,
    /// Rows out per source element.
    pub rows: f64,
    /// Elements per row (the product of batch sizes above the source).
    pub width: f64,
}

impl PartialOrd for Cost {
    fn partial_cmp(&self, other: &Cost) -> Option<std::cmp::Ordering> {
        self.total.partial_cmp(&other.total)
    }
}

impl Cost {
    fn ops(total: f64) -> Cost {
        Cost { total, rows: 1.0, width: 1.0 }
    }
}

/// A cost model over flumen's language: given a node and its children's costs, the node's.
/// Implement it to steer extraction with your own model (see [`crate::Optimizer::with_cost`]).
pub trait CostModel: Send + Sync {
    /// The cost of `node` (in `egraph`), whose children cost `child(id)`.
    fn cost(&self, egraph: &Graph, node: &Node, child: &dyn Fn(Id) -> Cost) -> Cost;
}

/// flumen's default model (see the module docs); its weights are public for experiments.
#[derive(Debug, Clone)]
pub struct DefaultCost {
    /// Per element and operator: pulling it through one more operator.
    pub per_operator: f64,
    /// Per call of a function on one element (a per-row fallback pays it per element).
    pub dispatch: f64,
    /// Per expression operation per element when run over a chunk.
    pub per_op_columnar: f64,
    /// Per byte an operator copies.
    pub per_byte: f64,
    /// Per byte a source reads and decodes.
    pub per_byte_read: f64,
    /// The fraction of elements a filter is assumed to keep.
    pub selectivity: f64,
    /// The cores a parallel function is spread over.
    pub cores: f64,
    /// The fraction of its producer's cost a prefetch leaves visible to the consumer.
    pub prefetch_visible: f64,
}

impl Default for DefaultCost {
    fn default() -> Self {
        DefaultCost {
            per_operator: 2.0,
            dispatch: 100.0,
            per_op_columnar: 1.0,
            per_byte: 0.05,
            per_byte_read: 0.2,
            selectivity: 0.5,
            cores: 2.0,
            prefetch_visible: 0.9,
        }
    }
}

/// Bytes per element of `spec` (unknown dims count as 8, strings as 16 bytes).
pub fn element_bytes(spec: &ElementSpec) -> f64 {
    spec.fields
        .iter()
        .map(|f| {
            let width = match f.dtype {
                DType::Bool | DType::Int8 | DType::UInt8 => 1.0,
                DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => 2.0,
                DType::Int32 | DType::UInt32 | DType::Float32 | DType::Date32 => 4.0,
                DType::Int64 | DType::UInt64 | DType::Float64 | DType::TimeMicros | DType::TimestampMicros => 8.0,
                DType::Utf8 | DType::Binary | DType::Decimal128 { .. } => 16.0,
            };
            let dims: f64 = f.shape[spec.batch_dims.min(f.shape.len())..]
                .iter()
                .map(|d| if *d < 0 { 8.0 } else { *d as f64 })
                .product();
            width * dims
        })
        .sum()
}

impl DefaultCost {
    /// The work of running `func` (of `ops` operations) on one row of `width` elements.
    fn call(&self, func: &MapFn, vectorized: bool, ops: f64, width: f64, rows: f64, parallel: bool) -> f64 {
        // Opaque columnar work (a batch closure, a parse) per row, past the call's dispatch.
        let opaque = width * self.per_op_columnar * 10.0;
        let per_chunk = rows * (self.dispatch / 10.0 + opaque);
        let work = match func {
            MapFn::Exprs { .. } if vectorized => rows * width * ops * self.per_op_columnar,
            MapFn::Exprs { .. } => rows * (self.dispatch + width * ops * self.per_op_columnar),
            MapFn::ParseExample { .. } if vectorized => per_chunk,
            MapFn::ParseExample { .. } => rows * (self.dispatch + opaque),
            MapFn::Closure { closure, .. } => match closure.kind {
                ClosureKind::PerElement => rows * (2.0 * self.dispatch) * width,
                ClosureKind::PerBatch | ClosureKind::PerBatchRowwise => per_chunk,
            },
        };
        self.on_workers(work, parallel)
    }

    /// `cost` spread over the cores when a parallel operator's workers pay it.
    fn on_workers(&self, cost: f64, parallel: bool) -> f64 {
        if parallel {
            cost / self.cores
        } else {
            cost
        }
    }
}

/// Whether `t` asks for more than one call at once.
pub(crate) fn parallel(t: &Tunable) -> bool {
    matches!(t, Tunable::Autotune) || matches!(t, Tunable::Fixed(n) if *n > 1)
}

impl DefaultCost {
    /// The operations a call of function `name` counts for: one, except for decoding an
    /// image, which costs as much as a long expression (a crop's decode of only the rows it
    /// keeps, `decode_jpeg_rows`, less than a whole one).
    fn call_ops(&self, name: &str) -> f64 {
        match name {
            "decode_jpeg" | "decode_png" | "decode_image" => 1000.0,
            "decode_jpeg_rows" => 700.0,
            _ => 1.0,
        }
    }
}

impl CostModel for DefaultCost {
    fn cost(&self, egraph: &Graph, node: &Node, child: &dyn Fn(Id) -> Cost) -> Cost {
        if !node.is_plan() && !matches!(node, Node::Sink(_)) {
            // Functions and expressions: the number of operations.
            let own = match node {
                Node::Lit(_) | Node::Name(_) | Node::Opaque(_) | Node::Col(_) => 0.0,
                Node::Exprs(_)
                | Node::Out(_)
                | Node::Pfor(_)
                | Node::ClosureFn(_)
                | Node::ClosurePred(_)
                | Node::ParseFn(_) => 0.0,
                Node::Call(c) => match &egraph[c[0]].data.value {
                    Value::Name(f) => self.call_ops(f),
                    _ => 1.0,
                },
                _ => 1.0,
            };
            return Cost::ops(own + node.children().iter().map(|c| child(*c).total).sum::<f64>());
        }
        if let Node::Sink(x) = node {
            return child(*x);
        }
        // This term's own operator (its class's representative may be another one).
        let Value::Plan(plan) = decode(node, &|id| &egraph[id].data.value) else {
            return Cost { total: f64::INFINITY, rows: 1.0, width: 1.0 };
        };
        let children = node.children();
        let input = if plan.inputs().is_empty() {
            Cost { total: 0.0, rows: 1.0, width: 1.0 }
        } else {
            let inputs: Vec<Cost> =
                children[children.len() - plan.inputs().len()..].iter().map(|c| child(*c)).collect();
            Cost {
                total: inputs.iter().map(|c| c.total).sum(),
                rows: inputs.iter().map(|c| c.rows).sum(),
                width: inputs.iter().map(|c| c.width).fold(1.0, f64::max),
            }
        };
        let (rows, width) = (input.rows, input.width);
        let out_bytes = element_bytes(plan.spec()) * width;
        let overhead = rows * self.per_operator;
        let fn_ops = |i: usize| child(children[i]).total;
        let (own, rows_out, width_out) = match plan.op() {
            Op::Source(_) => (self.per_operator + element_bytes(plan.spec()) * self.per_byte_read, 1.0, 1.0),
            Op::Map { func, vectorized, num_parallel_calls, .. } => {
                let calls = parallel(num_parallel_calls);
                let work = self.call(func, *vectorized, fn_ops(0), width, rows, calls);
                // A parallel map's workers write its outputs too, so a map that only renames
                // or selects fields (no operations) is still cheaper parallel.
                let copy = self.on_workers(rows * out_bytes * self.per_byte, calls);
                (overhead + work + copy, rows, width)
            }
            Op::Filter { predicate, vectorized, num_parallel_calls, .. } => {
                let func = match predicate {
                    flumen_ir::Predicate::Expr { .. } => MapFn::Exprs { outputs: vec![], keep_input: true },
                    flumen_ir::Predicate::Closure { closure } => {
                        MapFn::Closure { closure: closure.clone(), output: ElementSpec::default() }
                    }
                };
                let work = self.call(&func, *vectorized, fn_ops(0), width, rows, parallel(num_parallel_calls));
                let copy = rows * self.selectivity * out_bytes * self.per_byte;
                (overhead + work + copy, rows * self.selectivity, width)
            }
            Op::MapAndBatch { func, vectorized, batch_size, num_parallel_calls, .. } => {
                let calls = parallel(num_parallel_calls);
                let work = self.call(func, *vectorized, fn_ops(0), width, rows, calls);
                // One operator and one copy: results are written straight into the batch, by
                // the workers when parallel.
                let b = *batch_size as f64;
                let copy = self.on_workers(rows * out_bytes * self.per_byte / b, calls);
                (overhead + work + copy, rows / b, width * b)
            }
            Op::Batch { batch_size, .. } => {
                let b = *batch_size as f64;
                (overhead + rows * element_bytes(plan.input().spec()) * width * self.per_byte, rows / b, width * b)
            }
            Op::Shuffle { .. } => (overhead + 2.0 * rows * out_bytes * self.per_byte, rows, width),
            Op::ShuffleAndRepeat { .. } => (overhead + 2.0 * rows * out_bytes * self.per_byte, rows, width),
            Op::Shard { num_shards, .. } => (overhead, rows / *num_shards as f64, width),
            Op::Prefetch { buffer_size } => {
                if *buffer_size == Tunable::Fixed(0) {
                    (overhead, rows, width)
                } else {
                    // Overlap: only part of the producer's cost stays on the consumer's path.
                    let hidden = input.total * (1.0 - self.prefetch_visible);
                    (rows * self.per_operator * 0.01 - hidden, rows, width)
                }
            }
            _ => (overhead + rows * out_bytes * self.per_byte, rows, width),
        };
        Cost { total: input.total + own, rows: rows_out, width: width_out }
    }
}

/// Adapts a [`CostModel`] to egg's extraction.
pub(crate) struct Extraction<'a> {
    pub egraph: &'a Graph,
    pub model: &'a dyn CostModel,
}

impl CostFunction<Node> for Extraction<'_> {
    type Cost = Cost;

    fn cost<C>(&mut self, enode: &Node, mut costs: C) -> Cost
    where
        C: FnMut(Id) -> Cost,
    {
        // A node has a handful of children: a list, not a hash map, per call (the
        // extractor calls this for every node on every pass). `cargo bench --bench
        // optimizer -- optimize/50`: 11.15 → 10.55 and 10.84 → 10.38 ms.
        let known: Vec<(Id, Cost)> = enode.children().iter().map(|c| (*c, costs(*c))).collect();
        self.model.cost(self.egraph, enode, &|id| {
            known.iter().find(|(c, _)| *c == id).map(|(_, cost)| *cost).expect("a child of the node")
        })
    }
}
