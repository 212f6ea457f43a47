#!/usr/bin/env bash
#! The second aggregation study (docs/study/preregistration.md), as one command. With no phase it
#! runs every phase in order; each phase is resumable (run the same command again after a kill:
#! finished runs are skipped, the others resume) and deterministic, so the order of runs and
#! `--jobs` do not change a result.
#!
#!   scripts/study2.sh                  # pilot, main, dose, stress, then the reports
#!   scripts/study2.sh pilot            # warm-ups and manipulation checks; the lr sweep
#!   scripts/study2.sh main|dose|stress|report
#!   scripts/study2.sh pack             # finished runs' result files -> docs/study/runs.tar.gz
#!   scripts/study2.sh unpack           # ... and back, so that a fresh checkout resumes the study
#!
#! Phases (configs/study/decisive.toml; cells set the length knobs of shape.rs):
#!   pilot   ba for 20 steps at lr 2e-5 in each cell (the manipulation checks: token's mass ratio, within-
#!           side CV, truncation, the warm-up's accuracy), and ba in C0 and BOTH for 40 steps at
#!           four learning rates (the sweep that chose optim.lr)
#!   main    token, seq, ba, token-group x 4 cells x 4 seeds, 80 steps
#!   dose    ba with ba_pos_scale in {1/3, 1/2, 1, 2, 3} in C0, 2 seeds (the side-balance dose-response)
#!   stress  BOTH at 4x the learning rate with 4 mini-batches per step (off-policy, clipping acts),
#!           token, seq, ba x 3 seeds, 60 steps
#!   report  `fulcrum report` of each phase, and the pre-registered analysis
#!           (scripts/study2_analysis.py) into runs/study2/analysis.json, and the verdicts by the
#!           pre-registered rules with their tables (scripts/study2_report.py) into runs/study2/report.md
#! Every phase shares the cells' warm-ups (sft.seed is fixed): the first phase to need one trains
#! it, the later ones copy it from runs/study2/pilot.
set -euo pipefail
cd "$(dirname "$0")/.."
root=runs/study2
jobs=${JOBS:-2}
config=configs/study/decisive.toml
base="arithmetic:difficulty=2,mistake_rate=0.3"
levels="verbose_levels=0:0.6/1:0.2/4:0.2"
loop="loop_rate=1,loop_length=420"
C0="$base"
CV="$base,$levels"
LOOP="$base,$loop"
BOTH="$base,$levels,$loop"
# FULCRUM: a fixed binary for a long study (a copy of target/release/fulcrum under target/, so its
# rpath still finds libtorch), so that editing or rebuilding the code meanwhile cannot change it.
fulcrum=${FULCRUM:-./scripts/fulcrum}

# Copies the warm-ups of runs/study2/pilot into OUT (content-keyed, so a copy is the same
# warm-up; compare checks that every run reused it).
share_warmups() {
    local out=$1
    [ -d "$root/pilot/runs" ] || return 0
    for cache in "$root"/pilot/runs/*/sft-cache; do
        [ -d "$cache" ] || continue
        local task
        task=$(basename "$(dirname "$cache")")
        mkdir -p "$out/runs/$task/sft-cache"
        for entry in "$cache"/*; do
            [ -e "$out/runs/$task/sft-cache/$(basename "$entry")" ] || cp -r "$entry" "$out/runs/$task/sft-cache/"
        done
    done
}

compare() {
    local out=$1
    shift
    share_warmups "$out"
    $fulcrum compare --config "$config" --jobs "$jobs" --quiet --out "$out" "$@"
}

pilot() {
    # The manipulation checks ran at 2e-5, before the sweep chose the config's lr.
    compare "$root/pilot" --rules ba --seeds 1 --steps 20 --tasks "$C0,$CV,$LOOP,$BOTH" --set optim.lr=0.00002
    for lr in 0.000005 0.00001 0.00002 0.00004; do
        compare "$root/lr-$lr" --rules ba --seeds 1 --steps 40 --tasks "$C0,$BOTH" --set "optim.lr=$lr"
    done
}

main_runs() {
    compare "$root/main" --rules token,seq,ba,token-group --seeds 4 --tasks "$C0,$CV,$LOOP,$BOTH"
}

dose() {
    for scale in 0.3333333333333333 0.5 1 2 3; do
        compare "$root/dose-$scale" --rules ba --seeds 2 --tasks "$C0" --set "ba_pos_scale=$scale"
    done
}

stress() {
    lr=$(sed -n 's/^lr = //p' "$config")
    stress_lr=$(python3 -c "print(4 * $lr)")
    compare "$root/stress" --rules token,seq,ba --seeds 3 --steps 60 --tasks "$BOTH" \
        --set "optim.lr=$stress_lr" --set ppo.mini_batches=4
}

pack() { scripts/runs-archive.sh pack "$root" docs/study/runs.tar.gz; }
unpack() { scripts/runs-archive.sh unpack docs/study/runs.tar.gz; }

report() {
    for d in "$root"/*/; do
        [ -f "$d/summary.json" ] && $fulcrum report "$d" >/dev/null
    done
    python3 scripts/study2_analysis.py "$root" >"$root/analysis.json"
    python3 scripts/study2_report.py "$root/analysis.json" >"$root/report.md"
    echo "study2: analysis in $root/analysis.json, verdicts and tables in $root/report.md" >&2
}

phase=${1:-all}
case $phase in
    pilot) pilot ;;
    main) main_runs ;;
    dose) dose ;;
    stress) stress ;;
    report) report ;;
    pack) pack ;;
    unpack) unpack ;;
    all) unpack; pilot; main_runs; dose; stress; report ;;
    *) echo "study2: unknown phase $phase (pilot, main, dose, stress, report, pack, unpack)" >&2; exit 2 ;;
esac
