#!/usr/bin/env bash
#! Installs libtorch for the build: PyPI's torch==2.13.0 (the version tch 0.26 binds) into the
#! project-local virtual environment `.venv`, and links `.venv/site` to its site-packages so that
#! `.cargo/config.toml` can name `.venv/site/torch` without knowing the Python version.
#! The wheel ships c10d's headers but not Gloo's, which crates/fulcrum-dist's shim also needs:
#! they come from Debian's libgloo-dev, unpacked (no root needed) into `.venv/gloo`.
#! `--nccl` also installs the CUDA headers that ProcessGroupNCCL's headers include and the wheel
#! lacks (nvidia-cuda-crt: crt/host_config.h; nvidia-cuda-cccl: nv/target), at the CUDA version of
#! the wheel's own runtime, so that `--features fulcrum-dist/nccl` builds on a machine without CUDA.
#! Idempotent: a second run checks a stamp file and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.13.0
STAMP=.venv/.fulcrum-torch-$TORCH_VERSION

gloo_headers() {
    if [[ -f .venv/gloo/usr/include/gloo/rendezvous/store.h || -f /usr/include/gloo/rendezvous/store.h || -n ${FULCRUM_GLOO_INCLUDE:-} ]]; then
        return 0
    fi
    echo "setup-libtorch: unpacking Debian's libgloo-dev headers into .venv/gloo (for the c10d shim)" >&2
    local tmp
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && apt-get download libgloo-dev >/dev/null 2>&1); then
        rm -rf "$tmp"
        echo "setup-libtorch: could not download libgloo-dev with apt-get: install Gloo's headers (apt-get install libgloo-dev) or point FULCRUM_GLOO_INCLUDE at a folder holding gloo/" >&2
        exit 1
    fi
    mkdir -p .venv/gloo
    dpkg-deb -x "$tmp"/libgloo-dev_*.deb .venv/gloo
    rm -rf "$tmp"
}

WANT_NCCL=0
for arg in "$@"; do
    case $arg in
        --nccl) WANT_NCCL=1 ;;
        *) echo "setup-libtorch: unknown argument $arg (the only one is --nccl)" >&2; exit 2 ;;
    esac
done

nccl_headers() {
    [[ $WANT_NCCL == 1 ]] || return 0
    if [[ -f .venv/site/nvidia/cu13/include/crt/host_config.h && -d .venv/site/nvidia/cu13/include/nv ]]; then
        return 0
    fi
    local cuda
    cuda=$(.venv/bin/python -c 'import importlib.metadata as m; print(".".join(m.version("nvidia-cuda-runtime").split(".")[:2]))')
    echo "setup-libtorch: installing CUDA $cuda headers (nvidia-cuda-crt, nvidia-cuda-cccl) for the NCCL shim" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
        "nvidia-cuda-crt==$cuda.*" "nvidia-cuda-cccl==$cuda.*"
}

if [[ -f $STAMP && -f .venv/site/torch/lib/libtorch.so ]]; then
    gloo_headers
    nccl_headers
    exit 0
fi
PYTHON=${PYTHON:-python3}
echo "setup-libtorch: installing torch==$TORCH_VERSION from PyPI into .venv (once; about 5 GB)" >&2
# The wheel and its CUDA libraries unpack to about 5 GB, and pip needs room for the downloads
# beside them: say so plainly up front rather than fail halfway with ENOSPC.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [[ -n $free_kb && $free_kb -lt $((8 * 1024 * 1024)) ]]; then
    echo "setup-libtorch: only $((free_kb / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'); torch needs about 8 GiB while installing" >&2
    exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
# --no-cache-dir: a second copy of the wheels in pip's cache would only cost disk.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-cache-dir "torch==$TORCH_VERSION"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ln -sfn "$site" .venv/site
got=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')
if [[ $got != "$TORCH_VERSION" ]]; then
    echo "setup-libtorch: expected torch $TORCH_VERSION in .venv, got $got" >&2
    exit 1
fi
gloo_headers
nccl_headers
touch "$STAMP"
echo "setup-libtorch: torch $got ready in .venv/site/torch" >&2
