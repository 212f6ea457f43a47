#!/usr/bin/env python3
"""Build the reference fixtures for fulcrum-model's logits tests.

Creates tiny random Llama, Qwen2 and Qwen3 models with HF `transformers` (CPU), saves each as an
HF folder under crates/fulcrum-model/tests/fixtures/<name>/ and records, in reference.safetensors
next to it, fixed input ids, the model's logits on them (f32, eager attention) and a greedy
continuation from HF `generate`. The Rust tests load the folders and must match within 1e-4.

Run once after changing it (needs `transformers` in the project venv):
    .venv/bin/pip install transformers==5.24.0 && .venv/bin/python tools/make_fixtures.py
"""
import pathlib

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/fulcrum-model/tests/fixtures"
COMMON = dict(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)
MODELS = {
    # Llama with an untied head (SmolLM2 ties; the loader must handle both).
    "llama": (LlamaConfig, LlamaForCausalLM,
              dict(tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0)),
    # Qwen2: q/k/v biases, tied head, large RoPE base.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM,
              dict(tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0)),
    # Qwen3: q/k norms and a head_dim that is not hidden/heads.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM,
              dict(tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=1000000.0,
                   head_dim=32)),
}


def perturb(model):
    """Random norm scales and biases, so that the tests exercise them (HF inits them to 1, 0)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))


def main():
    for i, (name, (cfg_cls, model_cls, extra)) in enumerate(MODELS.items()):
        torch.manual_seed(1000 + i)
        cfg = cfg_cls(**COMMON, **extra)
        cfg._attn_implementation = "eager"
        model = model_cls(cfg).eval()
        perturb(model)
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder, safe_serialization=True)
        input_ids = torch.randint(3, COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            logits = model(input_ids).logits.float()
            prompt = input_ids[:1, :5]
            gen = model.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
        save_file({"input_ids": input_ids.contiguous(), "logits": logits.contiguous(),
                   "generate_prompt": prompt.clone(),
                   "generate_tokens": gen[:, prompt.shape[1]:].contiguous()},
                  str(folder / "reference.safetensors"))
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, {size} bytes in {folder}")


if __name__ == "__main__":
    main()
