//! Native code kept for the life of the process: a program is compiled once, and every
//! later kernel of the same program runs the same code.
//!
//! Operators, and so their kernels, are built anew for each iterator: every epoch of
//! `for batch in dataset` (tf.data's way of training) builds them again, and without the
//! cache compiled its programs again, about 1.5 ms each (w4's stage: a tenth of its pass).
//! Programs are keyed by everything the code depends on, so a hit runs exactly the code a
//! compilation would give.

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

/// The kept code, each with when it was last used (a count of uses of the cache).
#[derive(Default)]
struct Kept {
    code: HashMap<Key, (Arc<Native>, u64)>,
    uses: u64,
}

fn kept() -> &'static Mutex<Kept> {
    static KEPT_CODE: OnceLock<Mutex<Kept>> = OnceLock::new();
    KEPT_CODE.get_or_init(Mutex::default)
}

/// `program`'s native code ([`Native::compile`], or [`Native::compile_selecting`] when
/// `selecting`), compiled now or kept from an earlier kernel.
pub fn native(program: &Program, repeated: u64, selecting: bool) -> Option<Arc<Native>> {
    let key = Key::of(program, repeated, selecting);
    {
        let mut kept = kept().lock().ok()?;
        kept.uses += 1;
        let now = kept.uses;
        if let Some((code, used)) = kept.code.get_mut(&key) {
            *used = now;
            return Some(code.clone());
        }
    }
    // Compiled outside the lock: another thread's different program need not wait for it.
    let code =
        Arc::new(if selecting { Native::compile_selecting(program)? } else { Native::compile(program, repeated)? });
    let mut kept = kept().lock().ok()?;
    if kept.code.len() >= KEPT {
        let oldest = kept.code.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| Key::clone(k));
        oldest.map(|k| kept.code.remove(&k));
    }
    kept.uses += 1;
    let now = kept.uses;
    Some(kept.code.entry(key).or_insert((code, now)).0.clone())
}
