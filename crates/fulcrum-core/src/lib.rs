//! fulcrum-core: the exact mathematics of one GRPO-style update, on plain slices.
//!
//! This crate owns what `shared/spec/aggregation.md` specifies, plus the two small things every
//! other crate shares (names of closed sets, the random generator), and nothing else:
//!
//! - [`rules`]: every aggregation rule (`token`, `token-group`, `seq`, `seq-sum`, `drgrpo`,
//!   `ba`, `ba-batch`) as a per-response weight function of the **whole step batch**;
//! - [`advantages`]: the group-relative advantage estimators (`grpo`, `mean`, `rloo`, `opo`);
//! - [`ppo_loss`]: the per-token PPO loss with asymmetric clip and dual clip, and its statistics;
//! - [`policy_loss`]: the policy-loss family (PPO, GSPO, CISPO, SAPO, GMPO, Clip-Cov, KL-Cov)
//!   in token form, and how each meets the rules;
//! - [`diagnostics`]: the length, group-mix and per-rule mass diagnostics of the spec;
//! - [`stats`]: the few small statistics the rest needs;
//! - [`names`]: the closed sets' one spelling ([`closed_set!`]), with "did you mean" errors;
//! - [`rng`]: SplitMix64 and the seed derivations every crate of fulcrum draws from;
//! - [`analysis`]: the `fulcrum analyze --json` document, shared with the Python package.
//!
//! It has no tensor library and no micro-batch type: weights are a function of the whole batch,
//! so a loss that depends on how the batch was split cannot be written with this API.
//!
//! Precision: everything is `f64`. The spec's worked examples are reproduced to 1e-9 relative.
//!
//! ```
//! use fulcrum_core::{advantages, Estimator, Rule, RuleParams, StepBatch};
//!
//! let groups = [0, 0, 0, 0];
//! let rewards = [1.0, 0.0, 0.0, 1.0];
//! let lengths = [5, 12, 9, 3];
//! let adv = advantages::compute(Estimator::Grpo, &groups, &rewards, &lengths)?;
//! let batch = StepBatch::new(&groups, &lengths, &adv)?;
//! let w = Rule::Ba.weights(&batch, &RuleParams::default());
//! // Balanced Aggregation: within a sign subset every token weighs the same.
//! assert_eq!(w[0], w[3]);
//! # Ok::<(), fulcrum_core::CoreError>(())
//! ```

pub mod advantages;
pub mod analysis;
mod batch;
pub mod cov_selection;
pub mod diagnostics;
mod error;
pub mod names;
pub mod policy_loss;
pub mod ppo_loss;
pub mod rng;
pub mod rules;
pub mod stats;

/// serde, for the implementations that [`closed_set!`] writes in other crates.
#[doc(hidden)]
pub use serde as __serde;

pub use advantages::Estimator;
pub use analysis::AnalysisReport;
pub use batch::StepBatch;
pub use diagnostics::{Diagnostics, LengthDiagnostics, RuleMass};
pub use error::CoreError;
pub use policy_loss::{LossLevel, LossParams, PolicyLoss};
pub use ppo_loss::{ClipParams, ClipStats, KlEstimator, TokenLoss};
pub use rng::SplitMix64;
pub use rules::{BaCount, Rule, RuleParams};

/// The aggregated loss `J = sum_i w_i * sum_t l_{i,t}` (spec: "Every aggregation rule is linear
/// in the token losses").
///
/// `token_losses[i]` holds response `i`'s per-token losses. Because `weights` come from the whole
/// step batch, summing this over any partition of the responses gives the same total.
pub fn weighted_loss<T: AsRef<[f64]>>(
    weights: &[f64],
    token_losses: &[T],
) -> Result<f64, CoreError> {
    error::check_len("token_losses", weights.len(), token_losses.len())?;
    Ok(weights
        .iter()
        .zip(token_losses)
        .map(|(w, l)| {
            if *w == 0.0 {
                0.0
            } else {
                w * l.as_ref().iter().sum::<f64>()
            }
        })
        .sum())
}
