//! The per-token policy loss, `shared/spec/aggregation.md` section "Policy loss per token",
//! and its clip statistics; plus the two KL estimators used as optional regularisers.
//!
//! ```text
//! r = exp(logp_new - logp_old)
//! l = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))
//! if A < 0:  l = min(l, -A c)                              (dual clip)
//! ```

use crate::CoreError;

/// Clip settings of the PPO loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipParams {
    /// Lower clip range: the ratio is clipped below at `1 - eps_low`.
    pub eps_low: f64,
    /// Upper clip range: the ratio is clipped above at `1 + eps_high` (DAPO's clip-higher: 0.28).
    pub eps_high: f64,
    /// Dual-clip constant `c > 1`: a negative-advantage token's loss is capped at `-A c`.
    /// `f64::INFINITY` switches the dual clip off.
    pub dual_clip_c: f64,
}

impl Default for ClipParams {
    /// The policy loss's defaults (`LossParams`, where every setting is defaulted once).
    fn default() -> Self {
        crate::LossParams::default().clip()
    }
}

impl ClipParams {
    /// Checks the ranges: `0 <= eps_low < 1`, `eps_high >= 0`, `c > 1` (the dual clip must sit
    /// above the ordinary clip's ratio 1, or it would cap unclipped tokens).
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |name, why: String| Err(CoreError::InvalidParam { name, why });
        if !(self.eps_low >= 0.0 && self.eps_low < 1.0) {
            return bad(
                "eps_low",
                format!("must be in [0, 1), got {}", self.eps_low),
            );
        }
        if !(self.eps_high >= 0.0 && self.eps_high.is_finite()) {
            return bad(
                "eps_high",
                format!("must be finite and >= 0, got {}", self.eps_high),
            );
        }
        if self.dual_clip_c.is_nan() || self.dual_clip_c <= 1.0 {
            return bad(
                "dual_clip_c",
                format!("must be > 1, got {}", self.dual_clip_c),
            );
        }
        Ok(())
    }
}

/// Which term of the loss is active for a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipRegion {
    /// `-A r`: the gradient flows.
    Unclipped,
    /// The ratio fell below `1 - eps_low` with `A < 0`: clipped, no gradient.
    ClippedLow,
    /// The ratio rose above `1 + eps_high` with `A > 0`: clipped, no gradient.
    ClippedHigh,
    /// `A < 0` and the ratio above `c`: capped at `-A c`, no gradient.
    DualClipped,
}

/// One token's loss value, its derivative with respect to `logp_new`, and the active term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLoss {
    /// `l_{i,t}`.
    pub loss: f64,
    /// `d l / d logp_new`: `-A r` when unclipped, 0 otherwise.
    pub grad_logp_new: f64,
    /// The active term.
    pub region: ClipRegion,
}

/// The PPO token loss for one token with advantage `adv`.
///
/// At a tie (the ratio exactly on a clip boundary) both terms are equal and the token counts as
/// unclipped.
pub fn token_loss(logp_new: f64, logp_old: f64, adv: f64, clip: &ClipParams) -> TokenLoss {
    let ratio = (logp_new - logp_old).exp();
    let clipped = ratio.clamp(1.0 - clip.eps_low, 1.0 + clip.eps_high);
    let unclipped_loss = -adv * ratio;
    let clipped_loss = -adv * clipped;
    let (mut loss, mut region) = if clipped_loss > unclipped_loss {
        let side = if ratio > 1.0 {
            ClipRegion::ClippedHigh
        } else {
            ClipRegion::ClippedLow
        };
        (clipped_loss, side)
    } else {
        (unclipped_loss, ClipRegion::Unclipped)
    };
    if adv < 0.0 {
        let cap = -adv * clip.dual_clip_c;
        if loss > cap {
            loss = cap;
            region = ClipRegion::DualClipped;
        }
    }
    let grad_logp_new = if region == ClipRegion::Unclipped {
        -adv * ratio
    } else {
        0.0
    };
    TokenLoss {
        loss,
        grad_logp_new,
        region,
    }
}

/// Token losses of one response (all tokens share the response's advantage).
pub fn response_losses(
    logp_new: &[f64],
    logp_old: &[f64],
    adv: f64,
    clip: &ClipParams,
) -> Result<Vec<TokenLoss>, CoreError> {
    crate::error::check_len("logp_old", logp_new.len(), logp_old.len())?;
    crate::error::check_finite("logp_new", logp_new)?;
    crate::error::check_finite("logp_old", logp_old)?;
    Ok(logp_new
        .iter()
        .zip(logp_old)
        .map(|(&n, &o)| token_loss(n, o, adv, clip))
        .collect())
}

/// How often each clip was active, as fractions of the tokens counted.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ClipStats {
    /// Tokens counted.
    pub tokens: u64,
    /// Fraction clipped by either side of the ordinary clip.
    pub clip_frac: f64,
    /// Fraction clipped below (`A < 0`, ratio < `1 - eps_low`).
    pub clip_frac_low: f64,
    /// Fraction clipped above (`A > 0`, ratio > `1 + eps_high`).
    pub clip_frac_high: f64,
    /// Fraction capped by the dual clip.
    pub dual_clip_frac: f64,
}

impl ClipStats {
    /// Counts the regions of the given token losses.
    pub fn from_losses<'a>(losses: impl IntoIterator<Item = &'a TokenLoss>) -> Self {
        let (mut n, mut low, mut high, mut dual) = (0u64, 0u64, 0u64, 0u64);
        for l in losses {
            n += 1;
            match l.region {
                ClipRegion::Unclipped => {}
                ClipRegion::ClippedLow => low += 1,
                ClipRegion::ClippedHigh => high += 1,
                ClipRegion::DualClipped => dual += 1,
            }
        }
        let frac = |k: u64| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        Self {
            tokens: n,
            clip_frac: frac(low + high),
            clip_frac_low: frac(low),
            clip_frac_high: frac(high),
            dual_clip_frac: frac(dual),
        }
    }
}

crate::closed_set! {
    /// How the per-token KL to the reference policy is estimated (Schulman's k1 and k3).
    #[derive(Default)]
    pub enum KlEstimator("kl estimator") {
        /// [`kl_k1`].
        K1 = "k1",
        /// [`kl_k3`] (default).
        #[default]
        K3 = "k3",
    }
}

impl KlEstimator {
    /// The estimate for one token.
    pub fn estimate(self, logp: f64, logp_ref: f64) -> f64 {
        match self {
            KlEstimator::K1 => kl_k1(logp, logp_ref),
            KlEstimator::K3 => kl_k3(logp, logp_ref),
        }
    }
}

/// `k1 = logp - logp_ref`: the unbiased, high-variance KL estimator.
pub fn kl_k1(logp: f64, logp_ref: f64) -> f64 {
    logp - logp_ref
}

/// `k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1`: non-negative, low-variance.
pub fn kl_k3(logp: f64, logp_ref: f64) -> f64 {
    let d = logp_ref - logp;
    d.exp() - d - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIP: ClipParams = ClipParams {
        eps_low: 0.2,
        eps_high: 0.28,
        dual_clip_c: 3.0,
    };

    #[test]
    fn positive_advantage_is_clipped_above_only() {
        let l = token_loss(0.5f64.ln() + 1.0, 1.0, 2.0, &CLIP); // ratio 0.5
        assert_eq!(l.region, ClipRegion::Unclipped);
        assert!((l.loss + 1.0).abs() < 1e-12);
        let l = token_loss(2.0f64.ln(), 0.0, 2.0, &CLIP); // ratio 2
        assert_eq!(l.region, ClipRegion::ClippedHigh);
        assert!((l.loss + 2.0 * 1.28).abs() < 1e-12);
        assert_eq!(l.grad_logp_new, 0.0);
    }

    #[test]
    fn negative_advantage_is_clipped_below_and_dual_clipped() {
        let l = token_loss(0.5f64.ln(), 0.0, -1.0, &CLIP);
        assert_eq!(l.region, ClipRegion::ClippedLow);
        assert!((l.loss - 0.8).abs() < 1e-12);
        let l = token_loss(10f64.ln(), 0.0, -1.0, &CLIP);
        assert_eq!(l.region, ClipRegion::DualClipped);
        assert!((l.loss - 3.0).abs() < 1e-12);
        let l = token_loss(2f64.ln(), 0.0, -1.0, &CLIP);
        assert_eq!(l.region, ClipRegion::Unclipped);
        assert!((l.grad_logp_new - 2.0).abs() < 1e-12);
    }

    #[test]
    fn gradient_matches_finite_difference() {
        for &(new, old, adv) in &[(-1.0, -1.1, 0.7), (-0.3, -0.2, -1.3), (-2.0, -1.0, -0.5)] {
            let h = 1e-6;
            let f = |x| token_loss(x, old, adv, &CLIP).loss;
            let fd = (f(new + h) - f(new - h)) / (2.0 * h);
            let g = token_loss(new, old, adv, &CLIP).grad_logp_new;
            assert!((fd - g).abs() < 1e-6, "{fd} vs {g}");
        }
    }

    #[test]
    fn clip_stats_count_regions() {
        let ls = [
            token_loss(0.0, 0.0, 1.0, &CLIP),
            token_loss(2f64.ln(), 0.0, 1.0, &CLIP),
            token_loss(0.5f64.ln(), 0.0, -1.0, &CLIP),
            token_loss(10f64.ln(), 0.0, -1.0, &CLIP),
        ];
        let s = ClipStats::from_losses(&ls);
        assert_eq!(s.tokens, 4);
        assert_eq!(s.clip_frac, 0.5);
        assert_eq!(s.clip_frac_high, 0.25);
        assert_eq!(s.clip_frac_low, 0.25);
        assert_eq!(s.dual_clip_frac, 0.25);
    }

    #[test]
    fn invalid_clip_params_are_errors() {
        let d = ClipParams::default();
        for bad in [
            ClipParams {
                dual_clip_c: 1.0,
                ..d
            },
            ClipParams {
                dual_clip_c: f64::NAN,
                ..d
            },
            ClipParams { eps_low: 1.0, ..d },
            ClipParams {
                eps_high: f64::NAN,
                ..d
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(d.validate().is_ok());
    }

    #[test]
    fn k3_is_non_negative_and_zero_at_equality() {
        assert_eq!(kl_k3(-1.0, -1.0), 0.0);
        assert!(kl_k3(-1.0, -3.0) > 0.0 && kl_k3(-3.0, -1.0) > 0.0);
        assert_eq!(kl_k1(-1.0, -3.0), 2.0);
    }
}
