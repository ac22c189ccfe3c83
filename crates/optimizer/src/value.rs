//! What a term means in IR: decoding a node from the meanings of its children.
//!
//! The same decoding serves the e-graph analysis (each class knows the IR value of one of
//! its terms) and raising an extracted term back into a typed [`Plan`].

use egg::{Id, RecExpr};
use flumen_ir::{DType, Expr, Func, MapFn, NamedExpr, Op, Plan, Predicate, Scalar, Tunable, UnaryOp};

use crate::language::Node;
use crate::leaf::OpaqueValue;

/// The IR meaning of a term.
#[derive(Debug, Clone)]
pub enum Value {
    /// A literal or operator argument.
    Lit(Scalar),
    /// A bare word.
    Name(String),
    /// An opaque descriptor.
    Opaque(OpaqueValue),
    /// An expression.
    Expr(Expr),
    /// One named output of an expression map.
    Out(NamedExpr),
    /// The function of a map.
    Func {
        /// The function.
        func: MapFn,
        /// Run over whole chunks (pfor).
        pfor: bool,
    },
    /// A predicate that is not a bare expression (a closure, or a `pfor` predicate).
    Pred {
        /// The predicate.
        predicate: Predicate,
        /// Run over whole chunks (pfor).
        pfor: bool,
    },
    /// A typed plan.
    Plan(Plan),
    /// The consumer of a plan.
    Sink(Plan),
    /// A term that does not mean anything (a rule built something ill-typed: a bug).
    Invalid(String),
}

impl Value {
    /// The plan, for plan classes.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            Value::Plan(p) | Value::Sink(p) => Some(p),
            _ => None,
        }
    }

    /// The map function and its pfor flag, for function classes.
    pub fn func(&self) -> Option<(&MapFn, bool)> {
        match self {
            Value::Func { func, pfor } => Some((func, *pfor)),
            _ => None,
        }
    }

    /// The predicate and its pfor flag, for classes used as predicates.
    pub fn predicate(&self) -> Option<(Predicate, bool)> {
        match self {
            Value::Expr(e) => Some((Predicate::Expr { expr: e.clone() }, false)),
            Value::Lit(s) => Some((Predicate::Expr { expr: Expr::Literal(s.clone()) }, false)),
            Value::Pred { predicate, pfor } => Some((predicate.clone(), *pfor)),
            _ => None,
        }
    }

    /// The expression, for expression classes.
    pub fn expr(&self) -> Option<&Expr> {
        match self {
            Value::Expr(e) => Some(e),
            _ => None,
        }
    }
}

/// Decodes `node` given the meaning of each child id.
pub fn decode<'v>(node: &Node, child: &dyn Fn(Id) -> &'v Value) -> Value {
    match try_decode(node, child) {
        Ok(v) => v,
        Err(e) => Value::Invalid(e),
    }
}

fn try_decode<'v>(node: &Node, child: &dyn Fn(Id) -> &'v Value) -> Result<Value, String> {
    let expr = |id: Id| match child(id) {
        Value::Expr(e) => Ok(e.clone()),
        Value::Lit(s) => Ok(Expr::Literal(s.clone())),
        other => Err(format!("expected an expression, got {other:?}")),
    };
    let plan = |id: Id| match child(id) {
        Value::Plan(p) => Ok(p.clone()),
        other => Err(format!("expected a plan, got {}", short(other))),
    };
    let make = |op: Op, inputs: Vec<Plan>| Plan::new(op, inputs).map(Value::Plan).map_err(|e| e.to_string());
    let unary =
        |op: UnaryOp, a: Id| -> Result<Value, String> { Ok(Value::Expr(Expr::Unary { op, arg: Box::new(expr(a)?) })) };
    match node {
        Node::Add(_)
        | Node::Sub(_)
        | Node::Mul(_)
        | Node::Div(_)
        | Node::Mod(_)
        | Node::Eq(_)
        | Node::NotEq(_)
        | Node::Lt(_)
        | Node::LtEq(_)
        | Node::Gt(_)
        | Node::GtEq(_)
        | Node::And(_)
        | Node::Or(_) => {
            let (op, [l, r]) = node.as_binary().expect("a binary node");
            Ok(Value::Expr(Expr::binary(op, expr(l)?, expr(r)?)))
        }
        Node::Lit(l) => Ok(Value::Lit(l.value().clone())),
        Node::Name(n) => Ok(Value::Name(n.0.clone())),
        Node::Opaque(o) => Ok(Value::Opaque(o.value().clone())),
        Node::Col(n) => Ok(Value::Expr(Expr::Column(name(child(*n))?))),
        Node::Not(a) => unary(UnaryOp::Not, *a),
        Node::Neg(a) => unary(UnaryOp::Neg, *a),
        Node::IsNull(a) => unary(UnaryOp::IsNull, *a),
        Node::IsNotNull(a) => unary(UnaryOp::IsNotNull, *a),
        Node::Cast([a, t]) => {
            let t = name(child(*t))?;
            let to = DType::from_name(&t).ok_or_else(|| format!("unknown type {t}"))?;
            Ok(Value::Expr(Expr::Cast { arg: Box::new(expr(*a)?), to }))
        }
        Node::Case(children) => {
            let mut branches = Vec::new();
            let mut it = children.chunks_exact(2);
            for pair in it.by_ref() {
                branches.push((expr(pair[0])?, expr(pair[1])?));
            }
            let otherwise = match it.remainder() {
                [e] => Some(Box::new(expr(*e)?)),
                _ => None,
            };
            Ok(Value::Expr(Expr::Case { branches, otherwise }))
        }
        Node::Call(children) => {
            let (f, args) = children.split_first().ok_or("call without a function")?;
            let f = name(child(*f))?;
            let func = Func::from_name(&f).ok_or_else(|| format!("unknown function {f}"))?;
            Ok(Value::Expr(Expr::Call { func, args: args.iter().map(|a| expr(*a)).collect::<Result<_, _>>()? }))
        }
        Node::Out([n, e]) => Ok(Value::Out(NamedExpr { name: name(child(*n))?, expr: expr(*e)? })),
        Node::Exprs(children) => {
            let (keep, outs) = children.split_first().ok_or("exprs without a mode")?;
            let keep_input = match name(child(*keep))?.as_str() {
                "keep" => true,
                "only" => false,
                other => return Err(format!("exprs mode must be keep or only, got {other}")),
            };
            let outputs = outs
                .iter()
                .map(|o| match child(*o) {
                    Value::Out(n) => Ok(n.clone()),
                    other => Err(format!("expected an output, got {}", short(other))),
                })
                .collect::<Result<_, _>>()?;
            Ok(Value::Func { func: MapFn::Exprs { outputs, keep_input }, pfor: false })
        }
        Node::ClosureFn([c, s]) => match (child(*c), child(*s)) {
            (Value::Opaque(OpaqueValue::Closure(closure)), Value::Opaque(OpaqueValue::Spec(output))) => {
                Ok(Value::Func {
                    func: MapFn::Closure { closure: closure.clone(), output: output.clone() },
                    pfor: false,
                })
            }
            _ => Err("closure needs a closure and a spec".into()),
        },
        Node::ParseFn(a) => match child(*a) {
            Value::Opaque(OpaqueValue::ParseExample(field, features)) => Ok(Value::Func {
                func: MapFn::ParseExample { field: field.clone(), features: features.clone() },
                pfor: false,
            }),
            _ => Err("parse_example needs its field and features".into()),
        },
        Node::ClosurePred(c) => match child(*c) {
            Value::Opaque(OpaqueValue::Closure(closure)) => {
                Ok(Value::Pred { predicate: Predicate::Closure { closure: closure.clone() }, pfor: false })
            }
            _ => Err("closure predicate needs a closure".into()),
        },
        Node::Pfor(f) => match child(*f) {
            Value::Func { func, pfor: false } if crate::rules::vectorize::vectorizable(func) => {
                Ok(Value::Func { func: func.clone(), pfor: true })
            }
            Value::Expr(expr) => Ok(Value::Pred { predicate: Predicate::Expr { expr: expr.clone() }, pfor: true }),
            Value::Lit(s) => {
                Ok(Value::Pred { predicate: Predicate::Expr { expr: Expr::Literal(s.clone()) }, pfor: true })
            }
            other => Err(format!("only expressions and parse_example can be vectorized, not {}", short(other))),
        },
        Node::Sink(p) => Ok(Value::Sink(plan(*p)?)),
        Node::Source(s) => match child(*s) {
            Value::Opaque(OpaqueValue::Source(s)) => make(Op::Source(s.clone()), vec![]),
            _ => Err("source needs a source descriptor".into()),
        },
        Node::Map([f, c, d, x]) => {
            let (func, vectorized) = func(child(*f))?;
            let op = Op::Map {
                func,
                num_parallel_calls: tunable(child(*c))?,
                deterministic: optional_bool(child(*d))?,
                vectorized,
            };
            make(op, vec![plan(*x)?])
        }
        Node::Filter([p, c, d, x]) => {
            let (predicate, vectorized) = child(*p).predicate().ok_or("filter needs a predicate")?;
            let op = Op::Filter {
                predicate,
                vectorized,
                num_parallel_calls: tunable(child(*c))?,
                deterministic: optional_bool(child(*d))?,
            };
            make(op, vec![plan(*x)?])
        }
        Node::MapAndBatch([f, n, r, c, d, x]) => {
            let (func, vectorized) = func(child(*f))?;
            let op = Op::MapAndBatch {
                func,
                batch_size: unsigned(child(*n))?,
                drop_remainder: boolean(child(*r))?,
                num_parallel_calls: tunable(child(*c))?,
                deterministic: optional_bool(child(*d))?,
                vectorized,
            };
            make(op, vec![plan(*x)?])
        }
        Node::Batch([n, r, c, d, x]) => {
            let op = Op::Batch {
                batch_size: unsigned(child(*n))?,
                drop_remainder: boolean(child(*r))?,
                num_parallel_calls: tunable(child(*c))?,
                deterministic: optional_bool(child(*d))?,
            };
            make(op, vec![plan(*x)?])
        }
        Node::Shuffle([n, s, r, x]) => {
            let op = Op::Shuffle {
                buffer_size: unsigned(child(*n))?,
                seed: seed(child(*s))?,
                reshuffle_each_iteration: boolean(child(*r))?,
            };
            make(op, vec![plan(*x)?])
        }
        Node::ShuffleAndRepeat([n, s, r, c, x]) => {
            let op = Op::ShuffleAndRepeat {
                buffer_size: unsigned(child(*n))?,
                seed: seed(child(*s))?,
                reshuffle_each_iteration: boolean(child(*r))?,
                count: signed(child(*c))?,
            };
            make(op, vec![plan(*x)?])
        }
        Node::Repeat([c, x]) => make(Op::Repeat { count: signed(child(*c))? }, vec![plan(*x)?]),
        Node::Take([c, x]) => make(Op::Take { count: signed(child(*c))? }, vec![plan(*x)?]),
        Node::Skip([c, x]) => make(Op::Skip { count: signed(child(*c))? }, vec![plan(*x)?]),
        Node::Shard([n, i, x]) => {
            let op = Op::Shard { num_shards: unsigned(child(*n))?, index: unsigned(child(*i))? };
            make(op, vec![plan(*x)?])
        }
        Node::Prefetch([b, x]) => make(Op::Prefetch { buffer_size: tunable(child(*b))? }, vec![plan(*x)?]),
        Node::Other(sym, children) => {
            let (op, inputs) = children.split_first().ok_or("operator without arguments")?;
            let op = match child(*op) {
                Value::Opaque(OpaqueValue::Op(op)) => op.clone(),
                _ => return Err(format!("{sym} needs an operator descriptor")),
            };
            if op.name() != sym.as_str() {
                return Err(format!("{sym} holds a {} operator", op.name()));
            }
            make(op, inputs.iter().map(|i| plan(*i)).collect::<Result<_, _>>()?)
        }
    }
}

pub(crate) fn short(v: &Value) -> String {
    match v {
        Value::Plan(p) => format!("plan {}", p.op().name()),
        Value::Invalid(e) => format!("an invalid term ({e})"),
        other => format!("{other:?}").chars().take(80).collect(),
    }
}

pub(crate) fn name(v: &Value) -> Result<String, String> {
    match v {
        Value::Name(n) => Ok(n.clone()),
        other => Err(format!("expected a name, got {}", short(other))),
    }
}

pub(crate) fn func(v: &Value) -> Result<(MapFn, bool), String> {
    v.func().map(|(f, p)| (f.clone(), p)).ok_or_else(|| format!("expected a function, got {}", short(v)))
}

pub(crate) fn boolean(v: &Value) -> Result<bool, String> {
    match v {
        Value::Lit(Scalar::Bool(b)) => Ok(*b),
        other => Err(format!("expected a bool, got {}", short(other))),
    }
}

pub(crate) fn signed(v: &Value) -> Result<i64, String> {
    match v {
        Value::Lit(Scalar::Int(i, DType::Int64)) => Ok(*i),
        other => Err(format!("expected an int64, got {}", short(other))),
    }
}

pub(crate) fn unsigned(v: &Value) -> Result<u64, String> {
    match v {
        Value::Lit(Scalar::Int(i, DType::Int64)) if *i >= 0 => Ok(*i as u64),
        Value::Lit(Scalar::UInt64(u)) => Ok(*u),
        other => Err(format!("expected a non-negative integer, got {}", short(other))),
    }
}

pub(crate) fn tunable(v: &Value) -> Result<Tunable, String> {
    match v {
        Value::Name(n) if n == "default" => Ok(Tunable::Default),
        Value::Name(n) if n == "autotune" => Ok(Tunable::Autotune),
        Value::Lit(Scalar::Int(i, DType::Int64)) => {
            u32::try_from(*i).map(Tunable::Fixed).map_err(|_| format!("{i} is not a valid parallelism"))
        }
        other => Err(format!("expected default, autotune or a number, got {}", short(other))),
    }
}

pub(crate) fn optional_bool(v: &Value) -> Result<Option<bool>, String> {
    match v {
        Value::Name(n) if n == "none" => Ok(None),
        other => boolean(other).map(Some),
    }
}

pub(crate) fn seed(v: &Value) -> Result<Option<u64>, String> {
    match v {
        Value::Name(n) if n == "none" => Ok(None),
        other => unsigned(other).map(Some),
    }
}

/// Raises a term of the language back into a typed plan.
pub fn raise(expr: &RecExpr<Node>) -> flumen_ir::Result<Plan> {
    let nodes = expr.as_ref();
    let mut values: Vec<Value> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let v = decode(node, &|id: Id| &values[usize::from(id)]);
        values.push(v);
    }
    match values.pop() {
        Some(Value::Plan(p)) | Some(Value::Sink(p)) => Ok(p),
        Some(Value::Invalid(e)) => {
            Err(flumen_ir::Error::plan("optimizer", format!("the optimized plan is ill-typed: {e}")))
        }
        other => Err(flumen_ir::Error::plan("optimizer", format!("the term is not a plan: {other:?}"))),
    }
}
