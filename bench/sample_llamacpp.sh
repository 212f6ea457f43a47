#!/usr/bin/env bash
#! Sampling a real model: fulcrum's KV-cache sampler (f32 and bf16) against llama.cpp's server on
#! the same GGUF file, the same prompt token ids and the same thread count, in one invocation.
#! Usage: bench/sample_llamacpp.sh [THREADS (cores)] [BATCHES (1,32)] [NEW_TOKENS (128)]
#! Each side samples every response to NEW_TOKENS at temperature 1 (no stop); a batch of B is one
#! fulcrum `generate` call with B rows, and B concurrent requests to a server with B slots
#! (llama.cpp batches them into one decode per step). Best of 3 after a warm-up, on each side.
#! Needs the SmolLM2 GGUF (fulcrum fetch-assets --only smollm2; FULCRUM_SMOLLM2_GGUF for another
#! file); installs the engine on first use (scripts/llamacpp-server.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
threads=${1:-$(nproc)}
batches=${2:-1,32}
new=${3:-128}
gguf=${FULCRUM_SMOLLM2_GGUF:-assets/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$gguf" ] || { echo "missing $gguf: fulcrum fetch-assets --only smollm2" >&2; exit 1; }
cargo build --release -p fulcrum-model --example sample-real-bench >&2
fulcrum_json=$(target/release/examples/sample-real-bench --model "$gguf" --batches "$batches" \
    --new-tokens "$new" --threads "$threads")
slots=$(tr ',' '\n' <<<"$batches" | sort -n | tail -1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
scripts/llamacpp-server.sh "$gguf" "$port" --slots "$slots" --threads "$threads" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
python3 - "$port" "$fulcrum_json" "$batches" "$new" "$threads" <<'PY'
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
port, f, batches, new, threads = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
url = f"http://127.0.0.1:{port}/completion"

def one(seed, n):
    body = {"prompt": f["prompt_ids"], "n_predict": n, "ignore_eos": True, "temperature": 1.0,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
            "seed": seed, "cache_prompt": False}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["timings"]["predicted_n"]

def batch(b, n, seed):
    t = time.perf_counter()
    with ThreadPoolExecutor(b) as pool:
        tokens = sum(pool.map(lambda i: one(seed * 1000 + i, n), range(b)))
    return time.perf_counter() - t, tokens

llama = {}
for b in map(int, batches.split(",")):
    batch(b, 8, 0)
    best = min((batch(b, new, r + 1) for r in range(3)), key=lambda x: x[0])
    llama[b] = best[1] / best[0]
print(f"sampling {new} new tokens per response, {threads} threads, same GGUF and prompt; tokens/s (best of 3)")
print(f"{'batch':>6} {'llama.cpp':>10} {'fulcrum f32':>12} {'fulcrum bf16':>13} {'f32 / llama.cpp':>16} {'bf16 / f32':>11}")
for b, rate in llama.items():
    get = lambda d: next((r["tokens_per_s"] for r in f["results"] if r["batch"] == b and r["dtype"] == d), float("nan"))
    print(f"{b:>6} {rate:>10.1f} {get('f32'):>12.1f} {get('bf16'):>13.1f} {get('f32') / rate:>15.2f}x {get('bf16') / get('f32'):>10.2f}x")
PY
machine_line after
