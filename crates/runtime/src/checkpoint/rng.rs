//! The exact position of a ChaCha8 random stream: its seed, stream and word position. A
//! restored stream continues with the same draws, so a restored shuffle or sampler picks
//! what the original would have picked.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// A saved [`ChaCha8Rng`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    /// The 32-byte seed, as hex.
    seed: String,
    /// The stream number.
    stream: u64,
    /// The position in the stream, in 32-bit words (a `u128`, as a decimal string: JSON
    /// numbers do not hold it).
    word_pos: String,
}

impl RngState {
    /// The position of `rng`.
    pub fn of(rng: &ChaCha8Rng) -> Self {
        let seed = rng.get_seed().iter().map(|b| format!("{b:02x}")).collect();
        RngState { seed, stream: rng.get_stream(), word_pos: rng.get_word_pos().to_string() }
    }

    /// A generator at this position.
    pub fn rng(&self) -> flumen_ir::Result<ChaCha8Rng> {
        let bad = || crate::checkpoint::state::mismatch("a saved random stream is malformed");
        if self.seed.len() != 64 {
            return Err(bad());
        }
        let mut seed = [0u8; 32];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = u8::from_str_radix(&self.seed[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(self.word_pos.parse().map_err(|_| bad())?);
        Ok(rng)
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    #[test]
    fn a_restored_stream_continues_with_the_same_draws() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..13 {
            rng.random::<u32>();
        }
        let json = serde_json::to_string(&RngState::of(&rng)).unwrap();
        let mut back = serde_json::from_str::<RngState>(&json).unwrap().rng().unwrap();
        let a: Vec<u64> = (0..20).map(|_| rng.random_range(0..1000)).collect();
        let b: Vec<u64> = (0..20).map(|_| back.random_range(0..1000)).collect();
        assert_eq!(a, b);
    }
}
