#!/usr/bin/env bash
#! The aggregation study of docs/results.md ("## Aggregation study"), as one command:
#! `fulcrum compare` over six settings of the length knobs x 3 seeds x 5 rules, then
#! `fulcrum report`.
#!
#!   scripts/study.sh                 # token, seq, ba, token-group, drgrpo; 2 runs at a time
#!   scripts/study.sh --rules token,seq,ba --jobs 1   # other flags go to `fulcrum compare`
#!
#! Interrupted? Run the same command again: finished runs are skipped, the others resume. A
#! later call with more rules (or tasks) adds their runs to the same directory; every run is
#! deterministic, so the order in which they ran does not matter.
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/study
rules=token,seq,ba,token-group,drgrpo
jobs=2
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift ;;
        --rules) rules="$2"; shift ;;
        --jobs) jobs="$2"; shift ;;
        *) extra+=("$1") ;;
    esac
    shift
done
# 3-digit additions under a 2 x 3 design of the length knobs (crates/fulcrum-tasks/src/synthetic/
# shape.rs): within-group length variation low (verbose_rate 0) or high (0.5: half the answers
# restate every line) x wrong answers shorter (mistake_length 0.5), as long (1), or longer (2).
tasks="arithmetic:difficulty=2"
tasks+=",arithmetic:difficulty=2,mistake_length=0.5"
tasks+=",arithmetic:difficulty=2,mistake_length=2"
tasks+=",arithmetic:difficulty=2,verbose_rate=0.5"
tasks+=",arithmetic:difficulty=2,verbose_rate=0.5,mistake_length=0.5"
tasks+=",arithmetic:difficulty=2,verbose_rate=0.5,mistake_length=2"
./scripts/fulcrum compare --config configs/study/base.toml --rules "$rules" --seeds 3 \
    --tasks "$tasks" --jobs "$jobs" --out "$out" "${extra[@]}"
./scripts/fulcrum report "$out"
