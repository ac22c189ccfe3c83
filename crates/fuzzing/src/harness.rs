//! What a libFuzzer target runs around a target: libFuzzer's Rust glue aborts at the first
//! panic anywhere, even one flumen catches and turns into an error (arrow and parquet
//! panic on some corrupt input, and flumen guards those calls). Here only a panic that
//! escapes the target aborts, after printing where it came from, and an input still runs
//! under the allocation cap.

use std::sync::{Mutex, Once};

use crate::alloc::{cap_for, with_cap};

/// The message of the last panic, printed when one escapes.
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Runs `target` on `data` under the allocation cap; aborts if a panic escapes it.
pub fn run(target: fn(&[u8]), data: &[u8]) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = info.to_string();
            }
        }))
    });
    let escaped = std::panic::catch_unwind(|| with_cap(cap_for(data.len()), || target(data))).is_err();
    if escaped {
        let message = LAST_PANIC.lock().map(|m| m.clone()).unwrap_or_default();
        eprintln!("a panic escaped the target: {message}");
        std::process::abort();
    }
}
