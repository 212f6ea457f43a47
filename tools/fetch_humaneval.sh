#!/usr/bin/env bash
# Fetch HumanEval into data/code/HumanEval.jsonl.gz, sha256-checked.
# Kept for compatibility: it is `fulcrum fetch-assets --only humaneval` (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./scripts/fulcrum fetch-assets --only humaneval "$@"
