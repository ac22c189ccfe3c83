//! Native code for kernel programs: a program whose every operation is one exact machine
//! instruction is compiled with Cranelift into a single loop over its rows.
//!
//! The tile interpreter ([`super::exec`]) makes one pass over a tile per instruction, each
//! storing its results for the next one to load back. That costs a store per value per
//! instruction, and a slow instruction (a division, a square root) cannot overlap with the
//! others the way it does in one loop. A native loop keeps every intermediate value in a
//! machine register, so it runs as fast as the same expression written by hand.
//!
//! Only operations whose machine instruction gives the interpreter's value bit for bit are
//! compiled: float add, sub, mul, div, sqrt, floor, ceil, trunc, abs and neg (IEEE 754
//! operations, correctly rounded, as the interpreter's `wide` loops compute them), and
//! integer-to-float conversion (round to nearest, as Rust's `as`). Everything that can fail
//! or needs a library function (integer arithmetic, comparisons, remainders, the other math
//! functions, float-to-integer casts) stays with the interpreter, as do programs mixing
//! types of different widths (float32 with int64), whose vectors would hold different
//! numbers of lanes. A program that does not compile natively, or a host Cranelift does not
//! support, runs interpreted: native code changes speed, never values.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, BlockArg, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use flumen_ir::{BinaryOp, Func};

use super::program::{Arg, Konst, Op, Program, Ty};

/// The signature of a compiled program: the input columns' values, the outputs' buffers
/// (null for an output that is not computed), the number of rows and the values per row.
type Entry = unsafe extern "C" fn(*const *const u8, *const *mut u8, usize, usize);

/// A program compiled to machine code.
pub struct Native {
    /// Owns the code's memory, freed on drop; `None` only while dropping.
    module: Option<JITModule>,
    entry: Entry,
    /// The inputs holding one value per row (a bit per input).
    repeated: u64,
}

// SAFETY: after `finalize_definitions` the module is never used again except to free its
// memory on drop; the code itself is immutable and reads and writes only the buffers each
// call passes.
unsafe impl Send for Native {}
// SAFETY: as for `Send`: shared references only ever call the finished, immutable code.
unsafe impl Sync for Native {}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native").field("repeated", &self.repeated).finish_non_exhaustive()
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
        let width = native_width(program)?;
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        let isa = cranelift_native::builder().ok()?.finish(settings::Flags::new(flags)).ok()?;
        let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let config = module.target_config();
        let pointer = config.pointer_type();
        let mut ctx = module.make_context();
        ctx.func.signature.params.extend([pointer; 4].map(AbiParam::new));
        let id = module.declare_function("kernel", Linkage::Local, &ctx.func.signature).ok()?;
        let mut builder_ctx = FunctionBuilderContext::new();
        build(FunctionBuilder::new(&mut ctx.func, &mut builder_ctx), program, repeated, config, width);
        module.define_function(id, &mut ctx).ok()?;
        module.clear_context(&mut ctx);
        module.finalize_definitions().ok()?;
        let code = module.get_finalized_function(id);
        // SAFETY: the function was declared with exactly this signature, in the module's
        // default calling convention, which is the platform's C convention.
        let entry = unsafe { std::mem::transmute::<*const u8, Entry>(code) };
        Some(Native { module: Some(module), entry, repeated })
    }

    /// The inputs the code reads one value per row from (a bit per input).
    pub fn repeated(&self) -> u64 {
        self.repeated
    }

    /// Runs the program over `rows` rows of `row_values` values: input `i`'s values from
    /// `inputs[i]` (one per row where it repeats), output `k`'s values written from
    /// `outputs[k]` (null for an output that is not computed).
    ///
    /// # Safety
    /// Each input pointer must be valid for reading `rows` values of its type where it
    /// repeats and `rows * row_values` otherwise, each non-null output pointer valid for
    /// writing `rows * row_values` values of its type, the outputs must not overlap
    /// anything else passed, and there must be one pointer per input and per output of
    /// the program.
    pub unsafe fn run(&self, inputs: &[*const u8], outputs: &[*mut u8], rows: usize, row_values: usize) {
        // SAFETY: the caller's contract is the compiled code's.
        unsafe { (self.entry)(inputs.as_ptr(), outputs.as_ptr(), rows, row_values) }
    }
}

/// The one value width of a program native code computes, or `None`.
fn native_width(p: &Program) -> Option<usize> {
    let width = |ty: Ty| match ty {
        Ty::F64 | Ty::I64 => Some(8),
        Ty::F32 | Ty::I32 => Some(4),
        Ty::Bool => None,
    };
    let mut types = p.inputs.iter().map(|(_, t)| *t).chain(p.instrs.iter().map(|i| i.ty));
    let first = width(types.next()?)?;
    if !types.all(|t| width(t) == Some(first)) {
        return None;
    }
    let exact = |op: Op, ty: Ty| match op {
        Op::Arith(op) => ty.is_float() && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div),
        Op::Neg | Op::Splat => ty.is_float(),
        Op::Math(f) => ty.is_float() && matches!(f, Func::Sqrt | Func::Floor | Func::Ceil | Func::Trunc | Func::Abs),
        Op::Cast(from) => ty.is_float() && matches!(from, Ty::I64 | Ty::I32),
        _ => false,
    };
    p.instrs.iter().all(|i| exact(i.op, i.ty)).then_some(first)
}

/// The Cranelift type of `ty`'s values, one per row or `lanes` to a vector.
fn clif_type(ty: Ty, lanes: u32) -> Type {
    let scalar = match ty {
        Ty::F64 => types::F64,
        Ty::F32 => types::F32,
        Ty::I64 => types::I64,
        Ty::I32 => types::I32,
        Ty::Bool => unreachable!("native programs have no bools"),
    };
    if lanes == 1 {
        scalar
    } else {
        scalar.by(lanes).expect("a 128-bit vector type")
    }
}

/// Emits the function over values of `width` bytes. Rows are `row_values` values each (a
/// tensor's values, or the whole run as one row when nothing repeats); a repeated input
/// holds one value per row, loaded once per row, and every other input and output one
/// value per row's value. Offsets are in bytes.
///
/// ```text
/// entry(inputs, outputs, rows, row_values): base pointers, constants; jump row(0, 0, 0)
/// row(r, scalar_offset, offset): r < rows ? row_start : exit
/// row_start:        the repeated inputs' values; jump quads(0)
/// quads(i):         i < whole_quads ? quad_body : vectors(i)
/// quad_body:        the program on four vectors from offset + i; jump quads(i + 64)
/// vectors(i):       i < whole ? vector_body : values_left(i)
/// vector_body:      the program on one vector at offset + i; jump vectors(i + 16)
/// values_left(i):   i < row_bytes ? value_body : next_row
/// value_body:       the program on one value at offset + i; jump values_left(i + width)
/// next_row:         jump row(r + 1, scalar_offset + width, offset + row_bytes)
/// ```
fn build(mut b: FunctionBuilder, p: &Program, repeated: u64, config: TargetFrontendConfig, width: usize) {
    let pointer = config.pointer_type();
    let lanes = (16 / width) as u32;
    let [entry, row, row_start, quads, quad_body, vectors, vector_body, values_left, value_body, next_row, exit] =
        [(); 11].map(|_| b.create_block());
    b.append_block_params_for_function_params(entry);
    let [r, scalar_offset, offset] = [(); 3].map(|_| b.append_block_param(row, pointer));
    let i_quads = b.append_block_param(quads, pointer);
    let i_vectors = b.append_block_param(vectors, pointer);
    let i_values = b.append_block_param(values_left, pointer);

    b.switch_to_block(entry);
    let [inputs, outputs, rows, row_values] = [0, 1, 2, 3].map(|i| b.block_params(entry)[i]);
    let flags = MemFlagsData::new().with_notrap();
    let input_bases: Vec<Value> =
        (0..p.inputs.len()).map(|i| b.ins().load(pointer, flags, inputs, (i * 8) as i32)).collect();
    let output_bases: Vec<Option<Value>> = p
        .outputs
        .iter()
        .enumerate()
        .map(|(k, (arg, _, _))| {
            matches!(arg, Arg::Val(_)).then(|| b.ins().load(pointer, flags, outputs, (k * 8) as i32))
        })
        .collect();
    let row_bytes = b.ins().imul_imm_u(row_values, width as i64);
    let whole = b.ins().band_imm_s(row_bytes, -16);
    // Four vectors a step (as a compiler unrolls a loop by hand): a quarter of the loop's
    // own instructions per value, which is what a streaming loop like `t * w` is bound by.
    let whole_quads = b.ins().band_imm_s(row_bytes, -64);
    let consts = Constants::new(&mut b, p, lanes);
    let zero = b.ins().iconst(pointer, 0);
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
    b.ins().jump(quads, &[BlockArg::from(zero)]);

    let body =
        Body { p, input_bases: &input_bases, per_row: &per_row, output_bases: &output_bases, consts: &consts, flags };
    b.switch_to_block(quads);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i_quads, whole_quads);
    b.ins().brif(more, quad_body, &[], vectors, &[BlockArg::from(i_quads)]);

    b.switch_to_block(quad_body);
    for k in 0..4 {
        let at = b.ins().iadd(offset, i_quads);
        let at = b.ins().iadd_imm_u(at, 16 * k);
        body.emit(&mut b, at, lanes);
    }
    let next = b.ins().iadd_imm_u(i_quads, 64);
    b.ins().jump(quads, &[BlockArg::from(next)]);

    b.switch_to_block(vectors);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, i_vectors, whole);
    b.ins().brif(more, vector_body, &[], values_left, &[BlockArg::from(i_vectors)]);

    b.switch_to_block(vector_body);
    let at = b.ins().iadd(offset, i_vectors);
    body.emit(&mut b, at, lanes);
    let next = b.ins().iadd_imm_u(i_vectors, 16);
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
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(config);
}

/// The program's constants, made once in the entry block, as scalars and as vectors.
struct Constants(HashMap<(Ty, u64), (Value, Value)>);

impl Constants {
    fn new(b: &mut FunctionBuilder, p: &Program, lanes: u32) -> Constants {
        let mut made = HashMap::new();
        for arg in p.instrs.iter().flat_map(|i| &i.args) {
            let Arg::Const(k) = *arg else { continue };
            made.entry(k.key()).or_insert_with(|| {
                let scalar = match k {
                    Konst::F64(v) => b.ins().f64const(v),
                    Konst::F32(v) => b.ins().f32const(v),
                    other => unreachable!("native programs have float constants only, not {other:?}"),
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

/// What one step of either loop reads.
struct Body<'a> {
    p: &'a Program,
    input_bases: &'a [Value],
    /// Per input, its value for the current row as a scalar and a vector, when it repeats.
    per_row: &'a [Option<(Value, Value)>],
    output_bases: &'a [Option<Value>],
    consts: &'a Constants,
    flags: MemFlagsData,
}

impl Body<'_> {
    /// The program over the `lanes` rows at byte `offset`: inputs loaded once, every value
    /// an SSA value (a machine register), each computed output stored.
    fn emit(&self, b: &mut FunctionBuilder, offset: Value, lanes: u32) {
        let p = self.p;
        let mut columns: Vec<Option<Value>> = vec![None; p.inputs.len()];
        let mut values: Vec<Option<Value>> = vec![None; p.instrs.iter().map(|i| i.out + 1).max().unwrap_or(0)];
        for instr in &p.instrs {
            let mut operand = |b: &mut FunctionBuilder, arg: Arg| match arg {
                Arg::Val(v) => values[v].expect("operands come first"),
                Arg::Const(k) => self.consts.get(k, lanes),
                Arg::Col(c) if self.per_row[c].is_some() => {
                    one_or_vector(self.per_row[c].expect("a repeated input"), lanes)
                }
                Arg::Col(c) => *columns[c].get_or_insert_with(|| {
                    let address = b.ins().iadd(self.input_bases[c], offset);
                    b.ins().load(clif_type(p.inputs[c].1, lanes), self.flags, address, 0)
                }),
            };
            let a = operand(b, instr.args[0]);
            let value = match instr.op {
                Op::Splat => a,
                Op::Arith(op) => {
                    let c = operand(b, instr.args[1]);
                    match op {
                        BinaryOp::Add => b.ins().fadd(a, c),
                        BinaryOp::Sub => b.ins().fsub(a, c),
                        BinaryOp::Mul => b.ins().fmul(a, c),
                        BinaryOp::Div => b.ins().fdiv(a, c),
                        other => unreachable!("{other:?} is not compiled natively"),
                    }
                }
                Op::Neg => b.ins().fneg(a),
                Op::Math(Func::Sqrt) => b.ins().sqrt(a),
                Op::Math(Func::Floor) => b.ins().floor(a),
                Op::Math(Func::Ceil) => b.ins().ceil(a),
                Op::Math(Func::Trunc) => b.ins().trunc(a),
                Op::Math(Func::Abs) => b.ins().fabs(a),
                Op::Cast(from) => int_to_float(b, a, from, instr.ty, lanes),
                other => unreachable!("{other:?} is not compiled natively"),
            };
            values[instr.out] = Some(value);
        }
        for ((arg, _, _), base) in p.outputs.iter().zip(self.output_bases) {
            if let (Arg::Val(v), Some(base)) = (arg, base) {
                let address = b.ins().iadd(*base, offset);
                b.ins().store(self.flags, values[*v].expect("outputs are computed"), address, 0);
            }
        }
    }
}

/// `a` (of integer type `from`) converted to `to`, rounding to nearest. x86 has no
/// conversion of 64-bit integer vectors before AVX-512, so those go a lane at a time.
fn int_to_float(b: &mut FunctionBuilder, a: Value, from: Ty, to: Ty, lanes: u32) -> Value {
    if lanes == 1 || from == Ty::I32 {
        return b.ins().fcvt_from_sint(clif_type(to, lanes), a);
    }
    let scalar = clif_type(to, 1);
    let lane = |b: &mut FunctionBuilder, i: u8| {
        let x = b.ins().extractlane(a, i);
        b.ins().fcvt_from_sint(scalar, x)
    };
    let first = lane(b, 0);
    let mut vector = b.ins().scalar_to_vector(clif_type(to, lanes), first);
    for i in 1..lanes as u8 {
        let x = lane(b, i);
        vector = b.ins().insertlane(vector, x, i);
    }
    vector
}
