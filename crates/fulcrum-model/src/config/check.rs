//! Every hyper-parameter checked alone and against the others before anything is allocated
//! (the bounds are [`crate::limits::model`]'s, each with why).

use super::{Field, ModelConfig};
use crate::error::HyperProblem;
use crate::limits::model as limits;

pub(super) const WHY_VOCAB: &str = "64 times the largest vocabularies";
pub(super) const WHY_HIDDEN: &str = "four times the widest open models";
pub(super) const WHY_INTERMEDIATE: &str = "about five times the widest open models";
pub(super) const WHY_LAYERS: &str = "eight times the deepest open models";
pub(super) const WHY_HEADS: &str = "eight times the most heads of open models";
pub(super) const WHY_HEAD_DIM: &str = "four times the largest head dimension of open models";
pub(super) const WHY_POSITIONS: &str = "ten times the longest context of open models";

/// `value` in `1..=max`.
pub(super) fn check_count(
    value: i64,
    max: i64,
    why: &'static str,
) -> std::result::Result<(), HyperProblem> {
    if value < 1 {
        Err(HyperProblem::TooSmall {
            value: value.to_string(),
            min: "1".into(),
        })
    } else if value > max {
        Err(HyperProblem::TooLarge {
            value: value.to_string(),
            limit: max.to_string(),
            why,
        })
    } else {
        Ok(())
    }
}

/// `value` finite and > 0.
pub(super) fn check_positive(value: f64) -> std::result::Result<(), HyperProblem> {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(HyperProblem::NotPositiveFinite {
            value: value.to_string(),
        })
    }
}

impl ModelConfig {
    /// Checks every hyper-parameter alone and against the others, before anything is
    /// allocated: sizes at least 1 and at most the bounds of [`crate::limits::model`], key/value
    /// heads dividing the heads, an even head dimension (RoPE rotates pairs), a finite positive
    /// RoPE base and norm epsilon below 1, token ids inside the vocabulary. The error names
    /// the field as `name` spells it (the file's own naming: [`Field::hf`], [`Field::gguf`]).
    pub fn check(
        &self,
        name: &dyn Fn(Field) -> String,
    ) -> std::result::Result<(), (Field, HyperProblem)> {
        let count = |field: Field, value: i64, max: i64, why: &'static str| {
            check_count(value, max, why).map_err(|p| (field, p))
        };
        count(Field::Vocab, self.vocab_size, limits::MAX_VOCAB, WHY_VOCAB)?;
        count(
            Field::Hidden,
            self.hidden_size,
            limits::MAX_HIDDEN,
            WHY_HIDDEN,
        )?;
        count(
            Field::Intermediate,
            self.intermediate_size,
            limits::MAX_INTERMEDIATE,
            WHY_INTERMEDIATE,
        )?;
        count(
            Field::Layers,
            self.num_layers,
            limits::MAX_LAYERS,
            WHY_LAYERS,
        )?;
        count(Field::Heads, self.num_heads, limits::MAX_HEADS, WHY_HEADS)?;
        count(
            Field::KvHeads,
            self.num_kv_heads,
            limits::MAX_HEADS,
            WHY_HEADS,
        )?;
        if self.num_heads % self.num_kv_heads != 0 {
            return Err((
                Field::KvHeads,
                HyperProblem::Inconsistent(format!(
                    "{} does not divide {} = {} (each key/value head serves a whole group of \
                     query heads)",
                    self.num_kv_heads,
                    name(Field::Heads),
                    self.num_heads
                )),
            ));
        }
        count(
            Field::HeadDim,
            self.head_dim,
            limits::MAX_HEAD_DIM,
            WHY_HEAD_DIM,
        )?;
        if self.head_dim % 2 != 0 {
            return Err((
                Field::HeadDim,
                HyperProblem::Inconsistent(format!("must be even for RoPE, got {}", self.head_dim)),
            ));
        }
        check_positive(self.rms_norm_eps).map_err(|p| (Field::NormEps, p))?;
        if self.rms_norm_eps >= 1.0 {
            return Err((
                Field::NormEps,
                HyperProblem::Inconsistent(format!(
                    "must be below 1, got {} (models use 1e-6 to 1e-5; 1 or more would swamp \
                     the activations it normalises)",
                    self.rms_norm_eps
                )),
            ));
        }
        check_positive(self.rope_theta).map_err(|p| (Field::RopeTheta, p))?;
        count(
            Field::MaxPositions,
            self.max_position_embeddings,
            limits::MAX_POSITIONS,
            WHY_POSITIONS,
        )?;
        let token = |field: Field, id: i64| {
            if (0..self.vocab_size).contains(&id) {
                Ok(())
            } else {
                Err((
                    field,
                    HyperProblem::Inconsistent(format!(
                        "token id {id} is outside the vocabulary 0..{} ({} = {})",
                        self.vocab_size,
                        name(Field::Vocab),
                        self.vocab_size
                    )),
                ))
            }
        };
        if let Some(bos) = self.bos_token_id {
            token(Field::BosToken, bos)?;
        }
        for &eos in &self.eos_token_ids {
            token(Field::EosToken, eos)?;
        }
        Ok(())
    }
}
