"""A real `fulcrum train`'s dashboards read back by their own readers: TensorBoard's
EventAccumulator over `<run_dir>/tb/`, and the W&B SDK's record protocol buffers over the
offline run `logging.wandb_mode = "offline"` writes. Every number of metrics.jsonl and eval.jsonl
must be there, at its step, once, also after a resume that discards recorded steps.

The run: SmolLM2-135M (GGUF, `fulcrum fetch-assets --only smollm2`) on one-digit additions, which
it gets right about half the time, so groups have responses of both advantage signs.
"""

import glob
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FULCRUM = os.environ["FULCRUM_BIN"]
GGUF = ROOT / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"

RUN = [
    f"model.path={json.dumps(str(GGUF))}",
    'task.name="jsonl"',
    f"task.path={json.dumps(str(ROOT / 'data/arith/add_1digit.jsonl'))}",
    "steps=3",
    "sft.steps=0",
    # Adapters only: a checkpoint of a few MB instead of the model and its AdamW moments.
    'model.lora={ rank = 4, alpha = 8.0, targets = ["q_proj", "v_proj"] }',
    "optim.lr=1e-4",
    "rollout.prompts_per_step=3",
    "rollout.group_size=4",
    "rollout.max_prompt_len=64",
    "rollout.max_response_len=16",
    "eval.prompts=4",
    "eval_every=1",
    "checkpoint_every=1",
    "checkpoint_keep=3",
    "export.hf=false",
    "threads=2",
]


def fulcrum(*args, env=None):
    out = subprocess.run([FULCRUM, *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out


def train(run_dir, *sets, env=None):
    args = ["train", "--quiet", "--run-dir", str(run_dir)]
    for s in (*RUN, *sets):
        args += ["--set", s]
    return fulcrum(*args, env=env)


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def numbers(record, prefix=""):
    """The numbers of a record under their dashboard names (nested keys joined by '/')."""
    out = {}
    for k, v in record.items():
        if not prefix and k == "step":
            continue
        key = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            out.update(numbers(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def expected(run_dir):
    """(tag, step) -> value of every number the run's JSONL files hold."""
    want = {}
    for m in jsonl(run_dir / "metrics.jsonl"):
        for k, v in numbers(m).items():
            want[(k, m["step"])] = v
    for e in jsonl(run_dir / "eval.jsonl"):
        for k, v in numbers(e).items():
            want[(f"eval/{k}", e["step"])] = v
    return want


def tensorboard_of(run_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    files = glob.glob(str(run_dir / "tb" / "events.out.tfevents.*"))
    assert len(files) == 1, files
    acc = ea.EventAccumulator(
        str(run_dir / "tb"),
        size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0},
    )
    acc.Reload()
    return acc


def assert_tensorboard_holds_the_run(run_dir):
    acc = tensorboard_of(run_dir)
    got = {}
    for tag in acc.Tags()["scalars"]:
        steps = [e.step for e in acc.Scalars(tag)]
        assert len(steps) == len(set(steps)), f"{tag}: a step twice: {steps}"
        for e in acc.Scalars(tag):
            got[(tag, e.step)] = e.value
    want = expected(run_dir)
    assert set(got) == set(want), (set(got) ^ set(want))
    for key, v in want.items():
        # TensorBoard's simple_value is a float32.
        assert got[key] == pytest.approx(np.float32(v), rel=1e-6, abs=1e-30), key
    return acc


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run for the module, removed after it (its checkpoints hold the whole model)."""
    if not GGUF.is_file():
        pytest.fail(f"{GGUF} is missing: `fulcrum fetch-assets --only smollm2`")
    base = tmp_path_factory.mktemp("dash")
    train(base / "run")
    yield base / "run"
    shutil.rmtree(base, ignore_errors=True)


def test_every_number_of_the_jsonl_files_is_a_tensorboard_scalar_at_its_step(run):
    acc = assert_tensorboard_holds_the_run(run)
    # The config as text at step 0, and the lengths by advantage sign as histograms.
    config = acc.Tensors("config")
    assert config[0].step == 0
    assert b"add_1digit.jsonl" in config[0].tensor_proto.string_val[0]
    metrics = jsonl(run / "metrics.jsonl")
    hist = set(acc.Tags()["histograms"])
    assert {"len/positive_advantage", "len/negative_advantage"} <= hist, hist
    pos = {h.step: h.histogram_value for h in acc.Histograms("len/positive_advantage")}
    neg = {h.step: h.histogram_value for h in acc.Histograms("len/negative_advantage")}
    for m in metrics:
        for side in (pos, neg):
            if m["step"] in side:
                h = side[m["step"]]
                assert h.num == sum(h.bucket) > 0
                assert h.min <= h.max <= 16


def test_a_resume_that_discards_steps_leaves_each_step_once(run):
    # Resumed from step 1's checkpoint: steps 2 and 3 are trained (and logged) again.
    before = tensorboard_of(run).Scalars("reward/mean")
    fulcrum("train", "--quiet", "--resume", str(run), "--from-checkpoint", "step-1")
    assert [m["step"] for m in jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    after = assert_tensorboard_holds_the_run(run).Scalars("reward/mean")
    assert [e.step for e in after] == [1, 2, 3]
    # Steps 2 and 3 are the resumed run's events, written after the first run's.
    assert after[0].wall_time == before[0].wall_time
    assert all(a.wall_time > before[-1].wall_time for a in after[1:])


def wandb_history(run_dir):
    """The history rows of the run's offline W&B run, read as the SDK writes them: its record
    protocol buffers (wandb.proto) in the run file's LevelDB-style log blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, files
    data = Path(files[0]).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, records, part = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if n == 0 and kind == 0:
            break
        chunk, pos = data[pos : pos + n], pos + n
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            part = chunk
        elif kind == 3:
            part += chunk
        elif kind == 4:
            records.append(part + chunk)
    rows, config = {}, None
    for raw in records:
        r = pb.Record()
        r.ParseFromString(raw)
        kind = r.WhichOneof("record_type")
        if kind == "history":
            row = {
                (i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                for i in r.history.item
            }
            rows.setdefault(row["_step"], {}).update(row)
        elif kind == "run":
            config = {u.key: json.loads(u.value_json) for u in r.run.config.update}
    return rows, config


def test_an_offline_wandb_run_holds_the_same_history(tmp_path):
    env = dict(os.environ, FULCRUM_PYTHON=sys.executable, WANDB_SILENT="true")
    run_dir = tmp_path / "wb"
    wandb = ("logging.wandb=true", 'logging.wandb_mode="offline"')
    train(run_dir, "steps=2", "checkpoint_every=0", *wandb, env=env)
    rows, config = wandb_history(run_dir)
    assert config["rule"] in ("ba", {"value": "ba"}), config.get("rule")
    for (tag, step), v in expected(run_dir).items():
        got = rows[step][tag]
        assert got == pytest.approx(v, rel=1e-12), (tag, step)
    # The histograms by advantage sign, and the report's charts at the end.
    assert any(k.startswith("len/") and k.endswith("/_type") for r in rows.values() for k in r)
    assert any(k.startswith("charts/") for r in rows.values() for k in r)


def test_a_missing_wandb_package_stops_the_run_at_start_saying_so(tmp_path):
    # A python without wandb: the system one, with the venv's site-packages out of reach.
    env = dict(os.environ, FULCRUM_PYTHON="/usr/bin/python3", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    probe = subprocess.run(["/usr/bin/python3", "-c", "import wandb"], capture_output=True, env=env)
    if probe.returncode == 0:
        pytest.skip("/usr/bin/python3 has wandb")
    args = ["train", "--quiet", "--run-dir", str(tmp_path / "r")]
    for s in (*RUN, "logging.wandb=true", 'logging.wandb_mode="offline"'):
        args += ["--set", s]
    out = subprocess.run([FULCRUM, *args], capture_output=True, text=True, env=env)
    assert out.returncode != 0
    assert "logging.wandb" in out.stderr and "pip install wandb" in out.stderr, out.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists() or not jsonl(
        tmp_path / "r" / "metrics.jsonl"
    )
