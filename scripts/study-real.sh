#!/usr/bin/env bash
#! The real-model aggregation study (docs/study-real/preregistration.md), as one command. Each
#! phase is resumable (run the same command again after a kill: finished runs are skipped,
#! interrupted ones resume from their latest checkpoint) and deterministic on one machine (a fixed
#! seed and one thread per run), so the order of runs and JOBS do not change a result. Another
#! CPU's kernels may round differently, and a run there can diverge (docs/results.md says how much).
#!
#!   scripts/study-real.sh pilot        # token and ba, pilot seeds 100-101, 60 steps, eval every 10
#!   scripts/study-real.sh main         # token, seq, ba, token-group x the main seeds (setting A;
#!                                      # FROM_SEED=k runs seeds k.. first)
#!   scripts/study-real.sh samples      # each finished run's start and end held-out samples
#!   scripts/study-real.sh report       # charts, then the pre-registered analysis and verdicts
#!   scripts/study-real.sh analysis     # the analysis and verdicts alone, from the committed files
#!                                      # (docs/study-real: runs.tar.gz and the samples; no build)
#!   scripts/study-real.sh pack|unpack  # finished runs' result files <-> docs/study-real/runs.tar.gz
#!   scripts/study-real.sh              # all of it, in that order
#!
#! FULCRUM: one fixed binary for the whole study (a copy of target/release/fulcrum under
#! target/, so that its rpath still finds libtorch): editing or rebuilding the code meanwhile
#! cannot change it. JOBS: runs at once (default 2, one libtorch thread each).
#! Needs the model: `fulcrum fetch-assets --only smollm2`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=runs/study-real
docs=docs/study-real
jobs=${JOBS:-2}
config=configs/real-rl-cpu.toml
heldout=data/arith/chat_heldout.jsonl
gguf=assets/SmolLM2-135M-Instruct.Q4_1.gguf
fulcrum=${FULCRUM:-./scripts/fulcrum}
# Every run: one libtorch thread (a fixed count reproduces a run), only the newest step
# checkpoint kept on disk (1.6 GB each with AdamW's moments).
common=(--config "$config" --jobs "$jobs" --quiet --set threads=1 --set checkpoint_keep=1)

pilot() {
    $fulcrum compare "${common[@]}" --out "$root/pilot" --rules token,ba --seeds 2 \
        --set seed=100 --set eval_every=10 --steps 60
}

main_runs() {
    # Settings, seeds and steps are fixed by the pre-registration, section "Runs".
    local seeds steps every
    seeds=$(sed -n 's/^main_seeds: //p' "$docs/preregistration.md")
    steps=$(sed -n 's/^main_steps: //p' "$docs/preregistration.md")
    every=$(sed -n 's/^main_eval_every: //p' "$docs/preregistration.md")
    [[ -n $seeds && -n $steps && -n $every ]] || { echo "study-real: no main_seeds/main_steps/main_eval_every line in $docs/preregistration.md" >&2; exit 2; }
    # FROM_SEED=k: the runs of seeds k.. first (the same cells: each run's config names its
    # seed, so the order changes no result), then every run.
    if [[ -n ${FROM_SEED:-} ]]; then
        $fulcrum compare "${common[@]}" --out "$root/main" --rules token,seq,ba,token-group \
            --seeds $((seeds - FROM_SEED)) --set "seed=$FROM_SEED" --set "eval_every=$every" --steps "$steps"
    fi
    $fulcrum compare "${common[@]}" --out "$root/main" --rules token,seq,ba,token-group \
        --seeds "$seeds" --set seed=0 --set "eval_every=$every" --steps "$steps"
}

# Greedy held-out samples as the in-training evaluation takes them (all 300 problems).
eval_samples() { # MODEL OUT
    local tmp=${2%.gz}
    $fulcrum eval --model "$1" --bench "jsonl:path=$heldout" --max-new-tokens 64 \
        --threads 1 --samples "$tmp" --fresh >&2
    gzip -9 -n -f "$tmp"
}

samples() {
    mkdir -p "$docs"
    local start=$root/start.samples.jsonl.gz
    [ -f "$start" ] || eval_samples "$gguf" "$start"
    for summary in "$root"/main/runs/*/*-seed*/summary.json; do
        [ -f "$summary" ] || continue
        local d name
        d=$(dirname "$summary")
        name=$(basename "$d")
        cp "$start" "$docs/A-$name-start.samples.jsonl.gz"
        local end=$docs/A-$name-end.samples.jsonl.gz
        if [ ! -f "$end" ]; then
            eval_samples "$d" "$end"
        fi
        # The end samples are taken: a finished run's checkpoints (2 GB) are not needed again.
        rm -rf "$d/checkpoints"
    done
}

report() {
    for d in "$root"/pilot "$root"/main; do
        [ -f "$d/summary.json" ] && $fulcrum report "$d" >/dev/null
    done
    # The comparison's per-run summary (rule, seed, steps, task, final accuracy, diagnostics).
    cp "$root/main/summary.json" "$docs/summary.json"
    write_analysis "$root/main"
}

# The pre-registered analysis of the main runs in RUNS_DIR, with the committed samples, into
# docs/study-real: analysis.json and report.md.
write_analysis() { # RUNS_DIR
    python3 scripts/study_real_analysis.py "$docs" "$1" >"$docs/analysis.json"
    python3 scripts/study_real_analysis.py --report "$docs/analysis.json" >"$docs/report.md"
    echo "study-real: $docs/analysis.json and $docs/report.md" >&2
}

# The same from the committed files alone (the runs unpacked into a scratch folder).
analysis() {
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    tar --extract --gzip --file "$docs/runs.tar.gz" --directory "$scratch"
    write_analysis "$scratch/$root/main"
}

pack() { scripts/runs-archive.sh pack "$root" "$docs/runs.tar.gz"; }
unpack() { scripts/runs-archive.sh unpack "$docs/runs.tar.gz"; }

phase=${1:-all}
case $phase in
    pilot) pilot ;;
    main) main_runs ;;
    samples) samples ;;
    report) report ;;
    analysis) analysis ;;
    pack) pack ;;
    unpack) unpack ;;
    all) unpack; pilot; main_runs; samples; report ;;
    *) echo "study-real: unknown phase $phase (pilot, main, samples, report, analysis, pack, unpack)" >&2; exit 2 ;;
esac
