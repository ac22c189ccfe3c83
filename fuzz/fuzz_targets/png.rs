//! libFuzzer target `png`: see `flumen_fuzzing::targets::png`.
#![no_main]

use flumen_fuzzing::alloc::CappedAlloc;

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flumen_fuzzing::harness::run(flumen_fuzzing::targets::png, data);
});
