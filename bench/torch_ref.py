#!/usr/bin/env python3
"""PyTorch (eager) counterparts of bench/engine.rs, same configs; prints one JSON object.

- train step: a plain Llama-style module (RMSNorm, RoPE, SDPA, SwiGLU; d 256, 4 layers,
  4 heads, ffn 1024, vocab 512), seq 256, batch 16, log-softmax loss, backward, grad clip,
  torch.optim.AdamW (defaults);
- sampling, batch 64, prompt 32, 128 new tokens, temperature 1: a straightforward KV-cache loop
  (cache grown by torch.cat each step) on the same module, and HF transformers' `generate` on a
  LlamaForCausalLM of the same shape (when transformers is installed).
Usage: torch_ref.py [--device cpu|cuda]
"""
import copy
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

D, LAYERS, HEADS, FFN, VOCAB = 256, 4, 4, 1024, 512
DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.RMSNorm(D, eps=1e-5)
        self.ln2 = nn.RMSNorm(D, eps=1e-5)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
        self.down = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin, cache=None):
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, t, HEADS, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if cache is not None:
            if cache[0] is not None:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            cache[0], cache[1] = k, v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.head = nn.Linear(D, VOCAB, bias=False)
        hd = D // HEADS
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)))

    def forward(self, ids, start=0, caches=None):
        t = ids.shape[1]
        pos = torch.arange(start, start + t, device=ids.device).float()
        f = torch.outer(pos, self.inv_freq)
        emb = torch.cat([f, f], -1)
        x = self.emb(ids)
        cos, sin = emb.cos()[None, None].to(x.dtype), emb.sin()[None, None].to(x.dtype)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, None if caches is None else caches[i])
        return self.head(self.norm(x))


def bench_train(model):
    ids = torch.randint(VOCAB, (16, 257), device=DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    times = []
    for i in range(7):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        logits = model(ids[:, :-1])
        logp = logits.float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        loss = -logp.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


@torch.no_grad()
def bench_naive_sampling(model, prompts, new_tokens=128):
    sync()
    t0 = time.perf_counter()
    caches = [[None, None] for _ in range(LAYERS)]
    logits = model(prompts, 0, caches)[:, -1]
    pos = prompts.shape[1]
    out = []
    for _ in range(new_tokens):
        probs = logits.float().softmax(-1)
        tok = torch.multinomial(probs, 1)
        out.append(tok)
        logits = model(tok, pos, caches)[:, -1]
        pos += 1
    sync()
    return time.perf_counter() - t0, len(out) * prompts.shape[0]


def bench_hf_generate(prompts, new_tokens=128):
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=512,
                      tie_word_embeddings=False, pad_token_id=0)
    model = LlamaForCausalLM(cfg).to(DEVICE).eval()
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
              min_new_tokens=new_tokens, pad_token_id=0)
    with torch.no_grad():
        model.generate(prompts[:4], **{**kw, "max_new_tokens": 8, "min_new_tokens": 8})

        def run():
            sync()
            t0 = time.perf_counter()
            out = model.generate(prompts, **kw)
            sync()
            return time.perf_counter() - t0, (out.shape[1] - prompts.shape[1]) * out.shape[0]

        return median_run(run)


def median_run(run, n=3):
    """The median (seconds, tokens) of n runs, as fulcrum's side reports it."""
    return sorted(run() for _ in range(n))[n // 2]


def main():
    torch.manual_seed(0)
    if DEVICE == "cpu":
        torch.set_num_threads(os.cpu_count())
    res = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    model = Model().to(DEVICE)
    res["train_step_s"] = bench_train(model)
    print(f"torch train step: {res['train_step_s'] * 1e3:.1f} ms", file=sys.stderr)
    model.eval()
    prompts = torch.randint(VOCAB, (64, 32), device=DEVICE)
    bench_naive_sampling(model, prompts[:4], 8)
    secs, n = median_run(lambda: bench_naive_sampling(model, prompts))
    res["naive_sample_s"], res["naive_sample_tokens_per_s"] = secs, n / secs
    if DEVICE == "cpu":
        # The same loop with bf16 weights (and so a bf16 cache), against fulcrum's bf16 line.
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        bench_naive_sampling(bf16, prompts[:4], 8)
        res["naive_sample_bf16_s"] = median_run(lambda: bench_naive_sampling(bf16, prompts))[0]
        del bf16
    print(f"torch naive KV loop: {secs:.2f} s", file=sys.stderr)
    hf = bench_hf_generate(prompts)
    if hf is not None:
        res["hf_generate_s"], res["hf_generate_tokens_per_s"] = hf[0], hf[1] / hf[0]
        print(f"HF generate: {hf[0]:.2f} s", file=sys.stderr)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
