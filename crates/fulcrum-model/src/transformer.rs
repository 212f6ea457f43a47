//! The decoder-only transformer: Llama, Qwen2/2.5 and Qwen3 in one implementation.
//!
//! Built bottom-up (RmsNorm, [`Linear`](crate::linear::Linear) from `linear.rs`, Mlp, Attention, DecoderLayer, Transformer); every parameter
//! is created under its HF name (`model.layers.3.self_attn.q_proj.weight`, ...), so loading is a
//! name-for-name copy. The differences between families are config fields: q/k/v biases,
//! per-head q/k RMSNorm (Qwen3), explicit head dimension, tied LM head, RoPE base.
//! Attention is libtorch's scaled-dot-product attention (fused kernels with a backward pass);
//! RoPE is the rotate-half form HF uses. The KV cache is not hidden in the layers: callers pass a
//! [`KvCache`] explicitly. Not here: sampling (`sampler.rs`), log-probabilities (`logprobs.rs`).

use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

use crate::config::ModelConfig;
use crate::error::{ModelError, Result, TorchContext};
use crate::kv_cache::KvCache;
use crate::linear::{Linear, INIT_STD};

/// Root-mean-square normalisation with a learned scale.
#[derive(Debug)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(p: nn::Path, dim: i64, eps: f64) -> Self {
        RmsNorm {
            weight: p.var("weight", &[dim], Init::Const(1.0)),
            eps,
        }
    }

    pub fn forward(&self, xs: &Tensor) -> Tensor {
        let dim = *xs.size().last().unwrap_or(&0);
        xs.rms_norm([dim], Some(&self.weight), self.eps)
    }
}

/// The SwiGLU feed-forward block: `down(silu(gate(x)) * up(x))`.
#[derive(Debug)]
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    pub fn new(p: nn::Path, cfg: &ModelConfig) -> Self {
        let (d, f) = (cfg.hidden_size, cfg.intermediate_size);
        Mlp {
            gate_proj: Linear::new(&p / "gate_proj", d, f, false),
            up_proj: Linear::new(&p / "up_proj", d, f, false),
            down_proj: Linear::new(&p / "down_proj", f, d, false),
        }
    }

    pub fn forward(&self, xs: &Tensor) -> Tensor {
        let gate = self.gate_proj.forward(xs).silu();
        self.down_proj.forward(&(gate * self.up_proj.forward(xs)))
    }
}

/// Rotary position embedding tables for a batch of positions.
#[derive(Debug)]
pub struct Rope {
    inv_freq: Tensor,
}

impl Rope {
    fn new(cfg: &ModelConfig, device: Device) -> Self {
        let half = cfg.head_dim / 2;
        let exponents = Tensor::arange(half, (Kind::Double, device)) * 2.0 / cfg.head_dim as f64;
        let inv_freq = Tensor::from(cfg.rope_theta)
            .to_device(device)
            .pow(&exponents)
            .reciprocal()
            .to_kind(Kind::Float);
        Rope { inv_freq }
    }

    /// `(cos, sin)`, each `[batch, 1, seq, head_dim]` in `kind`, for int64 `positions` `[batch, seq]`.
    fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq;
        let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
        (emb.cos().to_kind(kind), emb.sin().to_kind(kind))
    }
}

fn apply_rope(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = xs.size()[3] / 2;
    let x1 = xs.narrow(3, 0, half);
    let x2 = xs.narrow(3, half, half);
    let rotated = Tensor::cat(&[&x2.neg(), &x1], 3);
    xs * cos + rotated * sin
}

/// How attention is masked in one forward.
#[derive(Debug)]
pub enum AttnMask<'a> {
    /// Plain causal attention over the sequence (training, unpadded prefill).
    Causal,
    /// No mask: every query sees every key (one decode step without padding).
    None,
    /// Boolean `[batch, 1, queries, keys]`, true where attention is allowed.
    Explicit(&'a Tensor),
}

/// What a forward does with each layer's keys and values besides attending to them.
pub(crate) enum LayerKv<'a> {
    /// Nothing more (a plain forward).
    Own,
    /// Appended to the sampler's cache; attention covers everything cached so far.
    Cache(&'a mut KvCache),
    /// Kept with their graph, one entry per layer, for forwards that continue this sequence
    /// (the shared prompt of a group, `shared_prompt.rs`).
    Keep(&'a mut Vec<(Tensor, Tensor)>),
    /// Attention covers these keys and values of a one-row prefix (shared by every row, and
    /// differentiated through) before the input's own.
    After(&'a [(Tensor, Tensor)]),
}

/// Grouped-query self-attention with optional q/k/v biases and per-head q/k norms.
#[derive(Debug)]
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: i64,
    num_kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    pub fn new(p: nn::Path, cfg: &ModelConfig) -> Self {
        let d = cfg.hidden_size;
        let q = cfg.num_heads * cfg.head_dim;
        let kv = cfg.num_kv_heads * cfg.head_dim;
        let norm = |name: &str| RmsNorm::new(&p / name, cfg.head_dim, cfg.rms_norm_eps);
        Attention {
            q_proj: Linear::new(&p / "q_proj", d, q, cfg.qkv_bias),
            k_proj: Linear::new(&p / "k_proj", d, kv, cfg.qkv_bias),
            v_proj: Linear::new(&p / "v_proj", d, kv, cfg.qkv_bias),
            o_proj: Linear::new(&p / "o_proj", q, d, false),
            q_norm: cfg.qk_norm.then(|| norm("q_norm")),
            k_norm: cfg.qk_norm.then(|| norm("k_norm")),
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
        }
    }

    fn forward(
        &self,
        xs: &Tensor,
        rope: &(Tensor, Tensor),
        mask: &AttnMask,
        kv: &mut LayerKv,
        layer: usize,
    ) -> Tensor {
        let (b, t) = (xs.size()[0], xs.size()[1]);
        let heads = |proj: &Linear, n: i64, norm: &Option<RmsNorm>| {
            let h = proj.forward(xs).view([b, t, n, self.head_dim]);
            let h = match norm {
                Some(norm) => norm.forward(&h),
                None => h,
            };
            h.transpose(1, 2)
        };
        let q = apply_rope(
            &heads(&self.q_proj, self.num_heads, &self.q_norm),
            &rope.0,
            &rope.1,
        );
        let k = apply_rope(
            &heads(&self.k_proj, self.num_kv_heads, &self.k_norm),
            &rope.0,
            &rope.1,
        );
        let v = heads(&self.v_proj, self.num_kv_heads, &None);
        let (k, v) = match kv {
            LayerKv::Own => (k, v),
            LayerKv::Cache(cache) => cache.append(layer, &k, &v),
            LayerKv::Keep(kept) => {
                kept.push((k.shallow_clone(), v.shallow_clone()));
                (k, v)
            }
            LayerKv::After(prefix) => {
                let (pk, pv) = &prefix[layer];
                let rows = |t: &Tensor| t.expand([b, -1, -1, -1], false);
                (
                    Tensor::cat(&[rows(pk), k], 2),
                    Tensor::cat(&[rows(pv), v], 2),
                )
            }
        };
        let gqa = self.num_heads != self.num_kv_heads;
        if gqa && t == 1 && !matches!(mask, AttnMask::Causal) {
            // One decode step: the query heads sharing a KV head become that head's query rows
            // (`[B, kv, group, D]`), so attention reads the cached keys and values as they are
            // instead of the copies `enable_gqa` makes of them for every query head.
            let group = self.num_heads / self.num_kv_heads;
            let q = q.reshape([b, self.num_kv_heads, group, self.head_dim]);
            let m = match mask {
                AttnMask::Explicit(m) => Some(*m),
                _ => None,
            };
            let out = Tensor::scaled_dot_product_attention(&q, &k, &v, m, 0.0, false, None, false)
                .reshape([b, t, self.num_heads * self.head_dim]);
            return self.o_proj.forward(&out);
        }
        let out = match mask {
            AttnMask::Causal => Tensor::scaled_dot_product_attention::<Tensor>(
                &q, &k, &v, None, 0.0, true, None, gqa,
            ),
            AttnMask::None => Tensor::scaled_dot_product_attention::<Tensor>(
                &q, &k, &v, None, 0.0, false, None, gqa,
            ),
            AttnMask::Explicit(m) => {
                Tensor::scaled_dot_product_attention(&q, &k, &v, Some(*m), 0.0, false, None, gqa)
            }
        };
        let out = out
            .transpose(1, 2)
            .reshape([b, t, self.num_heads * self.head_dim]);
        self.o_proj.forward(&out)
    }
}

/// One pre-norm decoder block.
#[derive(Debug)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    pub fn new(p: nn::Path, cfg: &ModelConfig) -> Self {
        DecoderLayer {
            input_layernorm: RmsNorm::new(
                &p / "input_layernorm",
                cfg.hidden_size,
                cfg.rms_norm_eps,
            ),
            self_attn: Attention::new(&p / "self_attn", cfg),
            post_attention_layernorm: RmsNorm::new(
                &p / "post_attention_layernorm",
                cfg.hidden_size,
                cfg.rms_norm_eps,
            ),
            mlp: Mlp::new(&p / "mlp", cfg),
        }
    }

    fn forward(
        &self,
        xs: &Tensor,
        rope: &(Tensor, Tensor),
        mask: &AttnMask,
        kv: &mut LayerKv,
        layer: usize,
    ) -> Tensor {
        let h = xs
            + self
                .self_attn
                .forward(&self.input_layernorm.forward(xs), rope, mask, kv, layer);
        let out = self.mlp.forward(&self.post_attention_layernorm.forward(&h));
        h + out
    }
}

/// The whole model: embeddings, decoder layers, final norm and LM head.
#[derive(Debug)]
pub struct Transformer {
    config: ModelConfig,
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// `None` when tied to `embed_tokens`.
    lm_head: Option<Tensor>,
    rope: Rope,
}

impl Transformer {
    /// Create the parameters under `root` (the VarStore root) with HF names, randomly initialised.
    pub fn new(root: &nn::Path, cfg: &ModelConfig) -> Self {
        let model = root / "model";
        let embed_init = Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        };
        let embed_tokens =
            (&model / "embed_tokens").var("weight", &[cfg.vocab_size, cfg.hidden_size], embed_init);
        let layers = (0..cfg.num_layers)
            .map(|i| DecoderLayer::new(&model / "layers" / i, cfg))
            .collect();
        let norm = RmsNorm::new(&model / "norm", cfg.hidden_size, cfg.rms_norm_eps);
        let lm_head = (!cfg.tie_embeddings).then(|| {
            (root / "lm_head").var("weight", &[cfg.vocab_size, cfg.hidden_size], embed_init)
        });
        Transformer {
            config: cfg.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope: Rope::new(cfg, root.device()),
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Every projection with its HF name (`model.layers.N.self_attn.q_proj`), for LoRA.
    pub fn linears(&self) -> Vec<(String, &Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let (a, m) = (&l.self_attn, &l.mlp);
            let attn = [
                ("q_proj", &a.q_proj),
                ("k_proj", &a.k_proj),
                ("v_proj", &a.v_proj),
                ("o_proj", &a.o_proj),
            ];
            for (n, lin) in attn {
                out.push((format!("model.layers.{i}.self_attn.{n}"), lin));
            }
            for (n, lin) in [
                ("gate_proj", &m.gate_proj),
                ("up_proj", &m.up_proj),
                ("down_proj", &m.down_proj),
            ] {
                out.push((format!("model.layers.{i}.mlp.{n}"), lin));
            }
        }
        out
    }

    /// [`Transformer::linears`], mutable (attaching adapters).
    pub(crate) fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let (a, m) = (&mut l.self_attn, &mut l.mlp);
            let attn = [
                ("q_proj", &mut a.q_proj),
                ("k_proj", &mut a.k_proj),
                ("v_proj", &mut a.v_proj),
                ("o_proj", &mut a.o_proj),
            ];
            for (n, lin) in attn {
                out.push((format!("model.layers.{i}.self_attn.{n}"), lin));
            }
            for (n, lin) in [
                ("gate_proj", &mut m.gate_proj),
                ("up_proj", &mut m.up_proj),
                ("down_proj", &mut m.down_proj),
            ] {
                out.push((format!("model.layers.{i}.mlp.{n}"), lin));
            }
        }
        out
    }

    pub fn device(&self) -> Device {
        self.embed_tokens.device()
    }

    /// The dtype of the parameters (and of activations).
    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// Final hidden states `[batch, seq, hidden]` for int64 `input_ids` `[batch, seq]` at int64
    /// `positions` `[batch, seq]`. With a cache, keys and values are appended to it and
    /// attention covers everything cached so far.
    pub fn forward_hidden(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: &AttnMask,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        match cache {
            Some(cache) => self.forward_layers(input_ids, positions, mask, LayerKv::Cache(cache)),
            None => self.forward_layers(input_ids, positions, mask, LayerKv::Own),
        }
    }

    /// [`Transformer::forward_hidden`] with any use of the layers' keys and values.
    pub(crate) fn forward_layers(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: &AttnMask,
        mut kv: LayerKv,
    ) -> Result<Tensor> {
        let size = input_ids.size();
        if size.len() != 2 || positions.size() != size {
            return Err(ModelError::Invalid(format!(
                "input_ids must be [batch, seq] and positions the same shape, got {size:?} and {:?}",
                positions.size()
            )));
        }
        if let LayerKv::Cache(cache) = &kv {
            cache.reserve(size[1])?;
            if cache.batch() != size[0] {
                return Err(ModelError::Invalid(format!(
                    "KV cache has {} rows, input has {}",
                    cache.batch(),
                    size[0]
                )));
            }
        }
        let mut xs = self.embed(input_ids)?;
        let rope = self.rope.tables(positions, self.kind());
        for (i, layer) in self.layers.iter().enumerate() {
            xs = layer.forward(&xs, &rope, mask, &mut kv, i);
        }
        if let LayerKv::Cache(cache) = kv {
            cache.advance(size[1]);
        }
        Ok(self.norm.forward(&xs))
    }

    /// A full causal forward over `[batch, seq]` ids (positions 0..seq) that keeps no graph
    /// inside the decoder layers, only each layer's input: the activation checkpointing of
    /// [`CheckpointedTrunk`]. Returns the final hidden states as a leaf with gradient.
    pub fn forward_checkpointed(&self, input_ids: &Tensor) -> Result<CheckpointedTrunk<'_>> {
        let positions = full_positions(input_ids)?;
        let embedded = self.embed(input_ids)?;
        let rope = self.rope.tables(&positions, self.kind());
        let mut inputs = Vec::with_capacity(self.layers.len());
        let mut xs = embedded.detach();
        tch::no_grad(|| {
            for layer in &self.layers {
                let next = layer.forward(&xs, &rope, &AttnMask::Causal, &mut LayerKv::Own, 0);
                inputs.push(std::mem::replace(&mut xs, next));
            }
        });
        let last = xs.set_requires_grad(true);
        let hidden = self.norm.forward(&last);
        Ok(CheckpointedTrunk {
            net: self,
            embedded,
            inputs,
            rope,
            last,
            hidden,
        })
    }

    /// Token embeddings of int64 ids (an id outside the vocabulary is an error).
    fn embed(&self, input_ids: &Tensor) -> Result<Tensor> {
        Tensor::f_embedding(&self.embed_tokens, input_ids, -1, false, false).ctx(|| {
            format!(
                "embedding token ids (vocabulary {})",
                self.config.vocab_size
            )
        })
    }

    /// LM-head logits for hidden states `[..., hidden]`.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear::<Tensor>(self.lm_head.as_ref().unwrap_or(&self.embed_tokens), None)
    }

    /// Logits `[batch, seq, vocab]` of a full causal forward over unpadded or right-padded
    /// sequences (positions 0..seq); what training and reference checks use.
    pub fn forward(&self, input_ids: &Tensor) -> Result<Tensor> {
        let positions = full_positions(input_ids)?;
        let hidden = self.forward_hidden(input_ids, &positions, &AttnMask::Causal, None)?;
        Ok(self.logits(&hidden))
    }
}

/// Positions 0..seq for every row of `[batch, seq]` ids.
fn full_positions(input_ids: &Tensor) -> Result<Tensor> {
    let size = input_ids.size();
    if size.len() != 2 {
        return Err(ModelError::Invalid(format!(
            "input_ids must be [batch, seq], got {size:?}"
        )));
    }
    Ok(Tensor::arange(size[1], (Kind::Int64, input_ids.device()))
        .unsqueeze(0)
        .expand([size[0], size[1]], false))
}

/// The decoder stack run by [`Transformer::forward_checkpointed`]: what it needs to
/// back-propagate layer by layer, recomputing each layer's activations from its saved input.
/// Memory: one `[batch, seq, hidden]` tensor per layer plus one layer's activations, instead of
/// every layer's; cost: one more forward of the layers.
pub struct CheckpointedTrunk<'a> {
    net: &'a Transformer,
    /// Token embeddings, with their graph (to the embedding matrix).
    embedded: Tensor,
    /// The input of each layer (no graph).
    inputs: Vec<Tensor>,
    rope: (Tensor, Tensor),
    /// The last layer's output as a leaf: the gradient of the loss arrives in its `.grad`.
    last: Tensor,
    /// Final-normed hidden states (graph from `last`): what the head reads.
    pub hidden: Tensor,
}

impl CheckpointedTrunk<'_> {
    /// Back-propagates through the layers, last to first, once the loss's gradient has reached
    /// `hidden` (that is, after the backward of everything computed from it).
    pub fn backward(self) {
        let mut grad = self.last.grad();
        if !grad.defined() {
            return;
        }
        for (layer, input) in self.net.layers.iter().zip(&self.inputs).rev() {
            let leaf = input.detach().set_requires_grad(true);
            let out = layer.forward(&leaf, &self.rope, &AttnMask::Causal, &mut LayerKv::Own, 0);
            (out * &grad).sum(Kind::Float).backward();
            grad = leaf.grad();
        }
        // Frozen embeddings (LoRA) have no graph to continue into.
        if self.embedded.requires_grad() {
            (&self.embedded * grad).sum(Kind::Float).backward();
        }
    }
}
