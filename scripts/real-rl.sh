#!/usr/bin/env bash
#! Real-model RL on a CPU (docs/results.md, "Real-model RL on a CPU"): configs/real-rl-cpu.toml
#! under each rule and seed, the held-out per-problem results of each run's start and end into
#! docs/real-rl/, and the table with the paired intervals.
#!
#!   scripts/real-rl.sh                        # ba, token, seq with seed 0
#!   RULES=ba SEEDS=0,1,2 scripts/real-rl.sh   # three seeds of ba
#!   THREADS=1 scripts/real-rl.sh              # the thread count (a fixed count reproduces a run)
#!
#! Resumable: a finished run (its summary.json) is kept, an interrupted one is resumed. Needs the
#! model (fulcrum fetch-assets --only smollm2). About 50 s a step on 2 cores, 60 steps a run.
set -euo pipefail
cd "$(dirname "$0")/.."
fulcrum=${FULCRUM:-./scripts/fulcrum}
threads=${THREADS:-2}
heldout=data/arith/chat_heldout.jsonl
gguf=assets/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p runs/real-rl docs/real-rl
samples() { # MODEL OUT: greedy held-out samples as the in-training evaluation takes them
    local tmp=${2%.gz}
    $fulcrum eval --model "$1" --bench "jsonl:path=$heldout" --max-new-tokens 64 \
        --threads "$threads" --samples "$tmp" --fresh >&2
    gzip -9 -n -f "$tmp"
}
start=runs/real-rl/start.samples.jsonl.gz
[ -f "$start" ] || samples "$gguf" "$start"
runs=()
IFS=, read -r -a rules <<<"${RULES:-ba,token,seq}"
IFS=, read -r -a seeds <<<"${SEEDS:-0}"
for seed in "${seeds[@]}"; do
    for rule in "${rules[@]}"; do
        dir=runs/real-rl/$rule-seed$seed
        if [ ! -f "$dir/summary.json" ]; then
            if [ -d "$dir/checkpoints" ]; then
                $fulcrum train --resume "$dir"
            else
                rm -rf "$dir"
                $fulcrum train --config configs/real-rl-cpu.toml --set "threads=$threads" \
                    --set "rule=\"$rule\"" --set "seed=$seed" --set "run_dir=\"$dir\""
            fi
        fi
        cp "$start" "docs/real-rl/$rule-seed$seed-start.samples.jsonl.gz"
        end=docs/real-rl/$rule-seed$seed-end.samples.jsonl.gz
        [ -f "$end" ] || samples "$dir" "$end"
        runs+=("$dir")
    done
done
python3 scripts/real_rl_table.py "${runs[@]}"
# Charts of every finished run so far (all rules and seeds), drawn by `fulcrum report` from a
# comparison-shaped directory of links to the runs, into docs/img/real-rl-*.png.
view=runs/real-rl/report-view
spec="jsonl:path=data/arith/chat_train.jsonl"
rm -rf "$view" && mkdir -p "$view/runs/jsonl-path=data_arith_chat_train.jsonl"
for d in runs/real-rl/*-seed*; do
    [ -f "$d/summary.json" ] && ln -s "$PWD/$d" "$view/runs/jsonl-path=data_arith_chat_train.jsonl/"
done
printf '{"tasks": ["%s"], "rules": ["ba", "token", "seq"], "seeds": [0, 1, 2]}\n' "$spec" >"$view/compare.json"
$fulcrum report "$view" >&2
for chart in accuracy accuracy-diff reward length; do
    png="$view/report/jsonl-path=data_arith_chat_train.jsonl-$chart.png"
    [ -f "$png" ] && cp "$png" "docs/img/real-rl-$chart.png"
done
