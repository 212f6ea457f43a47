"""The reference GRPO step of ../shared/bench-workload.md in TRL's GRPOTrainer (CPU, f32).

Three modes:
  --build DIR   write the benchmark's Qwen2-shaped model (random init, seed 0, 3,173,376
                parameters) and its 23-id character tokenizer as an HF folder, so that fulcrum
                loads exactly the same weights;
  --warm SRC DST  the warmed-up variant: SRC fine-tuned for a fixed 1,500 supervised steps
                (seed 0, one thread) on the workload's prompts with the answer `A<sum>`, so
                that many groups have mixed rewards and a step does real work; written as an
                HF folder that both sides load, with DST/warm.json recording the steps, the
                sampled accuracy reached and the weights' sha256;
  --model DIR   time GRPOTrainer on it: `--warmup` steps, then `--steps` timed steps; prints one
                JSON line with every step's seconds and the median.
A step is timed from the start of sampling to the end of the optimizer step (TrainerCallback
on_step_begin to on_step_end, which brackets generation, scoring, forward, backward and AdamW).
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

VOCAB = ["<pad>", "<bos>", "<eos>", "<unk>"] + [str(d) for d in range(10)] + list("+-*=:; SA")


def build(out_dir):
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    assert len(VOCAB) == 23
    cfg = Qwen2Config(
        vocab_size=23, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
        tie_word_embeddings=True, hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    if n != 3_173_376:
        sys.exit(f"bench model has {n} parameters, the workload says 3,173,376")
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(VOCAB[:4])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>")
    tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(out_dir)) or ".")
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    os.replace(tmp, out_dir)


def digit_prompts(count, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(3, 9)
        out.append("S " + "".join(str(rng.randint(0, 9)) for _ in range(n)) + ":")
    return out


def reward(prompts, completions, **_):
    scores = []
    for p, c in zip(prompts, completions):
        want = str(sum(int(ch) for ch in p[2:-1]))
        got = c[c.rfind("A") + 1:] if "A" in c else c
        scores.append(1.0 if got.strip() == want else 0.0)
    return scores


WARM_STEPS = 1500


def sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def warm(src, dst, steps=WARM_STEPS):
    """A fixed number of supervised steps on `S <digits>:` -> `A<sum><eos>` (seed 0, one
    thread, so the same weights on any machine of the same kind of CPU), then the sampled
    accuracy (T = 1, 128 fresh prompts, seeded) measured and reported, never used to decide
    when to stop. Writes DST and DST/warm.json (steps, accuracy, the weights' sha256)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    rng = random.Random(1)
    ids = {t: i for i, t in enumerate(VOCAB)}

    def encode(text):
        return [ids[ch] for ch in text]

    def batch(n):
        rows, masks = [], []
        for p in digit_prompts(n, seed=rng.randrange(1 << 30)):
            a = "A" + str(sum(int(ch) for ch in p[2:-1]))
            x = encode(p) + encode(a) + [2]
            rows.append(x)
            masks.append([0] * len(encode(p)) + [1] * (len(x) - len(encode(p))))
        w = max(map(len, rows))
        x = torch.tensor([r + [0] * (w - len(r)) for r in rows])
        m = torch.tensor([mm + [0] * (w - len(mm)) for mm in masks], dtype=torch.float32)
        return x, m

    def sampled_accuracy():
        torch.manual_seed(12345)
        prompts = digit_prompts(128, seed=12345)
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=16, pad_token_id=0, eos_token_id=2)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return sum(reward([p], [t])[0] for p, t in zip(prompts, texts)) / len(prompts)

    for step in range(1, steps + 1):
        x, m = batch(64)
        logits = model(input_ids=x).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        loss = (nll * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 250 == 0:
            print(f"warm: step {step}: loss {loss.item():.3f}", file=sys.stderr)
    acc = sampled_accuracy()
    tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(dst)) or ".")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    record = {"supervised_steps": steps, "seed": 0, "threads": 1, "sampled_accuracy": acc,
              "model_sha256": sha256(os.path.join(tmp, "model.safetensors"))}
    with open(os.path.join(tmp, "warm.json"), "w") as f:
        json.dump(record, f)
    os.replace(tmp, dst)
    return record


def time_trl(model_dir, warmup, steps, loss_type, threads):
    import torch
    torch.set_num_threads(threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    total = warmup + steps
    data = Dataset.from_dict({"prompt": digit_prompts(16 * total + 16)})
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=128,
        gradient_accumulation_steps=1, num_generations=8, max_completion_length=64,
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=1e-5, adam_beta1=0.9,
        adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        lr_scheduler_type="constant", beta=0.0, epsilon=0.2, num_iterations=1,
        loss_type=loss_type, max_steps=total, use_cpu=True, bf16=False, fp16=False,
        report_to="none", save_strategy="no", logging_steps=10_000, seed=0,
        disable_tqdm=True, shuffle_dataset=False,
    )
    times = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=tok, callbacks=[Timer()])
    trainer.train()
    timed = times[warmup:]
    return {"side": "trl", "loss_type": loss_type, "threads": torch.get_num_threads(),
            "step_s": timed, "median_s": statistics.median(timed)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--model")
    ap.add_argument("--warm", nargs=2, metavar=("SRC", "DST"))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--loss-type", default="dapo")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.build:
        build(a.build)
    if a.warm:
        record = warm(*a.warm)
        print(f"warm: {json.dumps(record)}", file=sys.stderr)
    if a.model:
        print(json.dumps(time_trl(a.model, a.warmup, a.steps, a.loss_type, a.threads)))


if __name__ == "__main__":
    main()
