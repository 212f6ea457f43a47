#!/usr/bin/env bash
#! Runs fulcrum's engine benchmark and its PyTorch counterparts one after the other, in one
#! invocation, and prints the ratios. Usage: bench/run.sh [--device cpu|cuda] [--skip-smollm2]
#! Needs the project venv (scripts/setup-libtorch.sh); HF generate needs `transformers` in it.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
./scripts/setup-libtorch.sh
cargo build --release -p fulcrum-model --example engine-bench >&2
fulcrum_json=$(target/release/examples/engine-bench "$@")
torch_args=()
if [[ ${1:-} == --device ]]; then torch_args=(--device "$2"); fi
torch_json=$(.venv/bin/python bench/torch_ref.py "${torch_args[@]}")
.venv/bin/python - "$fulcrum_json" "$torch_json" <<'PY'
import json, sys
f, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"fulcrum": f, "torch": t}))
print(f"threads: fulcrum {f['threads']}, torch {t['threads']}; device {f['device']}; torch {t['torch']}")
print(f"GEMM (2048^3 f32): {f['gemm_gflops']:.1f} GFLOP/s")
print(f"train step  d256/4L/seq256/b16: fulcrum {f['train_step_s']*1e3:.1f} ms, torch {t['train_step_s']*1e3:.1f} ms"
      f" -> {t['train_step_s']/f['train_step_s']:.2f}x torch speed (goal >= 1.2x);"
      f" {f['train_gflops']:.1f} GFLOP/s = {100*f['train_gemm_fraction']:.0f}% of GEMM")
print(f"sampling b64/p32/n128: fulcrum {f['sample_s']:.2f} s ({f['sample_tokens_per_s']:.0f} tok/s),"
      f" naive torch KV loop {t['naive_sample_s']:.2f} s -> {t['naive_sample_s']/f['sample_s']:.2f}x (goal >= 2x)")
if "naive_sample_bf16_s" in t:
    print(f"  bf16 weights and cache: fulcrum {f['sample_bf16_s']:.2f} s, naive torch KV loop {t['naive_sample_bf16_s']:.2f} s"
          f" -> {t['naive_sample_bf16_s']/f['sample_bf16_s']:.2f}x; fulcrum bf16 vs naive f32 {t['naive_sample_s']/f['sample_bf16_s']:.2f}x")
if "hf_generate_s" in t:
    print(f"  HF generate {t['hf_generate_s']:.2f} s -> {t['hf_generate_s']/f['sample_s']:.2f}x (goal >= 3x)")
if "smollm2" in f:
    s = f["smollm2"]
    print(f"SmolLM2-135M: sampling {s['sample_b1_tokens_per_s']:.1f} tok/s at batch 1, {s['sample_b32_tokens_per_s']:.1f} tok/s at batch 32;"
          f" training {s['train_tokens_per_s']:.0f} tok/s (batch {s['train_batch']} x {s['train_seq']});"
          f" peak RSS {s['peak_rss_bytes']/1e9:.2f} GB")
PY
machine_line after
