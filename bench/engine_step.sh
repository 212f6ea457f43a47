#!/usr/bin/env bash
# A GRPO step with rollouts from the native sampler and from a llama.cpp server, side by side
# (README "Rollouts on inference engines"). Starts its own server on a free port, runs the same
# config both ways (3 steps each, one after the other) and prints the median per-step phases.
#   bench/engine_step.sh [STEPS] [PROMPTS] [GROUP]          needs the release binary and the GGUF
# With LEARN=1: 16 steps of 8 x 8 at lr 2e-5 with an evaluation before and after, both ways.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
steps="${1:-3}"; prompts="${2:-4}"; group="${3:-8}"
gguf="${FULCRUM_SMOLLM2_GGUF:-assets/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$gguf" ] || { echo "missing $gguf: fulcrum fetch-assets --only smollm2" >&2; exit 1; }
[ -x target/release/fulcrum ] || cargo build --release -p fulcrum
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/llamacpp-server.sh "$gguf" "$port" --verbosity 0 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
out=$(mktemp -d)
extra=()
if [ "${LEARN:-0}" = 1 ]; then
    steps=16; prompts=8; group=8
    extra=(--set optim.lr=2e-5 --set eval.prompts=64 --set eval.at_start=true)
else
    extra=(--set eval.prompts=4)
fi
common=(--quiet --set "model.path=\"$gguf\"" --set task.name='"jsonl"' --set task.path='"data/arith/add_1digit.jsonl"'
    --set "steps=$steps" --set sft.steps=0 --set "rollout.prompts_per_step=$prompts" --set "rollout.group_size=$group"
    --set rollout.max_prompt_len=64 --set rollout.max_response_len=24 --set ppo.micro_batch_size=16
    --set eval_every=0 --set checkpoint_every=0 --set threads=2 "${extra[@]}")
target/release/fulcrum train "${common[@]}" --set "run_dir=\"$out/engine\"" \
    --set rollout.engine=llamacpp --set "rollout.engine_urls=[\"http://127.0.0.1:$port\"]" >/dev/null 2>&1
target/release/fulcrum train "${common[@]}" --set "run_dir=\"$out/native\"" >/dev/null 2>&1
python3 - "$out" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
keys = ["time/step", "time/sample", "time/train", "time/weight_push", "kl/engine", "rollout/stale", "reward/mean"]
runs = {r: [json.loads(l) for l in open(os.path.join(out, r, "metrics.jsonl"))] for r in ("native", "engine")}
print(f"{'median per step':<20}{'native':>12}{'llama.cpp':>12}")
for k in keys:
    print(f"{k:<20}" + "".join(f"{statistics.median(m[k] for m in runs[r]):>12.4g}" for r in ("native", "engine")))
for r in ("native", "engine"):
    p = os.path.join(out, r, "eval.jsonl")
    if os.path.exists(p):
        print(r, "eval accuracy by step:", [(e["step"], e["accuracy"]) for e in map(json.loads, open(p))])
PY
machine_line after
