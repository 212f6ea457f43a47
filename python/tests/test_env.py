"""The environment python/test.sh builds: the project's torch reached through a .pth file."""

import subprocess
import sys

from conftest import require


def test_datasets_hashes_a_function_that_uses_torch():
    """dill pickles a module by reference only when its file lies under the interpreter's prefix
    or a `site-packages` path; torch reached through the `.venv/site` symlink is neither, so
    datasets' fingerprint pickled torch by value and failed. The .pth holds the real path."""
    require("datasets")
    require("torch")
    code = (
        "import torch\n"
        "from datasets.fingerprint import Hasher\n"
        "def reward(completions, **_):\n"
        "    return torch.zeros(len(completions)).tolist()\n"
        "print(len(Hasher.hash(reward)))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "16"
