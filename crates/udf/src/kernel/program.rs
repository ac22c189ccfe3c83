//! Compiling expressions into a kernel program: typed instructions over tile registers.
//!
//! Typing follows the expression IR exactly ([`common_type`], literals adopting a column's
//! type, math in float64 unless the argument is float32), so the instructions compute the
//! same values the Arrow evaluation would. Equal sub-expressions become one instruction (the
//! fusion rules inline a map into the next one, which repeats its expressions), literals
//! stay operands instead of registers, and registers are reused once their last reader has
//! run, so a program over a tile stays in the L1 cache.

use std::collections::HashMap;

use arrow::datatypes::{DataType, Schema};
use flumen_ir::expr::common_type;
use flumen_ir::{BinaryOp, DType, Expr, Func, Scalar, UnaryOp};

/// The value types a kernel computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    /// float64.
    F64,
    /// float32.
    F32,
    /// int64.
    I64,
    /// int32.
    I32,
    /// bool, one byte (0 or 1) per row.
    Bool,
}

impl Ty {
    fn of_dtype(t: DType) -> Option<Ty> {
        Some(match t {
            DType::Float64 => Ty::F64,
            DType::Float32 => Ty::F32,
            DType::Int64 => Ty::I64,
            DType::Int32 => Ty::I32,
            DType::Bool => Ty::Bool,
            _ => return None,
        })
    }

    /// The kernel type of an Arrow column type, where kernels compute it.
    pub fn of_arrow(t: &DataType) -> Option<Ty> {
        Some(match t {
            DataType::Float64 => Ty::F64,
            DataType::Float32 => Ty::F32,
            DataType::Int64 => Ty::I64,
            DataType::Int32 => Ty::I32,
            DataType::Boolean => Ty::Bool,
            _ => return None,
        })
    }

    fn dtype(self) -> DType {
        match self {
            Ty::F64 => DType::Float64,
            Ty::F32 => DType::Float32,
            Ty::I64 => DType::Int64,
            Ty::I32 => DType::Int32,
            Ty::Bool => DType::Bool,
        }
    }

    /// Whether this is a float type.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F64 | Ty::F32)
    }
}

/// A constant operand.
#[derive(Debug, Clone, Copy)]
pub enum Konst {
    /// float64.
    F64(f64),
    /// float32.
    F32(f32),
    /// int64.
    I64(i64),
    /// int32.
    I32(i32),
    /// bool as 0 or 1.
    Bool(u8),
}

impl Konst {
    fn ty(self) -> Ty {
        match self {
            Konst::F64(_) => Ty::F64,
            Konst::F32(_) => Ty::F32,
            Konst::I64(_) => Ty::I64,
            Konst::I32(_) => Ty::I32,
            Konst::Bool(_) => Ty::Bool,
        }
    }

    /// Bits that tell constants apart (float bits, so -0.0 and 0.0 differ).
    pub fn key(self) -> (Ty, u64) {
        let bits = match self {
            Konst::F64(v) => v.to_bits(),
            Konst::F32(v) => u64::from(v.to_bits()),
            Konst::I64(v) => v as u64,
            Konst::I32(v) => v as u32 as u64,
            Konst::Bool(v) => u64::from(v),
        };
        (self.ty(), bits)
    }

    /// This constant as `to`, when the conversion is the one a column cast would make and
    /// cannot fail (literals adopting a column's type).
    fn convert(self, to: Ty) -> Option<Konst> {
        Some(match (self, to) {
            (k, t) if k.ty() == t => k,
            (Konst::I64(v), Ty::F64) => Konst::F64(v as f64),
            (Konst::I64(v), Ty::F32) => Konst::F32(v as f32),
            (Konst::I32(v), Ty::F64) => Konst::F64(f64::from(v)),
            (Konst::I32(v), Ty::F32) => Konst::F32(v as f32),
            (Konst::I64(v), Ty::I32) => Konst::I32(i32::try_from(v).ok()?),
            (Konst::I32(v), Ty::I64) => Konst::I64(i64::from(v)),
            (Konst::F64(v), Ty::F32) => Konst::F32(v as f32),
            (Konst::F32(v), Ty::F64) => Konst::F64(f64::from(v)),
            _ => return None,
        })
    }
}

/// An instruction's operand.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    /// The value an earlier instruction computed (its value number).
    Val(usize),
    /// The kernel's `i`-th input column.
    Col(usize),
    /// A constant.
    Const(Konst),
}

impl Arg {
    /// What identifies the operand: its kind, and its number or constant's bits.
    pub fn key(self) -> (u8, Ty, u64) {
        match self {
            Arg::Val(v) => (0, Ty::Bool, v as u64),
            Arg::Col(c) => (1, Ty::Bool, c as u64),
            Arg::Const(k) => {
                let (t, b) = k.key();
                (2, t, b)
            }
        }
    }
}

/// What an instruction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `+ - * / %` on the result type.
    Arith(BinaryOp),
    /// A comparison of two operands of type `.1`, giving bool.
    Cmp(BinaryOp, Ty),
    /// Boolean and (both operands non-null: the kernel runs only then).
    And,
    /// Boolean or.
    Or,
    /// Boolean not.
    Not,
    /// Negation.
    Neg,
    /// A one-argument float function.
    Math(Func),
    /// Integer absolute value (fails on the minimum).
    IntAbs,
    /// Integer sign.
    IntSignum,
    /// A conversion from `.0` to the result type.
    Cast(Ty),
    /// A constant, materialized (only where both operands of an operation are constants).
    Splat,
}

/// One step of a program: `out = op(args)`, of type `ty`.
#[derive(Debug, Clone)]
pub struct Instr {
    /// The operation.
    pub op: Op,
    /// Its operands (one or two).
    pub args: Vec<Arg>,
    /// The result type.
    pub ty: Ty,
    /// The result's value number.
    pub out: usize,
}

/// A compiled program: instructions in order, the register each value lives in, and where
/// each output comes from.
#[derive(Debug)]
pub struct Program {
    /// The instructions, in an order where every operand is computed first.
    pub instrs: Vec<Instr>,
    /// The register of each value number.
    pub reg_of: Vec<usize>,
    /// The type of each register.
    pub regs: Vec<Ty>,
    /// The input columns read, as indices into the chunk, with their types.
    pub inputs: Vec<(usize, Ty)>,
    /// Each output: its operand, its type and the input columns it depends on (a bit per
    /// entry of `inputs`), whose nulls it inherits.
    pub outputs: Vec<(Arg, Ty, u64)>,
    /// For each instruction, the output it writes straight into (its value is that output
    /// alone and no instruction reads it), instead of a register copied out after.
    pub direct: Vec<Option<usize>>,
    /// Whether a Kleene operator (`and`, `or`) is used, whose result is not null wherever
    /// an input is: such a program runs only over inputs without nulls.
    pub kleene: bool,
}

/// What makes two instructions the same: operation, result type and operands.
type InstrKey = (Op, Ty, Vec<(u8, Ty, u64)>);

struct Builder<'a> {
    schema: &'a Schema,
    instrs: Vec<Instr>,
    types: Vec<Ty>,
    deps: Vec<u64>,
    inputs: Vec<(usize, Ty)>,
    memo: HashMap<InstrKey, usize>,
    kleene: bool,
}

/// Compiles `exprs` over chunks of `schema` into one program with an output per
/// expression; `None` when an expression uses something kernels do not compute (strings,
/// lists, `case`, null tests, multi-argument functions, other number types), which the
/// Arrow evaluation then handles.
pub fn compile(exprs: &[&Expr], schema: &Schema) -> Option<Program> {
    let mut b = Builder {
        schema,
        instrs: vec![],
        types: vec![],
        deps: vec![],
        inputs: vec![],
        memo: HashMap::new(),
        kleene: false,
    };
    let mut outputs = vec![];
    for expr in exprs {
        let (arg, ty, _) = b.expr(expr)?;
        outputs.push((arg, ty, b.deps_of(arg)));
    }
    let (reg_of, regs) = allocate(&b.instrs, &b.types, &outputs);
    let direct = direct_writes(&b.instrs, &outputs);
    Some(Program { instrs: b.instrs, reg_of, regs, inputs: b.inputs, outputs, direct, kleene: b.kleene })
}

impl Builder<'_> {
    fn deps_of(&self, arg: Arg) -> u64 {
        match arg {
            Arg::Val(v) => self.deps[v],
            Arg::Col(c) => 1 << c,
            Arg::Const(_) => 0,
        }
    }

    fn emit(&mut self, op: Op, args: Vec<Arg>, ty: Ty) -> Arg {
        let key = (op, ty, args.iter().map(|a| a.key()).collect::<Vec<_>>());
        if let Some(v) = self.memo.get(&key) {
            return Arg::Val(*v);
        }
        let out = self.types.len();
        let deps = args.iter().fold(0, |d, a| d | self.deps_of(*a));
        self.types.push(ty);
        self.deps.push(deps);
        self.instrs.push(Instr { op, args, ty, out });
        self.memo.insert(key, out);
        Arg::Val(out)
    }

    fn column(&mut self, name: &str) -> Option<(Arg, Ty)> {
        let (index, field) = self.schema.column_with_name(name)?;
        let ty = Ty::of_arrow(field.data_type())?;
        let slot = match self.inputs.iter().position(|(i, _)| *i == index) {
            Some(slot) => slot,
            None => {
                self.inputs.push((index, ty));
                self.inputs.len() - 1
            }
        };
        // One bit per input in the dependency masks.
        (slot < 64).then_some((Arg::Col(slot), ty))
    }

    /// `arg` (of type `from`) as type `to`.
    fn convert(&mut self, arg: Arg, from: Ty, to: Ty) -> Option<Arg> {
        if from == to {
            return Some(arg);
        }
        if let Arg::Const(k) = arg {
            if let Some(k) = k.convert(to) {
                return Some(Arg::Const(k));
            }
        }
        let arg = self.operand(arg);
        Some(self.emit(Op::Cast(from), vec![arg], to))
    }

    /// A register or column operand for a one-argument operation (a constant is splat).
    fn operand(&mut self, arg: Arg) -> Arg {
        match arg {
            Arg::Const(k) => self.emit(Op::Splat, vec![arg], k.ty()),
            other => other,
        }
    }

    /// The operand, its type, and whether it involves no column (a literal).
    fn expr(&mut self, e: &Expr) -> Option<(Arg, Ty, bool)> {
        Some(match e {
            Expr::Column(name) => {
                let (arg, ty) = self.column(name)?;
                (arg, ty, false)
            }
            Expr::Literal(s) => {
                let k = match s {
                    Scalar::Float(v, DType::Float64) => Konst::F64(*v),
                    Scalar::Float(v, DType::Float32) => Konst::F32(*v as f32),
                    Scalar::Int(v, DType::Int64) => Konst::I64(*v),
                    Scalar::Int(v, DType::Int32) => Konst::I32(i32::try_from(*v).ok()?),
                    Scalar::Bool(v) => Konst::Bool(u8::from(*v)),
                    _ => return None,
                };
                (Arg::Const(k), k.ty(), true)
            }
            Expr::Unary { op, arg } => {
                let (a, t, lit) = self.expr(arg)?;
                let a = self.operand(a);
                match op {
                    UnaryOp::Not if t == Ty::Bool => (self.emit(Op::Not, vec![a], t), t, lit),
                    UnaryOp::Neg if t != Ty::Bool => (self.emit(Op::Neg, vec![a], t), t, lit),
                    _ => return None,
                }
            }
            Expr::Binary { op, left, right } => self.binary(*op, left, right)?,
            Expr::Cast { arg, to } => {
                let (a, t, lit) = self.expr(arg)?;
                let to = Ty::of_dtype(*to)?;
                (self.convert(a, t, to)?, to, lit)
            }
            Expr::Call { func, args } => {
                let [arg] = args.as_slice() else { return None };
                let (a, t, lit) = self.expr(arg)?;
                let a = self.operand(a);
                self.call(*func, a, t, lit)?
            }
            Expr::Case { .. } => return None,
        })
    }

    fn binary(&mut self, op: BinaryOp, left: &Expr, right: &Expr) -> Option<(Arg, Ty, bool)> {
        let (l, lt, llit) = self.expr(left)?;
        let (r, rt, rlit) = self.expr(right)?;
        let lit = llit && rlit;
        if matches!(op, BinaryOp::And | BinaryOp::Or) {
            if lt != Ty::Bool || rt != Ty::Bool {
                return None;
            }
            self.kleene = true;
            let (l, r) = self.pair(l, r);
            let op = if op == BinaryOp::And { Op::And } else { Op::Or };
            return Some((self.emit(op, vec![l, r], Ty::Bool), Ty::Bool, lit));
        }
        let common = Ty::of_dtype(common_type(lt.dtype(), llit, rt.dtype(), rlit)?)?;
        let l = self.convert(l, lt, common)?;
        let r = self.convert(r, rt, common)?;
        let (l, r) = self.pair(l, r);
        if op.is_comparison() {
            Some((self.emit(Op::Cmp(op, common), vec![l, r], Ty::Bool), Ty::Bool, lit))
        } else if op.is_arithmetic() && common != Ty::Bool {
            Some((self.emit(Op::Arith(op), vec![l, r], common), common, lit))
        } else {
            None
        }
    }

    /// Two operands, at most one of them a constant.
    fn pair(&mut self, l: Arg, r: Arg) -> (Arg, Arg) {
        match (l, r) {
            (Arg::Const(_), Arg::Const(_)) => (self.operand(l), r),
            pair => pair,
        }
    }

    fn call(&mut self, func: Func, a: Arg, t: Ty, lit: bool) -> Option<(Arg, Ty, bool)> {
        if t == Ty::Bool {
            return None;
        }
        let whole = matches!(func, Func::Floor | Func::Ceil | Func::Round | Func::Trunc);
        if !t.is_float() {
            // Integers are whole already; abs and signum stay integers; the rest is float64
            // math, as in the IR's typing.
            return match func {
                _ if whole => Some((a, t, lit)),
                Func::Abs => Some((self.emit(Op::IntAbs, vec![a], t), t, lit)),
                Func::Signum => Some((self.emit(Op::IntSignum, vec![a], t), t, lit)),
                f if f.is_unary_math() => {
                    let a = self.convert(a, t, Ty::F64)?;
                    Some((self.emit(Op::Math(f), vec![a], Ty::F64), Ty::F64, lit))
                }
                _ => None,
            };
        }
        if whole || func.is_unary_math() || matches!(func, Func::Abs | Func::Signum) {
            return Some((self.emit(Op::Math(func), vec![a], t), t, lit));
        }
        None
    }
}

/// The output each instruction can write directly (see [`Program::direct`]).
fn direct_writes(instrs: &[Instr], outputs: &[(Arg, Ty, u64)]) -> Vec<Option<usize>> {
    let read = |v: usize| instrs.iter().any(|i| i.args.iter().any(|a| matches!(a, Arg::Val(x) if *x == v)));
    let outputs_of = |v: usize| {
        let of_v = move |(k, (a, _, _)): (usize, &(Arg, Ty, u64))| matches!(a, Arg::Val(x) if *x == v).then_some(k);
        outputs.iter().enumerate().filter_map(of_v)
    };
    instrs
        .iter()
        .map(|i| {
            let mut found = outputs_of(i.out);
            match (found.next(), found.next()) {
                (Some(k), None) if !read(i.out) => Some(k),
                _ => None,
            }
        })
        .collect()
}

/// Assigns registers: a value's register is free again after the last instruction that
/// reads it, and outputs keep theirs to the end of the tile.
fn allocate(instrs: &[Instr], types: &[Ty], outputs: &[(Arg, Ty, u64)]) -> (Vec<usize>, Vec<Ty>) {
    let mut last_use = vec![0usize; types.len()];
    for (i, instr) in instrs.iter().enumerate() {
        for arg in &instr.args {
            if let Arg::Val(v) = arg {
                last_use[*v] = i;
            }
        }
    }
    for (arg, _, _) in outputs {
        if let Arg::Val(v) = arg {
            last_use[*v] = usize::MAX;
        }
    }
    let mut reg_of = vec![usize::MAX; types.len()];
    let mut regs: Vec<Ty> = vec![];
    let mut free: Vec<usize> = vec![];
    for (i, instr) in instrs.iter().enumerate() {
        let found = free.iter().position(|r| regs[*r] == instr.ty);
        reg_of[instr.out] = match found {
            Some(at) => free.swap_remove(at),
            None => {
                regs.push(instr.ty);
                regs.len() - 1
            }
        };
        // Operands read for the last time free their registers after the result has one:
        // a result never shares a register with its own operand, which keeps the loops
        // free of aliasing.
        for arg in &instr.args {
            if let Arg::Val(v) = arg {
                if last_use[*v] == i && !free.contains(&reg_of[*v]) {
                    free.push(reg_of[*v]);
                }
            }
        }
    }
    (reg_of, regs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn schema() -> Schema {
        Schema::new(vec![Field::new("value", DataType::Int64, false), Field::new("s", DataType::Utf8, false)])
    }

    fn col(name: &str) -> Expr {
        Expr::col(name)
    }

    fn lit(v: f64) -> Expr {
        Expr::Literal(Scalar::Float(v, DType::Float64))
    }

    #[test]
    fn equal_subexpressions_are_computed_once_and_registers_are_reused() {
        // v = sqrt(f64(value) * 3 + 1) * 0.5; v * v + 1, as map fusion writes it.
        let cast = Expr::Cast { arg: Box::new(col("value")), to: DType::Float64 };
        let v = Expr::binary(
            BinaryOp::Mul,
            Expr::Call {
                func: Func::Sqrt,
                args: vec![Expr::binary(BinaryOp::Add, Expr::binary(BinaryOp::Mul, cast, lit(3.0)), lit(1.0))],
            },
            lit(0.5),
        );
        let out = Expr::binary(BinaryOp::Add, Expr::binary(BinaryOp::Mul, v.clone(), v), lit(1.0));
        let p = compile(&[&out], &schema()).unwrap();
        let ops: Vec<Op> = p.instrs.iter().map(|i| i.op).collect();
        assert_eq!(
            ops,
            [
                Op::Cast(Ty::I64),
                Op::Arith(BinaryOp::Mul),
                Op::Arith(BinaryOp::Add),
                Op::Math(Func::Sqrt),
                Op::Arith(BinaryOp::Mul),
                Op::Arith(BinaryOp::Mul),
                Op::Arith(BinaryOp::Add),
            ]
        );
        // A chain needs two registers, used in turn: each step's operand is dead after it.
        assert_eq!(p.regs, [Ty::F64, Ty::F64]);
        assert_eq!(p.inputs, [(0, Ty::I64)]);
    }

    #[test]
    fn literals_adopt_the_column_type_and_unsupported_expressions_do_not_compile() {
        let int_lit = Expr::binary(BinaryOp::Mul, col("value"), Expr::Literal(Scalar::Int(3, DType::Int64)));
        let p = compile(&[&int_lit], &schema()).unwrap();
        assert!(matches!(p.instrs[0].args[1], Arg::Const(Konst::I64(3))));
        assert!(compile(&[&col("s")], &schema()).is_none());
        let null_test = Expr::Unary { op: UnaryOp::IsNull, arg: Box::new(col("value")) };
        assert!(compile(&[&null_test], &schema()).is_none());
    }
}
