//! A bounded quasi-Newton ascent (BFGS projected onto a box): what refines the process'
//! hyperparameters from the scan's start, as scikit-learn's L-BFGS-B does in log space.

/// Steps at most this long (in each coordinate's units: log length scales) per iteration.
const MAX_STEP: f64 = 2.0;
const MAX_ITERATIONS: usize = 100;
const HALVINGS: usize = 30;

/// A local maximum of `f` (its value and gradient at a point, None where undefined) within
/// `[lo, hi]` from `start` (clamped into the box), and its value; `start` itself when `f` is
/// undefined there.
pub fn maximize(
    f: impl Fn(&[f64]) -> Option<(f64, Vec<f64>)>,
    start: &[f64],
    lo: &[f64],
    hi: &[f64],
) -> Option<(Vec<f64>, f64)> {
    let n = start.len();
    let clamp =
        |x: Vec<f64>| -> Vec<f64> { x.iter().enumerate().map(|(i, v)| v.clamp(lo[i], hi[i])).collect() };
    let mut x = clamp(start.to_vec());
    let (mut value, mut grad) = f(&x)?;
    // The inverse Hessian of −f, approximated.
    let mut h = identity(n);
    for _ in 0..MAX_ITERATIONS {
        // Coordinates at a bound the gradient pushes past stay there.
        let free: Vec<bool> =
            (0..n).map(|i| !((x[i] <= lo[i] && grad[i] < 0.0) || (x[i] >= hi[i] && grad[i] > 0.0))).collect();
        let mut direction: Vec<f64> = (0..n)
            .map(|i| {
                if free[i] { (0..n).filter(|&j| free[j]).map(|j| h[i * n + j] * grad[j]).sum() } else { 0.0 }
            })
            .collect();
        if direction.iter().zip(&grad).map(|(d, g)| d * g).sum::<f64>() <= 0.0 {
            // Not an ascent direction (the approximation went astray): the gradient's.
            h = identity(n);
            direction = (0..n).map(|i| if free[i] { grad[i] } else { 0.0 }).collect();
        }
        let longest = direction.iter().fold(0.0_f64, |m, d| m.max(d.abs()));
        if longest == 0.0 {
            break;
        }
        let mut t = (MAX_STEP / longest).min(1.0);
        let mut accepted = None;
        for _ in 0..HALVINGS {
            let trial = clamp(x.iter().zip(&direction).map(|(xi, d)| xi + t * d).collect());
            let rise: f64 = grad.iter().zip(trial.iter().zip(&x)).map(|(g, (a, b))| g * (a - b)).sum();
            if let Some((v, g)) = f(&trial)
                && v >= value + 1e-4 * rise
                && v.is_finite()
            {
                accepted = Some((trial, v, g));
                break;
            }
            t /= 2.0;
        }
        let Some((next, next_value, next_grad)) = accepted else { break };
        let s: Vec<f64> = next.iter().zip(&x).map(|(a, b)| a - b).collect();
        // For −f: y = ∇(−f)(next) − ∇(−f)(x).
        let y: Vec<f64> = grad.iter().zip(&next_grad).map(|(a, b)| a - b).collect();
        let gain = next_value - value;
        (x, value, grad) = (next, next_value, next_grad);
        if gain.abs() < 1e-9 || s.iter().all(|v| v.abs() < 1e-9) {
            break;
        }
        update(&mut h, &s, &y);
    }
    Some((x, value))
}

fn identity(n: usize) -> Vec<f64> {
    (0..n * n).map(|k| if k / n == k % n { 1.0 } else { 0.0 }).collect()
}

/// The BFGS update of the inverse Hessian `h` by step `s` and gradient change `y`, skipped when
/// the curvature sᵀy is not positive.
fn update(h: &mut [f64], s: &[f64], y: &[f64]) {
    let n = s.len();
    let sy: f64 = s.iter().zip(y).map(|(a, b)| a * b).sum();
    if sy <= 1e-12 {
        return;
    }
    let rho = 1.0 / sy;
    let hy: Vec<f64> = (0..n).map(|i| (0..n).map(|j| h[i * n + j] * y[j]).sum()).collect();
    let yhy: f64 = y.iter().zip(&hy).map(|(a, b)| a * b).sum();
    for i in 0..n {
        for j in 0..n {
            h[i * n + j] += -rho * (hy[i] * s[j] + s[i] * hy[j]) + (rho * rho * yhy + rho) * s[i] * s[j];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::maximize;

    /// A concave quadratic: its maximum inside the box, and on the bound when outside it.
    #[test]
    fn finds_a_quadratic_s_maximum_within_the_box() {
        let f = |x: &[f64]| {
            let (a, b) = (x[0] - 1.0, x[1] + 2.0);
            Some((-(a * a) - 3.0 * b * b - a * b, vec![-2.0 * a - b, -6.0 * b - a]))
        };
        let (x, v) = maximize(f, &[0.0, 0.0], &[-5.0, -5.0], &[5.0, 5.0]).unwrap();
        assert!((x[0] - 1.0).abs() < 1e-5 && (x[1] + 2.0).abs() < 1e-5, "{x:?}");
        assert!(v.abs() < 1e-9);
        let (x, _) = maximize(f, &[0.0, 0.0], &[-5.0, -1.0], &[5.0, 5.0]).unwrap();
        assert!((x[1] + 1.0).abs() < 1e-12, "{x:?}");
        // With x₁ held at −1, the best x₀ is 1 − (x₁ + 2)/2 = 0.5.
        assert!((x[0] - 0.5).abs() < 1e-5, "{x:?}");
    }
}
