//! Pushdown into sources.
//!
//! - Projection: when a map reads only some fields, the fields nobody reads are pruned on
//!   the way down — outputs of earlier maps that are never used (when they cannot fail)
//!   and columns of Parquet, CSV and Avro sources (also inside `flat_map`/`interleave` reads),
//!   so those columns are never decoded. CSV columns that can fail to parse (numbers,
//!   bools) are kept, so a malformed record stays an error. Filters on the way add the
//!   fields they read, and a `parse_example` reads its records' field only (its features
//!   are all kept: any of them can make a record an error).
//! - Predicate: a filter right above a Parquet read becomes the reader's predicate
//!   (row-group pruning from statistics plus an exact row filter). Only through
//!   operators where that is exact: a plain read, or a `flat_map` of reads (not an
//!   interleave with several inputs, whose order depends on how many elements each has).

use std::collections::{BTreeSet, HashMap};

use egg::Id;
use flumen_ir::{BinaryOp, DatasetFn, Expr, FileFormat, MapFn, NamedExpr, Op, Predicate, SourceDesc, Tunable};

use super::{builtin, Match, Rule};
use crate::language::Node;
use crate::leaf::OpaqueValue;
use crate::simplify::{fold, may_fail};
use crate::value::{decode, Value};

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        builtin("projection-pushdown", "(map ?f ?c ?d ?x)", |m| projection_pushdown(m, false)),
        builtin("projection-pushdown-batch", "(map_and_batch ?f ?n ?r ?c ?d ?x)", |m| projection_pushdown(m, true)),
        builtin("predicate-pushdown", "(filter ?p ?c ?d ?x)", |m| {
            let (Predicate::Expr { expr }, _) = m.predicate("?p")? else { return None };
            // A predicate that can fail must fail on exactly the elements it fails on as
            // written: statistics would skip some, and conjunctions evaluate every side.
            if may_fail(&expr, m.plan("?x")?.spec()) {
                return None;
            }
            let x = m.id("?x")?;
            push_predicate(m, x, &expr)
        }),
    ]
}

/// A map (or `map_and_batch` when `batched`) over its input with the fields its function
/// does not read pruned on the way down.
fn projection_pushdown(m: &mut Match, batched: bool) -> Option<Id> {
    let (func, vectorized) = m.func("?f")?;
    let needed = m.egraph[m.id("?f")?].data.fields_used()?;
    let op = m.map_with(func, vectorized, batched)?;
    let x = m.id("?x")?;
    let pruned = Projection::default().class(m, x, &needed, 0)?;
    m.add(op, &[pruned])
}

/// The operator of one term (not of its class's representative, which may be another
/// operator with another input).
fn op_of_node(m: &Match, node: &Node) -> Option<Op> {
    decode(node, &|id| &m.egraph[id].data.value).plan().map(|p| p.op().clone())
}

/// One projection's walk down the e-graph. Every class it reaches holds the equivalent
/// terms found so far, each a way down; trying them all afresh at each class would try every
/// path through a chain of such classes, exponentially many (an optimization that never
/// ended was found by the equivalence fuzzer). So each (class, fields needed) pair is
/// worked out once, and a class met again below itself (the e-graph has cycles) is not
/// pruned there.
#[derive(Default)]
struct Projection {
    done: HashMap<(Id, BTreeSet<String>), Option<Id>>,
}

impl Projection {
    /// A class equivalent to `class` for readers of `needed` only, with fewer fields read or
    /// computed; `None` when nothing can be pruned.
    fn class(&mut self, m: &mut Match, class: Id, needed: &BTreeSet<String>, depth: usize) -> Option<Id> {
        // Plans are shallow chains; the bound keeps the recursion's stack small.
        if depth > 64 {
            return None;
        }
        let key = (m.egraph.find(class), needed.clone());
        if let Some(done) = self.done.get(&key) {
            return *done;
        }
        self.done.insert(key.clone(), None);
        let nodes: Vec<Node> = m.egraph[class].nodes.clone();
        let found = nodes.iter().find_map(|node| self.node(m, node, needed, depth));
        self.done.insert(key, found);
        found
    }

    fn node(&mut self, m: &mut Match, node: &Node, needed: &BTreeSet<String>, depth: usize) -> Option<Id> {
        let value = |m: &Match, id: Id| m.egraph[id].data.value.clone();
        match node {
            Node::Source(s) => {
                let Value::Opaque(OpaqueValue::Source(SourceDesc::Files { files, format })) = value(m, *s) else {
                    return None;
                };
                let format = project_format(&format, needed)?;
                m.add(Op::Source(SourceDesc::Files { files, format }), &[])
            }
            Node::Other(_, children) if children.len() == 2 => {
                let Value::Opaque(OpaqueValue::Op(op)) = value(m, children[0]) else { return None };
                let op = match op {
                    Op::FlatMap { func } => Op::FlatMap { func: project_read(&func, needed)? },
                    Op::Interleave { func, cycle_length, block_length, num_parallel_calls, deterministic } => {
                        Op::Interleave {
                            func: project_read(&func, needed)?,
                            cycle_length,
                            block_length,
                            num_parallel_calls,
                            deterministic,
                        }
                    }
                    Op::IgnoreErrors | Op::ElementPositions { .. } => {
                        let input = self.class(m, children[1], needed, depth + 1)?;
                        return m.add(op, &[input]);
                    }
                    _ => return None,
                };
                m.add(op, &[children[1]])
            }
            Node::Filter([p, c, d, x]) => {
                let (predicate, _) = value(m, *p).predicate()?;
                let Predicate::Expr { expr } = &predicate else { return None };
                let mut below = needed.clone();
                below.extend(expr.columns());
                let input = self.class(m, *x, &below, depth + 1)?;
                let (predicate, vectorized) = m.egraph[*p].data.value.predicate()?;
                let num_parallel_calls = crate::value::tunable(&value(m, *c)).ok()?;
                let deterministic = crate::value::optional_bool(&value(m, *d)).ok()?;
                let op = Op::Filter { predicate, vectorized, num_parallel_calls, deterministic };
                m.add(op, &[input])
            }
            Node::Map([f, c, d, x]) => {
                let (func, vectorized) = value(m, *f).func().map(|(f, p)| (f.clone(), p))?;
                let num_parallel_calls = crate::value::tunable(&value(m, *c)).ok()?;
                let deterministic = crate::value::optional_bool(&value(m, *d)).ok()?;
                if let MapFn::ParseExample { field, .. } = &func {
                    // Every feature can fail (missing, of another type or length), so none is
                    // pruned; below the parse, only the records are read.
                    let input = self.class(m, *x, &BTreeSet::from([field.clone()]), depth + 1)?;
                    return m.add(Op::Map { func, num_parallel_calls, deterministic, vectorized }, &[input]);
                }
                let MapFn::Exprs { outputs, keep_input } = &func else { return None };
                let x_plan = value(m, *x).plan()?.clone();
                // Keep the outputs someone reads, and those that could fail (their errors count).
                let kept: Vec<NamedExpr> = outputs
                    .iter()
                    .filter(|o| needed.contains(&o.name) || may_fail(&o.expr, x_plan.spec()))
                    .cloned()
                    .collect();
                let assigned: BTreeSet<&String> = outputs.iter().map(|o| &o.name).collect();
                let mut below: BTreeSet<String> = kept.iter().flat_map(|o| o.expr.columns()).collect();
                if *keep_input {
                    below.extend(needed.iter().filter(|n| !assigned.contains(n)).cloned());
                }
                // An element with no fields at all has no rows to count: keep one output.
                if kept.is_empty() && !keep_input {
                    return None;
                }
                let pruned_here = kept.len() < outputs.len();
                let input = self.class(m, *x, &below, depth + 1);
                if !pruned_here && input.is_none() {
                    return None;
                }
                let func = MapFn::Exprs { outputs: kept, keep_input: *keep_input };
                let op = Op::Map { func, num_parallel_calls, deterministic, vectorized };
                m.add(op, &[input.unwrap_or(*x)])
            }
            Node::Batch([.., x])
            | Node::Shuffle([.., x])
            | Node::ShuffleAndRepeat([.., x])
            | Node::Repeat([_, x])
            | Node::Take([_, x])
            | Node::Skip([_, x])
            | Node::Shard([_, _, x])
            | Node::Prefetch([_, x]) => {
                let input = self.class(m, *x, needed, depth + 1)?;
                let op = op_of_node(m, node)?;
                m.add(op, &[input])
            }
            _ => None,
        }
    }
}

/// The format reading only the `needed` columns (in the current order), when that reads fewer.
/// A CSV column whose values can fail to parse (numbers, bools) is still read: a malformed
/// value in it is an error of that record, whether anyone reads the column or not.
fn project_format(format: &FileFormat, needed: &BTreeSet<String>) -> Option<FileFormat> {
    let spec = format.output_spec().ok()?;
    let keep = |f: &flumen_ir::FieldSpec| match format {
        FileFormat::Csv(_) => {
            needed.contains(&f.name) || !matches!(f.dtype, flumen_ir::DType::Utf8 | flumen_ir::DType::Binary)
        }
        _ => needed.contains(&f.name),
    };
    let current = spec.field_names();
    let columns: Vec<String> = spec.fields.iter().filter(|f| keep(f)).map(|f| f.name.clone()).collect();
    if columns.len() == current.len() || columns.is_empty() {
        return None;
    }
    match format {
        FileFormat::Csv(c) => Some(FileFormat::Csv(flumen_ir::CsvFormat { columns: Some(columns), ..c.clone() })),
        FileFormat::Parquet(p) => {
            Some(FileFormat::Parquet(flumen_ir::ParquetFormat { columns: Some(columns), ..p.clone() }))
        }
        // An Avro field not read is still walked over (a record has no index), so a
        // malformed one is still an error of its block.
        FileFormat::Avro(a) => Some(FileFormat::Avro(flumen_ir::AvroFormat { columns: Some(columns), ..a.clone() })),
        _ => None,
    }
}

fn project_read(func: &DatasetFn, needed: &BTreeSet<String>) -> Option<DatasetFn> {
    match func {
        DatasetFn::ReadFile { field, format } => {
            Some(DatasetFn::ReadFile { field: field.clone(), format: project_format(format, needed)? })
        }
        DatasetFn::ReadSplit { format } => Some(DatasetFn::ReadSplit { format: project_format(format, needed)? }),
        _ => None,
    }
}

/// The Parquet format with `predicate` added to what it already filters.
fn with_predicate(format: &FileFormat, predicate: &Expr) -> Option<FileFormat> {
    let FileFormat::Parquet(p) = format else { return None };
    let combined = match &p.predicate {
        None => predicate.clone(),
        Some(existing) => {
            fold(&Expr::binary(BinaryOp::And, existing.clone(), predicate.clone()), &format.output_spec().ok()?)
        }
    };
    Some(FileFormat::Parquet(flumen_ir::ParquetFormat { predicate: Some(combined), ..p.clone() }))
}

fn push_predicate(m: &mut Match, class: Id, predicate: &Expr) -> Option<Id> {
    let nodes: Vec<Node> = m.egraph[class].nodes.clone();
    nodes.iter().find_map(|node| match node {
        Node::Source(s) => {
            let Value::Opaque(OpaqueValue::Source(SourceDesc::Files { files, format })) =
                m.egraph[*s].data.value.clone()
            else {
                return None;
            };
            let format = with_predicate(&format, predicate)?;
            m.add(Op::Source(SourceDesc::Files { files, format }), &[])
        }
        Node::Other(_, children) if children.len() == 2 => {
            let Value::Opaque(OpaqueValue::Op(op)) = m.egraph[children[0]].data.value.clone() else { return None };
            let read = |func: &DatasetFn| match func {
                DatasetFn::ReadFile { field, format } => {
                    Some(DatasetFn::ReadFile { field: field.clone(), format: with_predicate(format, predicate)? })
                }
                DatasetFn::ReadSplit { format } => {
                    Some(DatasetFn::ReadSplit { format: with_predicate(format, predicate)? })
                }
                _ => None,
            };
            let op = match op {
                Op::FlatMap { func } => Op::FlatMap { func: read(&func)? },
                Op::Interleave {
                    func,
                    cycle_length: Tunable::Fixed(1),
                    block_length,
                    num_parallel_calls,
                    deterministic,
                } => Op::Interleave {
                    func: read(&func)?,
                    cycle_length: Tunable::Fixed(1),
                    block_length,
                    num_parallel_calls,
                    deterministic,
                },
                _ => return None,
            };
            m.add(op, &[children[1]])
        }
        _ => None,
    })
}
