#!/usr/bin/env bash
#! Asynchronous within a bound, measured (docs/scale.md, "Asynchronous within a bound"): the
#! real-model preset (configs/real-rl-cpu.toml, SmolLM2-135M on chat arithmetic) with rollouts on
#! a local llama.cpp server, at rollout.max_staleness = 0, 1 and 2, same seed, then a table of
#! step time, held-out accuracy, staleness and engine/trainer KL per run. Each run has its own
#! server (a push from one run must not reach another's sampling). Learning does not depend on
#! the machine's load (the versions each draw samples on are fixed by the queue order); step
#! times do: run it on an idle machine.
#!
#!   bench/staleness.sh [STEPS] [OUT_DIR]      # default 20 steps, runs/bench-staleness
#!   TIMING=1 bench/staleness.sh 6 runs/bench-staleness-timing   # step times only: evaluations
#!                                              # cut to 8 prompts, at the end only
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
steps=${1:-20}
out=${2:-runs/bench-staleness}
fulcrum=${FULCRUM:-./scripts/fulcrum}
gguf=assets/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || $fulcrum fetch-assets --only smollm2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for k in 0 1 2; do
    dir=$out/k$k
    if [ -f "$dir/summary.json" ]; then continue; fi
    # One thread for the server, one for the trainer: the two overlap only when k >= 1.
    scripts/llamacpp-server.sh "$gguf" "$port" --slots 8 --ctx 2048 --threads 1 --verbosity 0 &
    server=$!
    trap 'kill $server 2>/dev/null || true' EXIT
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.5; done
    evals=(--set eval_every=$((steps / 2)))
    if [ "${TIMING:-0}" = 1 ]; then evals=(--set eval_every=0 --set eval.prompts=8 --set eval.at_start=false); fi
    resume=()
    [ -f "$dir/metrics.jsonl" ] && resume=(--resume "$dir")
    $fulcrum train --config configs/real-rl-cpu.toml --quiet --run-dir "$dir" "${resume[@]}" \
        --set threads=1 --set "steps=$steps" "${evals[@]}" \
        --set checkpoint_every=$((steps / 2)) --set checkpoint_keep=1 \
        --set rollout.engine=llamacpp --set "rollout.engine_urls=[\"http://127.0.0.1:$port\"]" \
        --set rollout.is_cap=2.0 --set rollout.max_staleness=$k
    kill $server
    wait $server 2>/dev/null || true
    trap - EXIT
done
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
print("| max_staleness | step time (s, mean of steps 2+) | held-out accuracy (start -> end) | staleness mean | dropped | kl/engine (mean) | time/weight_push (s) |")
print("|---|---|---|---|---|---|---|")
for k in (0, 1, 2):
    m = [json.loads(l) for l in open(f"{out}/k{k}/metrics.jsonl")]
    ev = [json.loads(l) for l in open(f"{out}/k{k}/eval.jsonl")]
    acc = [e["accuracy"] for e in ev]
    step = [x["time/step"] for x in m[1:]]
    print(f"| {k} | {st.mean(step):.1f} | {acc[0]:.3f} -> {acc[-1]:.3f} | "
          f"{st.mean(x['rollout/staleness_mean'] for x in m):.2f} | "
          f"{sum(x['rollout/dropped_stale'] for x in m)} | "
          f"{st.mean(x['kl/engine'] for x in m):.4f} | "
          f"{st.mean(x['time/weight_push'] for x in m):.2f} |")
PY
machine_line after
