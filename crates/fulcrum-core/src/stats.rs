//! Small statistics on slices of `f64`, as the diagnostics use them.

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// Population standard deviation (divides by `n`, as numpy's default); `None` when empty.
pub fn std_pop(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    Some((xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt())
}

/// Coefficient of variation `std_pop / mean`; `None` when empty or the mean is not positive.
pub fn cv(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    if m > 0.0 {
        Some(std_pop(xs)? / m)
    } else {
        None
    }
}

/// Pearson correlation of `xs` and `ys`.
///
/// `None` when there are fewer than two points or `xs` does not vary (undefined). When `xs`
/// varies but `ys` is constant, `ys` does not depend on `xs` at all and the answer is `0`.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 2 {
        return None;
    }
    let (mx, my) = (mean(xs)?, mean(ys)?);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mx, y - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    // Relative thresholds: values equal up to rounding count as constant.
    let scale_x = xs.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    let scale_y = ys.iter().fold(0.0f64, |a, y| a.max(y.abs()));
    let tiny = |s: f64, scale: f64| s.sqrt() <= 1e-12 * scale * (xs.len() as f64).sqrt();
    if tiny(sxx, scale_x) {
        return None;
    }
    if tiny(syy, scale_y) {
        return Some(0.0);
    }
    Some((sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0))
}

/// The unbiased pass@k estimator of Chen et al. (2021) for one problem with `n` samples of
/// which `c` are correct: `1 - C(n-c, k) / C(n, k)`, the chance that k samples drawn without
/// replacement from the n contain a correct one. Computed as a product, so it is exact for any
/// n (no factorials). `None` when `k` is 0, `k > n` or `c > n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i).
    let miss: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    Some(1.0 - miss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_matches_hand_counts() {
        // n = 2, c = 1, k = 1: half the single draws are correct.
        assert_eq!(pass_at_k(2, 1, 1), Some(0.5));
        // n = 4, c = 1, k = 2: 1 - C(3,2)/C(4,2) = 1 - 3/6.
        assert!((pass_at_k(4, 1, 2).unwrap() - 0.5).abs() < 1e-12);
        // n = 5, c = 2, k = 3: 1 - C(3,3)/C(5,3) = 1 - 1/10.
        assert!((pass_at_k(5, 2, 3).unwrap() - 0.9).abs() < 1e-12);
        // pass@1 is c / n; k = n is "any correct".
        assert!((pass_at_k(10, 3, 1).unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(pass_at_k(4, 1, 4), Some(1.0));
        assert_eq!(pass_at_k(4, 0, 4), Some(0.0));
        assert_eq!(pass_at_k(4, 0, 1), Some(0.0));
        assert_eq!(pass_at_k(4, 4, 1), Some(1.0));
        // n = 32, c = 1, k = 8: exactly k / n.
        assert!((pass_at_k(32, 1, 8).unwrap() - 0.25).abs() < 1e-12);
        // Large n stays finite and in range.
        let p = pass_at_k(100_000, 17, 1000).unwrap();
        assert!(p > 0.0 && p < 1.0);
        for bad in [(4, 1, 0), (4, 1, 5), (4, 5, 1)] {
            assert_eq!(pass_at_k(bad.0, bad.1, bad.2), None, "{bad:?}");
        }
    }

    #[test]
    fn pearson_of_linear_relation_is_one() {
        let r = pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap();
        assert!((r - 1.0).abs() < 1e-12);
        let r = pearson(&[1.0, 2.0, 3.0], &[6.0, 4.0, 2.0]).unwrap();
        assert!((r + 1.0).abs() < 1e-12);
    }

    #[test]
    fn pearson_edge_cases() {
        assert_eq!(pearson(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(pearson(&[1.0, 2.0], &[0.25, 0.25]), Some(0.0));
        assert_eq!(pearson(&[1.0], &[1.0]), None);
    }

    #[test]
    fn cv_and_std() {
        assert_eq!(std_pop(&[2.0, 4.0]), Some(1.0));
        assert_eq!(cv(&[2.0, 4.0]), Some(1.0 / 3.0));
        assert_eq!(cv(&[0.0, 0.0]), None);
        assert_eq!(mean(&[]), None);
    }
}
