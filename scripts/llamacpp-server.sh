#!/usr/bin/env bash
# Runs llama.cpp's server for fulcrum's rollouts on 127.0.0.1:PORT, in the foreground until killed:
#   scripts/llamacpp-server.sh MODEL.gguf PORT [--slots N] [--ctx TOKENS] [--threads N]
# On first use it installs the engine (PyPI `xllamacpp`, a prebuilt CPU build of llama.cpp) into
# .venv-engine beside this checkout (FULCRUM_ENGINE_VENV elsewhere). The server answers
# llama-server's own routes (/completion, /v1/completions, /tokenize, /health, /props, ...) and
# POST /reload_model, which fulcrum's weight push uses (scripts/llamacpp_server.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 2 ]; then
    echo "usage: $0 MODEL.gguf PORT [--slots N] [--ctx TOKENS] [--threads N]" >&2
    exit 2
fi
model="$1"; port="$2"; shift 2
if [ ! -r "$model" ]; then
    echo "llamacpp-server: $model: no such readable file (fulcrum fetch-assets --only smollm2 fetches one)" >&2
    exit 1
fi
venv="${FULCRUM_ENGINE_VENV:-$here/../.venv-engine}"
version="2026.10.11549"
if ! "$venv/bin/python" -c "import xllamacpp, sys; sys.exit(xllamacpp.__version__ != '$version')" 2>/dev/null; then
    echo "llamacpp-server: installing xllamacpp==$version into $venv" >&2
    if ! python3 -m venv "$venv"; then
        echo "llamacpp-server: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "xllamacpp==$version"; then
        echo "llamacpp-server: pip could not install xllamacpp==$version (a PyPI mirror or proxy is needed)" >&2
        exit 1
    fi
fi
exec "$venv/bin/python" "$here/llamacpp_server.py" "$(realpath "$model")" "$port" "$@"
