//! A deterministic mutator for the short tier: the byte-level mutations a fuzzer starts
//! with (flips, interesting values, insertions, deletions, truncation, duplication, splices
//! of two inputs), drawn from a seeded xorshift stream so that every run tries the same
//! inputs.

/// A seeded xorshift64* stream.
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed` (never zero).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Bytes that often sit on a decoder's boundaries.
const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 0xfe, b'\n', b','];

/// `input` changed by one to four mutations; `other` is spliced in by some of them.
pub fn mutate(input: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let len = out.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = (1 + rng.below(16)).min(len - i);
                out.drain(i..i + n);
            }
            4 if len > 0 => out.truncate(rng.below(len)),
            5 if len > 0 => {
                let i = rng.below(len);
                let n = (1 + rng.below(64)).min(len - i);
                let copy = out[i..i + n].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
            6 if !other.is_empty() => {
                let cut = rng.below(out.len() + 1);
                let from = rng.below(other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ if len >= 8 => {
                // A little-endian length-like field set to an extreme.
                let i = rng.below(len - 7);
                let value: u64 = [u64::MAX, 1 << 60, 1 << 31, 0x7fff_ffff, 0][rng.below(5)];
                out[i..i + 8].copy_from_slice(&value.to_le_bytes());
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_mutations() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let input = b"hello, world\n0123456789";
        for _ in 0..100 {
            assert_eq!(mutate(input, b"other", &mut a), mutate(input, b"other", &mut b));
        }
    }
}
