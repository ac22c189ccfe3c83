//! Fused expression kernels: a map's or a filter's expressions compiled into one program
//! that reads each input column once and writes each output once.
//!
//! The Arrow evaluation ([`crate::eval`]) runs one compute kernel per operation, each
//! allocating and writing a whole column that the next one reads back. A kernel instead
//! runs the whole program as one loop of machine code where every operation allows it
//! ([`native`], compiled once per process: [`code_cache`]), and otherwise interprets it
//! over a tile of rows at a time ([`TILE`]),
//! keeping intermediates in a few tile-sized registers that stay in the L1 cache, with the
//! hot loops in `wide` SIMD types ([`lanes`]). Nulls are handled outside the loops: values
//! are computed for every row, and an output's validity is the union of its input columns'
//! validities.
//!
//! A kernel computes exactly the values the Arrow evaluation computes, bit for bit (the
//! tests compare the two on random expressions and data). Whatever it cannot decide alone
//! it hands back: expressions it does not compile (strings, lists, `case`, null tests,
//! other number types), Kleene `and`/`or` over inputs with nulls, and chunks where an
//! operation fails (integer overflow, division by zero, a float out of an integer's range),
//! which the Arrow evaluation then reports with the row and the expression.
//!
//! [`FusedMap`] and [`FusedPredicate`] are what the runtime calls: they compile on the
//! first chunk and fall back to the Arrow evaluation per chunk. A chain of maps and filters
//! may also run as one selecting loop ([`chain`]).

mod affine;
pub mod chain;
pub mod code_cache;
pub mod exec;
pub mod lanes;
pub mod native;
pub mod program;

use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, RecordBatch};
use arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{ArrowPrimitiveType, Float32Type, Float64Type, Int32Type, Int64Type, SchemaRef};
use flumen_ir::{Expr, NamedExpr, Result};

use crate::eval::{
    assemble_map, computes_first, evaluate_output, evaluate_with_batch_dims, kept_columns, list_depth, repeat_each,
    FlatColumn, Tensors,
};

use exec::{exec, Buf, Elem, Input, Tile};
use native::Native;
use program::{compile, Arg, Konst, Program, Ty};

/// Rows per tile: 512 float64 values are 4 KiB, so a program's registers and the tile's
/// inputs fit in the L1 cache together.
pub const TILE: usize = 512;

/// A compiled program over chunks of one schema.
#[derive(Debug)]
pub struct Kernel {
    program: Program,
    /// The program as machine code, where it compiles to it ([`native`]), shared with the
    /// other kernels of the same program ([`code_cache`]).
    native: Option<Arc<Native>>,
    schema: SchemaRef,
}

impl Kernel {
    /// Compiles `exprs` over chunks of `schema`; `None` when one of them uses something
    /// kernels do not compute (see the module overview). The program runs as native code
    /// where every operation allows it ([`native`]), interpreted otherwise.
    pub fn compile(exprs: &[&Expr], schema: &SchemaRef) -> Option<Kernel> {
        let mut kernel = Kernel::interpreted(exprs, schema)?;
        kernel.native = code_cache::native(&kernel.program, 0, false);
        Some(kernel)
    }

    /// [`compile`](Self::compile) for flat chunks like `tensors`, whose per-row scalars
    /// native code reads once per row ([`run_flat`](Self::run_flat)).
    pub fn compile_flat(exprs: &[&Expr], tensors: &Tensors) -> Option<Kernel> {
        let mut kernel = Kernel::interpreted(exprs, tensors.schema())?;
        let repeated =
            mask(kernel.program.inputs.iter().map(|(i, _)| matches!(tensors.columns()[*i], FlatColumn::Repeated(_))));
        kernel.native = code_cache::native(&kernel.program, repeated, false);
        Some(kernel)
    }

    /// [`compile`](Self::compile) without native code: the same values, always by the tile
    /// interpreter (for comparing the two).
    pub fn interpreted(exprs: &[&Expr], schema: &SchemaRef) -> Option<Kernel> {
        Some(Kernel { program: compile(exprs, schema)?, native: None, schema: schema.clone() })
    }

    /// Compiles `exprs` over chunks of `schema` into selecting native code: the first
    /// expression, a predicate, says which rows to keep, and the others are computed for
    /// those rows only ([`run_selecting`](Self::run_selecting)); `None` where the program has
    /// no such code (see [`native`]).
    pub fn compile_selecting(exprs: &[&Expr], schema: &SchemaRef) -> Option<Kernel> {
        let mut kernel = Kernel::interpreted(exprs, schema)?;
        kernel.native = Some(code_cache::native(&kernel.program, 0, true)?);
        Some(kernel)
    }

    /// The outputs after the first over the rows of `chunk` the first keeps, of a kernel
    /// from [`compile_selecting`](Self::compile_selecting); `None` for a chunk of another
    /// schema, one whose inputs have nulls, or one the code hands back (a failing
    /// operation, a remainder it does not compute exactly).
    pub fn run_selecting(&self, chunk: &RecordBatch) -> Option<Vec<ArrayRef>> {
        let native = self.native.as_ref().filter(|n| n.selecting())?;
        if !self.fits(chunk.schema_ref()) {
            return None;
        }
        let p = &self.program;
        let columns: Vec<&ArrayRef> = p.inputs.iter().map(|(i, _)| chunk.column(*i)).collect();
        if columns.iter().any(|c| c.null_count() > 0) {
            return None;
        }
        let rows = chunk.num_rows();
        let inputs: Vec<Input> = columns.iter().zip(&p.inputs).map(|(c, (_, ty))| input(c, *ty)).collect();
        let mut outs: Vec<Buf> = p.outputs[1..].iter().map(|(_, ty, _)| Buf::with_capacity(*ty, rows)).collect();
        let input_ptrs: Vec<*const u8> = inputs.iter().map(|i| i.ptr(0, rows)).collect();
        let output_ptrs: Vec<*mut u8> =
            std::iter::once(std::ptr::null_mut()).chain(outs.iter_mut().map(|o| o.spare_ptr(0, rows))).collect();
        // SAFETY: each input pointer starts `rows` values, and each output pointer room for
        // as many (`ptr` and `spare_ptr` check them); each output is a buffer of its own,
        // and the predicate's is not written.
        let kept = unsafe { native.run(&input_ptrs, &output_ptrs, 1, rows) }?;
        Some(
            outs.into_iter()
                .map(|mut out| {
                    // SAFETY: the code wrote the kept rows' values, `kept` of them.
                    unsafe { out.set_len(kept) };
                    array(out, None)
                })
                .collect(),
        )
    }

    /// Whether both kernels run the same native code ([`code_cache`]).
    pub fn shares_code_with(&self, other: &Kernel) -> bool {
        matches!((&self.native, &other.native), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }

    /// Whether the kernel runs as native code.
    pub fn is_native(&self) -> bool {
        self.native.is_some()
    }

    /// The outputs over `chunk`, one array per expression; `None` when the chunk is one the
    /// kernel hands back (another schema, nulls under `and`/`or`, a failing operation).
    pub fn run(&self, chunk: &RecordBatch) -> Option<Vec<ArrayRef>> {
        if !self.fits(chunk.schema_ref()) {
            return None;
        }
        let columns: Vec<Column> = self.program.inputs.iter().map(|(i, _)| Column::Plain(chunk.column(*i))).collect();
        self.execute(&columns, &[(0, chunk.num_rows())])
    }

    /// The outputs over a flat chunk of tensor values ([`Tensors`]), the per-row scalars read
    /// once per row rather than repeated into columns; `None` as for [`run`](Self::run), and
    /// when a repeated scalar has nulls or is a bool.
    pub fn run_flat(&self, tensors: &Tensors) -> Option<Vec<ArrayRef>> {
        self.execute(&self.flat_columns(tensors)?, &[(0, tensors.len())])
    }

    /// [`run_flat`](Self::run_flat) over only the rows of `runs` (each a first row and a
    /// count, in order), the outputs holding just those rows' values one after another: a
    /// filter's selection consumed without first copying the filtered tensors. `None` as for
    /// `run_flat`, and when an input has nulls or an output is an input as is (either would
    /// have to be filtered). A validity buffer without nulls is no null.
    pub fn run_flat_selected(&self, tensors: &Tensors, runs: &[(usize, usize)]) -> Option<Vec<ArrayRef>> {
        let columns = self.flat_columns(tensors)?;
        if columns.iter().any(|c| c.nulls().is_some())
            || self.program.outputs.iter().any(|(a, ..)| matches!(a, Arg::Col(_)))
        {
            return None;
        }
        let width = tensors.width();
        let segments: Vec<(usize, usize)> = runs.iter().map(|(start, rows)| (start * width, rows * width)).collect();
        self.execute(&columns, &segments)
    }

    /// The kernel's inputs from a flat chunk; `None` for another schema, or a repeated
    /// scalar with nulls or of bools.
    fn flat_columns<'t>(&self, tensors: &'t Tensors) -> Option<Vec<Column<'t>>> {
        if !self.fits(tensors.schema()) {
            return None;
        }
        let width = tensors.width();
        self.program
            .inputs
            .iter()
            .map(|(i, ty)| match &tensors.columns()[*i] {
                FlatColumn::Values(a) => Some(Column::Plain(a)),
                FlatColumn::Repeated(a) => {
                    (a.null_count() == 0 && *ty != Ty::Bool).then_some(Column::Repeated(a, width))
                }
            })
            .collect::<Option<Vec<Column>>>()
    }

    fn fits(&self, schema: &SchemaRef) -> bool {
        Arc::ptr_eq(schema, &self.schema) || **schema == *self.schema
    }

    /// Runs the program over the `segments` of `columns` (the program's inputs, in order),
    /// each a first row and a count, writing their results one after another. Only a run
    /// over the whole of `columns` may have nulls or outputs that are inputs as is.
    fn execute(&self, columns: &[Column], segments: &[(usize, usize)]) -> Option<Vec<ArrayRef>> {
        let rows = segments.iter().map(|(_, n)| n).sum();
        let p = &self.program;
        let nulls: Vec<Option<&NullBuffer>> = columns.iter().map(Column::nulls).collect();
        if p.kleene && nulls.iter().any(Option::is_some) {
            return None;
        }
        let inputs: Vec<Input> = columns.iter().zip(&p.inputs).map(|(c, (_, ty))| c.input(*ty)).collect();
        let mut outs: Vec<Option<Buf>> = p
            .outputs
            .iter()
            .map(|(arg, ty, _)| matches!(arg, Arg::Val(_)).then(|| Buf::with_capacity(*ty, rows)))
            .collect();
        let repeated = mask(columns.iter().map(|c| matches!(c, Column::Repeated(..))));
        let mut run = Run { columns, inputs: &inputs, outs: &mut outs, at: 0 };
        let native = self.native.as_ref().filter(|n| n.repeated() == repeated && !n.selecting());
        if !native.is_some_and(|native| run.native(native, segments)) {
            run.restart();
            run.interpret(p, segments)?;
        }
        let mut arrays = Vec::with_capacity(p.outputs.len());
        for ((arg, ty, deps), out) in p.outputs.iter().zip(outs) {
            arrays.push(match (arg, out) {
                (Arg::Val(_), Some(out)) => array(out, deps_nulls(&nulls, *deps)),
                (Arg::Col(c), _) => columns[*c].array()?,
                (Arg::Const(k), _) => array(splat(*k, rows), None),
                (Arg::Val(_), None) => unreachable!("every computed output has a buffer, of type {ty:?}"),
            });
        }
        Some(arrays)
    }
}

/// One run of a kernel: its inputs, and its computed outputs filled in order.
struct Run<'r, 'c> {
    columns: &'r [Column<'c>],
    inputs: &'r [Input<'c>],
    /// The computed outputs (`None` for an output that is an input or a constant).
    outs: &'r mut [Option<Buf>],
    /// How many values of each output are written.
    at: usize,
}

impl Run<'_, '_> {
    /// The tiles of `segments`, each a first row and a count.
    fn tiles(segments: &[(usize, usize)]) -> impl Iterator<Item = (usize, usize)> + '_ {
        segments.iter().flat_map(move |&(first, count)| {
            (first..first + count).step_by(TILE).map(move |start| (start, TILE.min(first + count - start)))
        })
    }

    /// Runs the program's native code, a call per segment: one row of the segment's values,
    /// or rows of a tensor's values where a per-row scalar repeats over them; `false` when
    /// the code handed a segment back for the interpreter.
    fn native(&mut self, native: &Native, segments: &[(usize, usize)]) -> bool {
        let width = self.columns.iter().find_map(|c| match c {
            Column::Repeated(_, width) => Some(*width),
            Column::Plain(_) => None,
        });
        for &(first, count) in segments {
            let (rows, row_values) = match width {
                Some(w) => {
                    assert!(first % w == 0 && count % w == 0, "a flat run covers whole rows");
                    (count / w, w)
                }
                None => (1, count),
            };
            let inputs: Vec<*const u8> = (self.columns.iter().zip(self.inputs))
                .map(|(column, input)| match column {
                    Column::Repeated(..) => input.ptr(first / row_values, rows),
                    Column::Plain(_) => input.ptr(first, count),
                })
                .collect();
            let at = self.at;
            let outputs: Vec<*mut u8> = self
                .outs
                .iter_mut()
                .map(|o| o.as_mut().map_or(std::ptr::null_mut(), |b| b.spare_ptr(at, count)))
                .collect();
            // SAFETY: each input pointer starts as many values as the code reads from it,
            // and each output pointer as many as it writes (`ptr` and `spare_ptr` check
            // them); each output is a buffer of its own.
            if unsafe { native.run(&inputs, &outputs, rows, row_values) }.is_none() {
                return false;
            }
            self.at += count;
            for out in self.outs.iter_mut().flatten() {
                // SAFETY: the native code wrote values `at..at + count` just now.
                unsafe { out.set_len(self.at) };
            }
        }
        true
    }

    /// Forgets every value written, for a run to start over.
    fn restart(&mut self) {
        self.at = 0;
        self.outs.iter_mut().flatten().for_each(Buf::clear);
    }

    /// Runs the program's instructions one tile at a time; `None` when an operation fails.
    fn interpret(&mut self, p: &Program, segments: &[(usize, usize)]) -> Option<()> {
        let rows = segments.iter().map(|(_, n)| n).sum::<usize>();
        let mut regs: Vec<Buf> = p.regs.iter().map(|ty| Buf::new(*ty, TILE.min(rows))).collect();
        // A repeated scalar's values for the tile, refilled per tile.
        let mut expanded: Vec<Option<Buf>> = (self.columns.iter().zip(&p.inputs))
            .map(|(c, (_, ty))| matches!(c, Column::Repeated(..)).then(|| Buf::new(*ty, TILE.min(rows))))
            .collect();
        for (start, len) in Self::tiles(segments) {
            let at = self.at;
            // Outputs grow a tile at a time, each tile's zeros written just before its
            // values, in the cache: zeroing a whole output first was a pass of its own over
            // cold memory.
            self.outs.iter_mut().flatten().for_each(|out| out.grow_to(at + len));
            for (column, buf) in self.columns.iter().zip(&mut expanded) {
                if let (Column::Repeated(a, width), Some(buf)) = (column, buf) {
                    fill_repeated(a, *width, start, len, buf);
                }
            }
            for (instr, direct) in p.instrs.iter().zip(&p.direct) {
                // A result kept in a register leaves the set while the operands are read: a
                // result never shares a register with its operands.
                let r = p.reg_of[instr.out];
                let mut own = direct.is_none().then(|| std::mem::replace(&mut regs[r], Buf::Bool(Vec::new())));
                let tile =
                    Tile { inputs: self.inputs, expanded: &expanded, regs: &regs, reg_of: &p.reg_of, start, len };
                let (out, from) = match direct {
                    Some(k) => (self.outs[*k].as_mut().expect("a computed output"), at),
                    None => (own.as_mut().expect("taken above"), 0),
                };
                let ok = exec(instr, &tile, out, from);
                if let Some(reg) = own {
                    regs[r] = reg;
                }
                if !ok {
                    return None;
                }
            }
            for (k, ((arg, _, _), out)) in p.outputs.iter().zip(self.outs.iter_mut()).enumerate() {
                if let (Arg::Val(v), Some(out)) = (arg, out) {
                    if !p.direct.contains(&Some(k)) {
                        copy_tile(&regs[p.reg_of[*v]], out, at, len);
                    }
                }
            }
            self.at += len;
        }
        Some(())
    }
}

/// The bits of the `true`s, one per item in order.
fn mask(bits: impl Iterator<Item = bool>) -> u64 {
    bits.enumerate().filter(|(_, b)| *b).fold(0, |m, (i, _)| m | 1 << i)
}

/// An input column of a kernel run.
enum Column<'a> {
    /// A column of the chunk.
    Plain(&'a ArrayRef),
    /// A per-row scalar standing for each value repeated `width` times (no nulls).
    Repeated(&'a ArrayRef, usize),
}

impl Column<'_> {
    /// The column's nulls; `None` without any, even where it has a validity buffer (a
    /// slice of a column with nulls elsewhere, or a reader's all-valid one), which would
    /// otherwise keep a selected run off and give the outputs a validity of the whole
    /// column's length.
    fn nulls(&self) -> Option<&NullBuffer> {
        match self {
            Column::Plain(a) => a.nulls().filter(|n| n.null_count() > 0),
            Column::Repeated(..) => None,
        }
    }

    /// The kernel's view of the column's values (a repeated one's one per row, which the
    /// interpreter reads from its tile instead: `fill_repeated`).
    fn input(&self, ty: Ty) -> Input<'_> {
        match self {
            Column::Plain(a) | Column::Repeated(a, _) => input(a, ty),
        }
    }

    /// The column as an output of `rows` rows (an output that is an input as is).
    fn array(&self) -> Option<ArrayRef> {
        match self {
            Column::Plain(a) => Some((*a).clone()),
            Column::Repeated(a, width) => repeat_each(a, a.len(), *width).ok(),
        }
    }
}

/// Writes the tile `start..start + len` of `array`'s values each repeated `width` times
/// into `buf`: the rows the tile covers, each as one run.
fn fill_repeated(array: &ArrayRef, width: usize, start: usize, len: usize, buf: &mut Buf) {
    fn fill<T: Elem>(values: &[T], width: usize, start: usize, out: &mut [T]) {
        let mut at = 0;
        while at < out.len() {
            let flat = start + at;
            let run = (width - flat % width).min(out.len() - at);
            out[at..at + run].fill(values[flat / width]);
            at += run;
        }
    }
    match buf {
        Buf::F64(out) => fill(array.as_primitive::<Float64Type>().values(), width, start, &mut out[..len]),
        Buf::F32(out) => fill(array.as_primitive::<Float32Type>().values(), width, start, &mut out[..len]),
        Buf::I64(out) => fill(array.as_primitive::<Int64Type>().values(), width, start, &mut out[..len]),
        Buf::I32(out) => fill(array.as_primitive::<Int32Type>().values(), width, start, &mut out[..len]),
        Buf::Bool(_) => unreachable!("a repeated bool is handed back"),
    }
}

/// A column's values as a kernel input of type `ty` (checked at compile time).
fn input<'a>(column: &'a ArrayRef, ty: Ty) -> Input<'a> {
    match ty {
        Ty::F64 => Input::F64(column.as_primitive::<Float64Type>().values()),
        Ty::F32 => Input::F32(column.as_primitive::<Float32Type>().values()),
        Ty::I64 => Input::I64(column.as_primitive::<Int64Type>().values()),
        Ty::I32 => Input::I32(column.as_primitive::<Int32Type>().values()),
        Ty::Bool => Input::Bool(column.as_boolean().values().iter().map(u8::from).collect()),
    }
}

fn copy_tile(reg: &Buf, out: &mut Buf, start: usize, len: usize) {
    fn copy<T: Elem>(reg: &Buf, out: &mut Buf, start: usize, len: usize) {
        T::buf_mut(out)[start..start + len].copy_from_slice(&T::buf(reg)[..len]);
    }
    match out {
        Buf::F64(_) => copy::<f64>(reg, out, start, len),
        Buf::F32(_) => copy::<f32>(reg, out, start, len),
        Buf::I64(_) => copy::<i64>(reg, out, start, len),
        Buf::I32(_) => copy::<i32>(reg, out, start, len),
        Buf::Bool(_) => copy::<u8>(reg, out, start, len),
    }
}

fn splat(k: Konst, rows: usize) -> Buf {
    match k {
        Konst::F64(v) => Buf::F64(vec![v; rows]),
        Konst::F32(v) => Buf::F32(vec![v; rows]),
        Konst::I64(v) => Buf::I64(vec![v; rows]),
        Konst::I32(v) => Buf::I32(vec![v; rows]),
        Konst::Bool(v) => Buf::Bool(vec![v; rows]),
    }
}

/// The union of the validities of the inputs in `deps` (a bit per input).
fn deps_nulls(nulls: &[Option<&NullBuffer>], deps: u64) -> Option<NullBuffer> {
    let mut out: Option<NullBuffer> = None;
    for (i, n) in nulls.iter().enumerate() {
        if deps & (1 << i) != 0 {
            out = NullBuffer::union(out.as_ref(), *n);
        }
    }
    out
}

fn array(buf: Buf, nulls: Option<NullBuffer>) -> ArrayRef {
    fn primitive<T: ArrowPrimitiveType>(values: Vec<T::Native>, nulls: Option<NullBuffer>) -> ArrayRef {
        Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls))
    }
    match buf {
        Buf::F64(v) => primitive::<Float64Type>(v, nulls),
        Buf::F32(v) => primitive::<Float32Type>(v, nulls),
        Buf::I64(v) => primitive::<Int64Type>(v, nulls),
        Buf::I32(v) => primitive::<Int32Type>(v, nulls),
        Buf::Bool(v) => Arc::new(BooleanArray::new(BooleanBuffer::collect_bool(v.len(), |i| v[i] != 0), nulls)),
    }
}

/// Compiles on the first chunk, keeping the kernel (or that there is none) for the rest.
#[derive(Debug, Default)]
struct Compiled(OnceLock<Option<Kernel>>);

impl Compiled {
    fn get(&self, exprs: &[&Expr], schema: &SchemaRef) -> Option<&Kernel> {
        self.0.get_or_init(|| Kernel::compile(exprs, schema)).as_ref()
    }

    /// The kernel for flat chunks like `tensors` ([`Kernel::compile_flat`]).
    fn get_flat(&self, exprs: &[&Expr], tensors: &Tensors) -> Option<&Kernel> {
        self.0.get_or_init(|| Kernel::compile_flat(exprs, tensors)).as_ref()
    }
}

/// An expression `map` run by fused kernels where they compile, by the Arrow evaluation
/// otherwise (see [`crate::eval::evaluate_map`] for what the outputs are). The scalar
/// outputs share one kernel over the chunk; a tensor output has a kernel of its own over the
/// chunk made flat ([`crate::eval::Tensors`]).
#[derive(Debug)]
pub struct FusedMap {
    outputs: Vec<NamedExpr>,
    keep_input: bool,
    out_schema: SchemaRef,
    /// Each output's list depth in the output schema: 0 for a scalar.
    depths: Vec<usize>,
    scalars: Compiled,
    /// The scalar outputs' kernel over the columns [`evaluate_selected`](Self::evaluate_selected)
    /// filters, a chunk of another schema. Those columns depend on which tensor outputs read
    /// the selection in place; it is compiled for the first chunk's, and a chunk with others
    /// is evaluated by Arrow (the kernel's schema check hands it back).
    selected_scalars: Compiled,
    /// Per output, whether its kernel may read a selection in place: a tensor output with
    /// no reduction or tensor function, which the Arrow evaluation computes first.
    selectable: Vec<bool>,
    tensors: Vec<Compiled>,
}

impl FusedMap {
    /// The map computing `outputs` (keeping the input columns when `keep_input`) into
    /// chunks of `out_schema`.
    pub fn new(outputs: Vec<NamedExpr>, keep_input: bool, out_schema: SchemaRef) -> Self {
        let depths: Vec<usize> = outputs
            .iter()
            .map(|o| out_schema.field_with_name(&o.name).map_or(0, |f| list_depth(f.data_type())))
            .collect();
        let tensors = outputs.iter().map(|_| Compiled::default()).collect();
        let selectable = outputs.iter().zip(&depths).map(|(o, depth)| *depth > 0 && !computes_first(&o.expr)).collect();
        FusedMap {
            outputs,
            keep_input,
            out_schema,
            depths,
            scalars: Compiled::default(),
            selected_scalars: Compiled::default(),
            selectable,
            tensors,
        }
    }

    /// The output chunk of `chunk`. A chunk without rows gives one without rows, and
    /// evaluates nothing: an expression of literals alone (`cast(1e300 as uint8)`) fails
    /// whatever the rows, and there is no element for it to fail on (a filter fused below
    /// the map may have kept none).
    pub fn evaluate(&self, chunk: &RecordBatch) -> Result<RecordBatch> {
        if chunk.num_rows() == 0 {
            return Ok(RecordBatch::new_empty(self.out_schema.clone()));
        }
        let values = self.values(chunk, &self.scalars, vec![None; self.outputs.len()])?;
        assemble_map(&self.outputs, kept_columns(chunk, self.keep_input), chunk.num_rows(), &self.out_schema, values)
    }

    /// The output chunk of the rows of `chunk` that `mask` keeps (null counting as false):
    /// what [`evaluate`](Self::evaluate) gives for the filtered chunk, with each tensor
    /// output's kernel reading the kept rows in place ([`Kernel::run_flat_selected`]), so
    /// that a tensor column only such outputs read is never copied by the filter (w2's
    /// `features`, whose filtered copy the scaled output would replace at once).
    pub fn evaluate_selected(&self, chunk: &RecordBatch, mask: &BooleanArray) -> Result<RecordBatch> {
        let mask = if mask.null_count() > 0 { arrow::compute::prep_null_mask_filter(mask) } else { mask.clone() };
        let rows = mask.true_count();
        if rows == chunk.num_rows() || rows == 0 {
            return self.evaluate(&chunk.slice(0, rows));
        }
        if !self.selectable.contains(&true) {
            return self.evaluate(&filter_record_batch(chunk, &mask)?);
        }
        let runs: Vec<(usize, usize)> = mask.values().set_slices().map(|(start, end)| (start, end - start)).collect();
        let mut done: Vec<Option<ArrayRef>> = vec![None; self.outputs.len()];
        for (k, ((out, depth), tensor)) in self.outputs.iter().zip(&self.depths).zip(&self.tensors).enumerate() {
            if !self.selectable[k] {
                continue;
            }
            let Some(flat) = Tensors::flatten(&out.expr, chunk, *depth)?.filter(Tensors::levels_valid) else {
                continue;
            };
            let run = tensor.get_flat(&[&out.expr], &flat).and_then(|k| k.run_flat_selected(&flat, &runs));
            if let Some(value) = run.and_then(|mut v| v.pop()) {
                done[k] = Some(flat.wrap_rows(value, rows, &out.expr)?);
            }
        }
        if done.iter().all(Option::is_none) {
            return self.evaluate(&filter_record_batch(chunk, &mask)?);
        }
        // Filter only the columns something else reads: the other outputs, and the input
        // fields kept as they are.
        let replaced = |name: &str| self.outputs.iter().zip(&done).any(|(o, d)| d.is_some() && o.name == name);
        let read: std::collections::BTreeSet<String> = self
            .outputs
            .iter()
            .zip(&done)
            .filter(|(_, d)| d.is_none())
            .flat_map(|(out, _)| out.expr.columns())
            .collect();
        let schema = chunk.schema();
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|i| {
                let name = schema.field(*i).name().as_str();
                read.contains(name) || (self.keep_input && !replaced(name))
            })
            .collect();
        let rest = filter_record_batch(&chunk.project(&keep)?, &mask)?;
        let values = self.values(&rest, &self.selected_scalars, done)?;
        // The kept input fields in their places; a replaced one's place holds its output.
        let mut input: Vec<(String, ArrayRef)> = Vec::new();
        if self.keep_input {
            for field in schema.fields() {
                let name = field.name();
                let column = match rest.column_by_name(name) {
                    Some(c) => c.clone(),
                    None => (self.outputs.iter().zip(&values))
                        .find(|(o, _)| o.name == *name)
                        .map(|(_, v)| v.clone())
                        .expect("a column left unfiltered is replaced by an output"),
                };
                input.push((name.clone(), column));
            }
        }
        assemble_map(&self.outputs, input, rows, &self.out_schema, values)
    }

    /// The outputs over `chunk`, those in `done` as they are; `scalars` is the kernel of the
    /// scalar outputs for chunks of this schema.
    fn values(&self, chunk: &RecordBatch, scalars: &Compiled, done: Vec<Option<ArrayRef>>) -> Result<Vec<ArrayRef>> {
        let scalar: Vec<&Expr> =
            self.outputs.iter().zip(&self.depths).filter(|(_, d)| **d == 0).map(|(o, _)| &o.expr).collect();
        let mut fused = if scalar.is_empty() {
            None
        } else {
            scalars.get(&scalar, &chunk.schema()).and_then(|k| k.run(chunk)).map(Vec::into_iter)
        };
        let mut values = Vec::with_capacity(self.outputs.len());
        for (((out, depth), tensor), done) in self.outputs.iter().zip(&self.depths).zip(&self.tensors).zip(done) {
            let value = match fused.as_mut().filter(|_| *depth == 0).and_then(Iterator::next) {
                Some(value) => value,
                None => match done {
                    Some(value) => value,
                    None => evaluate_output(&out.expr, chunk, *depth, |expr, flat| {
                        let run = tensor.get_flat(&[expr], flat).and_then(|k| k.run_flat(flat));
                        match run.and_then(|mut v| v.pop()) {
                            Some(value) => Ok(value),
                            None => evaluate_with_batch_dims(expr, flat.batch(expr)?, 0),
                        }
                    })?,
                },
            };
            values.push(value);
        }
        Ok(values)
    }
}

/// A filter predicate run by a fused kernel where it compiles, by the Arrow evaluation
/// otherwise (see [`crate::eval::evaluate_predicate`]).
#[derive(Debug)]
pub struct FusedPredicate {
    expr: Expr,
    kernel: Compiled,
}

impl FusedPredicate {
    /// The predicate `expr`.
    pub fn new(expr: Expr) -> Self {
        FusedPredicate { expr, kernel: Compiled::default() }
    }

    /// One bool per row of `chunk`, null counting as false (none, evaluating nothing, for
    /// a chunk without rows).
    pub fn evaluate(&self, chunk: &RecordBatch) -> Result<BooleanArray> {
        if chunk.num_rows() == 0 {
            return Ok(BooleanArray::from(Vec::<bool>::new()));
        }
        let kernel = self.kernel.get(&[&self.expr], &chunk.schema());
        let mask = kernel.and_then(|k| k.run(chunk)).and_then(|mut v| v.pop());
        match mask.as_ref().and_then(|m| m.as_boolean_opt()) {
            Some(mask) if mask.null_count() == 0 => Ok(mask.clone()),
            Some(mask) => Ok(arrow::compute::prep_null_mask_filter(mask)),
            None => crate::eval::evaluate_predicate(&self.expr, chunk),
        }
    }
}
