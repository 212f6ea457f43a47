#!/usr/bin/env bash
#! The real-model evaluation of docs/results.md ("## Real models on the benchmarks"): both GGUF
#! models of `fulcrum fetch-assets` on the nine benchmarks, greedy, one JSON file per model and
#! benchmark under OUT (default runs/eval-real), every scored response beside it
#! (`MODEL-BENCH.samples.jsonl`), and the table of docs/results.md at the end
#! (scripts/eval-real-table.py). Files already there are kept (run it again to finish an
#! interrupted evaluation).
#!
#!   scripts/eval-real.sh                          # the documented subset: first 30 problems
#!   PROMPTS=1000 scripts/eval-real.sh             # whole benchmarks
#!   MODELS=smollm2 BENCHES=gsm8k,humaneval scripts/eval-real.sh
#!
#! Settings (environment): PROMPTS (30), MAX_NEW_TOKENS (768), THREADS (0: every core),
#! OUT, FULCRUM (the binary; default: scripts/fulcrum, which builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
prompts=${PROMPTS:-30}
max_new=${MAX_NEW_TOKENS:-768}
threads=${THREADS:-0}
out=${OUT:-runs/eval-real}
fulcrum=${FULCRUM:-./scripts/fulcrum}
assets=${FULCRUM_ASSETS_DIR:-assets}
benches=${BENCHES:-humaneval,mbpp,gsm8k,math500,amc23,minerva,olympiadbench,aime24,aime25}
models=${MODELS:-smollm2,qwen2.5-coder-0.5b}
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
        [ -s "$dest" ] && { echo "eval-real: $dest exists, kept"; continue; }
        echo "eval-real: $m on $b ($prompts problems, greedy, at most $max_new new tokens)"
        "$fulcrum" eval --model "$file" --bench "$b" --k 1 --temperature 0 --prompts "$prompts" \
            --max-new-tokens "$max_new" --threads "$threads" --samples "$out/$m-$b.samples.jsonl" \
            --json > "$dest.tmp"
        mv "$dest.tmp" "$dest"
    done
done
echo "eval-real: results in $out"
python3 scripts/eval-real-table.py "$out"
