//! CRC32C (Castagnoli), the checksum of TFRecord framing, fast for short buffers.
//!
//! TFRecord checks an 8-byte length and then each record, and records are short:
//! `tf.train.Example`s of tens to a few hundred bytes. The `crc32c` crate spends much of
//! such a buffer aligning: it checksums the bytes before the first 8-byte boundary one at
//! a time (each a dependent 3-cycle instruction), and those after the last one the same
//! way. Here a short buffer is read as unaligned 8-byte words, which x86 loads at full
//! speed, and its last 0–7 bytes as at most one 4-, one 2- and one 1-byte step. Buffers of
//! [`SHORT`] bytes or more go to the crate, whose three interleaved streams are faster there.
//!
//! `cargo bench --bench tfrecord -- crc32c` (2 cores of an AMD EPYC, Zen 4; buffers in
//! cache at every alignment), crate → here: 40 bytes 3.6 → 10.1 GiB/s, 330 bytes 9.0 →
//! 14.1 GiB/s; 1,000 bytes go to the crate (14.9 GiB/s, where a word at a time gave about
//! 11). On w2 (330-byte records) a fresh pass took 131 → 124 ms of CPU, on w6 154 → 141
//! (medians of 11 and 9 passes, alternating with the build before).

/// Buffers this long or longer go to the `crc32c` crate (its three streams start at 768
/// bytes).
pub const SHORT: usize = 768;

/// The CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    if bytes.len() >= SHORT {
        return crc32c::crc32c(bytes);
    }
    #[cfg(target_arch = "x86_64")]
    if has_sse42() {
        // SAFETY: the CPU has SSE4.2.
        return unsafe { short(bytes) };
    }
    crc32c::crc32c(bytes)
}

/// Whether the CPU has SSE4.2: known when the build enables it (the workspace's x86-64-v2
/// baseline), asked of the CPU otherwise (a program that builds flumen as a dependency with
/// flags of its own), so that either build checksums a word at a time.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_sse42() -> bool {
    cfg!(target_feature = "sse4.2") || std::arch::is_x86_feature_detected!("sse4.2")
}

/// The CRC32C of a short buffer, a word at a time.
///
/// # Safety
/// The CPU has SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn short(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};

    let mut words = bytes.chunks_exact(8);
    let mut crc = u64::from(u32::MAX);
    for word in words.by_ref() {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(word.try_into().expect("8 bytes")));
    }
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if let Some((four, after)) = rest.split_first_chunk::<4>() {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(*four));
        rest = after;
    }
    if let Some((two, after)) = rest.split_first_chunk::<2>() {
        crc = _mm_crc32_u16(crc, u16::from_le_bytes(*two));
        rest = after;
    }
    if let Some(&one) = rest.first() {
        crc = _mm_crc32_u8(crc, one);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_value_is_castagnolis() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn every_length_and_alignment_agrees_with_the_crate() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let bytes: Vec<u8> = (0..2 * SHORT + 16)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for start in 0..8 {
            for len in 0..=2 * SHORT {
                let b = &bytes[start..start + len];
                assert_eq!(crc32c(b), crc32c::crc32c(b), "{len} bytes from {start}");
            }
        }
    }
}
