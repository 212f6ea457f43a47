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


def table_reward(table):
    """A reward function giving completion `i` of the generation batch `table[i]` (one process:
    TRL scores the whole batch in one call, groups in blocks of NUM_GENERATIONS). None is TRL's
    "no reward" for a completion."""

    def reward(completions, **_):
        assert len(completions) == len(table)
        return list(table)

    return reward


class Recorder:
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


class Recording(Recorder, GRPOTrainer):
    """fulcrum's trainer, recorded."""


class TrlRecording(Recorder, trl.GRPOTrainer):
    """TRL's own trainer, recorded (no fulcrum report)."""


def train(
    model_dir, loss_type, ga=1, steps=1, optim="sgd", lr=0.5, reward=parity_reward, trainer=Recording, config=None, **kw
):
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
        **(config or {}),
    )
    data = datasets.Dataset.from_dict({"prompt": digit_prompts(8 * (steps + 1))})
    trainer = trainer(
        model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok, **kw
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


INF, NAN = float("inf"), float("nan")
# One generation batch, 8 groups of NUM_GENERATIONS: TRL's group mean of an inf is inf, so TRL gives
# the first two groups NaN advantages, which its nan_to_num makes 0.
INF_TABLE = [INF, 0, 1, 0, -INF, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0] + [1, 0, 0, 1] * 4


def group_mix(trainer):
    log = next(h for h in trainer.state.log_history if "groups/mixed" in h)
    return [log[f"groups/{k}"] for k in ("mixed", "all_correct", "all_wrong")]


def test_an_inf_reward_passes_through_a_trl_loss_type_unchanged(model_dir):
    """TRL trains on with an inf reward: its loss types must too, on the same gradient."""
    theirs, _, p_theirs = train(model_dir, "dapo", ga=2, reward=table_reward(INF_TABLE), trainer=TrlRecording)
    ours, _, p_ours = train(model_dir, "dapo", ga=2, reward=table_reward(INF_TABLE))
    assert theirs.state.global_step == ours.state.global_step == 1
    torch.testing.assert_close(ours.batches[0]["advantages"], theirs.batches[0]["advantages"], rtol=0, atol=0)
    assert (ours.batches[0]["advantages"][:8] == 0).all() and (ours.batches[0]["advantages"][16:] != 0).all()
    assert rel_diff(theirs.grads[0], ours.grads[0]) == 0.0
    assert rel_diff(p_theirs, p_ours) == 0.0
    # An inf counts by its sign: neither of the two inf groups is all correct or all wrong.
    assert group_mix(ours) == pytest.approx([0.5, 1 / 8, 1 / 8], rel=1e-12)


def test_an_inf_reward_trains_a_fulcrum_rule(model_dir):
    trainer, before, after = train(model_dir, "ba", ga=2, reward=table_reward(INF_TABLE))
    assert trainer.state.global_step == 1 and all(math.isfinite(x) for x in trainer.losses)
    assert rel_diff(before, after) > 0
    assert trainer.reports[0]["advantages"][:8] == [0.0] * 8  # TRL's, before the fold
    assert group_mix(trainer) == pytest.approx([0.5, 1 / 8, 1 / 8], rel=1e-12)


@pytest.mark.parametrize("loss_type", ["ba", "dapo"])
def test_unscored_completions_are_left_out_of_the_group_counts(model_dir, loss_type):
    """A NaN (None) reward is no wrong answer: group counts are over the scored completions."""
    table = (
        [None, None, NAN, None]  # nothing scored: not a group of the counts
        + [1, 1, 1, None]  # all correct (its None as 0 would make it neither)
        + [0, 0, NAN, 0]  # all wrong
        + [1, 0, 1, 0]  # mixed
        + [1, None, 0, 0]  # mixed
        + [0, 0, 0, 0]  # all wrong
        + [1, 1, 1, 1]  # all correct
        + [None, 1, None, 1]  # all correct
    )
    trainer, _, _ = train(model_dir, loss_type, ga=2, reward=table_reward(table))
    assert trainer.state.global_step == 1 and all(math.isfinite(x) for x in trainer.losses)
    assert group_mix(trainer) == pytest.approx([2 / 7, 3 / 7, 2 / 7], rel=1e-12)
    adv = trainer.reports[0]["advantages"]
    assert [adv[i] for i, r in enumerate(table) if r is None or r != r] == [0.0] * 9  # TRL's zeros


def test_scored_group_mix_judges_a_group_on_its_scored_completions():
    from fulcrum_ba.trl import _scored_group_mix

    groups, lengths = [0, 0, 1, 1, 2, 2], [3, 4, 5, 6, 7, 8]
    rewards, adv = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.7, -0.7]
    mix = _scored_group_mix(groups, rewards, lengths, adv, [True, False, True, True, True, True])
    assert mix == {"frac_mixed": 1 / 3, "frac_all_correct": 1 / 3, "frac_all_wrong": 1 / 3}
    mix = _scored_group_mix(groups, rewards, lengths, adv, [True, True, False, False, True, True])
    assert mix == {"frac_mixed": 1 / 2, "frac_all_correct": 0.0, "frac_all_wrong": 0.0}
    none = _scored_group_mix(groups, rewards, lengths, adv, [False] * 6)
    assert none == {"frac_mixed": None, "frac_all_correct": None, "frac_all_wrong": None}


def test_masked_truncated_completions_are_zero_length_and_leave_bas_counts(model_dir):
    """`mask_truncated_completions`: TRL still scores a truncated completion (its reward is in its
    group's advantages) but zeroes its mask. BA reads L = 0: weight 0, outside n+, n- and W_g,
    while its group stays one of the M groups."""
    trainer, _, _ = train(model_dir, "ba", ga=2, config={"mask_truncated_completions": True})
    batch = trainer.batches[0]
    lengths = batch["completion_mask"].sum(1).long().tolist()
    raw = trainer.reports[0]["advantages"]
    masked = [i for i, n in enumerate(lengths) if n == 0]
    kept = [i for i, n in enumerate(lengths) if n > 0]
    assert any(raw[i] != 0 for i in masked) and kept, "no masked completion with an advantage"
    assert all(batch["advantages"][i] == 0 for i in masked)  # folded: w_i = 0
    w = trainer.reports[0]["rules"]["ba"]["weights"]
    groups = [i // NUM_GENERATIONS for i in range(len(lengths))]
    # The same weights as a batch without the masked completions, up to 1/M: a group whose
    # completions are all masked is still one of the M groups.
    alone = fulcrum_ba.weights([groups[i] for i in kept], [raw[i] for i in kept], [lengths[i] for i in kept])
    m, m_kept = len(set(groups)), len({groups[i] for i in kept})
    assert [w[i] for i in kept] == pytest.approx([x * m_kept / m for x in alone], rel=1e-12)


def test_unknown_loss_type_and_ba_count_are_value_errors(model_dir):
    with pytest.raises(ValueError, match='loss_type: unknown loss type "ba_batch"'):
        train(model_dir, "ba_batch", steps=0)
    with pytest.raises(ValueError, match='ba_count: unknown ba count "signd"'):
        train(model_dir, "ba", steps=0, ba_count="signd")
