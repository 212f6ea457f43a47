#!/usr/bin/env bash
#! Installs libtorch for the build: PyPI's torch==2.13.0 (the version tch 0.26 binds) into the
#! project-local virtual environment `.venv`, and links `.venv/site` to its site-packages so that
#! `.cargo/config.toml` can name `.venv/site/torch` without knowing the Python version.
#! Idempotent: a second run checks a stamp file and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
STAMP=.venv/.fulcrum-torch-$TORCH_VERSION
if [[ -f $STAMP && -f .venv/site/torch/lib/libtorch.so ]]; then
    exit 0
fi
PYTHON=${PYTHON:-python3}
echo "setup-libtorch: installing torch==$TORCH_VERSION from PyPI into .venv (once; about 5 GB)" >&2
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ln -sfn "$site" .venv/site
got=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')
if [[ $got != "$TORCH_VERSION" ]]; then
    echo "setup-libtorch: expected torch $TORCH_VERSION in .venv, got $got" >&2
    exit 1
fi
touch "$STAMP"
echo "setup-libtorch: torch $got ready in .venv/site/torch" >&2
