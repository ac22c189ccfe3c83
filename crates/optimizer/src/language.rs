//! The one e-graph language for plans and the expressions inside their functions.
//!
//! Plan operators take their arguments first and their inputs last, so `(map F calls det X)`
//! reads as "map F over X". A function is a term too: an expression map is
//! `(exprs keep|only (out name EXPR)...)`, a closure is `(closure #ref #spec)`, and
//! `(pfor F)` marks a function run over whole chunks at once. Expressions are plain terms
//! over `(col name)` and literals, so composing two maps is substituting terms — there are
//! no lambdas in the e-graph. Operators no rule rewrites (padded_batch, window, zip, ...)
//! share one generic form, `(name #op inputs...)`, that still round-trips losslessly.

use egg::Id;
use flumen_ir::BinaryOp;

pub use node::Node;

// egg's macro takes no per-variant attributes; each form is documented in the module docs
// and at its line here.
#[allow(missing_docs)]
mod node {
    use egg::{define_language, Id, Symbol};

    use crate::leaf::{Lit, Name, Opaque};

    define_language! {
    /// A node of the plan-and-expression language.
    pub enum Node {
        // ---- plan operators: arguments first, inputs last ----
        "source" = Source(Id),
        "map" = Map([Id; 4]),
        "filter" = Filter([Id; 4]),
        "map_and_batch" = MapAndBatch([Id; 6]),
        "batch" = Batch([Id; 5]),
        "shuffle" = Shuffle([Id; 4]),
        "shuffle_and_repeat" = ShuffleAndRepeat([Id; 5]),
        "repeat" = Repeat([Id; 2]),
        "take" = Take([Id; 2]),
        "skip" = Skip([Id; 2]),
        "shard" = Shard([Id; 3]),
        "prefetch" = Prefetch([Id; 2]),
        // The consumer of the whole plan: rules that decorate the output (inject_prefetch)
        // rewrite under it, so the plan's own class never contains itself.
        "sink" = Sink(Id),
        // ---- functions ----
        "exprs" = Exprs(Box<[Id]>),
        "out" = Out([Id; 2]),
        "closure" = ClosureFn([Id; 2]),
        "closure" = ClosurePred(Id),
        "parse_example" = ParseFn(Id),
        "pfor" = Pfor(Id),
        // ---- expressions ----
        "col" = Col(Id),
        "not" = Not(Id),
        "neg" = Neg(Id),
        "is_null" = IsNull(Id),
        "is_not_null" = IsNotNull(Id),
        "+" = Add([Id; 2]),
        "-" = Sub([Id; 2]),
        "*" = Mul([Id; 2]),
        "/" = Div([Id; 2]),
        "%" = Mod([Id; 2]),
        "==" = Eq([Id; 2]),
        "!=" = NotEq([Id; 2]),
        "<" = Lt([Id; 2]),
        "<=" = LtEq([Id; 2]),
        ">" = Gt([Id; 2]),
        ">=" = GtEq([Id; 2]),
        "and" = And([Id; 2]),
        "or" = Or([Id; 2]),
        "cast" = Cast([Id; 2]),
        "case" = Case(Box<[Id]>),
        "call" = Call(Box<[Id]>),
        // ---- leaves ----
        Lit(Lit),
        Opaque(Opaque),
        Name(Name),
        // ---- every other operator: (name #op inputs...) ----
        Other(Symbol, Vec<Id>),
    }
    }
}

impl Node {
    /// The binary expression node of `op` over `children`.
    pub fn binary(op: BinaryOp, children: [Id; 2]) -> Node {
        match op {
            BinaryOp::Add => Node::Add(children),
            BinaryOp::Sub => Node::Sub(children),
            BinaryOp::Mul => Node::Mul(children),
            BinaryOp::Div => Node::Div(children),
            BinaryOp::Mod => Node::Mod(children),
            BinaryOp::Eq => Node::Eq(children),
            BinaryOp::NotEq => Node::NotEq(children),
            BinaryOp::Lt => Node::Lt(children),
            BinaryOp::LtEq => Node::LtEq(children),
            BinaryOp::Gt => Node::Gt(children),
            BinaryOp::GtEq => Node::GtEq(children),
            BinaryOp::And => Node::And(children),
            BinaryOp::Or => Node::Or(children),
        }
    }

    /// The binary operator of a binary expression node, with its children.
    pub fn as_binary(&self) -> Option<(BinaryOp, [Id; 2])> {
        let (op, c) = match self {
            Node::Add(c) => (BinaryOp::Add, c),
            Node::Sub(c) => (BinaryOp::Sub, c),
            Node::Mul(c) => (BinaryOp::Mul, c),
            Node::Div(c) => (BinaryOp::Div, c),
            Node::Mod(c) => (BinaryOp::Mod, c),
            Node::Eq(c) => (BinaryOp::Eq, c),
            Node::NotEq(c) => (BinaryOp::NotEq, c),
            Node::Lt(c) => (BinaryOp::Lt, c),
            Node::LtEq(c) => (BinaryOp::LtEq, c),
            Node::Gt(c) => (BinaryOp::Gt, c),
            Node::GtEq(c) => (BinaryOp::GtEq, c),
            Node::And(c) => (BinaryOp::And, c),
            Node::Or(c) => (BinaryOp::Or, c),
            _ => return None,
        };
        Some((op, *c))
    }

    /// True for plan operators (nodes whose class is a dataset).
    pub fn is_plan(&self) -> bool {
        matches!(
            self,
            Node::Source(_)
                | Node::Map(_)
                | Node::Filter(_)
                | Node::MapAndBatch(_)
                | Node::Batch(_)
                | Node::Shuffle(_)
                | Node::ShuffleAndRepeat(_)
                | Node::Repeat(_)
                | Node::Take(_)
                | Node::Skip(_)
                | Node::Shard(_)
                | Node::Prefetch(_)
                | Node::Other(..)
        )
    }
}
