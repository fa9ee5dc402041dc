//! The seeded random source handed to protocol cores (the ZabCT coin, election jitter).
//! Cores never read entropy from the environment: the driver passes a seed and the core draws
//! from this generator, so a run replays exactly.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

#[derive(Clone, Debug)]
pub struct CoreRng(Xoshiro256PlusPlus);

impl CoreRng {
    pub fn new(seed: u64) -> Self {
        Self(Xoshiro256PlusPlus::seed_from_u64(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// A uniform value in `0..n` (`n > 0`), by Lemire's multiply-shift (bias < 2^-64 · n).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = CoreRng::new(7);
        let mut b = CoreRng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = CoreRng::new(8);
        assert_ne!(CoreRng::new(7).next_u64(), c.next_u64());
    }

    #[test]
    fn bounded_draws() {
        let mut r = CoreRng::new(1);
        let mut hits = 0;
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            if r.chance(0.25) {
                hits += 1;
            }
        }
        assert!((2_000..3_000).contains(&hits), "hits = {hits}");
    }
}
