#!/usr/bin/env bash
#! The reference GRPO step of ../shared/bench-workload.md, fulcrum against TRL's GRPOTrainer,
#! interleaved round by round in one invocation (the machine is noisy), same thread count.
#! Usage: bench/grpo_step.sh [ROUNDS (3)] [THREADS (cores)] [TRL_STEPS (10)]
#! WARM=1: the warmed-up variant. The workload's random model scores almost nothing, so nearly
#! every group has equal rewards and zero weight; WARM=1 starts both sides from that model
#! fine-tuned for a fixed 1,500 supervised steps (seed 0, one thread: bench/trl_grpo_step.py
#! --warm, written once), so that groups are mixed and skipping zero-weight groups saves only
#! what it should. Both models are built deterministically; their sha256 is printed, and the
#! accuracy and mixed-group fraction of the timed steps are reported with every figure.
#! Sets up what it needs: libtorch in .venv (scripts/setup-libtorch.sh), trl 1.16.0 and
#! transformers 5.24.0 from PyPI into the same .venv, the bench model folder (written once by
#! bench/trl_grpo_step.py so that both sides load the same weights).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
rounds=${1:-3}
threads=${2:-$(nproc)}
trl_steps=${3:-10}
./scripts/setup-libtorch.sh
if ! .venv/bin/python -c 'import trl, transformers as t; assert (trl.__version__, t.__version__) == ("1.16.0", "5.24.0")' 2>/dev/null; then
    echo "grpo_step: installing trl 1.16.0 and transformers 5.24.0 into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        "trl==1.16.0" "transformers==5.24.0"
fi
cargo build --release -p fulcrum-train --example grpo-step-bench >&2
model=target/bench-grpo/model
if [[ ! -f $model/model.safetensors ]]; then
    mkdir -p "$(dirname "$model")"
    .venv/bin/python bench/trl_grpo_step.py --build "$model" >&2
fi
if [[ ${WARM:-0} == 1 ]]; then
    if [[ ! -f $model-warm/warm.json ]]; then
        rm -rf "$model-warm"
        .venv/bin/python bench/trl_grpo_step.py --warm "$model" "$model-warm" >&2
    fi
    model=$model-warm
    echo "grpo_step: warmed-up model: $(cat "$model/warm.json")" >&2
fi
echo "grpo_step: model $model/model.safetensors sha256 $(sha256sum "$model/model.safetensors" | cut -c1-16)"
fulcrum=target/release/examples/grpo-step-bench
log=target/bench-grpo/rounds.jsonl
: >"$log"
for ((r = 1; r <= rounds; r++)); do
    echo "round $r/$rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$fulcrum" --model "$model" --threads "$threads" --rule token | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
    "$fulcrum" --model "$model" --threads "$threads" --rule ba | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
    "$fulcrum" --model "$model" --threads "$threads" --rule ba --skip-zero-weight | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
    "$fulcrum" --model "$model" --threads "$threads" --rule ba --share-prompt | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
    "$fulcrum" --model "$model" --threads "$threads" --rule ba --share-prompt --skip-zero-weight | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
    .venv/bin/python bench/trl_grpo_step.py --model "$model" --threads "$threads" \
        --steps "$trl_steps" 2>/dev/null | tail -1 | sed "s/^/{\"round\":$r,\"run\":/;s/$/}/" >>"$log"
done
.venv/bin/python - "$log" "${WARM:-0}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def label(run):
    if run["side"] == "trl":
        return f"TRL GRPOTrainer (loss_type={run['loss_type']})"
    share = ", prompt shared" if run.get("share_prompt") else ""
    skip = ", zero-weight skipped" if run["skip_zero_weight"] else ""
    return f"fulcrum rule={run['rule']} (micro-batch {run['micro_batch_size']}{share}{skip})"
model = "warmed-up model" if sys.argv[2] == "1" else "random model"
print(f"reference GRPO step ({model}), 16 prompts x 8 samples, <= 64 new tokens, {rows[0]['run']['threads']} threads; median s/step per round")
by_round = {}
for row in rows:
    by_round.setdefault(row["round"], []).append(row["run"])
for r, runs in sorted(by_round.items()):
    trl = next(x for x in runs if x["side"] == "trl")["median_s"]
    for x in runs:
        extra = ""
        if x["side"] == "fulcrum":
            extra = (f"  (sample {x['median_sample_s']:.2f} s, train {x['median_train_s']:.2f} s;"
                     f" {x['mean_completion_tokens']:.1f} tokens/completion, reward {x['mean_reward']:.2f},"
                     f" mixed groups {x.get('mean_groups_mixed', 0):.2f})  -> {trl / x['median_s']:.2f}x TRL")
        print(f"  round {r}: {label(x):60s} {x['median_s']:6.2f} s{extra}")
print("over all rounds (median of the per-round ratios):")
for key in sorted({label(x) for runs in by_round.values() for x in runs if x["side"] == "fulcrum"}):
    ratios = []
    for runs in by_round.values():
        trl = next(x for x in runs if x["side"] == "trl")["median_s"]
        ratios += [trl / x["median_s"] for x in runs if x["side"] == "fulcrum" and label(x) == key]
    print(f"  {key:60s} {statistics.median(ratios):.2f}x TRL (rounds: {', '.join(f'{q:.2f}' for q in ratios)})")
PY
machine_line after
