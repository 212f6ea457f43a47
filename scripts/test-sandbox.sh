#!/usr/bin/env bash
#! The hostile-program suites (fulcrum-tasks' sandbox_hostile and sandbox_escape) in every
#! sandbox mode, one after the other:
#!   bwrap, namespaces, landlock    exactly that mode
#!   bwrap-absent, bwrap-broken     `auto` with no bwrap / a failing bwrap: must fall back to a
#!                                  containing built-in mode
#!   unsafe-rlimit                  the weak opt-in: programs it cannot contain are measured,
#!                                  not asserted
#! and, when run as root, namespaces, landlock, bwrap and unsafe-rlimit again as uid 65534 (a
#! non-root runner: the user-namespace path, Landlock's signal scoping). A mode this machine
#! cannot run fails the script; FULCRUM_SANDBOX_MODES="..." runs fewer.
#!   scripts/test-sandbox.sh [--table FILE]   FILE: the measured program x mode table (markdown)
#! SANDBOX_TEST_SCOPE (default `-p fulcrum-tasks`) is passed to cargo; .ci/run passes
#! `--workspace` to reuse the workspace's test build (both --release, as scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
table=""
if [[ ${1:-} == --table ]]; then
    table=${2:?--table FILE}
fi
modes=${FULCRUM_SANDBOX_MODES:-bwrap namespaces landlock bwrap-absent bwrap-broken unsafe-rlimit}
scope=${SANDBOX_TEST_SCOPE:--p fulcrum-tasks}
report=$(mktemp /tmp/fulcrum-sandbox-report-XXXXXX)
chmod 666 "$report"
nobody_home=$(mktemp -d /tmp/fulcrum-sandbox-home-XXXXXX)
trap 'rm -rf "$report" "$nobody_home"' EXIT
suites=(--test sandbox_hostile --test sandbox_escape)
# shellcheck disable=SC2086
# sandbox_hostile first (sort -r), then sandbox_escape: the table's row order.
binaries=$(cargo test --release $scope "${suites[@]}" --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p' | sort -r)
[[ -n $binaries ]] || { echo "test-sandbox: no test binaries built" >&2; exit 1; }
for mode in $modes; do
    echo "== hostile programs, sandbox mode $mode"
    for bin in $binaries; do
        FULCRUM_TEST_SANDBOX=$mode FULCRUM_SANDBOX_REPORT=$report "$bin" --test-threads=1
    done
done
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
    # Copies that uid 65534 can run wherever the checkout lives.
    mkdir "$nobody_home/bin"
    copies=""
    for bin in $binaries; do
        cp "$bin" "$nobody_home/bin/"
        copies="$copies $nobody_home/bin/$(basename "$bin")"
    done
    chown -R 65534:65534 "$nobody_home"
    for mode in $modes; do
        case $mode in bwrap-*) continue;; esac
        echo "== hostile programs, sandbox mode $mode, runner uid 65534"
        for bin in $copies; do
            setpriv --reuid 65534 --regid 65534 --clear-groups env HOME="$nobody_home" \
                FULCRUM_TEST_SANDBOX="$mode" FULCRUM_SANDBOX_REPORT="$report" "$bin" --test-threads=1
        done
    done
fi
if [[ -n $table ]]; then
    python3 scripts/sandbox-table.py "$report" > "$table"
    echo "test-sandbox: table in $table"
fi
echo "test-sandbox: $(wc -l < "$report") program runs recorded; every containing mode contained every program"
