#!/usr/bin/env bash
#! The aggregation study of docs/results.md ("## Aggregation study"), as one command:
#! `fulcrum compare` over six synthetic task settings x 3 seeds, then `fulcrum report`.
#!
#!   scripts/study.sh                 # token, seq, ba (what docs/results.md reports)
#!   scripts/study.sh --full          # also token-group and drgrpo
#!   scripts/study.sh --out DIR ...   # other flags go to `fulcrum compare`
#!
#! Interrupted? Run the same command again: finished runs are skipped, the others resume.
set -euo pipefail
cd "$(dirname "$0")/.."
rules=token,seq,ba
out=runs/study
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --full) rules=token,seq,ba,token-group,drgrpo; out=runs/study-full ;;
        --out) out="$2"; shift ;;
        *) extra+=("$1") ;;
    esac
    shift
done
# The settings span low and high within-group length variation and negative, near-zero and
# positive +/- length gaps, as measured by short probes (docs/results.md lists the measured values).
tasks="arithmetic:difficulty=1,steps:difficulty=1,countdown:difficulty=1,length=0.5,lists:difficulty=1,lists:difficulty=1,length=2,steps:difficulty=1,length=2"
./scripts/fulcrum compare --config configs/study/base.toml --rules "$rules" --seeds 3 \
    --tasks "$tasks" --out "$out" "${extra[@]}"
./scripts/fulcrum report "$out"
