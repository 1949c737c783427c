//! The special functions bayes needs, in plain f64: the standard normal's density, CDF and
//! quantile (expected improvement; normal parameters in the unit cube), and the regularized
//! incomplete beta function (beta parameters). Accuracy is checked against scipy in the
//! fixtures of `tests.rs`.

use std::f64::consts::{PI, SQRT_2};

/// The standard normal density.
pub fn normal_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * PI).sqrt()
}

/// The standard normal CDF, from `erfc` (accurate in the tails too).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / SQRT_2)
}

/// The complementary error function: W. J. Cody's rational approximations (relative error
/// below 1e-15 over the whole line).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let ax = x.abs();
    let value = if ax < 0.5 {
        return 1.0 - erf_small(x);
    } else if ax < 4.0 {
        let p = [
            3.004_592_610_201_616e2,
            4.519_189_537_118_729e2,
            3.393_208_167_343_437e2,
            1.529_892_850_469_404_4e2,
            4.316_222_722_205_674e1,
            7.211_758_250_883_094,
            5.641_955_174_789_74e-1,
            -1.368_648_573_827_167e-7,
        ];
        let q = [
            3.004_592_609_569_833e2,
            7.909_509_253_278_98e2,
            9.313_540_948_506_096e2,
            6.389_802_644_656_312e2,
            2.775_854_447_439_876e2,
            7.700_015_293_522_947e1,
            1.278_272_731_962_942_3e1,
            1.0,
        ];
        let num = p.iter().rev().fold(0.0, |acc, c| acc * ax + c);
        let den = q.iter().rev().fold(0.0, |acc, c| acc * ax + c);
        (-ax * ax).exp() * num / den
    } else if ax < 27.0 {
        // Cody's form for large x: exp(-x²)/x · (1/√π − z·P(z)/Q(z)), z = 1/x².
        let p = [
            3.053_266_349_612_323_6e-1,
            3.603_448_999_498_044_5e-1,
            1.257_817_261_112_292_6e-1,
            1.608_378_514_874_227_5e-2,
            6.587_491_615_298_378e-4,
            1.631_538_713_730_209_7e-2,
        ];
        let q = [
            2.568_520_192_289_822,
            1.872_952_849_923_467_3,
            5.279_051_029_514_285e-1,
            6.051_834_131_244_132e-2,
            2.335_204_976_268_691_8e-3,
        ];
        let z = 1.0 / (ax * ax);
        let mut num = p[5] * z;
        let mut den = z;
        for i in 0..4 {
            num = (num + p[i]) * z;
            den = (den + q[i]) * z;
        }
        let r = z * (num + p[4]) / (den + q[4]);
        (-ax * ax).exp() * (1.0 / PI.sqrt() - r) / ax
    } else {
        0.0
    };
    if x < 0.0 { 2.0 - value } else { value }
}

/// erf for |x| < 0.5 (Cody).
fn erf_small(x: f64) -> f64 {
    let p = [
        3.209_377_589_138_469_4e3,
        3.774_852_376_853_02e2,
        1.138_641_541_510_501_6e2,
        3.161_123_743_870_565_6,
        1.857_777_061_846_031_5e-1,
    ];
    let q = [
        2.844_236_833_439_171e3,
        1.282_616_526_077_372_3e3,
        2.440_246_379_344_441_7e2,
        2.360_129_095_234_412e1,
        1.0,
    ];
    let z = x * x;
    let num = p.iter().rev().fold(0.0, |acc, c| acc * z + c);
    let den = q.iter().rev().fold(0.0, |acc, c| acc * z + c);
    x * num / den
}

/// The standard normal quantile (Acklam's approximation, refined by one Halley step on
/// `normal_cdf`: relative error near 1e-15). 0 and 1 give ∓∞.
pub fn normal_quantile(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if p > 0.5 {
        // By symmetry: the refinement below is exact where the CDF is small.
        return -normal_quantile(1.0 - p);
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    let low = 0.02425;
    let x = if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    // One Halley step: the error of the cdf at x, against its density.
    let e = normal_cdf(x) - p;
    let u = e * (2.0 * PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: relative error near 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        return (PI / (PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let series = G[1..].iter().enumerate().fold(G[0], |acc, (i, g)| acc + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

/// The regularized incomplete beta function I_x(a, b): the Beta(a, b) CDF at x.
pub fn beta_cdf(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast below the mean; above it, use the symmetry.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

/// The continued fraction of I_x(a, b) (modified Lentz).
fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The Beta(a, b) quantile: bisection on [`beta_cdf`] (the CDF is monotone; 100 halvings
/// reach f64's resolution).
pub fn beta_quantile(p: f64, a: f64, b: f64) -> f64 {
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if beta_cdf(mid, a, b) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= f64::EPSILON * hi {
            break;
        }
    }
    0.5 * (lo + hi)
}
