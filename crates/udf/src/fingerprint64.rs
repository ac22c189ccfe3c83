//! FarmHash's `Fingerprint64`: the hash tf.strings.to_hash_bucket_fast (TensorFlow's
//! `util::Fingerprint64`) buckets strings with, so that `hash_bucket` gives the buckets a
//! TensorFlow pipeline gives.
//!
//! `Fingerprint64` is farmhash's `farmhashna::Hash64`: a hash for byte strings of up to 16,
//! 32 and 64 bytes by three closed forms, and for longer ones by a loop over 64-byte blocks
//! that ends on the last 64 bytes. Its output is fixed forever (fingerprints are stored),
//! on every platform: words are read little-endian and all arithmetic wraps modulo 2^64.

const K0: u64 = 0xc3a5_c85c_97cb_3127;
const K1: u64 = 0xb492_b66f_be98_f273;
const K2: u64 = 0x9ae1_6a3b_2f90_404f;

/// The fingerprint of `bytes` (farmhash `Fingerprint64`, TensorFlow's `Fingerprint64`).
pub fn fingerprint64(bytes: &[u8]) -> u64 {
    match bytes.len() {
        0..=16 => len_0_to_16(bytes),
        17..=32 => len_17_to_32(bytes),
        33..=64 => len_33_to_64(bytes),
        _ => len_over_64(bytes),
    }
}

/// The little-endian 64-bit word at `at`.
fn word64(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The little-endian 32-bit word at `at`, widened.
fn word32(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

fn shift_mix(v: u64) -> u64 {
    v ^ (v >> 47)
}

/// Two words mixed into one under the multiplier `mul`.
fn mix16(u: u64, v: u64, mul: u64) -> u64 {
    let mut a = (u ^ v).wrapping_mul(mul);
    a ^= a >> 47;
    let mut b = (v ^ a).wrapping_mul(mul);
    b ^= b >> 47;
    b.wrapping_mul(mul)
}

fn len_0_to_16(s: &[u8]) -> u64 {
    let len = s.len();
    if len >= 8 {
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = word64(s, 0).wrapping_add(K2);
        let b = word64(s, len - 8);
        let c = b.rotate_right(37).wrapping_mul(mul).wrapping_add(a);
        let d = a.rotate_right(25).wrapping_add(b).wrapping_mul(mul);
        return mix16(c, d, mul);
    }
    if len >= 4 {
        let mul = K2.wrapping_add(len as u64 * 2);
        let a = word32(s, 0);
        return mix16((len as u64).wrapping_add(a << 3), word32(s, len - 4), mul);
    }
    if len > 0 {
        let (a, b, c) = (u32::from(s[0]), u32::from(s[len >> 1]), u32::from(s[len - 1]));
        let y = a.wrapping_add(b << 8);
        let z = (len as u32).wrapping_add(c << 2);
        return shift_mix(u64::from(y).wrapping_mul(K2) ^ u64::from(z).wrapping_mul(K0)).wrapping_mul(K2);
    }
    K2
}

fn len_17_to_32(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = word64(s, 0).wrapping_mul(K1);
    let b = word64(s, 8);
    let c = word64(s, len - 8).wrapping_mul(mul);
    let d = word64(s, len - 16).wrapping_mul(K2);
    mix16(
        a.wrapping_add(b).rotate_right(43).wrapping_add(c.rotate_right(30)).wrapping_add(d),
        a.wrapping_add(b.wrapping_add(K2).rotate_right(18)).wrapping_add(c),
        mul,
    )
}

fn len_33_to_64(s: &[u8]) -> u64 {
    let len = s.len();
    let mul = K2.wrapping_add(len as u64 * 2);
    let a = word64(s, 0).wrapping_mul(K2);
    let b = word64(s, 8);
    let c = word64(s, len - 8).wrapping_mul(mul);
    let d = word64(s, len - 16).wrapping_mul(K2);
    let y = a.wrapping_add(b).rotate_right(43).wrapping_add(c.rotate_right(30)).wrapping_add(d);
    let z = mix16(y, a.wrapping_add(b.wrapping_add(K2).rotate_right(18)).wrapping_add(c), mul);
    let e = word64(s, 16).wrapping_mul(mul);
    let f = word64(s, 24);
    let g = y.wrapping_add(word64(s, len - 32)).wrapping_mul(mul);
    let h = z.wrapping_add(word64(s, len - 24)).wrapping_mul(mul);
    mix16(
        e.wrapping_add(f).rotate_right(43).wrapping_add(g.rotate_right(30)).wrapping_add(h),
        e.wrapping_add(f.wrapping_add(a).rotate_right(18)).wrapping_add(g),
        mul,
    )
}

/// Two running words updated by the 32 bytes at `at`, seeded with `a` and `b`.
fn weak32(s: &[u8], at: usize, a: u64, b: u64) -> (u64, u64) {
    let (w, x, y, z) = (word64(s, at), word64(s, at + 8), word64(s, at + 16), word64(s, at + 24));
    let mut a = a.wrapping_add(w);
    let mut b = b.wrapping_add(a).wrapping_add(z).rotate_right(21);
    let c = a;
    a = a.wrapping_add(x).wrapping_add(y);
    b = b.wrapping_add(a.rotate_right(44));
    (a.wrapping_add(z), b.wrapping_add(c))
}

fn len_over_64(s: &[u8]) -> u64 {
    const SEED: u64 = 81;
    let len = s.len();
    let mut x = SEED;
    let mut y = SEED.wrapping_mul(K1).wrapping_add(113);
    let mut z = shift_mix(y.wrapping_mul(K2).wrapping_add(113)).wrapping_mul(K2);
    let (mut v, mut w) = ((0u64, 0u64), (0u64, 0u64));
    x = x.wrapping_mul(K2).wrapping_add(word64(s, 0));
    // Every whole 64-byte block but the one the last byte is in, then the last 64 bytes.
    let end = (len - 1) / 64 * 64;
    let last64 = end + ((len - 1) & 63) - 63;
    let mut at = 0;
    while at != end {
        x = x.wrapping_add(y).wrapping_add(v.0).wrapping_add(word64(s, at + 8)).rotate_right(37).wrapping_mul(K1);
        y = y.wrapping_add(v.1).wrapping_add(word64(s, at + 48)).rotate_right(42).wrapping_mul(K1);
        x ^= w.1;
        y = y.wrapping_add(v.0).wrapping_add(word64(s, at + 40));
        z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(K1);
        v = weak32(s, at, v.1.wrapping_mul(K1), x.wrapping_add(w.0));
        w = weak32(s, at + 32, z.wrapping_add(w.1), y.wrapping_add(word64(s, at + 16)));
        std::mem::swap(&mut z, &mut x);
        at += 64;
    }
    let mul = K1.wrapping_add((z & 0xff) << 1);
    let at = last64;
    w.0 = w.0.wrapping_add(((len - 1) & 63) as u64);
    v.0 = v.0.wrapping_add(w.0);
    w.0 = w.0.wrapping_add(v.0);
    x = x.wrapping_add(y).wrapping_add(v.0).wrapping_add(word64(s, at + 8)).rotate_right(37).wrapping_mul(mul);
    y = y.wrapping_add(v.1).wrapping_add(word64(s, at + 48)).rotate_right(42).wrapping_mul(mul);
    x ^= w.1.wrapping_mul(9);
    y = y.wrapping_add(v.0.wrapping_mul(9)).wrapping_add(word64(s, at + 40));
    z = z.wrapping_add(w.0).rotate_right(33).wrapping_mul(mul);
    v = weak32(s, at, v.1.wrapping_mul(mul), x.wrapping_add(w.0));
    w = weak32(s, at + 32, z.wrapping_add(w.1), y.wrapping_add(word64(s, at + 16)));
    std::mem::swap(&mut z, &mut x);
    mix16(
        mix16(v.0, w.0, mul).wrapping_add(shift_mix(y).wrapping_mul(K0)).wrapping_add(z),
        mix16(v.1, w.1, mul).wrapping_add(x),
        mul,
    )
}

#[cfg(test)]
mod tests {
    use super::fingerprint64;

    /// The first `n` bytes of a fixed ASCII text, as the reference strings were made.
    fn sample(n: usize) -> String {
        "The quick brown fox jumps over the lazy dog; ".repeat(4)[..n].to_string()
    }

    /// TensorFlow 2.21's `tf.strings.to_hash_bucket_fast(s, n)` for n = 2^62 and n = 2^63 - 1
    /// (printed by TensorFlow, not computed here), which together pin down all 64 bits of
    /// `Fingerprint64(s)`: `(sample length, bucket mod 2^62, bucket mod 2^63 - 1)`.
    const REFERENCE: [(usize, i64, i64); 28] = [
        (0, 1936946117179621455, 1936946117179621456),
        (1, 1366698271136253306, 1366698271136253306),
        (2, 2190563634351826419, 6802249652779214323),
        (3, 398699863598724093, 398699863598724094),
        (4, 3813857490243172005, 8425543508670559910),
        (5, 4193446892091626375, 8805132910519014279),
        (7, 4268079096047479687, 8879765114474867592),
        (8, 491173507650915335, 5102859526078303239),
        (9, 924466740769925203, 5536152759197313107),
        (12, 2211771481730107783, 6823457500157495688),
        (15, 4420331505753548199, 9032017524180936103),
        (16, 4320848957565769301, 4320848957565769301),
        (17, 550333784831045053, 5162019803258432958),
        (24, 2090655887396268341, 6702341905823656245),
        (31, 259718955123041107, 259718955123041108),
        (32, 3916272259504149090, 3916272259504149091),
        (33, 3629877152734163926, 8241563171161551831),
        (40, 2669959205246199969, 2669959205246199970),
        (48, 4311200253611388864, 8922886272038776768),
        (63, 2031115326577511002, 6642801345004898907),
        (64, 2265341852809025184, 6877027871236413088),
        (65, 554776872635861476, 5166462891063249381),
        (72, 2582732918326032105, 7194418936753420009),
        (79, 4147974648665512332, 4147974648665512333),
        (80, 2351137680516779791, 6962823698944167696),
        (128, 4293210953774408576, 8904896972201796481),
        (129, 4047840215353155377, 8659526233780543282),
        (180, 4355911999347976876, 4355911999347976876),
    ];

    #[test]
    fn fingerprints_match_tensorflow_in_every_length_branch() {
        let check = |s: &str, low: i64, high: i64| {
            let fp = fingerprint64(s.as_bytes());
            assert_eq!(fp % (1 << 62), low as u64, "{s:?} mod 2^62");
            assert_eq!(fp % i64::MAX as u64, high as u64, "{s:?} mod 2^63 - 1");
        };
        for (n, low, high) in REFERENCE {
            check(&sample(n), low, high);
        }
        // Multi-byte UTF-8 is hashed as its bytes.
        check("hello", 3786372426573024488, 3786372426573024489);
        check("héllo wörld", 4390285103997208723, 9001971122424596627);
        check("\u{e9}", 693143013273849025, 693143013273849025);
    }
}
