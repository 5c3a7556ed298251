//! Random choices without a dependency: xorshift64* and a Zipf sampler by inverse CDF.

/// xorshift64*: fast, small, good enough to pick requests.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Item ids `1..=n` with P(k) proportional to 1 / k^s (item 1 the most popular).
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n` items with exponent `s`.
    pub fn new(n: u64, s: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative = Vec::with_capacity(n as usize);
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cumulative.push(total);
        }
        for c in &mut cumulative {
            *c /= total;
        }
        Self { cumulative }
    }

    /// One item id.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        self.cumulative.partition_point(|&c| c < u) as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_the_first_items_by_the_exponent() {
        let zipf = Zipf::new(1_000, 1.0);
        let mut rng = Rng::new(7);
        let mut counts = vec![0u32; 1_001];
        for _ in 0..200_000 {
            let k = zipf.sample(&mut rng);
            assert!((1..=1_000).contains(&k));
            counts[k as usize] += 1;
        }
        // P(1)/P(2) = 2 and P(1)/P(10) = 10 for s = 1, within sampling noise.
        let r2 = f64::from(counts[1]) / f64::from(counts[2]);
        let r10 = f64::from(counts[1]) / f64::from(counts[10]);
        assert!((1.8..2.2).contains(&r2), "{r2}");
        assert!((8.5..11.5).contains(&r10), "{r10}");
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Rng::new(1);
        for n in [1, 2, 3, 10, 1_000_000] {
            for _ in 0..1_000 {
                assert!(rng.below(n) < n);
            }
        }
    }
}
