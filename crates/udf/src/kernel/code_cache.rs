//! Native code kept for the life of the process: a program is compiled once, and every
//! later kernel of the same program runs the same code.
//!
//! Operators, and so their kernels, are built anew for each iterator: every epoch of
//! `for batch in dataset` (tf.data's way of training) builds them again, and without the
//! cache compiled its programs again, about 1.5 ms each (w4's stage: a tenth of its pass).
//! Programs are keyed by everything the code depends on, so a hit runs exactly the code a
//! compilation would give. A program is compiled by the first thread to ask for it while
//! the others wait, and one without instructions is not compiled at all: fresh w4 passes
//! took 8.95 → 8.44 ms (medians of 60 alternating passes), w2's the same time with 1.6 ms
//! less CPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::native::Native;
use super::program::{Op, Program, Ty};

/// The most programs kept; past it, the one used least recently is dropped (its code is
/// freed once no kernel runs it), so a process that makes ever new programs holds a bounded
/// amount of code.
const KEPT: usize = 64;

/// An instruction as native code depends on it: operation, type, value number, operands.
type InstrKey = (Op, Ty, usize, Vec<(u8, Ty, u64)>);

/// What native code depends on: the instructions, the input and output types, which
/// inputs repeat per row, and whether the code selects rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    instrs: Vec<InstrKey>,
    inputs: Vec<Ty>,
    outputs: Vec<((u8, Ty, u64), Ty)>,
    repeated: u64,
    selecting: bool,
}

impl Key {
    fn of(p: &Program, repeated: u64, selecting: bool) -> Key {
        Key {
            instrs: p.instrs.iter().map(|i| (i.op, i.ty, i.out, i.args.iter().map(|a| a.key()).collect())).collect(),
            inputs: p.inputs.iter().map(|(_, ty)| *ty).collect(),
            outputs: p.outputs.iter().map(|(arg, ty, _)| (arg.key(), *ty)).collect(),
            repeated,
            selecting,
        }
    }
}

/// A program's code: compiled once, by the first thread to ask; the others wait for it
/// (both of a stage's workers met its programs in their first chunks and compiled each).
type Code = Arc<OnceLock<Option<Arc<Native>>>>;

/// The kept code, each with when it was last used (a count of uses of the cache).
#[derive(Default)]
struct Kept {
    code: HashMap<Key, (Code, u64)>,
    uses: u64,
}

fn kept() -> &'static Mutex<Kept> {
    static KEPT_CODE: OnceLock<Mutex<Kept>> = OnceLock::new();
    KEPT_CODE.get_or_init(Mutex::default)
}

/// `program`'s native code ([`Native::compile`], or [`Native::compile_selecting`] when
/// `selecting`), compiled now or kept from an earlier kernel. A program without
/// instructions has none: its outputs are inputs or constants, which need no code (each
/// such compilation took 0.2–0.5 ms of a fresh pass, w2's among them).
pub fn native(program: &Program, repeated: u64, selecting: bool) -> Option<Arc<Native>> {
    if program.instrs.is_empty() {
        return None;
    }
    let key = Key::of(program, repeated, selecting);
    let code = {
        let mut kept = kept().lock().ok()?;
        kept.uses += 1;
        let now = kept.uses;
        if !kept.code.contains_key(&key) && kept.code.len() >= KEPT {
            let oldest = kept.code.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| Key::clone(k));
            oldest.map(|k| kept.code.remove(&k));
        }
        let (code, used) = kept.code.entry(key).or_insert_with(|| (Code::default(), now));
        *used = now;
        code.clone()
    };
    // Compiled outside the lock: another thread's different program need not wait for it.
    code.get_or_init(|| {
        let native = if selecting { Native::compile_selecting(program) } else { Native::compile(program, repeated) };
        native.map(Arc::new)
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema};
    use flumen_ir::{BinaryOp, DType, Expr, Scalar};

    use super::*;
    use crate::kernel::program::compile;

    /// Threads asking for one program at once all run the same code, compiled once; a
    /// program whose outputs are its inputs has none.
    #[test]
    fn threads_share_one_compilation_and_a_program_without_instructions_has_no_code() {
        let schema = Schema::new(vec![Field::new("v", DataType::Float64, false)]);
        // A constant no other test uses, so that the code is compiled here.
        let scaled =
            Expr::binary(BinaryOp::Mul, Expr::col("v"), Expr::Literal(Scalar::Float(1234.5678, DType::Float64)));
        let program = compile(&[&scaled], &schema).expect("compiles");
        let codes: Vec<Arc<Native>> = std::thread::scope(|s| {
            let threads: Vec<_> =
                (0..4).map(|_| s.spawn(|| native(&program, 0, false).expect("native code"))).collect();
            threads.into_iter().map(|t| t.join().expect("no panic")).collect()
        });
        assert!(codes.windows(2).all(|pair| Arc::ptr_eq(&pair[0], &pair[1])));
        let copy = compile(&[&Expr::col("v")], &schema).expect("compiles");
        assert!(copy.instrs.is_empty());
        assert!(native(&copy, 0, false).is_none());
    }
}
