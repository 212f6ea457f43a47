"""Shared helpers of the fulcrum_ba tests.

Optional pieces (the `fulcrum` CLI binary, trl, verl) skip their tests when absent, except under
`FULCRUM_BA_STRICT=1` (set by python/test.sh, hence CI), where an absent piece fails the test.
"""

import importlib
import os
import random
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC_VECTORS = REPO / "crates" / "fulcrum-core" / "tests" / "fixtures" / "aggregation-vectors.json"
STRICT = os.environ.get("FULCRUM_BA_STRICT") == "1"


def missing(what):
    """Skips the calling test, or fails it under FULCRUM_BA_STRICT=1."""
    if STRICT:
        pytest.fail(f"{what} is missing (FULCRUM_BA_STRICT=1)")
    pytest.skip(f"{what} is missing")


def require(module):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing(f"python module {module} ({e})")


def fulcrum_cli():
    """The `fulcrum` binary: $FULCRUM_BIN, else target/debug or target/release of the checkout."""
    candidates = [os.environ.get("FULCRUM_BIN")] + [
        str(REPO / "target" / p / "fulcrum") for p in ("debug", "release")
    ]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            probe = subprocess.run([c, "--help"], capture_output=True)
            if probe.returncode == 0:
                return c
    missing("the fulcrum CLI binary (cargo build -p fulcrum, or FULCRUM_BIN)")


def random_batch(rng, n_groups=None, string_ids=False, zero_lengths=True, binary=True):
    """A random step batch: groups of 1-8 responses, lengths 0-300, rewards 0/1 or in [0, 1]."""
    n_groups = n_groups or rng.randint(1, 6)
    groups, rewards, lengths = [], [], []
    for g in range(n_groups):
        for _ in range(rng.randint(1, 8)):
            groups.append(f"uid-{g}" if string_ids else g * 7 + 3)
            rewards.append(float(rng.random() < 0.5) if binary else round(rng.random(), 3))
            lengths.append(0 if zero_lengths and rng.random() < 0.1 else rng.randint(1, 300))
    order = list(range(len(groups)))
    rng.shuffle(order)  # responses of a group need not be adjacent
    return [groups[i] for i in order], [rewards[i] for i in order], [lengths[i] for i in order]


@pytest.fixture
def rng():
    return random.Random(20240611)
