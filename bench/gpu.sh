#!/usr/bin/env bash
#! The GPU checks, in one short run (at most about 8 minutes): on a machine with an NVIDIA GPU,
#! the engine benchmark on CUDA against PyTorch on the same GPU (train step, sampling), a few
#! GRPO steps of Qwen2.5-Coder-0.5B in bf16 mixed precision with peak GPU memory and tokens/s,
#! and, with two or more GPUs, the data-parallel equivalence on NCCL (2 ranks vs 1).
#!
#! Usage: bench/gpu.sh [BIN_DIR]
#!   BIN_DIR holds `fulcrum` and `engine-bench` built for that machine's libtorch (default
#!   target/release and target/release/examples, i.e. a build on the GPU machine itself, or on any
#!   machine after `scripts/setup-libtorch.sh --nccl` (it adds the CUDA headers NCCL's need):
#!   `cargo build --release -p fulcrum --features fulcrum-dist/nccl && cargo build --release
#!   -p fulcrum-model --example engine-bench`). The binaries find libtorch through
#!   LD_LIBRARY_PATH, set here from the machine's own `python -c 'import torch'`.
#!   FULCRUM_GPU_MODEL: the Qwen2.5-Coder-0.5B folder or GGUF (default
#!   assets/Qwen2.5-Coder-0.5B-Instruct.gguf; `fulcrum fetch-assets --only qwen2.5-coder-0.5b`: it is
#!   491 MB, more than travels to a GPU machine without a network, so place it there first).
#! Prints one line per figure, each with the command that produced it.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
BIN=${1:-target/release}
FULCRUM=$BIN/fulcrum
ENGINE=$BIN/engine-bench
[[ -x $ENGINE ]] || ENGINE=$BIN/examples/engine-bench
PY=${PYTHON:-python3}
command -v nvidia-smi >/dev/null || { echo "gpu.sh: no nvidia-smi: not a GPU machine" >&2; exit 1; }
TORCH_LIB=$($PY -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH=$TORCH_LIB:${LD_LIBRARY_PATH:-}
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
echo "gpu.sh: $GPUS GPU(s): $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1); torch $($PY -c 'import torch; print(torch.__version__)')"
for b in "$FULCRUM" "$ENGINE"; do
    [[ -x $b ]] || { echo "gpu.sh: $b is missing (see the usage at the top)" >&2; exit 1; }
done

# Polls the peak GPU memory of the command given (MiB over all GPUs), printed after it.
with_peak_memory() {
    local peak=0 pid used
    "$@" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd+ | bc)
        (( used > peak )) && peak=$used
        sleep 0.5
    done
    wait "$pid"
    echo "peak GPU memory: $peak MiB (nvidia-smi, all processes)"
}

echo "== 1. engine benchmark on cuda: $ENGINE --device cuda --skip-smollm2 vs bench/torch_ref.py --device cuda"
f=$(timeout 150 "$ENGINE" --device cuda --skip-smollm2)
t=$(timeout 150 "$PY" bench/torch_ref.py --device cuda)
"$PY" - "$f" "$t" <<'PY'
import json, sys
f, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"train step d256/4L/seq256/b16: fulcrum {f['train_step_s']*1e3:.2f} ms, torch {t['train_step_s']*1e3:.2f} ms -> {t['train_step_s']/f['train_step_s']:.2f}x")
print(f"sampling b64/p32/n128: fulcrum {f['sample_s']:.3f} s, torch KV loop {t['naive_sample_s']:.3f} s -> {t['naive_sample_s']/f['sample_s']:.2f}x")
PY

MODEL=${FULCRUM_GPU_MODEL:-assets/Qwen2.5-Coder-0.5B-Instruct.gguf}
RUNS=$(mktemp -d)
QWEN=(--quiet --set device=cuda --set model.dtype=bf16 --set "model.path=\"$MODEL\"" --set steps=4
      --set sft.steps=0 --set eval_every=0 --set eval.prompts=8 --set rollout.prompts_per_step=16
      --set rollout.group_size=8 --set rollout.max_response_len=256 --set task.name=\"arithmetic\")
echo "== 2. GRPO, Qwen2.5-Coder-0.5B, bf16 mixed precision, 4 steps: $FULCRUM train ${QWEN[*]}"
if [[ -e $MODEL ]]; then
    with_peak_memory timeout 240 "$FULCRUM" train "${QWEN[@]}" --run-dir "$RUNS/qwen"
    "$PY" - "$RUNS/qwen/metrics.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
tok = sum(x["sample/tokens"] for x in m); s = sum(x["time/sample"] for x in m); tr = sum(x["time/train"] for x in m)
print(f"sampling {tok/s:.0f} tok/s; training {tok/tr:.0f} response tok/s; step {sum(x['time/step'] for x in m)/len(m):.2f} s")
PY
else
    echo "skipped: no $MODEL (set FULCRUM_GPU_MODEL)"
fi

echo "== 3. data parallel on NCCL: 2 ranks vs 1, tiny model, 3 steps"
if (( GPUS >= 2 )); then
    TINY=(--quiet --set device=cuda --set steps=3 --set sft.steps=50 --set eval_every=0 --set rollout.prompts_per_step=3)
    timeout 120 "$FULCRUM" train "${TINY[@]}" --run-dir "$RUNS/one"
    timeout 120 "$FULCRUM" train "${TINY[@]}" --nproc 2 --run-dir "$RUNS/two"
    "$PY" - "$RUNS" <<'PY'
import sys, torch
from safetensors.torch import load_file
a = load_file(f"{sys.argv[1]}/one/checkpoints/final/model.safetensors")
b = load_file(f"{sys.argv[1]}/two/checkpoints/final/model.safetensors")
d = max(((a[k].double() - b[k].double()).abs().max() / a[k].abs().max().clamp_min(1e-12)).item() for k in a)
print(f"max relative weight difference 2 ranks vs 1: {d:.2e} ({'ok' if d < 1e-5 else 'FAIL'})")
PY
else
    echo "skipped: $GPUS GPU (NCCL refuses two ranks on one GPU)"
fi
rm -rf "$RUNS"
machine_line after
