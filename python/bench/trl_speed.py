"""TRL step time with fulcrum's `ba` against TRL's own `dapo`, in one invocation.

The reference workload of bench/trl_grpo_step.py (../shared/bench-workload.md): the 3.2M-parameter
Qwen2-shaped bench model, 16 digit-sum prompts x 8 completions, <= 64 new tokens, CPU, f32. Each
round times `fulcrum_ba.trl.GRPOTrainer(loss_type="ba")` (weights, fold and diagnostics included)
and plain `trl.GRPOTrainer(loss_type="dapo")`, alternating which goes first; a step is timed from
on_step_begin to on_step_end (sampling, scoring, forward, backward, AdamW).

    python/.venv-test/bin/python python/bench/trl_speed.py [--rounds 3] [--steps 4] [--threads N]

Prints one JSON line per run, then the per-round and median ratios ba / dapo. On a busy machine
the step times are noisy, so the script also times fulcrum's own work directly: per generation
batch, the time `fulcrum_ba.trl.GRPOTrainer._generate_and_score_completions` spends beyond TRL's
method it wraps (gathers, weights, diagnostics, fold), as a fraction of the step.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from trl_grpo_step import build, digit_prompts, reward  # noqa: E402


def run(model_dir, loss_type, warmup, steps, threads):
    import fulcrum_ba.trl
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    torch.set_num_threads(threads)
    trl_s, extra_s = [], []
    trl_method = trl.GRPOTrainer._generate_and_score_completions

    class Timed(fulcrum_ba.trl.GRPOTrainer):
        """Times TRL's own _generate_and_score_completions inside fulcrum's override."""

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            extra_s.append(time.perf_counter() - t0 - trl_s[-1])
            return out

    def timed_trl(self, inputs):
        t0 = time.perf_counter()
        out = trl_method(self, inputs)
        trl_s.append(time.perf_counter() - t0)
        return out

    trl.GRPOTrainer._generate_and_score_completions = timed_trl
    trainer_cls = Timed if loss_type in fulcrum_ba.RULES else trl.GRPOTrainer
    total = warmup + steps
    data = Dataset.from_dict({"prompt": digit_prompts(16 * total + 16)})
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=128,
        gradient_accumulation_steps=1,
        num_generations=8,
        max_completion_length=64,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=1e-5,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="constant",
        beta=0.0,
        epsilon=0.2,
        num_iterations=1,
        loss_type=loss_type,
        max_steps=total,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=10_000,
        seed=0,
        disable_tqdm=True,
        shuffle_dataset=False,
    )
    times = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    trainer = trainer_cls(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=data,
        processing_class=tok,
        callbacks=[Timer()],
    )
    try:
        trainer.train()
    finally:
        trl.GRPOTrainer._generate_and_score_completions = trl_method
    timed = times[warmup:]
    out = {
        "loss_type": loss_type,
        "trainer": "fulcrum_ba.trl.GRPOTrainer" if extra_s else "trl.GRPOTrainer",
        "threads": threads,
        "step_s": timed,
        "median_s": statistics.median(timed),
    }
    if extra_s:
        out["fulcrum_extra_s"] = extra_s[warmup:]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--model", help="bench model folder (default: written once into target/bench-grpo/model)")
    a = ap.parse_args()
    model_dir = Path(a.model or REPO / "target" / "bench-grpo" / "model")
    if not (model_dir / "model.safetensors").is_file():
        model_dir.parent.mkdir(parents=True, exist_ok=True)
        build(str(model_dir))
    ratios, extra = [], []
    for r in range(a.rounds):
        order = ("ba", "dapo") if r % 2 == 0 else ("dapo", "ba")
        runs = {}
        for loss_type in order:
            runs[loss_type] = run(str(model_dir), loss_type, a.warmup, a.steps, a.threads)
            print(json.dumps({"round": r + 1, **runs[loss_type]}), flush=True)
        ratios.append(runs["ba"]["median_s"] / runs["dapo"]["median_s"])
        extra += [x / s for x, s in zip(runs["ba"]["fulcrum_extra_s"], runs["ba"]["step_s"])]
        print(
            f"round {r + 1}: ba {runs['ba']['median_s']:.3f} s/step, dapo {runs['dapo']['median_s']:.3f} s/step,"
            f" ratio ba/dapo {ratios[-1]:.3f}",
            flush=True,
        )
    print(
        f"median ratio ba/dapo over {a.rounds} rounds: {statistics.median(ratios):.3f}"
        f" (rounds: {', '.join(f'{x:.3f}' for x in ratios)})"
    )
    print(
        f"fulcrum's own work per step under ba: median {100 * statistics.median(extra):.3f}% of the step"
        f" (max {100 * max(extra):.3f}%)"
    )


if __name__ == "__main__":
    main()
