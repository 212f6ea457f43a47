#!/usr/bin/env bash
#! The result files of a study's finished runs, in one deterministic archive, and back; shared
#! by scripts/study2.sh and scripts/study-real.sh.
#!
#!   scripts/runs-archive.sh pack ROOT ARCHIVE     # ROOT/*/runs/*/*-seed*/ that have a summary.json
#!   scripts/runs-archive.sh unpack ARCHIVE        # restores them; a run already here is kept
#!
#! A finished run's config.toml, metrics.jsonl, eval.jsonl and summary.json are packed (no
#! checkpoints: a finished run is never resumed), with each comparison's compare.json and
#! summary.json, sorted, owned by root and dated 2026-01-01, so the same runs give the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
    pack)
        root=${2:?pack ROOT ARCHIVE}
        archive=${3:?pack ROOT ARCHIVE}
        list=$(mktemp)
        for summary in "$root"/*/runs/*/*-seed*/summary.json; do
            [ -f "$summary" ] || continue
            d=$(dirname "$summary")
            for f in config.toml metrics.jsonl eval.jsonl summary.json; do
                [ -f "$d/$f" ] && echo "$d/$f"
            done
        done | LC_ALL=C sort >"$list"
        runs=$(grep -c 'seed[0-9]*/summary.json' "$list" || true)
        for m in "$root"/*/compare.json "$root"/*/summary.json; do [ -f "$m" ] && echo "$m"; done >>"$list"
        tar --create --gzip --file "$archive" --owner=0 --group=0 --mtime=2026-01-01 --files-from "$list"
        echo "runs-archive: $runs finished runs packed into $archive" >&2
        rm -f "$list"
        ;;
    unpack)
        archive=${2:?unpack ARCHIVE}
        [ -f "$archive" ] || { echo "runs-archive: no $archive" >&2; exit 0; }
        tar --extract --gzip --file "$archive" --skip-old-files
        echo "runs-archive: finished runs restored from $archive" >&2
        ;;
    *) echo "runs-archive: pack ROOT ARCHIVE | unpack ARCHIVE" >&2; exit 2 ;;
esac
