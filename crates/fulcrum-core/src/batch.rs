//! [`StepBatch`]: the validated description of one optimizer step's responses (group, length,
//! advantage), from which every rule's weights and every diagnostic are computed.

use std::collections::HashMap;
use std::hash::Hash;

use crate::error::{check_finite, check_len, check_lengths};
use crate::CoreError;

/// One optimizer step's batch `B`, as the spec's notation has it: for response `i`, its group
/// `g(i)`, its loss-masked length `L_i` and its advantage `A_i`.
///
/// Responses of a group need not be adjacent; group ids are any hashable values and are mapped
/// to dense indices `0..M` in order of first appearance.
#[derive(Debug, Clone, PartialEq)]
pub struct StepBatch {
    group: Vec<usize>,
    n_groups: usize,
    lengths: Vec<f64>,
    advantages: Vec<f64>,
}

impl StepBatch {
    /// Validates and builds the batch. Errors: mismatched input lengths, a negative length, a
    /// non-finite advantage.
    pub fn new<G: Hash + Eq>(
        groups: &[G],
        lengths: &[i64],
        advantages: &[f64],
    ) -> Result<Self, CoreError> {
        check_len("lengths", groups.len(), lengths.len())?;
        check_len("advantages", groups.len(), advantages.len())?;
        check_lengths(lengths)?;
        check_finite("advantages", advantages)?;
        let (group, n_groups) = dense_group_index(groups);
        Ok(Self {
            group,
            n_groups,
            lengths: lengths.iter().map(|&l| l as f64).collect(),
            advantages: advantages.to_vec(),
        })
    }

    /// Number of responses.
    pub fn len(&self) -> usize {
        self.group.len()
    }

    /// True when the batch holds no response.
    pub fn is_empty(&self) -> bool {
        self.group.is_empty()
    }

    /// `M`, the number of groups.
    pub fn n_groups(&self) -> usize {
        self.n_groups
    }

    /// Dense group index of each response (`0..M`, in order of first appearance).
    pub fn group(&self) -> &[usize] {
        &self.group
    }

    /// `L_i` of each response, as `f64`.
    pub fn lengths(&self) -> &[f64] {
        &self.lengths
    }

    /// `A_i` of each response.
    pub fn advantages(&self) -> &[f64] {
        &self.advantages
    }

    /// `S`, the number of responses with `L_i > 0`.
    pub fn n_nonempty(&self) -> usize {
        self.lengths.iter().filter(|&&l| l > 0.0).count()
    }

    /// `sum_i L_i` over the batch.
    pub fn total_tokens(&self) -> f64 {
        self.lengths.iter().sum()
    }

    /// Iterates `(group, L_i, A_i)` per response.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (usize, f64, f64)> + '_ {
        self.group
            .iter()
            .zip(&self.lengths)
            .zip(&self.advantages)
            .map(|((&g, &l), &a)| (g, l, a))
    }
}

/// Maps arbitrary group ids to `0..M` in order of first appearance.
pub(crate) fn dense_group_index<G: Hash + Eq>(groups: &[G]) -> (Vec<usize>, usize) {
    let mut ids: HashMap<&G, usize> = HashMap::with_capacity(groups.len() / 4 + 1);
    let dense = groups
        .iter()
        .map(|g| {
            let next = ids.len();
            *ids.entry(g).or_insert(next)
        })
        .collect();
    (dense, ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_mismatched_inputs() {
        let err = StepBatch::new(&[0, 0], &[1], &[0.0, 0.0]).unwrap_err();
        assert_eq!(
            err,
            CoreError::LengthMismatch {
                field: "lengths",
                expected: 2,
                got: 1
            }
        );
        let err = StepBatch::new(&[0, 0], &[1, 2], &[0.0]).unwrap_err();
        assert!(matches!(
            err,
            CoreError::LengthMismatch {
                field: "advantages",
                ..
            }
        ));
    }

    #[test]
    fn rejects_negative_length_and_nan_advantage() {
        let err = StepBatch::new(&[0, 0], &[3, -1], &[0.0, 0.0]).unwrap_err();
        assert_eq!(
            err,
            CoreError::NegativeLength {
                index: 1,
                value: -1
            }
        );
        let err = StepBatch::new(&[0, 0], &[3, 1], &[0.0, f64::NAN]).unwrap_err();
        assert!(matches!(
            err,
            CoreError::NonFinite {
                field: "advantages",
                index: 1,
                ..
            }
        ));
    }

    #[test]
    fn group_ids_are_dense_in_order_of_first_appearance() {
        let b = StepBatch::new(&["b", "a", "b", "c"], &[1, 2, 3, 4], &[0.0; 4]).unwrap();
        assert_eq!(b.group(), &[0, 1, 0, 2]);
        assert_eq!(b.n_groups(), 3);
    }
}
