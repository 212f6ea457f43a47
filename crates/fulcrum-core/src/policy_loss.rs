//! The policy-loss family: PPO-clip and the published alternatives (GSPO, CISPO, SAPO, GMPO,
//! Clip-Cov, KL-Cov), each a short function on one response's numbers next to its formula and
//! source, and how each meets the aggregation rules.
//!
//! Every loss is written in **token form**: response `i` with advantage `A` and `n` loss tokens
//! gets, per token `t`, a value `l_t` and the derivative `g_t = d l_t / d logp_new_t` of the
//! surrogate the trainer differentiates. The aggregated loss is the rule's `sum_i w_i sum_t l_t`
//! as for PPO, so every rule applies to every loss unchanged:
//!
//! - *token-level losses* (`ppo`, `cispo`, `sapo`, `clip-cov`, `kl-cov`): `l_t` is the token's
//!   own loss, and the rule weighs tokens exactly as it does for PPO;
//! - *sequence-level losses* (`gspo`, `gmpo`): the response has one loss `L_i` of a
//!   sequence-level ratio, and every token carries it: `l_t = L_i`, `g_t = n * dL_i/dlogp_t`.
//!   The rule's weights, summed over the response's tokens, become a per-response weight
//!   `W_i = n_i w_i`, and the objective is `sum_i W_i L_i` with gradient `sum_i W_i grad L_i`.
//!   `seq` gives `W_i = 1/N`: the published GSPO and GMPO objectives (a mean over responses;
//!   verl forces it for GSPO, GMPO and SAPO). `token` gives `W_i = n_i / T`: longer responses
//!   weigh more. `seq-sum` gives `W_i = n_i / N`: LUSPO (TRL `loss_type="luspo"`) is exactly
//!   `gspo` under `seq-sum`. `ba` gives, for response `i` on side `s` (sign of `A`) of group
//!   `g`, `W_i = (1/M) (N_gs / W_g) (n_i / T_gs)`: inside a side responses weigh by their share
//!   of the side's tokens, and the two sides are balanced by their counts, whatever their
//!   lengths (the sign-length decoupling BA exists for). A per-side mean over *responses*
//!   instead would make `ba` identical to `seq` on the responses with `A != 0`
//!   (`(1/M) (N_gs / W_g) / N_gs = 1 / (M W_g)`),
//!   which is why `ba` keeps its token mean here. No rule is refused: every rule's weight is
//!   constant along a response, so `W_i` is always defined.
//!
//! Clip-Cov and KL-Cov treat a small set of tokens differently, chosen by the covariance of
//! log-probability and advantage over the batch (`cov_selection.rs`). fulcrum chooses them
//! once per step from the sampling-time log-probabilities (the source code uses the current ones of
//! each micro-batch, equal on the first update of an on-policy step), so the choice, and the
//! update, do not depend on the micro-batch size or the number of ranks.

use crate::ppo_loss::{token_loss, ClipParams, ClipRegion, TokenLoss};
use crate::CoreError;

crate::closed_set! {
    /// The policy loss (`ppo.loss`).
    #[derive(Default)]
    pub enum PolicyLoss("policy-loss name") {
        /// PPO-clip with asymmetric and dual clip (the spec's loss; default).
        #[default]
        Ppo = "ppo",
        /// Group Sequence Policy Optimization: a clipped sequence-level ratio.
        Gspo = "gspo",
        /// Clipped IS-weight Policy Optimization: the importance weight clipped, never the update.
        Cispo = "cispo",
        /// Soft Adaptive Policy Optimization: a sigmoid gate instead of the hard clip.
        Sapo = "sapo",
        /// Geometric-Mean Policy Optimization: the geometric mean of clipped token ratios.
        Gmpo = "gmpo",
        /// PPO-clip with the gradient of a few high-covariance tokens cut.
        ClipCov = "clip-cov",
        /// The unclipped PPO loss with a KL penalty on the highest-covariance tokens.
        KlCov = "kl-cov",
    }
}

/// Whether a loss is a function of each token or of the whole response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossLevel {
    Token,
    Sequence,
}

impl PolicyLoss {
    pub fn level(self) -> LossLevel {
        match self {
            PolicyLoss::Gspo | PolicyLoss::Gmpo => LossLevel::Sequence,
            _ => LossLevel::Token,
        }
    }

    /// The paper, and the anchor's code path the formula was checked against.
    pub fn source(self) -> &'static str {
        match self {
            PolicyLoss::Ppo => "Schulman et al. 2017 (arXiv:1707.06347); dual clip: Ye et al. 2020 (arXiv:1912.09729); verl core_algos.compute_policy_loss_vanilla",
            PolicyLoss::Gspo => "Zheng et al. 2025, Group Sequence Policy Optimization (arXiv:2507.18071); verl core_algos.compute_policy_loss_gspo; TRL importance_sampling_level=\"sequence\"",
            PolicyLoss::Cispo => "MiniMax 2025, MiniMax-M1 (arXiv:2506.13585); TRL GRPOTrainer loss_type=\"cispo\"; verl core_algos.compute_policy_loss_cispo",
            PolicyLoss::Sapo => "Gao et al. 2025, Soft Adaptive Policy Optimization (arXiv:2511.20347); TRL GRPOTrainer loss_type=\"sapo\"; verl core_algos.compute_policy_loss_sapo",
            PolicyLoss::Gmpo => "Zhao et al. 2025, Geometric-Mean Policy Optimization (arXiv:2507.20673); verl core_algos.compute_policy_loss_geo_mean",
            PolicyLoss::ClipCov => "Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv:2505.22617); verl core_algos.compute_policy_loss_clip_cov",
            PolicyLoss::KlCov => "Cui et al. 2025 (arXiv:2505.22617); verl core_algos.compute_policy_loss_kl_cov",
        }
    }

    /// Whether the loss treats the tokens of `cov_selection.rs` differently.
    pub fn uses_cov_selection(self) -> bool {
        matches!(self, PolicyLoss::ClipCov | PolicyLoss::KlCov)
    }
}

/// Every loss's own settings: the `ppo.*` keys of the same names, defined (and defaulted) here
/// only; the trainer's config reads them into this struct.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossParams {
    /// PPO's clip (`ppo`, and the ordinary clip of `clip-cov`, which has no dual clip): the
    /// ratio is clipped to `[1 - eps_low, 1 + eps_high]` (DAPO's clip-higher: `eps_high` 0.28),
    /// and a negative-advantage token's loss is capped at `-A dual_clip_c` (`c > 1`).
    pub eps_low: f64,
    pub eps_high: f64,
    pub dual_clip_c: f64,
    /// GSPO's clip of the sequence ratio: `[1 - gspo_eps_low, 1 + gspo_eps_high]` (paper:
    /// 3e-4 and 4e-4; sequence ratios stay much closer to 1 than token ratios).
    pub gspo_eps_low: f64,
    pub gspo_eps_high: f64,
    /// CISPO's clip of the importance weight: `[1 - cispo_eps_low, 1 + cispo_eps_high]`.
    /// MiniMax-M1 clips above only (`cispo_eps_low = 1`: no lower bound); the default cap
    /// `1 + 4 = 5` is TRL's recommended `epsilon_high = 5.0` (an absolute cap there). verl
    /// clips both sides with PPO's 0.2: `cispo_eps_low = cispo_eps_high = 0.2`.
    pub cispo_eps_low: f64,
    pub cispo_eps_high: f64,
    /// SAPO's gate temperatures for positive and negative advantages (paper: 1.0 and 1.05).
    pub sapo_tau_pos: f64,
    pub sapo_tau_neg: f64,
    /// GMPO's clip of each token's log-ratio: `[-gmpo_clip_low, gmpo_clip_high]` (paper: 0.4).
    pub gmpo_clip_low: f64,
    pub gmpo_clip_high: f64,
    /// Clip-Cov: the fraction of loss tokens whose gradient is cut, drawn at random among those
    /// with covariance in `(cov_lb, cov_ub)` (paper: 2e-4, 1, 5).
    pub clip_cov_frac: f64,
    pub clip_cov_lb: f64,
    pub clip_cov_ub: f64,
    /// KL-Cov: the fraction of loss tokens with the largest covariance that get the penalty
    /// `kl_cov_coef * |logp_new - logp_old|` (verl's defaults: 2e-4 and 0.1).
    pub kl_cov_frac: f64,
    pub kl_cov_coef: f64,
}

impl Default for LossParams {
    fn default() -> Self {
        LossParams {
            eps_low: 0.2,
            eps_high: 0.28,
            dual_clip_c: 3.0,
            gspo_eps_low: 3e-4,
            gspo_eps_high: 4e-4,
            cispo_eps_low: 1.0,
            cispo_eps_high: 4.0,
            sapo_tau_pos: 1.0,
            sapo_tau_neg: 1.05,
            gmpo_clip_low: 0.4,
            gmpo_clip_high: 0.4,
            clip_cov_frac: 2e-4,
            clip_cov_lb: 1.0,
            clip_cov_ub: 5.0,
            kl_cov_frac: 2e-4,
            kl_cov_coef: 0.1,
        }
    }
}

impl LossParams {
    /// PPO's clip settings.
    pub fn clip(&self) -> ClipParams {
        ClipParams {
            eps_low: self.eps_low,
            eps_high: self.eps_high,
            dual_clip_c: self.dual_clip_c,
        }
    }

    /// Checks the settings `loss` reads (the others are not its business).
    pub fn validate(&self, loss: PolicyLoss) -> Result<(), CoreError> {
        let bad = |name, why: String| Err(CoreError::InvalidParam { name, why });
        let nonneg = |name: &'static str, v: f64| {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                bad(name, format!("must be finite and >= 0, got {v}"))
            }
        };
        let frac = |name: &'static str, v: f64| {
            if v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                bad(name, format!("must be in (0, 1], got {v}"))
            }
        };
        match loss {
            PolicyLoss::Ppo => self.clip().validate(),
            PolicyLoss::Gspo => {
                nonneg("gspo_eps_high", self.gspo_eps_high)?;
                match self.gspo_eps_low {
                    v if (0.0..1.0).contains(&v) => Ok(()),
                    v => bad("gspo_eps_low", format!("must be in [0, 1), got {v}")),
                }
            }
            PolicyLoss::Cispo => {
                nonneg("cispo_eps_high", self.cispo_eps_high)?;
                match self.cispo_eps_low {
                    v if (0.0..=1.0).contains(&v) => Ok(()),
                    v => bad("cispo_eps_low", format!("must be in [0, 1], got {v}")),
                }
            }
            PolicyLoss::Sapo => {
                for (name, v) in [
                    ("sapo_tau_pos", self.sapo_tau_pos),
                    ("sapo_tau_neg", self.sapo_tau_neg),
                ] {
                    if !(v > 0.0 && v.is_finite()) {
                        return bad(name, format!("must be finite and > 0, got {v}"));
                    }
                }
                Ok(())
            }
            PolicyLoss::Gmpo => {
                nonneg("gmpo_clip_low", self.gmpo_clip_low)?;
                nonneg("gmpo_clip_high", self.gmpo_clip_high)
            }
            PolicyLoss::ClipCov => {
                self.clip().validate()?;
                frac("clip_cov_frac", self.clip_cov_frac)?;
                // NaN bounds fail too.
                if self.clip_cov_lb.partial_cmp(&self.clip_cov_ub) != Some(std::cmp::Ordering::Less)
                {
                    return bad(
                        "clip_cov_lb",
                        format!(
                            "must be below clip_cov_ub ({} >= {})",
                            self.clip_cov_lb, self.clip_cov_ub
                        ),
                    );
                }
                Ok(())
            }
            PolicyLoss::KlCov => {
                frac("kl_cov_frac", self.kl_cov_frac)?;
                nonneg("kl_cov_coef", self.kl_cov_coef)
            }
        }
    }
}

/// One token's share of a loss: its value, the derivative of the differentiated surrogate
/// with respect to the token's new log-probability, and what limited it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenTerm {
    pub loss: f64,
    pub grad: f64,
    /// `ClippedLow`/`ClippedHigh`: the token's (or its sequence's) ratio was clipped on that
    /// side; `DualClipped`: PPO's dual clip; `Unclipped` otherwise (SAPO never clips).
    pub region: ClipRegion,
    /// The token is one of those `cov_selection.rs` chose (Clip-Cov, KL-Cov).
    pub selected: bool,
}

/// The token terms of one response: new and sampling-time log-probabilities of its loss
/// tokens, its advantage, and (Clip-Cov, KL-Cov) which tokens `cov_selection.rs` chose.
pub fn response_terms(
    loss: PolicyLoss,
    logp_new: &[f64],
    logp_old: &[f64],
    adv: f64,
    selected: &[bool],
    p: &LossParams,
) -> Result<Vec<TokenTerm>, CoreError> {
    crate::error::check_len("logp_old", logp_new.len(), logp_old.len())?;
    crate::error::check_finite("logp_new", logp_new)?;
    crate::error::check_finite("logp_old", logp_old)?;
    if loss.uses_cov_selection() {
        crate::error::check_len("selected", logp_new.len(), selected.len())?;
    }
    let tokens = logp_new.iter().zip(logp_old);
    Ok(match loss {
        PolicyLoss::Ppo => tokens.map(|(&n, &o)| ppo(n, o, adv, &p.clip())).collect(),
        PolicyLoss::Gspo => gspo(logp_new, logp_old, adv, p),
        PolicyLoss::Cispo => tokens.map(|(&n, &o)| cispo(n, o, adv, p)).collect(),
        PolicyLoss::Sapo => tokens.map(|(&n, &o)| sapo(n, o, adv, p)).collect(),
        PolicyLoss::Gmpo => gmpo(logp_new, logp_old, adv, p),
        PolicyLoss::ClipCov => tokens
            .zip(selected)
            .map(|((&n, &o), &s)| clip_cov(n, o, adv, s, p))
            .collect(),
        PolicyLoss::KlCov => tokens
            .zip(selected)
            .map(|((&n, &o), &s)| kl_cov(n, o, adv, s, p))
            .collect(),
    })
}

/// PPO-clip, `ppo_loss::token_loss`:
/// `l = max(-A r, -A clip(r, 1-eps_low, 1+eps_high))`, capped at `-A c` where `A < 0`.
fn ppo(new: f64, old: f64, adv: f64, clip: &ClipParams) -> TokenTerm {
    token_loss(new, old, adv, clip).into()
}

impl From<TokenLoss> for TokenTerm {
    fn from(t: TokenLoss) -> Self {
        TokenTerm {
            loss: t.loss,
            grad: t.grad_logp_new,
            region: t.region,
            selected: false,
        }
    }
}

/// GSPO: `s = exp(mean_t (logp_new_t - logp_old_t))` (the log-ratio capped at 10, as in the
/// source), `L = max(-A s, -A clip(s, 1-eps_low, 1+eps_high))`; each token's gradient is `-A s`
/// while unclipped (the GSPO-token form: `n dL/dlogp_t`).
fn gspo(new: &[f64], old: &[f64], adv: f64, p: &LossParams) -> Vec<TokenTerm> {
    let n = new.len().max(1) as f64;
    let log_s = (new.iter().zip(old).map(|(a, b)| a - b).sum::<f64>() / n).min(10.0);
    // PPO's clip (without the dual clip) on the sequence ratio: `token_loss` of `log s`.
    let clip = ClipParams {
        eps_low: p.gspo_eps_low,
        eps_high: p.gspo_eps_high,
        dual_clip_c: f64::INFINITY,
    };
    let mut term = TokenTerm::from(token_loss(log_s, 0.0, adv, &clip));
    // The cap at 10 stops the gradient like a clip (it only guards against overflow).
    if log_s >= 10.0 {
        term.grad = 0.0;
    }
    vec![term; new.len()]
}

/// CISPO: `l = -sg(clip(r, 1-eps_low, 1+eps_high)) A logp_new`: a REINFORCE term whose
/// importance weight is clipped and never stops the gradient (`g = -A clip(r)`).
fn cispo(new: f64, old: f64, adv: f64, p: &LossParams) -> TokenTerm {
    let r = (new - old).exp();
    let w = r.clamp(1.0 - p.cispo_eps_low, 1.0 + p.cispo_eps_high);
    let region = if r > 1.0 + p.cispo_eps_high {
        ClipRegion::ClippedHigh
    } else if r < 1.0 - p.cispo_eps_low {
        ClipRegion::ClippedLow
    } else {
        ClipRegion::Unclipped
    };
    TokenTerm {
        loss: -w * adv * new,
        grad: -w * adv,
        region,
        selected: false,
    }
}

/// SAPO: `l = -A (4/tau) sigmoid(tau (r - 1))`, `tau` = `tau_pos` where `A > 0`, else
/// `tau_neg`. The gate's slope `4 s (1 - s)` is 1 at `r = 1` (PPO's gradient there) and fades
/// smoothly as `r` leaves 1; `g = -A 4 s (1 - s) r`.
fn sapo(new: f64, old: f64, adv: f64, p: &LossParams) -> TokenTerm {
    let r = (new - old).exp();
    let tau = if adv > 0.0 {
        p.sapo_tau_pos
    } else {
        p.sapo_tau_neg
    };
    let s = 1.0 / (1.0 + (-tau * (r - 1.0)).exp());
    TokenTerm {
        loss: -adv * 4.0 / tau * s,
        grad: -adv * 4.0 * s * (1.0 - s) * r,
        region: ClipRegion::Unclipped,
        selected: false,
    }
}

/// GMPO: each token's log-ratio `d_t` is clipped the PPO way in log space, `c_t = sign(A) min(sign(A) d_t, sign(A) clip(d_t, -clip_low, clip_high))`, and
/// the response's ratio is their geometric mean, `R = exp(mean_t c_t)`; `L = -A R`.
/// A token's gradient is `-A R` where its own log-ratio was not clipped, else 0.
fn gmpo(new: &[f64], old: &[f64], adv: f64, p: &LossParams) -> Vec<TokenTerm> {
    let n = new.len().max(1) as f64;
    let sign = if adv > 0.0 {
        1.0
    } else if adv < 0.0 {
        -1.0
    } else {
        0.0
    };
    let per_token: Vec<(f64, ClipRegion)> = new
        .iter()
        .zip(old)
        .map(|(a, b)| {
            let d = a - b;
            let c = d.clamp(-p.gmpo_clip_low, p.gmpo_clip_high);
            if sign * c < sign * d {
                let side = if d > 0.0 {
                    ClipRegion::ClippedHigh
                } else {
                    ClipRegion::ClippedLow
                };
                (c, side)
            } else {
                (d, ClipRegion::Unclipped)
            }
        })
        .collect();
    let ratio = (per_token.iter().map(|(c, _)| c).sum::<f64>() / n).exp();
    let loss = -adv * ratio;
    per_token
        .iter()
        .map(|&(_, region)| {
            let grad = if region == ClipRegion::Unclipped {
                -adv * ratio
            } else {
                0.0
            };
            TokenTerm {
                loss,
                grad,
                region,
                selected: false,
            }
        })
        .collect()
}

/// Clip-Cov: PPO-clip without the dual clip, and a selected token's loss (and gradient) set
/// to 0.
fn clip_cov(new: f64, old: f64, adv: f64, selected: bool, p: &LossParams) -> TokenTerm {
    let clip = ClipParams {
        dual_clip_c: f64::INFINITY,
        ..p.clip()
    };
    let t = token_loss(new, old, adv, &clip);
    let keep = if selected { 0.0 } else { 1.0 };
    TokenTerm {
        loss: keep * t.loss,
        grad: keep * t.grad_logp_new,
        region: t.region,
        selected,
    }
}

/// KL-Cov: the unclipped `-A r`, plus `kl_cov_coef |logp_new - logp_old|` on a selected token.
fn kl_cov(new: f64, old: f64, adv: f64, selected: bool, p: &LossParams) -> TokenTerm {
    let r = (new - old).exp();
    let d = new - old;
    let (pen, pen_grad) = if selected {
        // d|d|/d logp_new = sign(d), and 0 at d = 0 (torch's abs backward).
        (p.kl_cov_coef * d.abs(), p.kl_cov_coef * sign_or_zero(d))
    } else {
        (0.0, 0.0)
    };
    TokenTerm {
        loss: -adv * r + pen,
        grad: -adv * r + pen_grad,
        region: ClipRegion::Unclipped,
        selected,
    }
}

fn sign_or_zero(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: [f64; 5] = [-1.0, -0.3, -2.5, -0.05, -1.7];
    const OLD: [f64; 5] = [-1.2, -0.2, -1.0, -0.1, -1.75];

    /// The derivative of `f` at `x`, by central differences.
    fn fd(f: impl Fn(f64) -> f64, x: f64) -> f64 {
        let h = 1e-6;
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    /// Each token's gradient is the derivative, by its own log-probability, of the response's
    /// summed terms: a token-level term depends on its own token only, and a sequence-level
    /// loss puts `L` on all `n` tokens, so both reduce to the formulas of the module header.
    #[test]
    fn gradients_are_the_derivatives_of_the_summed_terms() {
        // CISPO is left out: its weight is a constant of the surrogate, so its gradient is not
        // the derivative of its value (tested in `cispo_keeps_the_gradient_of_a_capped_token`).
        // Wide clips so that GSPO's ratio is inside them, then narrow ones so that it is not.
        let sel = [false, true, false, true, false];
        for (eps, gmpo_clip) in [(0.5, 0.4), (1e-4, 0.07)] {
            let p = LossParams {
                gspo_eps_low: eps,
                gspo_eps_high: eps,
                gmpo_clip_low: gmpo_clip,
                gmpo_clip_high: gmpo_clip,
                ..LossParams::default()
            };
            for loss in PolicyLoss::ALL.iter().copied() {
                if loss == PolicyLoss::Cispo {
                    continue;
                }
                for adv in [0.9, -1.1] {
                    let terms = response_terms(loss, &NEW, &OLD, adv, &sel, &p).unwrap();
                    if loss.level() == LossLevel::Sequence {
                        let l0 = terms[0].loss;
                        assert!(terms.iter().all(|t| t.loss == l0), "{loss}: one value");
                    }
                    for t in 0..NEW.len() {
                        let f = |x: f64| {
                            let mut new = NEW;
                            new[t] = x;
                            let terms = response_terms(loss, &new, &OLD, adv, &sel, &p).unwrap();
                            terms.iter().map(|u| u.loss).sum::<f64>()
                        };
                        let g = fd(f, NEW[t]);
                        assert!(
                            (g - terms[t].grad).abs() < 1e-5,
                            "{loss} eps {eps} adv {adv} token {t}: {g} vs {}",
                            terms[t].grad
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ppo_is_the_spec_token_loss_and_equal_ratios_give_minus_a() {
        let p = LossParams::default();
        let terms = response_terms(PolicyLoss::Ppo, &NEW, &OLD, 0.5, &[], &p).unwrap();
        for (t, term) in terms.iter().enumerate() {
            assert_eq!(term.loss, token_loss(NEW[t], OLD[t], 0.5, &p.clip()).loss);
        }
        // On-policy (r = 1) every loss has PPO's gradient -A; every value is -A but CISPO's
        // (REINFORCE form, -A logp) and SAPO's (the gate's -2A/tau).
        for loss in PolicyLoss::ALL.iter().copied() {
            let sel = vec![false; 5];
            for (t, term) in response_terms(loss, &OLD, &OLD, 0.5, &sel, &p)
                .unwrap()
                .iter()
                .enumerate()
            {
                assert!((term.grad + 0.5).abs() < 1e-12, "{loss}: {term:?}");
                let want = match loss {
                    PolicyLoss::Cispo => -0.5 * OLD[t],
                    PolicyLoss::Sapo => -0.5 * 2.0 / p.sapo_tau_pos,
                    _ => -0.5,
                };
                assert!((term.loss - want).abs() < 1e-12, "{loss}: {term:?}");
            }
        }
    }

    #[test]
    fn gspo_clips_the_sequence_ratio_and_gmpo_the_token_ratios() {
        let p = LossParams::default();
        // Mean log-ratio 0.01 > log(1 + 4e-4): clipped above for A > 0, no gradient.
        let new = [0.01, 0.01];
        let t = response_terms(PolicyLoss::Gspo, &new, &[0.0, 0.0], 1.0, &[], &p).unwrap();
        assert_eq!(t[0].region, ClipRegion::ClippedHigh);
        assert_eq!(t[0].grad, 0.0);
        assert!((t[0].loss + 1.0004).abs() < 1e-12);
        // For A < 0 the same ratio is on the side that keeps its gradient.
        let t = response_terms(PolicyLoss::Gspo, &new, &[0.0, 0.0], -1.0, &[], &p).unwrap();
        assert_eq!(t[0].region, ClipRegion::Unclipped);
        // GMPO: a token's log-ratio of 1.0 is clipped to 0.4 for A > 0; the other stays.
        let t = response_terms(PolicyLoss::Gmpo, &[1.0, 0.1], &[0.0, 0.0], 1.0, &[], &p).unwrap();
        assert_eq!(t[0].region, ClipRegion::ClippedHigh);
        assert_eq!(t[1].region, ClipRegion::Unclipped);
        assert!((t[0].loss + (0.25f64).exp()).abs() < 1e-12);
    }

    #[test]
    fn cispo_keeps_the_gradient_of_a_capped_token() {
        let p = LossParams {
            cispo_eps_high: 0.2,
            ..LossParams::default()
        };
        let t = response_terms(PolicyLoss::Cispo, &[1.0], &[0.0], 2.0, &[], &p).unwrap()[0];
        assert_eq!(t.region, ClipRegion::ClippedHigh);
        assert!((t.grad + 2.0 * 1.2).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn unknown_names_list_the_valid_ones_and_bad_settings_are_errors() {
        let e = "gpso".parse::<PolicyLoss>().unwrap_err().to_string();
        for name in ["ppo", "gspo", "cispo", "sapo", "gmpo", "clip-cov", "kl-cov"] {
            assert!(e.contains(name), "{e}");
        }
        let p = LossParams {
            clip_cov_frac: 0.0,
            sapo_tau_neg: -1.0,
            ..LossParams::default()
        };
        assert!(p.validate(PolicyLoss::ClipCov).is_err());
        assert!(p.validate(PolicyLoss::Sapo).is_err());
        assert!(p.validate(PolicyLoss::Gspo).is_ok());
    }
}
