#!/usr/bin/env bash
#! Builds and tests the fulcrum_ba package (python/): `pip install ./python` into the test venv
#! python/.venv-test, then pytest python/tests. Extra arguments go to pytest. Called by .ci/run.
#!
#! The venv reuses the project's torch (.venv, scripts/setup-libtorch.sh) through a .pth file that
#! holds its real path, instead of installing a second 5 GB copy, and adds, once: trl 1.16.0 and
#! transformers 5.24.0 (the versions bench/ races), numpy, pytest, and verl 0.9.1 without its
#! dependencies (it pins transformers < 5.11) plus only what `verl.trainer.ppo.core_algos` imports.
#! The `fulcrum` CLI is built too: the tests compare against `fulcrum analyze --json`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-libtorch.sh
cargo build --quiet --release -p fulcrum

VENV=python/.venv-test
STAMP=$VENV/.fulcrum-ba-deps-1
if [[ ! -f $STAMP ]]; then
    echo "python/test.sh: creating $VENV (trl, transformers, verl core; torch from .venv)" >&2
    "${PYTHON:-python3}" -m venv --clear "$VENV"
fi
# Written at every run, so that a venv built before this line gets it too. The real path, not the
# `.venv/site` symlink: dill (datasets' fingerprint, multiprocessing) pickles a module by reference
# only when its file lies under a `site-packages` path, and pickled torch by value through the link.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/python" -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' .venv/site \
    >"$site/_fulcrum_project_torch.pth"
if [[ ! -f $STAMP ]]; then # after the .pth, so that pip sees the project's torch (trl needs one)
    pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    "${pip[@]}" "trl==1.16.0" "transformers==5.24.0" "numpy==2.4.6" "pytest==9.2.0" \
        "ray==2.60.0" "tensordict==0.10.0" "omegaconf==2.3.1" "codetiming==1.4.0"
    "${pip[@]}" --no-deps "verl==0.9.1"
    touch "$STAMP"
fi
# The real consumers of what fulcrum writes, each checked and installed on its own so that an
# existing venv gets a new one without a rebuild: PEFT (python/tests/test_export.py), TensorBoard
# and W&B's SDK (python/tests/test_dashboards.py).
for pin in peft==0.21.2 tensorboard==2.21.0 wandb==0.31.0; do
    "$VENV/bin/python" -c 'import importlib.metadata as m, sys; n, v = sys.argv[1].split("=="); sys.exit(m.version(n) != v)' "$pin" 2>/dev/null ||
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$pin"
done
"$VENV/bin/python" -c 'import torch' # the .pth must reach the project's torch
# An empty RUSTFLAGS replaces .cargo/config.toml's rustflags (the rpath to the project's libtorch,
# which the extension does not use) for the wheel's build only.
RUSTFLAGS="" "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./python
# Offline: the tests build their model locally and must never reach for a hub.
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 FULCRUM_BA_STRICT=1 FULCRUM_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/fulcrum" \
    "$VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider -W ignore::FutureWarning "$@"
