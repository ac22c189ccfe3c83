//! Native code for kernel programs: a program whose every operation has an exact machine
//! form is compiled with Cranelift into a single loop over its rows.
//!
//! The tile interpreter ([`super::exec`](mod@super::exec)) makes one pass over a tile per instruction, each
//! storing its results for the next one to load back. That costs a store per value per
//! instruction, and a slow instruction (a division, a square root) cannot overlap with the
//! others the way it does in one loop. A native loop keeps every intermediate value in a
//! machine register, so it runs as fast as the same expression written by hand.
//!
//! Only operations whose machine form gives the interpreter's value bit for bit are
//! compiled:
//! - float add, sub, mul, div, sqrt, floor, ceil, trunc, abs and neg (IEEE 754 operations,
//!   correctly rounded, as the interpreter's `wide` loops compute them), and integer-to-float
//!   conversion (round to nearest, as Rust's `as`);
//! - comparisons, IEEE 754's for floats as in the interpreter (`NaN` unordered, `-0.0 ==
//!   0.0`), and `and`, `or` and `not` of their results, each a mask as wide as the values
//!   compared;
//! - integer add, sub and mul, overflow handing the chunk back: int64 a lane at a time with
//!   the machine's overflow flag, or, by constants on an input column, against the interval
//!   of that column's values for which they fit (`kernel/affine.rs`); int32 as vectors, add
//!   and sub overflowing where the signs say so and mul only by a constant, against the
//!   bounds it allows;
//! - a float remainder by a whole constant, computed exactly when the dividend is a whole
//!   number below [`FloatLanes::WHOLE`], as the interpreter's
//!   `rem_by` does.
//!
//! Where the interpreter fails (an overflow) or computes otherwise (a remainder of a
//! fraction), the code stops and hands the chunk back ([`Native::run`] gives `None`), and the
//! interpreter runs it. Everything else (integer division, the other math functions,
//! float-to-integer casts, bool inputs) stays with the interpreter, as do programs mixing
//! values of different widths (float32 with int64), whose vectors would hold different
//! numbers of lanes. Native code changes speed, never values.
//!
//! A program may also be compiled *selecting* ([`Native::compile_selecting`]): its first
//! output is a predicate, and the others are written only for the rows it keeps, one after
//! another. That is a chain of maps and filters in one loop, with nothing written for the
//! rows a filter drops ([`super::chain`]).

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, BlockArg, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use flumen_ir::{BinaryOp, Func};

use super::affine::Affine;
use super::lanes::{whole_divisor, FloatLanes};
use super::program::{Arg, Instr, Konst, Op, Program, Ty};

/// The signature of a compiled program: the input columns' values, the outputs' buffers
/// (null for an output that is not computed), the number of rows and the values per row.
/// It returns the number of values written to each output of a selecting program (0 for
/// another), or [`HANDED_BACK`].
type Entry = unsafe extern "C" fn(*const *const u8, *const *mut u8, usize, usize) -> usize;

/// What the code returns when it stops for the interpreter to run the chunk.
const HANDED_BACK: usize = usize::MAX;

/// A program compiled to machine code.
pub struct Native {
    /// Owns the code's memory, freed on drop; `None` only while dropping.
    module: Option<JITModule>,
    entry: Entry,
    /// The inputs holding one value per row (a bit per input).
    repeated: u64,
    /// Whether the code selects rows ([`Native::compile_selecting`]).
    selecting: bool,
}

// SAFETY: after `finalize_definitions` the module is never used again except to free its
// memory on drop; the code itself is immutable and reads and writes only the buffers each
// call passes.
unsafe impl Send for Native {}
// SAFETY: as for `Send`: shared references only ever call the finished, immutable code.
unsafe impl Sync for Native {}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native")
            .field("repeated", &self.repeated)
            .field("selecting", &self.selecting)
            .finish_non_exhaustive()
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the entry point lives only in this value, so no call is running
            // and none can follow.
            unsafe { module.free_memory() };
        }
    }
}

impl Native {
    /// Compiles `program`, the inputs in `repeated` (a bit per input) holding one value per
    /// row; `None` when it uses something native code does not compute (see the module
    /// overview) or the host has no Cranelift backend.
    pub fn compile(program: &Program, repeated: u64) -> Option<Native> {
        Native::compile_as(program, repeated, false)
    }

    /// Compiles `program` selecting: its first output, a bool, says which rows to keep, and
    /// each other output is written for those rows only, one after another; `None` as for
    /// [`compile`](Self::compile), and when the first output is not a computed bool.
    pub fn compile_selecting(program: &Program) -> Option<Native> {
        Native::compile_as(program, 0, true)
    }

    fn compile_as(program: &Program, repeated: u64, selecting: bool) -> Option<Native> {
        let width = native_width(program, selecting)?;
        let mut flags = settings::builder();
        // Emitted as built: the program comes with its common sub-expressions computed
        // once and its constants made once before the loop. Cranelift's `speed` level
        // re-made the constants inside the loop and moved work past the hand-back test,
        // which spilled registers in every step of w4's selecting loop (`cargo bench
        // --bench kernels -- "w4 stage"`: 279 µs at `speed`, 233 µs as built), and it
        // compiled w1's 17-output program in 13-21 ms rather than 9.
        flags.set("opt_level", "none").ok()?;
        // The verifier checks the IR `build` emits, which tests (debug builds) cover; in a
        // release build it is a quarter of the compile time. Nothing unwinds through the
        // code: it calls nothing and cannot panic.
        flags.set("enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" }).ok()?;
        flags.set("unwind_info", "false").ok()?;
        let isa = cranelift_native::builder().ok()?.finish(settings::Flags::new(flags)).ok()?;
        let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let config = module.target_config();
        let pointer = config.pointer_type();
        let mut ctx = module.make_context();
        ctx.func.signature.params.extend([pointer; 4].map(AbiParam::new));
        ctx.func.signature.returns.push(AbiParam::new(pointer));
        let id = module.declare_function("kernel", Linkage::Local, &ctx.func.signature).ok()?;
        let mut builder_ctx = FunctionBuilderContext::new();
        let shape = Shape { repeated, config, width, selecting };
        build(FunctionBuilder::new(&mut ctx.func, &mut builder_ctx), program, shape);
        module.define_function(id, &mut ctx).ok()?;
        module.clear_context(&mut ctx);
        module.finalize_definitions().ok()?;
        let code = module.get_finalized_function(id);
        // SAFETY: the function was declared with exactly this signature, in the module's
        // default calling convention, which is the platform's C convention.
        let entry = unsafe { std::mem::transmute::<*const u8, Entry>(code) };
        Some(Native { module: Some(module), entry, repeated, selecting })
    }

    /// Whether the code writes its outputs for the rows its first output keeps only.
    pub fn selecting(&self) -> bool {
        self.selecting
    }

    /// The inputs the code reads one value per row from (a bit per input).
    pub fn repeated(&self) -> u64 {
        self.repeated
    }

    /// Runs the program over `rows` rows of `row_values` values: input `i`'s values from
    /// `inputs[i]` (one per row where it repeats), output `k`'s values written from
    /// `outputs[k]` (null for an output that is not computed). Gives the number of values
    /// written to each output of a selecting program (0 for another), or `None` when the
    /// code stopped for the interpreter, having written any number of values.
    ///
    /// # Safety
    /// Each input pointer must be valid for reading `rows` values of its type where it
    /// repeats and `rows * row_values` otherwise, each non-null output pointer valid for
    /// writing `rows * row_values` values of its type, the outputs must not overlap
    /// anything else passed, and there must be one pointer per input and per output of
    /// the program.
    pub unsafe fn run(
        &self,
        inputs: &[*const u8],
        outputs: &[*mut u8],
        rows: usize,
        row_values: usize,
    ) -> Option<usize> {
        // SAFETY: the caller's contract is the compiled code's.
        let written = unsafe { (self.entry)(inputs.as_ptr(), outputs.as_ptr(), rows, row_values) };
        (written != HANDED_BACK).then_some(written)
    }
}

/// The one value width of a program native code computes, or `None`. Bools are masks of
/// the width of the values compared, so they are never inputs or constants.
fn native_width(p: &Program, selecting: bool) -> Option<usize> {
    let width = |ty: Ty| match ty {
        Ty::F64 | Ty::I64 => Some(8),
        Ty::F32 | Ty::I32 => Some(4),
        Ty::Bool => None,
    };
    if p.inputs.iter().any(|(_, ty)| *ty == Ty::Bool) {
        return None;
    }
    let mut widths =
        (p.inputs.iter().map(|(_, t)| *t).chain(p.instrs.iter().map(|i| i.ty))).filter(|t| *t != Ty::Bool).map(width);
    let first = widths.next()??;
    if !widths.all(|w| w == Some(first)) {
        return None;
    }
    let bool_constant = |a: &Arg| matches!(a, Arg::Const(Konst::Bool(_)));
    if p.instrs.iter().any(|i| !compiles(i) || i.args.iter().any(bool_constant))
        || p.outputs.iter().any(|(a, ..)| bool_constant(a))
    {
        return None;
    }
    let keeps = matches!(p.outputs.first(), Some((Arg::Val(_), Ty::Bool, _)));
    (!selecting || keeps).then_some(first)
}

/// Whether native code computes `i` exactly as the interpreter does (see the module
/// overview).
fn compiles(i: &Instr) -> bool {
    use BinaryOp::{Add, Div, Mod, Mul, Sub};
    let constant = |k: usize| matches!(i.args.get(k), Some(Arg::Const(_)));
    let int = matches!(i.ty, Ty::I64 | Ty::I32);
    match i.op {
        Op::Arith(Add | Sub | Mul | Div) if i.ty.is_float() => true,
        Op::Arith(Mod) => match i.args[1] {
            Arg::Const(Konst::F64(b)) => whole_divisor(b),
            Arg::Const(Konst::F32(b)) => whole_divisor(b),
            _ => false,
        },
        Op::Arith(Add | Sub) => int,
        // x64 vectors have no int32 overflow flag; a constant's bounds stand for one.
        Op::Arith(Mul) => i.ty == Ty::I64 || (int && (constant(0) || constant(1))),
        Op::Neg => i.ty.is_float(),
        Op::Splat => i.ty != Ty::Bool,
        Op::Math(Func::Sqrt | Func::Floor | Func::Ceil | Func::Trunc | Func::Abs) => i.ty.is_float(),
        Op::Cast(Ty::I64 | Ty::I32) => i.ty.is_float(),
        Op::Cmp(_, ty) => ty != Ty::Bool,
        Op::And | Op::Or | Op::Not => true,
        _ => false,
    }
}

/// The constants an instruction needs besides its operands: a remainder's bound on whole
/// dividends, its divisor's magnitude and the sign bit (as -0); an integer product's bounds
/// on the other operand.
fn derived(i: &Instr) -> Vec<Konst> {
    match (i.op, i.args.as_slice()) {
        (Op::Arith(BinaryOp::Mod), [_, Arg::Const(Konst::F64(b))]) => {
            vec![Konst::F64(<f64 as FloatLanes>::WHOLE), Konst::F64(b.abs()), Konst::F64(-0.0)]
        }
        (Op::Arith(BinaryOp::Mod), [_, Arg::Const(Konst::F32(b))]) => {
            vec![Konst::F32(<f32 as FloatLanes>::WHOLE), Konst::F32(b.abs()), Konst::F32(-0.0)]
        }
        (Op::Arith(BinaryOp::Mul), _) if i.ty == Ty::I32 => {
            let (lo, hi) = product_bounds(i).expect("an integer product by a constant");
            vec![lo, hi]
        }
        _ => vec![],
    }
}

/// For an int32 product `x * c` by a constant: the least and greatest `x` whose product
/// does not overflow (Rust's `/` rounds toward zero, which rounds each bound inward).
fn product_bounds(i: &Instr) -> Option<(Konst, Konst)> {
    let c = i.args.iter().find_map(|a| match a {
        Arg::Const(Konst::I32(c)) => Some(*c),
        _ => None,
    })?;
    let (lo, hi) = match c {
        0 => (i32::MIN, i32::MAX),
        -1 => (i32::MIN + 1, i32::MAX),
        c if c > 0 => (i32::MIN / c, i32::MAX / c),
        c => (i32::MAX / c, i32::MIN / c),
    };
    Some((Konst::I32(lo), Konst::I32(hi)))
}

/// The Cranelift type of `ty`'s values, one per row or `lanes` to a vector.
fn clif_type(ty: Ty, lanes: u32) -> Type {
    let scalar = match ty {
        Ty::F64 => types::F64,
        Ty::F32 => types::F32,
        Ty::I64 => types::I64,
        Ty::I32 => types::I32,
        Ty::Bool => unreachable!("bools are masks of the values compared"),
    };
    vector_of(scalar, lanes)
}

/// `scalar` one per row, or `lanes` of it to a vector.
fn vector_of(scalar: Type, lanes: u32) -> Type {
    if lanes == 1 {
        scalar
    } else {
        scalar.by(lanes).expect("a 128-bit vector type")
    }
}

/// What is compiled: the inputs that repeat per row, the target, the values' width in
/// bytes, and whether the program selects rows.
struct Shape {
    repeated: u64,
    config: TargetFrontendConfig,
    width: usize,
    selecting: bool,
}

/// Emits the function. Rows are `row_values` values each (a tensor's values, or the whole
/// run as one row when nothing repeats); a repeated input holds one value per row, loaded
/// once per row, and every other input and output one value per row's value. Offsets are
/// in bytes of the values' width.
///
/// ```text
/// entry(inputs, outputs, rows, row_values): base pointers, constants; jump row(0, 0, 0)
/// row(r, scalar_offset, offset): r < rows ? row_start : exit
/// row_start:        the repeated inputs' values; jump unrolled(0)
/// unrolled(i):      i < whole_unrolled ? unrolled_body : vectors(i)
/// unrolled_body:    the program on `unroll(p)` vectors from offset + i; jump unrolled(i + 16·unroll)
/// vectors(i):       i < whole ? vector_body : values_left(i)
/// vector_body:      the program on one vector at offset + i; jump vectors(i + 16)
/// values_left(i):   i < row_bytes ? value_body : next_row
/// value_body:       the program on one value at offset + i; jump values_left(i + width)
/// next_row:         jump row(r + 1, scalar_offset + width, offset + row_bytes)
/// exit:             return the values kept (selecting) or 0
/// handed_back:      return HANDED_BACK (a step whose checks fail branches here)
/// ```
fn build(mut b: FunctionBuilder, p: &Program, shape: Shape) {
    let Shape { repeated, config, width, selecting } = shape;
    let pointer = config.pointer_type();
    let lanes = (16 / width) as u32;
    let step = i64::from(lanes) * width as i64;
    let [entry, row, row_start, unrolled, unrolled_body, vectors, vector_body, values_left, value_body, next_row, exit, handed_back] =
        [(); 12].map(|_| b.create_block());
    b.append_block_params_for_function_params(entry);
    let [r, scalar_offset, offset] = [(); 3].map(|_| b.append_block_param(row, pointer));
    let i_unrolled = b.append_block_param(unrolled, pointer);
    let i_vectors = b.append_block_param(vectors, pointer);
    let i_values = b.append_block_param(values_left, pointer);
    let kept = b.declare_var(pointer);

    b.switch_to_block(entry);
    let [inputs, outputs, rows, row_values] = [0, 1, 2, 3].map(|i| b.block_params(entry)[i]);
    let flags = MemFlagsData::new().with_notrap();
    let input_bases: Vec<Value> =
        (0..p.inputs.len()).map(|i| b.ins().load(pointer, flags, inputs, (i * 8) as i32)).collect();
    // A selecting program stores every output but its predicate; another only those it
    // computes (the caller makes the others).
    let output_bases: Vec<Option<Value>> = p
        .outputs
        .iter()
        .enumerate()
        .map(|(k, (arg, _, _))| {
            let stored = if selecting { k > 0 } else { matches!(arg, Arg::Val(_)) };
            stored.then(|| b.ins().load(pointer, flags, outputs, (k * 8) as i32))
        })
        .collect();
    let row_bytes = b.ins().imul_imm_u(row_values, width as i64);
    let whole = b.ins().band_imm_s(row_bytes, -step);
    let unroll = unroll(p);
    let whole_unrolled = b.ins().band_imm_s(row_bytes, -unroll * step);
    let affine = if divides(p) { Affine::none(p) } else { Affine::of(p, repeated) };
    let consts = Constants::new(&mut b, p, &affine.constants(), lanes);
    let zero = b.ins().iconst(pointer, 0);
    b.def_var(kept, zero);
    b.ins().jump(row, &[BlockArg::from(zero), BlockArg::from(zero), BlockArg::from(zero)]);

    b.switch_to_block(row);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, r, rows);
    b.ins().brif(more, row_start, &[], exit, &[]);

    b.switch_to_block(row_start);
    let per_row: Vec<Option<(Value, Value)>> = (p.inputs.iter().enumerate())
        .map(|(c, (_, ty))| {
            (repeated & (1 << c) != 0).then(|| {
                let address = b.ins().iadd(input_bases[c], scalar_offset);
                let scalar = b.ins().load(clif_type(*ty, 1), flags, address, 0);
                (scalar, b.ins().splat(clif_type(*ty, lanes), scalar))
            })
        })
        .collect();
    b.ins().jump(unrolled, &[BlockArg::from(zero)]);

    let body = Body {
        p,
        input_bases: &input_bases,
        per_row: &per_row,
        output_bases: &output_bases,
        consts: &consts,
        affine: &affine,
        flags,
        width,
        pointer,
        kept: selecting.then_some(kept),
        handed_back,
    };
    b.switch_to_block(unrolled);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i_unrolled, whole_unrolled);
    b.ins().brif(more, unrolled_body, &[], vectors, &[BlockArg::from(i_unrolled)]);

    b.switch_to_block(unrolled_body);
    for k in 0..unroll {
        let at = b.ins().iadd(offset, i_unrolled);
        let at = b.ins().iadd_imm_u(at, step * k);
        body.emit(&mut b, at, lanes);
    }
    let next = b.ins().iadd_imm_u(i_unrolled, unroll * step);
    b.ins().jump(unrolled, &[BlockArg::from(next)]);

    b.switch_to_block(vectors);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i_vectors, whole);
    b.ins().brif(more, vector_body, &[], values_left, &[BlockArg::from(i_vectors)]);

    b.switch_to_block(vector_body);
    let at = b.ins().iadd(offset, i_vectors);
    body.emit(&mut b, at, lanes);
    let next = b.ins().iadd_imm_u(i_vectors, step);
    b.ins().jump(vectors, &[BlockArg::from(next)]);

    b.switch_to_block(values_left);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i_values, row_bytes);
    b.ins().brif(more, value_body, &[], next_row, &[]);

    b.switch_to_block(value_body);
    let at = b.ins().iadd(offset, i_values);
    body.emit(&mut b, at, 1);
    let next = b.ins().iadd_imm_u(i_values, width as i64);
    b.ins().jump(values_left, &[BlockArg::from(next)]);

    b.switch_to_block(next_row);
    let [r, scalar_offset, offset] =
        [b.ins().iadd_imm_u(r, 1), b.ins().iadd_imm_u(scalar_offset, width as i64), b.ins().iadd(offset, row_bytes)];
    b.ins().jump(row, &[BlockArg::from(r), BlockArg::from(scalar_offset), BlockArg::from(offset)]);

    b.switch_to_block(exit);
    let written = b.use_var(kept);
    b.ins().return_(&[written]);

    b.switch_to_block(handed_back);
    let stop = b.ins().iconst(pointer, HANDED_BACK as i64);
    b.ins().return_(&[stop]);
    b.seal_all_blocks();
    b.finalize(config);
}

/// The vectors a step of the main loop computes (as a compiler unrolls a loop by hand).
/// Four for a program of a few operations, a streaming loop like `t * w` that is bound by
/// the loop's own instructions: w2's scaling took 43 µs with four, 70 with one (`cargo
/// bench --bench kernels -- "w2 scale"`). Two for a longer one, whose operations hide the
/// loop's, so that the main loop holds it twice rather than four times: w4's selecting
/// stage ran at 120–122 µs with two against 117–122 with four, and the five-operation
/// `w4 map` at 67.5–68.3 against 65.9–67.7 (three alternating runs each), as 283 IR
/// instructions rather than 411, which Cranelift compiled in 0.66–0.81 rather than
/// 0.84–0.94 ms in a fresh process. Fresh w4 passes took 0.6–0.8 ms less (7.23 → 6.62,
/// 7.51 → 6.70 and 6.93 → 6.32 ms, medians of 30 alternating with the build before, with
/// 100–140 fewer page faults), and ran as fast in one process (380 M rows/s for both). One
/// vector a step was slower there (129 µs).
fn unroll(p: &Program) -> i64 {
    if p.instrs.len() <= 3 {
        4
    } else {
        2
    }
}

/// Whether `p` divides or takes square roots of floats. Such a loop waits on the divider,
/// and int64 overflow flags, set and gathered on the integer units, cost it nothing, where
/// the interval checks of `kernel/affine.rs` are vector work beside the division's: w4's
/// selecting stage took 117 µs with flags and 123 µs with intervals (`cargo bench --bench
/// kernels -- "w4 stage"`), while its integer map alone took 44 against 28.
fn divides(p: &Program) -> bool {
    p.instrs
        .iter()
        .any(|i| i.ty.is_float() && matches!(i.op, Op::Arith(BinaryOp::Div | BinaryOp::Mod) | Op::Math(Func::Sqrt)))
}

/// The program's constants, made once in the entry block, as scalars and as vectors.
struct Constants(HashMap<(Ty, u64), (Value, Value)>);

impl Constants {
    fn new(b: &mut FunctionBuilder, p: &Program, checks: &[Konst], lanes: u32) -> Constants {
        let mut made = HashMap::new();
        let operands = p.instrs.iter().flat_map(|i| &i.args).filter_map(|a| match a {
            Arg::Const(k) => Some(*k),
            _ => None,
        });
        let outputs = p.outputs.iter().filter_map(|(a, ..)| match a {
            Arg::Const(k) => Some(*k),
            _ => None,
        });
        for k in operands.chain(outputs).chain(p.instrs.iter().flat_map(derived)).chain(checks.iter().copied()) {
            made.entry(k.key()).or_insert_with(|| {
                let scalar = match k {
                    Konst::F64(v) => b.ins().f64const(v),
                    Konst::F32(v) => b.ins().f32const(v),
                    Konst::I64(v) => b.ins().iconst(types::I64, v),
                    // Cranelift wants a narrow constant's bits zero-extended.
                    Konst::I32(v) => b.ins().iconst(types::I32, i64::from(v as u32)),
                    Konst::Bool(_) => unreachable!("native programs have no bool constants"),
                };
                (scalar, b.ins().splat(clif_type(k.key().0, lanes), scalar))
            });
        }
        Constants(made)
    }

    fn get(&self, k: Konst, lanes: u32) -> Value {
        one_or_vector(self.0[&k.key()], lanes)
    }
}

/// The scalar form of a value for a step of one lane, its vector form otherwise.
fn one_or_vector((scalar, vector): (Value, Value), lanes: u32) -> Value {
    if lanes == 1 {
        scalar
    } else {
        vector
    }
}

/// What one step of either loop reads and where it goes.
struct Body<'a> {
    p: &'a Program,
    input_bases: &'a [Value],
    /// Per input, its value for the current row as a scalar and a vector, when it repeats.
    per_row: &'a [Option<(Value, Value)>],
    output_bases: &'a [Option<Value>],
    consts: &'a Constants,
    /// The int64 operations checked on their input column, and the columns' intervals.
    affine: &'a Affine,
    flags: MemFlagsData,
    /// The values' width in bytes.
    width: usize,
    pointer: Type,
    /// The rows kept so far, where the program selects.
    kept: Option<Variable>,
    /// Where a step whose checks fail goes.
    handed_back: cranelift_codegen::ir::Block,
}

/// A value in one step: one SSA value (a machine register: a vector, or a scalar in a step
/// of one value), or an int64 a lane per register. x86 has no 64-bit integer vector
/// multiply, overflow flag or conversion to float before AVX-512, so int64 arithmetic goes a
/// lane at a time, and its values stay split until something needs them as a vector.
#[derive(Clone)]
enum Val {
    One(Value),
    Lanes(Vec<Value>),
}

/// One step's values, with the checks that must pass for them to be the interpreter's.
struct Step<'b, 'f> {
    b: &'b mut FunctionBuilder<'f>,
    lanes: u32,
    /// Values whose sign bits (per lane) say a check failed; in a step of one value, `i8`s
    /// that are 1 on failure.
    failed: Vec<Value>,
    /// `i8`s that are 1 where a lane's check failed (int64 overflow flags).
    flags: Vec<Value>,
}

impl Body<'_> {
    /// The program over the `lanes` rows at byte `offset`: inputs loaded once, every value
    /// an SSA value, the checks branching to `handed_back` when one fails, then each stored
    /// output written.
    fn emit(&self, b: &mut FunctionBuilder, offset: Value, lanes: u32) {
        let p = self.p;
        let mut columns: Vec<Option<Val>> = vec![None; p.inputs.len()];
        let mut values: Vec<Option<Val>> = vec![None; p.instrs.iter().map(|i| i.out + 1).max().unwrap_or(0)];
        let mut step = Step { b, lanes, failed: vec![], flags: vec![] };
        let each = |v: Value| Val::Lanes(vec![v; lanes as usize]);
        let mut operand = |s: &mut Step, values: &[Option<Val>], arg: Arg| match arg {
            Arg::Val(v) => values[v].clone().expect("operands come first"),
            Arg::Const(k) if k.key().0 == Ty::I64 => each(self.consts.get(k, 1)),
            Arg::Const(k) => Val::One(self.consts.get(k, lanes)),
            Arg::Col(c) => match self.per_row[c] {
                Some((scalar, _)) if p.inputs[c].1 == Ty::I64 => each(scalar),
                Some(pair) => Val::One(one_or_vector(pair, lanes)),
                None => columns[c]
                    .get_or_insert_with(|| {
                        let address = s.b.ins().iadd(self.input_bases[c], offset);
                        match p.inputs[c].1 {
                            Ty::I64 => Val::Lanes(
                                (0..lanes)
                                    .map(|i| s.b.ins().load(types::I64, self.flags, address, 8 * i as i32))
                                    .collect(),
                            ),
                            ty => Val::One(s.b.ins().load(clif_type(ty, lanes), self.flags, address, 0)),
                        }
                    })
                    .clone(),
            },
        };
        for (c, range) in self.affine.ranges.iter().enumerate() {
            if let Some((lo, hi)) = range {
                self.check_range(&mut step, c, offset, (Konst::I64(*lo), Konst::I64(*hi)));
            }
        }
        for (n, instr) in p.instrs.iter().enumerate() {
            let a = operand(&mut step, &values, instr.args[0]);
            let c = instr.args.get(1).map(|arg| operand(&mut step, &values, *arg));
            values[instr.out] = Some(self.compute(&mut step, instr, self.affine.covered[n], a, c));
        }
        let results: Vec<Val> = p.outputs.iter().map(|(arg, ..)| operand(&mut step, &values, *arg)).collect();
        let Step { b, failed, flags, .. } = step;
        let masks = failed.split_first().map(|(first, rest)| {
            let all = rest.iter().fold(*first, |acc, f| b.ins().bor(acc, *f));
            if lanes == 1 {
                b.ins().uextend(types::I32, all)
            } else {
                b.ins().vhigh_bits(types::I32, all)
            }
        });
        let flags = flags.split_first().map(|(first, rest)| {
            let all = rest.iter().fold(*first, |acc, f| b.ins().bor(acc, *f));
            b.ins().uextend(types::I32, all)
        });
        let any = match (masks, flags) {
            (Some(m), Some(f)) => Some(b.ins().bor(m, f)),
            (m, f) => m.or(f),
        };
        if let Some(any) = any {
            let go_on = b.create_block();
            b.ins().brif(any, self.handed_back, &[], go_on, &[]);
            b.switch_to_block(go_on);
        }
        match self.kept {
            Some(kept) => self.store_kept(b, &results, kept, lanes),
            None => self.store(b, &results, offset, lanes),
        }
    }

    /// Stores each computed output's values at byte `offset` (a bool output's at its row).
    fn store(&self, b: &mut FunctionBuilder, results: &[Val], offset: Value, lanes: u32) {
        for (((_, ty, _), base), value) in self.p.outputs.iter().zip(self.output_bases).zip(results) {
            let Some(base) = base else { continue };
            match value {
                Val::Lanes(values) => {
                    let address = b.ins().iadd(*base, offset);
                    for (i, v) in values.iter().enumerate() {
                        b.ins().store(self.flags, *v, address, (i * self.width) as i32);
                    }
                }
                Val::One(value) if *ty != Ty::Bool => {
                    let address = b.ins().iadd(*base, offset);
                    b.ins().store(self.flags, *value, address, 0);
                }
                Val::One(mask) => {
                    let row = b.ins().ushr_imm_u(offset, i64::from(self.width.trailing_zeros()));
                    let address = b.ins().iadd(*base, row);
                    let bits = lane_bits(b, *mask, lanes, self.pointer);
                    for lane in 0..lanes {
                        let bit = b.ins().ushr_imm_u(bits, i64::from(lane));
                        let bit = b.ins().band_imm_u(bit, 1);
                        b.ins().istore8(self.flags, bit, address, lane as i32);
                    }
                }
            }
        }
    }

    /// Stores the outputs after the first (the predicate) for the rows it keeps, from value
    /// `kept` on, each kept row one value further.
    fn store_kept(&self, b: &mut FunctionBuilder, results: &[Val], kept: Variable, lanes: u32) {
        let bits = |b: &mut FunctionBuilder, v: &Val| match v {
            Val::One(mask) => lane_bits(b, *mask, lanes, self.pointer),
            Val::Lanes(_) => unreachable!("a bool is a mask"),
        };
        let keep = bits(b, &results[0]);
        let output_bits: Vec<Option<Value>> =
            (self.p.outputs.iter().zip(results)).map(|((_, ty, _), v)| (*ty == Ty::Bool).then(|| bits(b, v))).collect();
        for lane in 0..lanes {
            let at = b.use_var(kept);
            for (k, (base, value)) in self.output_bases.iter().zip(results).enumerate().skip(1) {
                let base = base.expect("a selecting program stores every output but the first");
                if let Some(bits) = output_bits[k] {
                    let address = b.ins().iadd(base, at);
                    let bit = b.ins().ushr_imm_u(bits, i64::from(lane));
                    let bit = b.ins().band_imm_u(bit, 1);
                    b.ins().istore8(self.flags, bit, address, 0);
                    continue;
                }
                let scaled = b.ins().ishl_imm_u(at, i64::from(self.width.trailing_zeros()));
                let address = b.ins().iadd(base, scaled);
                let one = match value {
                    Val::Lanes(values) => values[lane as usize],
                    Val::One(v) if lanes == 1 => *v,
                    Val::One(v) => b.ins().extractlane(*v, lane as u8),
                };
                b.ins().store(self.flags, one, address, 0);
            }
            let bit = b.ins().ushr_imm_u(keep, i64::from(lane));
            let bit = b.ins().band_imm_u(bit, 1);
            let next = b.ins().iadd(at, bit);
            b.def_var(kept, next);
        }
    }

    /// Fails the step where input `c`'s values at byte `offset` lie outside `[lo, hi]`,
    /// a vector's lanes in one comparison each way.
    fn check_range(&self, s: &mut Step, c: usize, offset: Value, (lo, hi): (Konst, Konst)) {
        let (lo, hi) = (self.consts.get(lo, s.lanes), self.consts.get(hi, s.lanes));
        let b = &mut *s.b;
        let address = b.ins().iadd(self.input_bases[c], offset);
        let x = b.ins().load(vector_of(types::I64, s.lanes), self.flags, address, 0);
        let below = b.ins().icmp(IntCC::SignedLessThan, x, lo);
        let above = b.ins().icmp(IntCC::SignedGreaterThan, x, hi);
        s.failed_where(below);
        s.failed_where(above);
    }

    /// The value of `instr` over operands `a` and `c` (the second, where it has one);
    /// `covered`: an int64 operation that its input column's interval checks.
    fn compute(&self, s: &mut Step, instr: &Instr, covered: bool, a: Val, c: Option<Val>) -> Val {
        match (instr.op, instr.ty) {
            (Op::Splat, _) => a,
            (Op::Arith(op), Ty::I64) if covered => {
                let (xs, ys) = (s.lanes_of(&a), s.lanes_of(&c.expect("two operands")));
                let b = &mut *s.b;
                let lanes = xs.iter().zip(&ys).map(|(x, y)| match op {
                    BinaryOp::Add => b.ins().iadd(*x, *y),
                    BinaryOp::Sub => b.ins().isub(*x, *y),
                    BinaryOp::Mul => b.ins().imul(*x, *y),
                    other => unreachable!("{other:?} of int64 is not compiled natively"),
                });
                Val::Lanes(lanes.collect())
            }
            (Op::Arith(op), Ty::I64) => {
                let (xs, ys) = (s.lanes_of(&a), s.lanes_of(&c.expect("two operands")));
                let b = &mut *s.b;
                let lanes = xs.iter().zip(&ys).map(|(x, y)| {
                    let (r, overflow) = match op {
                        BinaryOp::Add => b.ins().sadd_overflow(*x, *y),
                        BinaryOp::Sub => b.ins().ssub_overflow(*x, *y),
                        BinaryOp::Mul => b.ins().smul_overflow(*x, *y),
                        other => unreachable!("{other:?} of int64 is not compiled natively"),
                    };
                    s.flags.push(overflow);
                    r
                });
                Val::Lanes(lanes.collect())
            }
            (Op::Cast(Ty::I64), to) => {
                let scalar = clif_type(to, 1);
                let converted: Vec<Value> =
                    s.lanes_of(&a).iter().map(|x| s.b.ins().fcvt_from_sint(scalar, *x)).collect();
                Val::One(s.vector(&converted))
            }
            _ => {
                let a = s.one(&a);
                let c = c.map(|c| s.one(&c));
                Val::One(self.compute_one(s, instr, a, c))
            }
        }
    }

    /// The value of `instr`, of one SSA value, over operands `a` and `c` (the second, where
    /// it has one).
    fn compute_one(&self, s: &mut Step, instr: &Instr, a: Value, c: Option<Value>) -> Value {
        let lanes = s.lanes;
        let two = || c.expect("two operands");
        let float = instr.ty.is_float();
        let b = &mut *s.b;
        match instr.op {
            Op::Splat => a,
            Op::Arith(op) if float => match op {
                BinaryOp::Add => b.ins().fadd(a, two()),
                BinaryOp::Sub => b.ins().fsub(a, two()),
                BinaryOp::Mul => b.ins().fmul(a, two()),
                BinaryOp::Div => b.ins().fdiv(a, two()),
                BinaryOp::Mod => self.rem_whole(s, instr, a),
                other => unreachable!("{other:?} is not compiled natively"),
            },
            // int32: int64 goes a lane at a time (`compute`).
            Op::Arith(BinaryOp::Add) => {
                // Overflow where the result's sign differs from both operands'.
                let (c, r) = (two(), b.ins().iadd(a, two()));
                let (x, y) = (b.ins().bxor(a, r), b.ins().bxor(c, r));
                let both = b.ins().band(x, y);
                s.failed_where_negative(both);
                r
            }
            Op::Arith(BinaryOp::Sub) => {
                // Overflow where the operands' signs differ and the result's differs from
                // the first's.
                let (c, r) = (two(), b.ins().isub(a, two()));
                let (x, y) = (b.ins().bxor(a, c), b.ins().bxor(a, r));
                let both = b.ins().band(x, y);
                s.failed_where_negative(both);
                r
            }
            Op::Arith(BinaryOp::Mul) => {
                let (lo, hi) = product_bounds(instr).expect("an integer product by a constant");
                let x = if matches!(instr.args[0], Arg::Const(_)) { two() } else { a };
                let (lo, hi) = (self.consts.get(lo, lanes), self.consts.get(hi, lanes));
                let below = b.ins().icmp(IntCC::SignedLessThan, x, lo);
                let above = b.ins().icmp(IntCC::SignedGreaterThan, x, hi);
                let out = b.ins().imul(a, two());
                s.failed_where(below);
                s.failed_where(above);
                out
            }
            Op::Neg => b.ins().fneg(a),
            Op::Math(Func::Sqrt) => b.ins().sqrt(a),
            Op::Math(Func::Floor) => b.ins().floor(a),
            Op::Math(Func::Ceil) => b.ins().ceil(a),
            Op::Math(Func::Trunc) => b.ins().trunc(a),
            Op::Math(Func::Abs) => b.ins().fabs(a),
            Op::Cast(_) => b.ins().fcvt_from_sint(clif_type(instr.ty, lanes), a),
            Op::Cmp(op, ty) => compare(b, op, ty, a, two()),
            Op::And => b.ins().band(a, two()),
            Op::Or => b.ins().bor(a, two()),
            Op::Not => not(b, a, lanes),
            other => unreachable!("{other:?} is not compiled natively"),
        }
    }

    /// `x % k` for a whole constant `k` (`instr`'s divisor), as `lanes::rem_whole` computes
    /// it: |x| mod |k| from the truncated quotient, then x's sign. Exact where x is a whole
    /// number below the bound; any other x fails the step.
    fn rem_whole(&self, s: &mut Step, instr: &Instr, x: Value) -> Value {
        let lanes = s.lanes;
        let [whole, k_abs, sign] = match derived(instr)[..] {
            [whole, k_abs, sign] => [whole, k_abs, sign].map(|k| self.consts.get(k, lanes)),
            _ => unreachable!("a remainder by a constant"),
        };
        let b = &mut *s.b;
        let ax = b.ins().fabs(x);
        let t = b.ins().trunc(ax);
        let too_big = b.ins().fcmp(FloatCC::UnorderedOrGreaterThanOrEqual, ax, whole);
        let fraction = b.ins().fcmp(FloatCC::NotEqual, ax, t);
        let fails = b.ins().bor(too_big, fraction);
        s.failed_where(fails);
        let b = &mut *s.b;
        let q = b.ins().fdiv(ax, k_abs);
        let q = b.ins().trunc(q);
        let qk = b.ins().fmul(q, k_abs);
        // Never negative: +0 where |k| divides |x|.
        let r = b.ins().fsub(ax, qk);
        if lanes == 1 {
            return b.ins().fcopysign(r, x);
        }
        // x64 has no vector copysign; r's sign bit is clear.
        let x_sign = b.ins().band(x, sign);
        b.ins().bor(r, x_sign)
    }
}

impl Step<'_, '_> {
    /// `v` as one SSA value.
    fn one(&mut self, v: &Val) -> Value {
        match v {
            Val::One(v) => *v,
            Val::Lanes(lanes) => self.vector(lanes),
        }
    }

    /// `v`'s lanes, one SSA value each.
    fn lanes_of(&mut self, v: &Val) -> Vec<Value> {
        match v {
            Val::Lanes(lanes) => lanes.clone(),
            Val::One(v) if self.lanes == 1 => vec![*v],
            Val::One(v) => (0..self.lanes as u8).map(|i| self.b.ins().extractlane(*v, i)).collect(),
        }
    }

    /// The vector of `lanes` (the one value where the step is of one).
    fn vector(&mut self, lanes: &[Value]) -> Value {
        let Some((first, rest)) = lanes.split_first().filter(|_| self.lanes > 1) else { return lanes[0] };
        let ty = vector_of(self.b.func.dfg.value_type(*first), self.lanes);
        let mut vector = self.b.ins().scalar_to_vector(ty, *first);
        for (i, lane) in rest.iter().enumerate() {
            vector = self.b.ins().insertlane(vector, *lane, i as u8 + 1);
        }
        vector
    }

    /// Fails the step where `mask` (a comparison's result) holds.
    fn failed_where(&mut self, mask: Value) {
        self.failed.push(mask);
    }

    /// Fails the step where `v`'s sign bit is set.
    fn failed_where_negative(&mut self, v: Value) {
        let flag = if self.lanes == 1 { self.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, 0) } else { v };
        self.failed.push(flag);
    }
}

/// The lanes of `mask` as the low bits of a pointer-sized integer.
fn lane_bits(b: &mut FunctionBuilder, mask: Value, lanes: u32, pointer: Type) -> Value {
    let bits = if lanes == 1 { mask } else { b.ins().vhigh_bits(types::I32, mask) };
    b.ins().uextend(pointer, bits)
}

/// A mask's complement (a one-lane mask is 0 or 1).
fn not(b: &mut FunctionBuilder, mask: Value, lanes: u32) -> Value {
    if lanes == 1 {
        b.ins().bxor_imm_u(mask, 1)
    } else {
        b.ins().bnot(mask)
    }
}

/// `a op c` over values of type `ty`, as a mask. Floats compare as IEEE 754 says, as the
/// interpreter does: `NaN` is unordered (only `!=` holds for it) and `-0.0 == 0.0`.
fn compare(b: &mut FunctionBuilder, op: BinaryOp, ty: Ty, a: Value, c: Value) -> Value {
    if ty.is_float() {
        let cc = match op {
            BinaryOp::Eq => FloatCC::Equal,
            // Unordered or unequal: C's `!=`, true for a NaN.
            BinaryOp::NotEq => FloatCC::NotEqual,
            BinaryOp::Lt => FloatCC::LessThan,
            BinaryOp::LtEq => FloatCC::LessThanOrEqual,
            BinaryOp::Gt => FloatCC::GreaterThan,
            BinaryOp::GtEq => FloatCC::GreaterThanOrEqual,
            other => unreachable!("{other:?} is not a comparison"),
        };
        return b.ins().fcmp(cc, a, c);
    }
    let cc = match op {
        BinaryOp::Eq => IntCC::Equal,
        BinaryOp::NotEq => IntCC::NotEqual,
        BinaryOp::Lt => IntCC::SignedLessThan,
        BinaryOp::LtEq => IntCC::SignedLessThanOrEqual,
        BinaryOp::Gt => IntCC::SignedGreaterThan,
        BinaryOp::GtEq => IntCC::SignedGreaterThanOrEqual,
        other => unreachable!("{other:?} is not a comparison"),
    };
    b.ins().icmp(cc, a, c)
}
