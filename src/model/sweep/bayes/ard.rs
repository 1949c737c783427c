//! One length scale per axis (automatic relevance determination) and the white-noise level,
//! fitted together by the log marginal likelihood from the scan's isotropic optimum
//! ([`gp`](super::gp)), with its gradient, by a bounded quasi-Newton ascent in log space
//! ([`ascent`](super::ascent)): an axis the targets hardly vary along gets a long scale, so
//! the points along it inform each other and the search spends fewer members on it.

use super::ascent::maximize;
use super::gp::{Fitted, cholesky, solve_lower, solve_upper_t};

/// The per-axis length scales' bounds: a unit cube holds no use for a scale far outside it, and
/// a scale at W&B's extremes would only interpolate the noise or ignore the axis entirely.
pub const SCALE_BOUNDS: (f64, f64) = (1e-2, 1e2);
/// The white-noise level's bounds (normalized variance).
pub const NOISE_BOUNDS: (f64, f64) = (1e-7, 1e-1);

/// The log marginal likelihood of `y` at `params` (each axis' log length scale, then the log
/// noise level) and its gradient in them; None when the kernel is not positive definite.
pub fn log_likelihood_and_gradient(x: &[Vec<f64>], y: &[f64], params: &[f64]) -> Option<(f64, Vec<f64>)> {
    let n = y.len();
    let dims = params.len() - 1;
    let scales: Vec<f64> = params[..dims].iter().map(|t| t.exp()).collect();
    let noise = params[dims].exp();
    // Per pair: exp(−√3 r) and the kernel; per axis: the squared scaled difference.
    let root3 = 3f64.sqrt();
    let mut k = vec![0.0; n * n];
    let mut decay = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..i {
            let r = (0..dims).map(|a| ((x[i][a] - x[j][a]) / scales[a]).powi(2)).sum::<f64>().sqrt();
            let e = (-root3 * r).exp();
            (k[i * n + j], k[j * n + i]) = ((1.0 + root3 * r) * e, (1.0 + root3 * r) * e);
            (decay[i * n + j], decay[j * n + i]) = (e, e);
        }
        k[i * n + i] = 1.0 + noise;
    }
    let l = cholesky(&k, n)?;
    let alpha = solve_upper_t(&l, n, &solve_lower(&l, n, y));
    let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
    let log_det: f64 = (0..n).map(|i| l[i * n + i].ln()).sum();
    let lml = -0.5 * fit - log_det - 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln();
    // W = ααᵀ − K⁻¹; ∂lml/∂θ = ½ Σ W ∘ ∂K/∂θ.
    let mut inverse = vec![0.0; n * n];
    for col in 0..n {
        let unit: Vec<f64> = (0..n).map(|i| if i == col { 1.0 } else { 0.0 }).collect();
        let column = solve_upper_t(&l, n, &solve_lower(&l, n, &unit));
        for row in 0..n {
            inverse[row * n + col] = column[row];
        }
    }
    let w = |i: usize, j: usize| alpha[i] * alpha[j] - inverse[i * n + j];
    let mut gradient = vec![0.0; dims + 1];
    for i in 0..n {
        for j in 0..i {
            let wij = w(i, j) * 3.0 * decay[i * n + j];
            for (a, g) in gradient[..dims].iter_mut().enumerate() {
                // ∂k/∂ log ℓ_a = 3 exp(−√3 r) (Δ_a/ℓ_a)²; the pair counts twice (i, j and j, i).
                *g += wij * ((x[i][a] - x[j][a]) / scales[a]).powi(2);
            }
        }
        gradient[dims] += 0.5 * w(i, i) * noise;
    }
    (lml.is_finite() && gradient.iter().all(|g| g.is_finite())).then_some((lml, gradient))
}

impl Fitted {
    /// `fit_noisy`, then each axis' length scale and the noise level refined together by the
    /// likelihood, kept when they raise it. A scan at its bound (W&B's poor fit) is kept as is.
    pub fn fit_per_axis(x: &[Vec<f64>], y: &[f64], levels: &[f64]) -> Option<Fitted> {
        let (theta, noise, lml) = Fitted::isotropic(x, y, levels);
        let isotropic = Fitted::with_noise(x, y, theta.exp(), noise)?;
        let dims = x.first().map_or(0, Vec::len);
        if isotropic.at_bound() || !lml.is_finite() || dims == 0 {
            return Some(isotropic);
        }
        let (lo_scale, hi_scale) = (SCALE_BOUNDS.0.ln(), SCALE_BOUNDS.1.ln());
        let mut lo = vec![lo_scale; dims];
        let mut hi = vec![hi_scale; dims];
        lo.push(NOISE_BOUNDS.0.ln());
        hi.push(NOISE_BOUNDS.1.ln());
        let mut start = vec![theta; dims];
        start.push(noise.ln());
        let Some((best, at_best)) = maximize(|p| log_likelihood_and_gradient(x, y, p), &start, &lo, &hi)
        else {
            return Some(isotropic);
        };
        if at_best <= lml {
            return Some(isotropic);
        }
        let scales: Vec<f64> = best[..dims].iter().map(|t| t.exp()).collect();
        Fitted::with_scales(x, y, isotropic.length_scale, &scales, best[dims].exp()).or(Some(isotropic))
    }
}

#[cfg(test)]
mod tests {
    use super::log_likelihood_and_gradient;
    use crate::model::sweep::random::Rng;

    /// The gradient against central finite differences, at points where each term matters.
    #[test]
    fn the_gradient_matches_finite_differences() {
        let mut rng = Rng::keyed(5, 0, 0);
        let x: Vec<Vec<f64>> = (0..12).map(|_| (0..3).map(|_| rng.unit()).collect()).collect();
        let y: Vec<f64> = x.iter().map(|p| (4.0 * p[0]).sin() + 0.3 * p[1] + 0.1 * rng.normal()).collect();
        for params in [[-1.0, 0.0, 1.5, -4.0], [0.5, -2.0, -0.5, -9.0], [-3.0, -3.0, -3.0, -2.0]] {
            let (_, gradient) = log_likelihood_and_gradient(&x, &y, &params).unwrap();
            for (i, g) in gradient.iter().enumerate() {
                let h = 1e-5;
                let at = |delta: f64| {
                    let mut p = params;
                    p[i] += delta;
                    log_likelihood_and_gradient(&x, &y, &p).unwrap().0
                };
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (g - numeric).abs() <= 1e-5 * numeric.abs().max(1.0),
                    "{params:?} [{i}]: {g} vs {numeric}"
                );
            }
        }
    }

    /// With equal scales and the noise as the nugget, the likelihood is the isotropic one.
    #[test]
    fn equal_scales_give_the_isotropic_likelihood() {
        let mut rng = Rng::keyed(6, 0, 0);
        let x: Vec<Vec<f64>> = (0..10).map(|_| (0..2).map(|_| rng.unit()).collect()).collect();
        let y: Vec<f64> = x.iter().map(|p| p[0] - p[1] * p[1]).collect();
        let (lml, _) =
            log_likelihood_and_gradient(&x, &y, &[0.3f64.ln(), 0.3f64.ln(), super::super::gp::NUGGET.ln()])
                .unwrap();
        let want = super::super::gp::log_likelihood(&x, &y, 0.3);
        assert!((lml - want).abs() < 1e-9 * want.abs().max(1.0), "{lml} vs {want}");
    }
}
