//! The small statistics a comparison needs: mean with a t-distribution 95% confidence interval,
//! the trapezoid area under a curve, the median, and ordinary least squares with one or two
//! predictors. Plain `f64` slices; `None` where a value is undefined (too few points, no spread).

/// Two-sided 95% critical values of Student's t for 1..=30 degrees of freedom (standard tables;
/// beyond 30 the normal value 1.96 is within 4%, and closer as df grows).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// `t_{0.975, df}`.
pub fn t975(df: usize) -> Option<f64> {
    match df {
        0 => None,
        1..=30 => Some(T975[df - 1]),
        _ => Some(1.96 + 2.4 / df as f64),
    }
}

/// Mean and half-width of its 95% confidence interval (t-distribution, sample std with n-1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MeanCi {
    pub mean: f64,
    /// Half-width; `None` with fewer than two values.
    pub ci95: Option<f64>,
    pub n: usize,
}

pub fn mean_ci(xs: &[f64]) -> Option<MeanCi> {
    let n = xs.len();
    if n == 0 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let ci95 = (n >= 2).then(|| {
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        t975(n - 1).unwrap_or(f64::NAN) * (var / n as f64).sqrt()
    });
    Some(MeanCi { mean, ci95, n })
}

/// The arithmetic mean (fulcrum-core's one implementation); `None` for no values.
pub use fulcrum_core::stats::mean;

/// Sample standard deviation (n-1).
pub fn std_sample(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    (xs.len() >= 2)
        .then(|| (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt())
}

pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let k = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[k]
    } else {
        (v[k - 1] + v[k]) / 2.0
    })
}

/// Area under the piecewise-linear curve through `(x, y)` points (sorted by x), divided by the
/// x span: the curve's mean height. One point: its height.
pub fn normalised_area(points: &[(f64, f64)]) -> Option<f64> {
    match points {
        [] => None,
        [(_, y)] => Some(*y),
        _ => {
            let span = points[points.len() - 1].0 - points[0].0;
            if span <= 0.0 {
                return None;
            }
            let area: f64 = points
                .windows(2)
                .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
                .sum();
            Some(area / span)
        }
    }
}

/// A least-squares fit `y = intercept + sum_k slopes[k] * x_k`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Fit {
    pub intercept: f64,
    pub slopes: Vec<f64>,
    /// Half-width of each slope's 95% confidence interval (t with n - p - 1 degrees of
    /// freedom); `None` without residual degrees of freedom.
    pub slope_ci95: Vec<Option<f64>>,
    /// Coefficient of determination.
    pub r2: f64,
    pub n: usize,
}

/// Ordinary least squares of `y` on one or two predictors (`xs[k][i]`). `None` when there are
/// not more points than coefficients or the predictors are collinear (or constant).
pub fn ols(xs: &[&[f64]], y: &[f64]) -> Option<Fit> {
    let n = y.len();
    let p = xs.len();
    if !(1..=2).contains(&p) || xs.iter().any(|x| x.len() != n) || n <= p + 1 {
        return None;
    }
    // Centre everything, then solve the p x p normal equations (Cramer's rule).
    let my = mean(y)?;
    let mx: Vec<f64> = xs.iter().map(|x| mean(x).unwrap_or(0.0)).collect();
    let c = |k: usize, i: usize| xs[k][i] - mx[k];
    let sxx = |a: usize, b: usize| (0..n).map(|i| c(a, i) * c(b, i)).sum::<f64>();
    let sxy = |a: usize| (0..n).map(|i| c(a, i) * (y[i] - my)).sum::<f64>();
    // `inv_diag`: the diagonal of the inverse of the centred X'X, for the slopes' variances.
    let (slopes, inv_diag) = if p == 1 {
        let d = sxx(0, 0);
        if d <= 1e-300 {
            return None;
        }
        (vec![sxy(0) / d], vec![1.0 / d])
    } else {
        let (a, b, d) = (sxx(0, 0), sxx(0, 1), sxx(1, 1));
        let det = a * d - b * b;
        if det.abs() <= 1e-12 * (a * d).abs().max(1e-300) {
            return None;
        }
        let (y0, y1) = (sxy(0), sxy(1));
        (
            vec![(y0 * d - b * y1) / det, (a * y1 - b * y0) / det],
            vec![d / det, a / det],
        )
    };
    let intercept = my - slopes.iter().zip(&mx).map(|(s, m)| s * m).sum::<f64>();
    let predict = |i: usize| intercept + (0..p).map(|k| slopes[k] * xs[k][i]).sum::<f64>();
    let ss_res: f64 = (0..n).map(|i| (y[i] - predict(i)).powi(2)).sum();
    let ss_tot: f64 = y.iter().map(|v| (v - my).powi(2)).sum();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::NAN
    };
    let df = n - p - 1;
    let sigma2 = ss_res / df as f64;
    let slope_ci95 = inv_diag
        .iter()
        .map(|v| t975(df).map(|t| t * (sigma2 * v).sqrt()))
        .collect();
    Some(Fit {
        intercept,
        slopes,
        slope_ci95,
        r2,
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_interval_uses_student_t() {
        let m = mean_ci(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m.mean, 2.0);
        // sd 1, n 3: 4.303 / sqrt(3)
        assert!((m.ci95.unwrap() - 4.303 / 3f64.sqrt()).abs() < 1e-12);
        assert_eq!(mean_ci(&[5.0]).unwrap().ci95, None);
        assert!(mean_ci(&[]).is_none());
    }

    #[test]
    fn normalised_area_is_the_mean_height_of_the_curve() {
        let a = normalised_area(&[(0.0, 0.0), (10.0, 1.0), (20.0, 1.0)]).unwrap();
        assert!((a - 0.75).abs() < 1e-12);
    }

    #[test]
    fn ols_recovers_an_exact_plane_and_refuses_collinear_predictors() {
        let x1 = [0.0, 1.0, 2.0, 3.0, 4.0];
        let x2 = [1.0, 0.0, 3.0, 1.0, 2.0];
        let y: Vec<f64> = (0..5).map(|i| 0.5 + 2.0 * x1[i] - 3.0 * x2[i]).collect();
        let f = ols(&[&x1, &x2], &y).unwrap();
        assert!((f.intercept - 0.5).abs() < 1e-9);
        assert!((f.slopes[0] - 2.0).abs() < 1e-9 && (f.slopes[1] + 3.0).abs() < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        // An exact fit leaves no residual: zero-width intervals.
        assert!(f
            .slope_ci95
            .iter()
            .all(|c| c.is_some_and(|c| c.abs() < 1e-6)));
        let twice: Vec<f64> = x1.iter().map(|v| 2.0 * v).collect();
        assert!(ols(&[&x1, &twice], &y).is_none());
        assert!(ols(&[&[1.0, 1.0, 1.0]], &[1.0, 2.0, 3.0]).is_none());
    }

    #[test]
    fn slope_interval_matches_the_textbook_formula() {
        // y = x + noise on 5 points: slope SE = sqrt(s^2 / Sxx), t_{0.975,3} = 3.182.
        let x = [0.0, 1.0, 2.0, 3.0, 4.0];
        let y = [0.1, 0.9, 2.2, 2.8, 4.1];
        let f = ols(&[&x], &y).unwrap();
        let (sxx, my) = (10.0, 2.02);
        let sxy: f64 = (0..5).map(|i| (x[i] - 2.0) * (y[i] - my)).sum();
        let b = sxy / sxx;
        let res: f64 = (0..5)
            .map(|i| (y[i] - (my + b * (x[i] - 2.0))).powi(2))
            .sum();
        let want = 3.182 * (res / 3.0 / sxx).sqrt();
        assert!((f.slopes[0] - b).abs() < 1e-12);
        assert!((f.slope_ci95[0].unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
