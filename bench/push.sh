#!/usr/bin/env bash
#! The write side of a weight push (docs/scale.md, "Weight sync"), SmolLM2-135M loaded as a run
#! loads it (f32): the llama.cpp push (one f16 GGUF) and a LoRA policy's (its adapter GGUF), the
#! HF push as one model.safetensors (what a push wrote before sharding), the sharded HF push
#! written by 1 and by 2 ranks at once (two shards per rank, a thread each), and a LoRA
#! policy's PEFT adapter folder (rank 8 on all seven projections). Median of REPEAT runs of each; the model's load is not
#! timed. Run it on an idle machine.
#!
#!   bench/push.sh [REPEAT]        # default 5
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
repeat=${1:-5}
gguf=${FULCRUM_SMOLLM2_GGUF:-assets/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$gguf" ] || { echo "missing $gguf: fulcrum fetch-assets --only smollm2" >&2; exit 1; }
cargo build --quiet --release -p fulcrum-model --example push-bench
bin=target/release/examples/push-bench
scratch=$(mktemp -d "${TMPDIR:-target}/fulcrum-push-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one() { # WHAT -> seconds of the write
    rm -rf "$scratch/out" && mkdir -p "$scratch/out"
    $bin "$gguf" "$scratch/out" "$@" | cut -d' ' -f1
}
two_ranks() { # both ranks' writes, started at one instant; the push is done when both are
    rm -rf "$scratch/out" && mkdir -p "$scratch/out"
    local start
    start=$(python3 -c 'import time; print(time.time() + 10)')
    PUSH_BENCH_START=$start $bin "$gguf" "$scratch/out" shards 0 2 >"$scratch/r0" &
    PUSH_BENCH_START=$start $bin "$gguf" "$scratch/out" shards 1 2 >"$scratch/r1"
    wait
    cat "$scratch/r0" "$scratch/r1" | cut -d' ' -f1 | sort -n | tail -1
}
printf '| push write | median seconds (of %d) | bytes |\n|---|---|---|\n' "$repeat"
for what in gguf gguf-adapter hf "shards 0 1" peft-adapter; do
    s=$(for _ in $(seq "$repeat"); do one $what; done | median)
    printf '| %s | %s | %s |\n' "$what" "$s" "$(du -sb "$scratch/out" | cut -f1)"
done
s=$(for _ in $(seq "$repeat"); do two_ranks; done | median)
printf '| shards 0-1 and 2-3, 2 ranks at once (the slower rank) | %s | %s |\n' "$s" "$(du -sb "$scratch/out" | cut -f1)"
machine_line after
