//! Runs of short varints (1 to 3 bytes each) in a packed list, decoded four at a time with
//! one byte shuffle.
//!
//! The token ids and small counts that fill packed int64 lists are mostly one to three bytes
//! each. Decoding them a value at a time costs a dozen instructions per value, whichever way
//! the loop is written (about 2.4 ns a value on an AMD EPYC). Here, the continuation bits of
//! the next 12 bytes (`pmovmskb`) index a table that says where the next four values'
//! bytes are; one `pshufb` moves each value's bytes into a 32-bit lane of its own, with zeros
//! past its end. Three masks and shifts then join the 7-bit groups, and the four lanes are
//! widened to i64 and stored. That is about 1.25 ns a value.
//!
//! Each step's start waits on the one before: its bytes are loaded, masked and looked up
//! from where the last step ended. Two things shorten that wait. The bytes each pattern
//! takes have a table of their own (4 KiB, in L1; the controls, in 16-byte rows that no
//! cache line splits, are 64 KiB), and while 32 bytes remain, two steps are taken from one
//! pair of loads, the second step's pattern being their masks shifted past the first
//! step's bytes. In `cargo bench --bench tfrecord
//! -- "w6 token lists"`, the table made flumen's parse 10% faster and the hand-written
//! decoder 7%; both together, 13% and 18%.
//!
//! A pattern without four such values in its 12 bytes has no table entry. There the run
//! stops, and the caller decodes the next value on its own.
//!
//! `parse_example` decodes packed int64 lists with it; it is public so that the hand-written
//! limit of w6 (`flumen bench w6 --limit`) decodes its tokens the same way.

/// Values one step decodes and appends.
pub const STEP: usize = 4;

/// Decodes the values of 1 to 3 bytes that start at `bytes[at..]`, four at a time, while
/// 16 bytes remain, the next four values are all that short, and `out`'s spare capacity
/// holds four more (reserve room for the whole list first: the run stops where it does
/// not). Appends them to `out`, and returns where the first value it left starts. Anything
/// it cannot decode is left to the caller, including every error. On a CPU without SSSE3
/// and SSE4.1 (or not x86-64) it decodes nothing and leaves every value to the caller.
#[inline]
pub fn decode(bytes: &[u8], at: usize, out: &mut Vec<i64>) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_shuffles() {
        // SAFETY: the CPU has SSSE3 and SSE4.1.
        return unsafe { runs(bytes, at, out) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, out);
    at
}

/// Whether the CPU has SSSE3 and SSE4.1: known when the build enables them (the workspace's
/// x86-64-v2 baseline), asked of the CPU otherwise (a program that builds flumen as a
/// dependency with flags of its own), so that either build decodes in steps.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_shuffles() -> bool {
    cfg!(all(target_feature = "ssse3", target_feature = "sse4.1"))
        || (std::arch::is_x86_feature_detected!("ssse3") && std::arch::is_x86_feature_detected!("sse4.1"))
}

/// [`decode`]'s runs.
///
/// # Safety
/// The CPU has SSSE3 and SSE4.1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3,sse4.1")]
unsafe fn runs(bytes: &[u8], mut at: usize, out: &mut Vec<i64>) -> usize {
    use std::arch::x86_64::{_mm_loadu_si128, _mm_movemask_epi8};

    let kept = out.len();
    let spare = out.spare_capacity_mut();
    let mut written = 0;
    // SAFETY: the loads read within `input`, and the steps write the four i64s of their
    // `slots`, in `out`'s spare capacity (the CPU has SSSE3 and SSE4.1: `runs`'s contract).
    unsafe {
        // Two steps at a time while 32 bytes remain. The second step's pattern is the same
        // two masks shifted past the first step's bytes: the next start waits on two table
        // reads, not on a load, a mask and a table read for each step.
        while let (Some(input), Some(slots)) = (bytes.get(at..at + 32), spare.get_mut(written..written + 2 * STEP)) {
            let p = input.as_ptr();
            let (a, b) = (_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(16).cast()));
            let mask = (_mm_movemask_epi8(a) as u32 & 0xffff) | ((_mm_movemask_epi8(b) as u32) << 16);
            let first = (mask & 0xfff) as usize;
            let used = usize::from(USED[first]);
            if used == 0 {
                break;
            }
            let second = ((mask >> used) & 0xfff) as usize;
            let then = usize::from(USED[second]);
            step(a, first, slots.as_mut_ptr().cast());
            if then == 0 {
                at += used;
                written += STEP;
                break;
            }
            step(_mm_loadu_si128(p.add(used).cast()), second, slots.as_mut_ptr().add(STEP).cast());
            at += used + then;
            written += 2 * STEP;
        }
        while let (Some(input), Some(slots)) = (bytes.get(at..at + 16), spare.get_mut(written..written + STEP)) {
            let v = _mm_loadu_si128(input.as_ptr().cast());
            let pattern = (_mm_movemask_epi8(v) & 0xfff) as usize;
            let used = USED[pattern];
            if used == 0 {
                break;
            }
            step(v, pattern, slots.as_mut_ptr().cast());
            at += usize::from(used);
            written += STEP;
        }
        // The loops wrote every slot below `written` (whole steps of four values).
        out.set_len(kept + written);
    }
    at
}

/// One step: the four values whose bytes start `v` (continuation bits `pattern`, which has
/// a table entry) written to the four i64s at `to`.
///
/// # Safety
/// The CPU has SSSE3 and SSE4.1, and `to` is valid for writing 32 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3,sse4.1")]
#[inline]
unsafe fn step(v: std::arch::x86_64::__m128i, pattern: usize, to: *mut std::arch::x86_64::__m128i) {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cvtepu32_epi64, _mm_loadu_si128, _mm_or_si128, _mm_set1_epi32, _mm_shuffle_epi8,
        _mm_srli_epi32, _mm_srli_si128, _mm_storeu_si128,
    };
    let (low, middle, high) = (_mm_set1_epi32(0x7f), _mm_set1_epi32(0x7f00), _mm_set1_epi32(0x7f_0000));
    let x = _mm_shuffle_epi8(v, _mm_loadu_si128(CONTROLS.0[pattern].as_ptr().cast()));
    let joined = _mm_or_si128(
        _mm_and_si128(x, low),
        _mm_or_si128(_mm_srli_epi32::<1>(_mm_and_si128(x, middle)), _mm_srli_epi32::<2>(_mm_and_si128(x, high))),
    );
    _mm_storeu_si128(to, _mm_cvtepu32_epi64(joined));
    _mm_storeu_si128(to.add(1), _mm_cvtepu32_epi64(_mm_srli_si128::<8>(joined)));
}

/// Where a step's four values are, for one pattern of continuation bits.
#[derive(Clone, Copy)]
struct Shuffle {
    /// For each of the four 32-bit lanes, the input bytes of its value (lowest first), and
    /// `0x80` (a zero) past the value's end.
    control: [u8; 16],
    /// The bytes the four values take; 0 where the pattern does not hold four values of 1
    /// to 3 bytes.
    used: u8,
}

/// Each pattern's [`Shuffle::control`], one aligned 16-byte row each (64 KiB), so that no
/// control straddles two cache lines.
#[repr(align(64))]
struct Controls([[u8; 16]; 4096]);

static CONTROLS: Controls = {
    let shuffles = shuffles();
    let mut controls = [[0; 16]; 4096];
    let mut pattern = 0;
    while pattern < 4096 {
        controls[pattern] = shuffles[pattern].control;
        pattern += 1;
    }
    Controls(controls)
};

/// Each pattern's [`Shuffle::used`]. The next step's start waits on it, and this table
/// (4 KiB) stays in the L1 cache where the controls do not: read from a table of both,
/// each step waited on an L2 load.
static USED: [u8; 4096] = {
    let shuffles = shuffles();
    let mut used = [0; 4096];
    let mut pattern = 0;
    while pattern < 4096 {
        used[pattern] = shuffles[pattern].used;
        pattern += 1;
    }
    used
};

/// The [`Shuffle`] of every 12-bit pattern of continuation bits (bit `i` set: byte `i`
/// continues its value), made at compile time into the two tables above.
const fn shuffles() -> [Shuffle; 4096] {
    let mut table = [Shuffle { control: [0x80; 16], used: 0 }; 4096];
    let mut pattern = 0;
    while pattern < 4096 {
        let mut control = [0x80u8; 16];
        let (mut start, mut value) = (0usize, 0usize);
        while value < STEP {
            let mut len = 1;
            while start + len <= 12 && (pattern >> (start + len - 1)) & 1 == 1 {
                len += 1;
            }
            if start + len > 12 || len > 3 {
                break;
            }
            let mut byte = 0;
            while byte < len {
                control[4 * value + byte] = (start + byte) as u8;
                byte += 1;
            }
            start += len;
            value += 1;
        }
        if value == STEP {
            table[pattern] = Shuffle { control, used: start as u8 };
        }
        pattern += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    static SHUFFLES: [Shuffle; 4096] = shuffles();

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    #[test]
    fn a_table_entry_places_each_values_bytes_in_its_lane() {
        // Values of 1, 3, 2 and 1 bytes: bytes 0 | 1 2 3 | 4 5 | 6, continuing at 1, 2 and 4.
        let entry = SHUFFLES[0b0001_0110];
        assert_eq!(entry.used, 7);
        let z = 0x80;
        assert_eq!(entry.control, [0, z, z, z, 1, 2, 3, z, 4, 5, z, z, 6, z, z, z]);
        // Four values of three bytes take all 12.
        assert_eq!(SHUFFLES[0b0110_1101_1011].used, 12);
        // A value of four bytes at the start; three values, then one that does not end in 12.
        assert_eq!(SHUFFLES[0b0111].used, 0);
        assert_eq!(SHUFFLES[0b1110_1101_1011].used, 0);
        // Twelve one-byte values: the first four.
        assert_eq!(SHUFFLES[0].used, 4);
    }

    #[test]
    fn runs_decode_as_written_and_stop_at_what_they_cannot_take() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut runs = 0;
        for round in 0..300 {
            let (mut bytes, mut values) = (vec![], vec![]);
            for _ in 0..round % 70 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly 1 to 3 bytes; a longer one now and then stops a run.
                let v = match x % 20 {
                    0 => x >> 20,
                    1 => x % 128,
                    _ => (x >> 8) % 2_000_000,
                };
                put_varint(&mut bytes, v);
                values.push(v as i64);
            }
            let mut out = vec![-1];
            out.reserve(bytes.len());
            let at = decode(&bytes, 0, &mut out);
            assert!(at <= bytes.len());
            let decoded = out.len() - 1;
            assert_eq!(out[1..], values[..decoded], "round {round}");
            // It stops where a value starts.
            let mut starts = vec![0];
            for (i, b) in bytes.iter().enumerate() {
                if b & 0x80 == 0 {
                    starts.push(i + 1);
                }
            }
            assert_eq!(starts[decoded], at, "round {round}");
            runs += decoded;
        }
        // Where the CPU has the instructions, the runs are decoded here, not all left to the
        // caller, whatever flags the build had.
        #[cfg(target_arch = "x86_64")]
        if has_shuffles() {
            assert!(runs > 1000, "{runs} values decoded in runs");
        }
    }
}
