#!/usr/bin/env bash
#! The first build and what later builds reuse (docs/performance.md, "Building"): from an empty
#! target directory, the release binary as `./scripts/fulcrum` builds it, then `cargo build
#! --release`, `cargo build --release --bin fulcrum`, the GRPO-step benchmark and the test
#! command's build, each timed with the number of crates it compiled. Run it on an idle machine.
#!
#!   bench/build.sh [TARGET_DIR]     # default: a fresh temporary directory, removed afterwards
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/machine.sh
machine_line before
./scripts/setup-libtorch.sh
cargo fetch --quiet
target=${1:-$(mktemp -d /tmp/fulcrum-build-XXXXXX)}
rm -rf "$target"
export CARGO_TARGET_DIR=$target CARGO_TERM_COLOR=never
log=$(mktemp)
printf '| build | seconds | crates compiled |\n|---|---|---|\n'
step() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    t1=$(date +%s.%N)
    printf '| `%s` | %.0f | %d |\n' "$name" "$(echo "$t1 - $t0" | bc)" "$(grep -c ' Compiling ' "$log")"
}
step "cargo build --release -p fulcrum (./scripts/fulcrum, first)" cargo build --release -p fulcrum
step "cargo build --release" cargo build --release
step "cargo build --release --bin fulcrum" cargo build --release --bin fulcrum
step "bench/grpo_step.sh's build" cargo build --release -p fulcrum-train --example grpo-step-bench
step "./scripts/test.sh's build" cargo test --workspace --release --no-run
rm -f "$log"
[[ -n ${1:-} ]] || rm -rf "$target"
machine_line after
