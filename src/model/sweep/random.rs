//! The draws of a random sweep: a small counter-based generator (splitmix64) keyed by
//! (seed, member, parameter), so member k's value of each parameter is a function of those
//! three alone: a sweep's members can be made in any order, again after a crash, and adding
//! members never changes earlier ones.

/// splitmix64's state and output function (Steele, Lea, Flood 2014).
pub struct Rng(u64);

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// The stream of parameter `parameter` of member `member` of the sweep seeded `seed`.
    pub fn keyed(seed: u64, member: u64, parameter: u64) -> Rng {
        let key = mix(mix(mix(seed.wrapping_add(GOLDEN)) ^ member.wrapping_add(GOLDEN))
            ^ parameter.wrapping_add(GOLDEN));
        Rng(key)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under `ln`.
    fn open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform over the `count` integers 0..count (count ≥ 1), without modulo bias worth
    /// measuring (Lemire's multiply-shift).
    pub fn below(&mut self, count: u128) -> u128 {
        ((self.next_u64() as u128) * count) >> 64
    }

    /// Uniform in [min, max].
    pub fn uniform(&mut self, min: f64, max: f64) -> f64 {
        // Weighted, not min + u·(max − min): the span of ±1e308 bounds overflows.
        let u = self.unit();
        ((1.0 - u) * min + u * max).clamp(min, max)
    }

    /// Standard normal (Box–Muller): within ±8.6.
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.open_unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma(shape, 1) (Marsaglia–Tsang), shape ≥ 0.001.
    fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.open_unit().powf(1.0 / shape);
            return self.gamma(shape + 1.0) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        // Accepts with probability > 0.95 a round; the bound only keeps the loop finite.
        for _ in 0..1_000 {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.open_unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
        d
    }

    /// Beta(a, b), in [0, 1].
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma(a);
        let y = self.gamma(b);
        let sum = x + y;
        if sum > 0.0 && sum.is_finite() { (x / sum).clamp(0.0, 1.0) } else { a / (a + b) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_keyed_and_reproducible() {
        let draw = |seed, member, parameter| Rng::keyed(seed, member, parameter).next_u64();
        assert_eq!(draw(1, 2, 3), draw(1, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 3, 3));
        assert_ne!(draw(1, 2, 3), draw(2, 2, 3));
        assert_ne!(draw(1, 2, 3), draw(1, 2, 4));
    }

    #[test]
    fn draws_have_the_moments_of_their_distributions() {
        let mut rng = Rng::keyed(7, 0, 0);
        let n = 20_000;
        let mean = |values: Vec<f64>| values.iter().sum::<f64>() / values.len() as f64;
        let normals: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        assert!(mean(normals.clone()).abs() < 0.05);
        assert!((mean(normals.iter().map(|x| x * x).collect()) - 1.0).abs() < 0.05);
        let betas: Vec<f64> = (0..n).map(|_| rng.beta(2.0, 6.0)).collect();
        assert!((mean(betas) - 0.25).abs() < 0.01);
        let small: Vec<f64> = (0..n).map(|_| rng.beta(0.5, 0.5)).collect();
        assert!((mean(small) - 0.5).abs() < 0.02);
        let dice: Vec<f64> = (0..n).map(|_| rng.below(6) as f64).collect();
        assert!((mean(dice) - 2.5).abs() < 0.05);
    }
}
