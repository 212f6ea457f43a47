#!/usr/bin/env bash
# Code-runner throughput: fulcrum's sandboxed runner vs a plain Python subprocess runner, on
# HumanEval's 164 canonical solutions, same machine, same worker count, one after the other.
#   bench/code_runner.sh [WORKERS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
workers=${1:-2}
rounds=${2:-1}
tools/fetch_humaneval.sh >/dev/null
cargo build --quiet --release -p fulcrum-tasks --example bench_code_runner
./target/release/examples/bench_code_runner "$workers" "$rounds"
python3 bench/code_runner_reference.py data/code/HumanEval.jsonl.gz "$workers" "$rounds"
machine_line after
