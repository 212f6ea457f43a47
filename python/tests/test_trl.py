"""fulcrum_ba.trl.GRPOTrainer on the bench model of bench/trl_grpo_step.py (Qwen2-shaped, 3.2M
parameters, CPU, f32): two steps per rule, the loss it trains on, and invariance to
gradient_accumulation_steps, against TRL's own normalisations."""

import math
import sys
import tempfile

import fulcrum_ba
import pytest
from conftest import REPO, require

torch = require("torch")
trl = require("trl")
datasets = require("datasets")
transformers = require("transformers")
from fulcrum_ba.trl import GRPOTrainer  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from trl_grpo_step import build, digit_prompts  # noqa: E402

NUM_GENERATIONS = 4
GENERATION_BATCH = 32  # 8 prompts x 4 completions per optimizer step


def parity_reward(completions, **_):
    """Mixed rewards in most groups: an even number of digits in the completion."""
    return [float(sum(ch.isdigit() for ch in c) % 2 == 0) for c in completions]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "model"
    build(str(path))
    return str(path)


class Recording(GRPOTrainer):
    """Records each generation batch (after the fold) and its analyze report, each micro-batch
    loss, and the gradient right before every optimizer step."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.batches, self.reports, self.losses, self.grads = [], [], [], []
        trainer = self

        class Grads(transformers.TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kw):
                trainer.grads.append(
                    {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()}
                )

        self.add_callback(Grads())

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.batches.append(
            {k: out[k].detach().clone() for k in ("completion_ids", "completion_mask", "advantages")}
        )
        return out

    def _log_diagnostics(self, mode, report):
        self.reports.append(report)  # holds TRL's own advantages, before the fold
        super()._log_diagnostics(mode, report)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.losses.append(loss.detach().item())
        return loss


def train(model_dir, loss_type, ga=1, steps=1, optim="sgd", lr=0.5, **kw):
    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=GENERATION_BATCH // ga,
        gradient_accumulation_steps=ga,
        num_generations=NUM_GENERATIONS,
        max_completion_length=24,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=lr,
        optim=optim,
        weight_decay=0.0,
        max_grad_norm=0.0,
        lr_scheduler_type="constant",
        beta=0.0,
        num_iterations=1,
        loss_type=loss_type,
        max_steps=steps,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        disable_tqdm=True,
        shuffle_dataset=False,
    )
    data = datasets.Dataset.from_dict({"prompt": digit_prompts(8 * (steps + 1))})
    trainer = Recording(
        model=model, reward_funcs=[parity_reward], args=args, train_dataset=data, processing_class=tok, **kw
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return trainer, before, after


def rel_diff(a, b):
    """||a - b|| / ||a|| over every tensor of two parameter (or gradient) dicts."""
    num = sum(float((a[n].double() - b[n].double()).pow(2).sum()) for n in a)
    den = sum(float(a[n].double().pow(2).sum()) for n in a)
    return math.sqrt(num / den)


@pytest.mark.parametrize("rule", ["ba", "token", "seq"])
def test_two_steps_per_rule_train_and_log_the_diagnostics(model_dir, rule):
    trainer, before, after = train(model_dir, rule, ga=2, steps=2, optim="adamw_torch", lr=1e-3)
    assert trainer.state.global_step == 2
    assert len(trainer.batches) == 2  # one generation batch per optimizer step
    assert all(math.isfinite(x) for x in trainer.losses) and len(trainer.losses) == 4
    assert rel_diff(before, after) > 0
    logs = [h for h in trainer.state.log_history if "mass_ratio/ba" in h]
    assert len(logs) == 2
    for key in (
        "len/mean",
        "len/cv",
        "groups/mixed",
        "len_weight_corr/token",
        *(f"mass_ratio/{r}" for r in fulcrum_ba.RULES),
    ):
        assert key in logs[0], key
    assert logs[0]["len/mean"] > 0
    if logs[0]["mass_ratio/ba"] is not None:
        assert logs[0]["mass_ratio/ba"] == pytest.approx(1.0, rel=1e-6)  # BA balances the two sides
    assert trainer.loss_type == "dapo" and trainer.fulcrum_rule == rule


@pytest.mark.parametrize("rule", ["ba", "token", "seq", "ba-batch", "token-group", "seq-sum", "drgrpo"])
def test_the_loss_is_minus_sum_of_w_L_A_at_ratio_one(model_dir, rule):
    trainer, _, _ = train(model_dir, rule, ga=4)
    batch = trainer.batches[0]
    folded = batch["advantages"].double()
    lengths = batch["completion_mask"].sum(1).double()
    # At the first iteration the ratio is exactly 1, so l_it = -A'_i and TRL's dapo loss summed
    # over the accumulation steps is -sum_i A'_i L_i / N.
    n_tokens = float(lengths.sum())
    want = float(-(folded * lengths).sum() / n_tokens)
    # Under ba and seq the two sides cancel (J ~ 0): compare on the scale of the terms.
    scale = float((folded * lengths).abs().sum() / n_tokens)
    assert abs(sum(trainer.losses) - want) <= 1e-6 * scale
    # And A'_i / N = A_i w_i, with TRL's advantages A_i and fulcrum's weights of the rule.
    groups = [i // NUM_GENERATIONS for i in range(len(lengths))]
    raw = torch.tensor(trainer.reports[0]["advantages"], dtype=torch.float64)
    w = fulcrum_ba.weights(groups, raw, lengths.long(), rule=rule, l_norm=24.0)
    w = torch.tensor(w, dtype=torch.float64)
    assert (raw != 0).any() and (w > 0).any(), "a batch with no gradient tests nothing"
    torch.testing.assert_close(folded / n_tokens, raw * w, rtol=1e-6, atol=1e-12)
    assert abs(sum(trainer.losses) - float(-(raw * w * lengths).sum())) <= 1e-6 * scale


@pytest.mark.parametrize("rule", ["ba", "token", "seq"])
def test_update_does_not_depend_on_gradient_accumulation(model_dir, rule):
    one, _, p1 = train(model_dir, rule, ga=1)
    four, _, p4 = train(model_dir, rule, ga=4)
    # The same generation batch in both runs (same seed, same prompts, one generate call).
    torch.testing.assert_close(
        one.batches[0]["completion_ids"], four.batches[0]["completion_ids"], rtol=0, atol=0
    )
    assert len(one.losses) == 1 and len(four.losses) == 4
    grad = rel_diff(one.grads[0], four.grads[0])
    params = rel_diff(p1, p4)
    print(f"\n{rule}: gradient rel diff GA1 vs GA4 {grad:.2e}, parameters {params:.2e}")
    assert grad <= 1e-5 and params <= 1e-5


def test_trl_bnpo_normalises_per_micro_batch_and_depends_on_it(model_dir):
    """TRL's own token-mean `bnpo` divides each micro-batch by its own token count: the update
    moves with gradient_accumulation_steps (its `dapo`, the global token count, does not)."""
    figures = {}
    for loss_type in ("bnpo", "dapo"):
        one, _, _ = train(model_dir, loss_type, ga=1)
        four, _, _ = train(model_dir, loss_type, ga=4)
        torch.testing.assert_close(
            one.batches[0]["completion_ids"], four.batches[0]["completion_ids"], rtol=0, atol=0
        )
        figures[loss_type] = rel_diff(one.grads[0], four.grads[0])
    print(f"\nTRL's own loss types, gradient rel diff GA1 vs GA4: {figures}")
    assert figures["bnpo"] > 1e-3
    assert figures["dapo"] <= 1e-5


def test_token_rule_is_trls_dapo(model_dir):
    ours, _, p_ours = train(model_dir, "token", ga=2)
    theirs, _, p_theirs = train(model_dir, "dapo", ga=2)
    assert rel_diff(ours.grads[0], theirs.grads[0]) <= 1e-5
    assert rel_diff(p_ours, p_theirs) <= 1e-6


def test_unknown_loss_type_and_ba_count_are_value_errors(model_dir):
    with pytest.raises(ValueError, match='loss_type: unknown loss type "ba_batch"'):
        train(model_dir, "ba_batch", steps=0)
    with pytest.raises(ValueError, match='ba_count: unknown ba count "signd"'):
        train(model_dir, "ba", steps=0, ba_count="signd")
