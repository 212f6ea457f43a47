"""The final policy as files others open, checked by the real consumers (docs/training.md, "The
final policy as files others open").

Two one-step `fulcrum train` runs of SmolLM2-135M-Instruct, a full fine-tune and a LoRA run, both
started from the HF folder `fulcrum convert` makes of the GGUF asset; an entropy bonus gives the
step a gradient whatever the rewards, so that the weights do move (no SFT warm-up: its cache is
another 1.6 GB on disk). Then:

- transformers loads `checkpoints/final/hf/` with no missing, unexpected or misshapen weight, and
  its logits at every position of four chat prompts match fulcrum's (the `logits` example of
  fulcrum-model, on the checkpoint itself) within LOGIT_TOL;
- its tokenizer renders the chat template and encodes as fulcrum does, has the eos, pad, bos and
  unk tokens the GGUF declares, and a batched, padded `generate` (what TRL's first step does)
  runs; `generation_config.json` has the ids;
- PEFT loads `checkpoints/final/adapter/` onto the base (the source folder), by hand and through
  `AutoPeftModelForCausalLM`, and matches the merged `hf/` folder and fulcrum's LoRA policy;
- the folder `fulcrum convert` writes passes the same checks against fulcrum on the GGUF.

SmolLM2's GGUF comes from `assets/` (or FULCRUM_SMOLLM2_GGUF); when absent it is fetched with
`fulcrum fetch-assets --only smollm2`. The GGUF export is checked against a llama.cpp server in
crates/fulcrum-train/tests/engine_llamacpp.rs.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, fulcrum_cli, missing, require

# Max |logit| difference allowed between transformers (or PEFT) and fulcrum, both in f32 on the
# CPU: the two differ only in the order of their sums (measured: below 1e-4 on logits of size 10-30).
LOGIT_TOL = 2e-3

PROMPTS = [
    "What is 7 + 5? Answer with just the number.",
    "Name three colours.",
    "Write the number 12345 backwards.",
    "Hi!",
]


def smollm2_gguf(cli):
    path = Path(os.environ.get("FULCRUM_SMOLLM2_GGUF") or REPO / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not path.is_file():
        subprocess.run([cli, "fetch-assets", "--only", "smollm2"], cwd=REPO, check=False)
    if not path.is_file():
        missing(f"{path} (fulcrum fetch-assets --only smollm2)")
    return path


def logits_tool():
    """fulcrum-model's `logits` example (built here: test.sh builds the CLI only)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "-p", "fulcrum-model", "--example", "logits"],
        cwd=REPO,
        check=True,
    )
    return target / "release" / "examples" / "logits"


def fulcrum_side(tool, model, tmp):
    """fulcrum's rendered prompts, token ids and logits for PROMPTS on `model`."""
    torch = require("torch")
    from safetensors.torch import load_file

    prompts, out = tmp / "prompts.json", tmp / f"fulcrum-{abs(hash(str(model)))}.safetensors"
    prompts.write_text(json.dumps(PROMPTS))
    done = subprocess.run([str(tool), str(model), str(prompts), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rendered = json.loads(done.stdout)
    t = load_file(str(out))
    return [(rendered[k], t[f"ids.{k}"].tolist(), t[f"logits.{k}"].to(torch.float32)) for k in range(len(PROMPTS))]


def train(cli, tmp, name, source, data, extra):
    run = tmp / name
    sets = {
        "model.path": json.dumps(str(source)),
        "task.name": '"jsonl"',
        "task.path": json.dumps(str(data)),
        "steps": "1",
        "sft.steps": "0",
        "ppo.entropy_coef": "0.01",
        "eval_every": "0",
        "checkpoint_every": "0",
        "rollout.prompts_per_step": "2",
        "rollout.group_size": "2",
        "rollout.max_prompt_len": "96",
        "rollout.max_response_len": "8",
        "ppo.micro_batch_size": "4",
        "eval.prompts": "2",
        "threads": "2",
        "logging.tensorboard": "false",
        **extra,
    }
    args = [cli, "train", "--run-dir", str(run)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    # Only the final checkpoint is looked at: its step checkpoint is 1.6 GB of disk.
    for step in (run / "checkpoints").glob("step-*"):
        shutil.rmtree(step)
    return run / "checkpoints" / "final"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cli = fulcrum_cli()
    require("transformers")
    tmp = tmp_path_factory.mktemp("export")
    try:
        yield make_runs(cli, tmp)
    finally:
        # About 4 GB of checkpoints and exports, which pytest would otherwise keep.
        shutil.rmtree(tmp, ignore_errors=True)


def make_runs(cli, tmp):
    gguf = smollm2_gguf(cli)
    source = tmp / "source-hf"
    done = subprocess.run([cli, "convert", str(gguf), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = tmp / "add.jsonl"
    rows = [{"prompt": f"What is {a} + {b}? Answer with just the number.", "answer": str(a + b)}
            for a in range(1, 5) for b in range(1, 5)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    full = train(cli, tmp, "full", source, data, {"optim.lr": "1e-4", "export.gguf": "true"})
    lora = train(cli, tmp, "lora", source, data, {
        "optim.lr": "1e-3",
        "model.lora": '{ rank = 8, alpha = 16, targets = ["q_proj", "v_proj", "up_proj"] }',
    })
    return {"tmp": tmp, "gguf": gguf, "source": source, "full": full, "lora": lora, "tool": logits_tool()}


def load_hf(path):
    transformers = require("transformers")
    torch = require("torch")
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, output_loading_info=True
    )
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info.get(key), f"{path}: {key}: {info[key]}"
    return model.eval()


def max_logit_diff(model, side):
    torch = require("torch")
    worst = 0.0
    with torch.no_grad():
        for _, ids, want in side:
            got = model(torch.tensor([ids])).logits[0].to(torch.float32)
            assert got.shape == want.shape
            worst = max(worst, (got - want).abs().max().item())
    return worst


def check_tokens(folder, side):
    """The tokenizer and generation config transformers reads from `folder`, against fulcrum."""
    transformers = require("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    # SmolLM2's GGUF declares bos <|im_start|> (1), eos and pad <|im_end|> (2), unk <|endoftext|> (0).
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 2)
    assert (tok.pad_token, tok.pad_token_id) == ("<|im_end|>", 2)
    assert (tok.bos_token, tok.unk_token) == ("<|im_start|>", "<|endoftext|>")
    assert tok.model_max_length == 8192
    for prompt, (rendered, ids, _) in zip(PROMPTS, side):
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        assert text == rendered
        assert tok(text)["input_ids"] == ids, prompt  # no bos added, digits split as fulcrum does
    gen = transformers.GenerationConfig.from_pretrained(str(folder))
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == (1, 2, 2)
    return tok


def test_the_converted_source_folder_matches_fulcrum_on_the_gguf(runs):
    side = fulcrum_side(runs["tool"], runs["gguf"], runs["tmp"])
    check_tokens(runs["source"], side)
    diff = max_logit_diff(load_hf(runs["source"]), side)
    print(f"convert: transformers vs fulcrum on the GGUF: max |logit diff| {diff:.2e}")
    assert diff < LOGIT_TOL


def test_the_hf_export_loads_in_transformers_with_fulcrums_logits_and_generates(runs):
    final = runs["full"]
    hf = final / "hf"
    assert (hf / "model.safetensors.index.json").is_file()
    assert (final / "model.gguf").is_file()
    side = fulcrum_side(runs["tool"], final, runs["tmp"])
    tok = check_tokens(hf, side)
    model = load_hf(hf)
    diff = max_logit_diff(model, side)
    print(f"hf/: transformers vs fulcrum's final policy: max |logit diff| {diff:.2e}")
    assert diff < LOGIT_TOL
    # The policy trained: the export is not the source model.
    moved = max_logit_diff(load_hf(runs["source"]), side)
    assert moved > 100 * LOGIT_TOL, moved
    # What TRL does first: a batch of chat prompts, left-padded, generated together.
    torch = require("torch")
    tok.padding_side = "left"
    texts = [t for t, _, _ in side]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    width = batch["input_ids"].shape[1]
    assert out.shape[0] == len(texts) and width < out.shape[1] <= width + 4


def test_the_peft_adapter_loads_on_the_base_and_matches_the_merged_folder(runs):
    peft = require("peft")
    torch = require("torch")
    final = runs["lora"]
    adapter = final / "adapter"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 8 and cfg["lora_alpha"] == 16
    assert Path(cfg["base_model_name_or_path"]) == runs["source"].resolve()
    side = fulcrum_side(runs["tool"], final, runs["tmp"])
    merged = load_hf(final / "hf")
    merged_vs_fulcrum = max_logit_diff(merged, side)
    on_base = peft.PeftModel.from_pretrained(load_hf(runs["source"]), str(adapter)).eval()
    peft_vs_fulcrum = max_logit_diff(on_base, side)
    auto = peft.AutoPeftModelForCausalLM.from_pretrained(str(adapter), dtype=torch.float32).eval()
    auto_vs_fulcrum = max_logit_diff(auto, side)
    base_vs_fulcrum = max_logit_diff(load_hf(runs["source"]), side)
    with torch.no_grad():
        peft_vs_merged = max(
            (on_base(torch.tensor([ids])).logits - merged(torch.tensor([ids])).logits).abs().max().item()
            for _, ids, _ in side
        )
    print(
        f"LoRA: hf/ vs fulcrum {merged_vs_fulcrum:.2e}, PEFT vs fulcrum {peft_vs_fulcrum:.2e}, "
        f"PEFT vs hf/ {peft_vs_merged:.2e}, AutoPeft vs fulcrum {auto_vs_fulcrum:.2e}; "
        f"the base vs fulcrum {base_vs_fulcrum:.2e} (what the adapter changes)"
    )
    assert max(merged_vs_fulcrum, peft_vs_fulcrum, peft_vs_merged, auto_vs_fulcrum) < LOGIT_TOL
    assert base_vs_fulcrum > 100 * LOGIT_TOL  # the adapter is not a no-op
