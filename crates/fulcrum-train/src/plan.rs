//! The update plan of one step: which responses take part with which advantage and weight, and
//! how the step batch is cut into mini-batches of whole groups (design.md step 6).

use crate::packing::Item;
use crate::rollout::Rollout;

/// Every response of the step with its numbers, and the mini-batches of the update.
pub struct UpdatePlan<'a> {
    pub items: Vec<Item<'a>>,
    /// Group ids of each mini-batch, in order of first appearance.
    pub mini_batches: Vec<Vec<usize>>,
    /// The weight of each token of the KL and entropy terms (a token mean over the step).
    pub reg_weight: f64,
}

impl<'a> UpdatePlan<'a> {
    /// Plans `mini_batches` optimizer steps over `rollouts` (fewer when there are fewer groups),
    /// with the rule's `weights` of the whole step batch and the loss-masked `loss_lengths`;
    /// `selection` holds each response's Clip-Cov / KL-Cov choice (empty when the loss has none).
    ///
    /// Why the weights are scaled by the number of mini-batches `n`: each optimizer step sees
    /// only its share of the batch, about `1/n` of the loss. Multiplying every weight by `n`
    /// gives each step a loss of the usual scale while the relative weights stay those of the
    /// whole batch, so the rule's balance is the same whatever `n` is.
    pub fn new(
        rollouts: &'a [Rollout],
        advantages: &[f64],
        weights: &[f64],
        loss_lengths: &[i64],
        selection: &'a [Vec<bool>],
        mini_batches: usize,
    ) -> Self {
        let group_ids = groups_in_order(rollouts);
        let n_mini = mini_batches.min(group_ids.len()).max(1);
        let active_tokens: i64 = loss_lengths.iter().sum();
        let reg_weight = if active_tokens > 0 {
            n_mini as f64 / active_tokens as f64
        } else {
            0.0
        };
        let items = rollouts
            .iter()
            .enumerate()
            .map(|(i, x)| Item {
                rollout: x,
                advantage: advantages[i],
                weight: weights[i] * n_mini as f64,
                active: loss_lengths[i] > 0,
                selected: selection.get(i).map(Vec::as_slice),
            })
            .collect();
        let per_mini = group_ids.len().div_ceil(n_mini).max(1);
        UpdatePlan {
            items,
            mini_batches: group_ids.chunks(per_mini).map(<[usize]>::to_vec).collect(),
            reg_weight,
        }
    }

    /// The responses of `groups` (a mini-batch, or one rank's share of it), in step order.
    pub fn items_of(&self, groups: &[usize]) -> Vec<Item<'a>> {
        self.items
            .iter()
            .filter(|it| groups.contains(&it.rollout.group))
            .copied()
            .collect()
    }
}

/// The distinct group ids in order of first appearance.
fn groups_in_order(rollouts: &[Rollout]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    rollouts
        .iter()
        .map(|x| x.group)
        .filter(|g| seen.insert(*g))
        .collect()
}
