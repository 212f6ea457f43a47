//! The one random-number module of fulcrum: SplitMix64 (Steele, Lea and Flood 2014) and the
//! derivations of seeds that the model, the tasks and the trainer use.
//!
//! Everything random in a run (prompts, sampling, data order) must be identical for a given
//! seed on every machine and every version of every dependency, so the generator is written
//! here rather than taken from `rand`, whose streams may change between releases. Every stream
//! below is kept bit for bit as it was when the crates had their own copies, so that prompts,
//! samples and runs did not change when they were merged. Not cryptographic.

/// The golden-ratio increment of SplitMix64.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// The two multipliers of SplitMix64's output function.
const MUL1: u64 = 0xBF58_476D_1CE4_E5B9;
const MUL2: u64 = 0x94D0_49BB_1331_11EB;
/// The multiplier that spreads a stream index in [`SplitMix64::derive`].
const INDEX_MUL: u64 = 0xD1B5_4A32_D192_ED03;
/// FNV-1a's offset basis and prime (string hashing for labels and splits).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// SplitMix64's output function: a bijective mix of 64 bits.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(MUL1);
    z = (z ^ (z >> 27)).wrapping_mul(MUL2);
    z ^ (z >> 31)
}

/// Decorrelates a `(seed, index)` pair into a new seed: the trainer derives the seed of each
/// step, draw, chunk and evaluation this way, so a resumed run draws what it would have drawn.
pub fn mix(seed: u64, index: u64) -> u64 {
    finalize(seed ^ index.wrapping_mul(GOLDEN))
}

/// FNV-1a hash of a string (stream labels; synthetic tasks assign prompts to splits with it).
pub fn hash_str(s: &str) -> u64 {
    hash_bytes(s.as_bytes())
}

/// FNV-1a hash of bytes: a fast fingerprint, not a security hash.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// SplitMix64: 64 bits of state, passes BigCrush, trivially reproducible across platforms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state is `state` as given.
    pub fn new(state: u64) -> Self {
        SplitMix64 { state }
    }

    /// A generator for `seed`, its state offset by the increment so that seed 0 is not the
    /// all-zero state (the synthetic tasks' and data shuffles' generator).
    pub fn seeded(seed: u64) -> Self {
        SplitMix64::new(seed ^ GOLDEN)
    }

    /// A generator for one stream derived from `seed` and two indices (the sampler's: prompt
    /// and sample), so that a row's stream does not depend on which rows share its batch.
    pub fn for_stream(seed: u64, a: u64, b: u64) -> Self {
        let s1 = SplitMix64::seeded(seed).next_u64() ^ a.wrapping_mul(MUL1);
        let s2 = SplitMix64::new(s1).next_u64() ^ b.wrapping_mul(MUL2);
        SplitMix64::new(s2)
    }

    /// A generator derived from a seed, a stream label and an index, so that streams with
    /// different labels do not overlap (the synthetic tasks' per-prompt streams).
    pub fn derive(seed: u64, label: &str, index: u64) -> Self {
        let mut r = SplitMix64::seeded(seed ^ hash_str(label) ^ index.wrapping_mul(INDEX_MUL));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        finalize(self.state)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = hi - lo + 1;
        lo + self.next_u64() % span
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Shuffles a slice in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.range(0, i as u64) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values recorded from the three former copies (fulcrum-tasks' `Rng`, fulcrum-model's
    // `SplitMix64`, fulcrum-train's `mix`), so that any change to a stream fails here first:
    // prompts, samples and whole runs depend on them.
    #[test]
    fn streams_are_those_of_the_former_copies() {
        let mut r = SplitMix64::seeded(3);
        assert_eq!(
            [r.next_u64(), r.next_u64()],
            [0xbeeb8da1658eec67, 0xf893a2eefb32555e]
        );
        let mut r = SplitMix64::derive(1, "group", 5);
        assert_eq!(
            [r.next_u64(), r.next_u64()],
            [0xdd435698f9b8ef16, 0x22bb3e949cbd053b]
        );
        let mut r = SplitMix64::for_stream(7, 1, 2);
        assert_eq!(
            [r.next_u64(), r.next_u64()],
            [0xdd35e8fc6e1b129a, 0xd6a331af1f4d9343]
        );
        assert_eq!(mix(5, 9), 0x79b387a9efea7a40);
        assert_eq!(mix(0, 0xe7a1), 0x74bd719f9f497d23);
    }

    #[test]
    fn same_seed_gives_same_stream_and_streams_differ() {
        let a: Vec<u64> = (0..4)
            .map(|_| SplitMix64::for_stream(7, 1, 2).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = SplitMix64::for_stream(7, 1, 2);
        let mut y = SplitMix64::for_stream(7, 2, 1);
        assert_ne!(x.next_u64(), y.next_u64());
        let mut r = SplitMix64::seeded(3);
        assert_ne!(r.next_u64(), r.next_u64());
    }

    #[test]
    fn range_stays_inside_bounds_and_uniforms_in_the_unit_interval() {
        let mut r = SplitMix64::seeded(1);
        for _ in 0..1000 {
            assert!((3..=7).contains(&r.range(3, 7)));
        }
        let mut g = SplitMix64::new(1);
        let xs: Vec<f64> = (0..10_000).map(|_| g.uniform()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
