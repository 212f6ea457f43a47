#!/usr/bin/env bash
#! Fetches the SmolLM2-135M-Instruct GGUF (Q4_1) into assets/ and checks its sha256.
#! Kept for compatibility: it is `fulcrum fetch-assets --only smollm2` (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./scripts/fulcrum fetch-assets --only smollm2 "$@"
