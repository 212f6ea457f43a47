#!/usr/bin/env bash
#! The real-model evaluation of docs/results.md ("## Real models on the benchmarks"): both GGUF
#! models of `fulcrum fetch-assets` on the nine benchmarks, greedy, each benchmark whole by
#! default, one JSON file per model and benchmark under OUT (default runs/eval-real), every
#! scored response beside it (`MODEL-BENCH.samples.jsonl`, also the cache that lets a rerun
#! skip finished problems), and the table of docs/results.md at the end
#! (scripts/eval-real-table.py). Interrupt it at any point and run it again to go on.
#!
#!   scripts/eval-real.sh                                              # whole benchmarks
#!   MODELS=qwen2.5-coder-0.5b BENCHES=humaneval,mbpp scripts/eval-real.sh   # the code rows: 164 + 427
#!   PROMPTS=30 BENCHES=gsm8k,math500 scripts/eval-real.sh             # a subset, labelled "30 of N"
#!   DEVICE=cuda scripts/eval-real.sh
#!
#! Settings (environment): PROMPTS (unset: whole benchmarks), MAX_NEW_TOKENS (unset: each
#! benchmark family's default, see `fulcrum eval --help`), THREADS (0: every core), DEVICE (cpu),
#! BATCH_SIZE (unset: fulcrum's default), FRESH=1 (start the samples files over, e.g. after
#! changing a setting), OUT, FULCRUM (the binary; default: scripts/fulcrum, which builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-0}
device=${DEVICE:-cpu}
out=${OUT:-runs/eval-real}
fulcrum=${FULCRUM:-./scripts/fulcrum}
assets=${FULCRUM_ASSETS_DIR:-assets}
benches=${BENCHES:-humaneval,mbpp,gsm8k,math500,amc23,minerva,olympiadbench,aime24,aime25}
models=${MODELS:-smollm2,qwen2.5-coder-0.5b}
extra=()
[ -n "${PROMPTS:-}" ] && extra+=(--prompts "$PROMPTS")
[ -n "${MAX_NEW_TOKENS:-}" ] && extra+=(--max-new-tokens "$MAX_NEW_TOKENS")
[ -n "${BATCH_SIZE:-}" ] && extra+=(--batch-size "$BATCH_SIZE")
[ "${FRESH:-0}" = 1 ] && extra+=(--fresh)
mkdir -p "$out"
for m in ${models//,/ }; do
    case "$m" in
        smollm2) file="$assets/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
        qwen2.5-coder-0.5b) file="$assets/Qwen2.5-Coder-0.5B-Instruct.gguf" ;;
        *) echo "eval-real: unknown model $m (smollm2, qwen2.5-coder-0.5b)" >&2; exit 2 ;;
    esac
    [ -f "$file" ] || { echo "eval-real: $file missing: run \`fulcrum fetch-assets --only $m\`" >&2; exit 2; }
    for b in ${benches//,/ }; do
        dest="$out/$m-$b.json"
        # Always run: the samples file holds every finished problem, so a finished benchmark
        # costs only its re-measuring, and one that was cut short goes on where it stopped.
        echo "eval-real: $m on $b (greedy${PROMPTS:+, first $PROMPTS problems})"
        start=$(date +%s)
        "$fulcrum" eval --model "$file" --bench "$b" --k 1 --temperature 0 --threads "$threads" \
            --device "$device" --samples "$out/$m-$b.samples.jsonl" ${extra[@]+"${extra[@]}"} --json > "$dest.tmp"
        mv "$dest.tmp" "$dest"
        echo "eval-real: $m on $b done in $(( $(date +%s) - start )) s"
    done
done
echo "eval-real: results in $out"
python3 scripts/eval-real-table.py "$out"
