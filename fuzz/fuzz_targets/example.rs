//! libFuzzer target `example`: see `flumen_fuzzing::targets::example`.
#![no_main]

use flumen_fuzzing::alloc::{cap_for, with_cap, CappedAlloc};

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    with_cap(cap_for(data.len()), || flumen_fuzzing::targets::example(data));
});
