"""TRL's side of the real-model race (bench/grpo_real.sh): GRPOTrainer on the model and prompts
fulcrum trains on, with the real-model preset's settings (configs/real-rl-cpu.toml).

  --model DIR --prompts FILE     time GRPOTrainer (its own generation, loss_type="dapo"):
                                 `--warmup` steps, then `--steps` timed ones; prints one JSON
                                 line with every step's seconds, their median and the phases
                                 (sample, score, old log-probabilities, train, push);
  --check OUT --model DIR --prompts FILE
                                 one TRL step whose batch (prompt and completion ids, advantages,
                                 rewards, text) goes to OUT/batch.json and whose gradient at the
                                 starting weights (TRL's own `_compute_loss`, backward, before
                                 clipping) goes to OUT/trl_grads.safetensors;
  --compare TRL_GRADS FULCRUM_GRADS
                                 prints one JSON line: the relative L2 difference of every
                                 parameter's gradient, the largest one, and the cosine of the
                                 whole gradients.

FILE holds the prompts `grpo-real-bench prompts` wrote (fulcrum's draw order for the seed):
TRL is given them in that order (shuffle_dataset=False), 8 prompts x 8 completions per step.
A step is timed from TrainerCallback.on_step_begin to on_step_end, which brackets generation,
scoring, forward, backward and AdamW; the phases are TRL's own methods, timed by wrapping them.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

# The preset's numbers (configs/real-rl-cpu.toml), on both sides.
PROMPTS_PER_STEP = 8
GROUP = 8
MAX_NEW = 64
TEMPERATURE = 0.7
LR = 1e-5
EPS_LOW, EPS_HIGH = 0.2, 0.28

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract(text):
    """fulcrum's math checker in the order it reads an answer, for integer answers: the last
    `Answer:` line, else the last `\\boxed{}`, else the last number."""
    lines = [l for l in text.splitlines() if "Answer:" in l]
    if lines:
        text = lines[-1].split("Answer:", 1)[1]
    else:
        boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
        if boxed:
            text = boxed[-1]
    nums = _NUMBER.findall(text)
    return nums[-1].replace(",", "") if nums else None


def reward(prompts, completions, answer, **_):
    out = []
    for c, want in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c
        got = extract(text)
        try:
            ok = got is not None and float(got) == float(want)
        except ValueError:
            ok = False
        out.append(1.0 if ok else 0.0)
    return out


def load_prompts(path, steps):
    rows = [json.loads(l) for l in open(path)]
    need = steps * PROMPTS_PER_STEP
    if len(rows) < need:
        sys.exit(f"{path} holds {len(rows)} prompts; {steps} steps need {need}")
    return rows[:need]


def trainer_for(model_dir, prompts, steps, threads, callbacks=()):
    import torch
    torch.set_num_threads(threads)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    data = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": r["prompt"]}] for r in prompts],
        "answer": [r["answer"] for r in prompts],
    })
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        gradient_accumulation_steps=1, num_generations=GROUP, max_completion_length=MAX_NEW,
        temperature=TEMPERATURE, top_p=1.0, top_k=0, learning_rate=LR, adam_beta1=0.9,
        adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        lr_scheduler_type="constant", beta=0.0, epsilon=EPS_LOW, epsilon_high=EPS_HIGH,
        num_iterations=1, loss_type="dapo", max_steps=steps, use_cpu=True, bf16=False,
        fp16=False, report_to="none", save_strategy="no", logging_steps=10_000, seed=0,
        disable_tqdm=True, shuffle_dataset=False,
    )
    return GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                       processing_class=tok, callbacks=list(callbacks))


class Phases:
    """Seconds per step in TRL's methods: `_generate` (sampling), `_calculate_rewards`
    (scoring), log-probability forwards under no_grad inside `_generate_and_score_completions`
    (old and reference log-probabilities; none with num_iterations=1 and no vLLM)."""

    def __init__(self, trainer):
        import torch
        self.now = {"sample": 0.0, "score": 0.0, "old_logprobs": 0.0, "prepare": 0.0}
        self.tokens = 0
        self.rewards = []
        phases = self

        def timed(name, fn, only_no_grad=False):
            def wrapper(*a, **k):
                if only_no_grad and torch.is_grad_enabled():
                    return fn(*a, **k)
                t0 = time.perf_counter()
                out = fn(*a, **k)
                phases.now[name] += time.perf_counter() - t0
                return out
            return wrapper

        trainer._generate = timed("sample", trainer._generate)
        trainer._get_per_token_logps_and_entropies = timed(
            "old_logprobs", trainer._get_per_token_logps_and_entropies, only_no_grad=True)
        gen_and_score = trainer._generate_and_score_completions

        def gen_wrapper(inputs):
            t0 = time.perf_counter()
            out = gen_and_score(inputs)
            phases.now["prepare"] += time.perf_counter() - t0
            phases.tokens += int(out["completion_mask"].sum())
            return out
        trainer._generate_and_score_completions = gen_wrapper

        calc = trainer._calculate_rewards

        def rewards_wrapper(*a, **k):
            t0 = time.perf_counter()
            out = calc(*a, **k)
            phases.now["score"] += time.perf_counter() - t0
            phases.rewards.append(out.detach().sum(dim=1).tolist())
            return out
        trainer._calculate_rewards = rewards_wrapper


def time_trl(model_dir, prompts_file, warmup, steps, threads):
    import torch
    from transformers import TrainerCallback

    prompts = load_prompts(prompts_file, warmup + steps)
    rows = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            for key in phases.now:
                phases.now[key] = 0.0
            phases.tokens = 0
            phases.rewards.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            total = time.perf_counter() - self.t0
            now = dict(phases.now)
            r = [x for batch in phases.rewards for x in batch]
            mixed = sum(0 < sum(r[g:g + GROUP]) < GROUP for g in range(0, len(r), GROUP))
            rows.append({
                "step_s": total, "sample_s": now["sample"], "score_s": now["score"],
                "old_logprobs_s": now["old_logprobs"], "train_s": total - now["prepare"],
                "tokens": phases.tokens, "reward_mean": sum(r) / max(len(r), 1),
                "groups_mixed": mixed / max(len(r) // GROUP, 1),
            })

    trainer = trainer_for(model_dir, prompts, warmup + steps, threads, [Timer()])
    phases = Phases(trainer)
    trainer.train()
    timed = rows[warmup:]
    med = lambda k: statistics.median(x[k] for x in timed)
    return {
        "side": "trl", "loss_type": "dapo", "threads": torch.get_num_threads(),
        "step_s": [x["step_s"] for x in timed], "median_s": med("step_s"),
        "median_sample_s": med("sample_s"), "median_score_s": med("score_s"),
        "median_old_logprobs_s": med("old_logprobs_s"), "median_train_s": med("train_s"),
        "median_push_s": 0.0,
        "mean_completion_tokens": sum(x["tokens"] for x in timed) / len(timed) / (PROMPTS_PER_STEP * GROUP),
        "mean_reward": sum(x["reward_mean"] for x in timed) / len(timed),
        "mean_groups_mixed": sum(x["groups_mixed"] for x in timed) / len(timed),
    }


def check(out_dir, model_dir, prompts_file, threads):
    import torch
    from safetensors.torch import save_file

    prompts = load_prompts(prompts_file, 1)
    trainer = trainer_for(model_dir, prompts, 1, threads)
    captured = {}
    compute = trainer._compute_loss

    def capture(model, inputs):
        if not captured:
            captured.update({k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in inputs.items()})
        return compute(model, inputs)
    trainer._compute_loss = capture
    start = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()

    # TRL's gradient of that batch at the starting weights, by TRL's own loss on its own
    # (prepared) model put back to those weights.
    model = trainer.model
    model.load_state_dict(start)
    model.train()
    model.zero_grad(set_to_none=True)
    loss = compute(model, captured)
    loss.backward()
    grads = {n: p.grad.detach().contiguous() for n, p in model.named_parameters() if p.grad is not None}
    os.makedirs(out_dir, exist_ok=True)
    save_file(grads, os.path.join(out_dir, "trl_grads.safetensors"))

    # TRL shuffles a generation batch before training on it: each row's prompt is found by its
    # token ids, and the rows are written group by group.
    tok = trainer.processing_class
    # (the user message is found in the decoded prompt: the questions are distinct).
    def prompt_of(ids):
        text = tok.decode(ids)
        found = [k for k, src in enumerate(prompts) if src["prompt"] in text]
        if len(found) != 1:
            sys.exit(f"a prompt of TRL's batch matches {len(found)} of the step's prompts: {text!r}")
        return found[0]
    rows = []
    for i in range(captured["prompt_ids"].shape[0]):
        pm = captured["prompt_mask"][i].bool()
        cm = captured["completion_mask"][i].bool()
        pids = captured["prompt_ids"][i][pm].tolist()
        k = prompt_of(pids)
        cids = captured["completion_ids"][i][cm].tolist()
        text = tok.decode(cids, skip_special_tokens=True)
        rows.append({
            "group": k, "prompt": prompts[k]["prompt"], "answer": prompts[k]["answer"],
            "prompt_ids": pids, "completion_ids": cids, "completion": text,
            "advantage": float(captured["advantages"][i]),
            "reward": reward(None, [text], [prompts[k]["answer"]])[0],
        })
    rows.sort(key=lambda r: r["group"])
    with open(os.path.join(out_dir, "batch.json"), "w") as f:
        json.dump({"group_size": GROUP, "rows": rows, "trl_loss": float(loss.detach())}, f)


def compare(trl_path, fulcrum_path):
    import torch
    from safetensors.torch import load_file

    trl, ful = load_file(trl_path), load_file(fulcrum_path)
    # A tied LM head is one tensor: HF names it after the embedding.
    names = sorted(trl)
    missing = [n for n in names if n not in ful]
    if missing:
        sys.exit(f"fulcrum's gradient has no {missing[:3]} (it has {sorted(ful)[:3]}...)")
    rel = {}
    dot = nt = nf = 0.0
    for n in names:
        a, b = trl[n].double(), ful[n].double()
        rel[n] = float((a - b).norm() / a.norm().clamp(min=1e-30))
        dot += float((a * b).sum())
        nt += float((a * a).sum())
        nf += float((b * b).sum())
    worst = max(rel, key=rel.get)
    return {"tensors": len(names), "max_rel_diff": rel[worst], "worst": worst,
            "median_rel_diff": statistics.median(rel.values()),
            "cosine": dot / (nt ** 0.5 * nf ** 0.5), "norm_trl": nt ** 0.5, "norm_fulcrum": nf ** 0.5}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--prompts")
    ap.add_argument("--check")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.compare:
        print(json.dumps(compare(*a.compare)))
    elif a.check:
        check(a.check, a.model, a.prompts, a.threads)
    else:
        print(json.dumps(time_trl(a.model, a.prompts, a.warmup, a.steps, a.threads)))


if __name__ == "__main__":
    main()
