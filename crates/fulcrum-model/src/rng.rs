//! A small explicit random generator (SplitMix64) for sampling.
//!
//! Owned by the caller and seeded per (seed, prompt, sample), so that a row's random stream does
//! not depend on which other rows share its batch or when they finish. Not cryptographic.

/// Holds libtorch's global random generator for the caller: seeding it and drawing initial
/// weights must not interleave with another thread doing the same (`fulcrum compare --jobs`
/// trains several models in one process), or the same seed would give different weights.
pub(crate) fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// SplitMix64: 64 bits of state, passes BigCrush, trivially reproducible across platforms.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for one stream derived from `seed` and two indices (e.g. prompt, sample).
    pub fn for_stream(seed: u64, a: u64, b: u64) -> Self {
        let mut g = SplitMix64::new(seed ^ 0x9E37_79B9_7F4A_7C15);
        let s1 = g.next_u64() ^ a.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let mut g = SplitMix64::new(s1);
        let s2 = g.next_u64() ^ b.wrapping_mul(0x94D0_49BB_1331_11EB);
        SplitMix64::new(s2)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map(|_| SplitMix64::for_stream(7, 1, 2).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = SplitMix64::for_stream(7, 1, 2);
        let mut y = SplitMix64::for_stream(7, 2, 1);
        assert_ne!(x.next_u64(), y.next_u64());
    }

    #[test]
    fn uniforms_lie_in_the_unit_interval_with_mean_near_half() {
        let mut g = SplitMix64::new(1);
        let xs: Vec<f64> = (0..10_000).map(|_| g.uniform()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
