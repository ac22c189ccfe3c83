//! Plan fingerprints: stable hashes of a plan's canonical JSON.
//!
//! The hash is 128-bit FNV-1a over the compact JSON form, so it depends only on what the plan
//! computes as written down (operators, arguments, file lists, expression trees), never on
//! memory addresses, hash-map order, the process or the machine.

use crate::json::canonical;
use crate::plan::Plan;

const FNV_OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV_PRIME: u128 = 0x0000000001000000000000000000013B;

fn fnv1a(bytes: &[u8]) -> u128 {
    let mut hash = Fnv1a::default();
    hash.update(bytes);
    hash.value()
}

/// 128-bit FNV-1a over bytes fed in any pieces: the hash of fingerprints, and of anything
/// else whose hash must be the same in every process and on every machine (the CLI's
/// output checksum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u128);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(FNV_OFFSET)
    }
}

impl Fnv1a {
    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |h, b| (h ^ u128::from(*b)).wrapping_mul(FNV_PRIME));
    }

    /// The hash of everything fed so far.
    pub fn value(&self) -> u128 {
        self.0
    }
}

/// The fingerprint of `plan` as 32 hex digits; seeds included.
pub fn fingerprint(plan: &Plan) -> String {
    format!("{:032x}", fnv1a(canonical(plan, true).as_bytes()))
}

/// The fingerprint of `plan` ignoring every seed (shuffle, sampling, file-list shuffle),
/// as the snapshot operator keys its files.
pub fn fingerprint_without_seeds(plan: &Plan) -> String {
    format!("{:032x}", fnv1a(canonical(plan, false).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // FNV-1a 128 test vectors from the FNV reference (empty string and "a").
        assert_eq!(fnv1a(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fnv1a(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
    }
}
