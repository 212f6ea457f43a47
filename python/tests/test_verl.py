"""fulcrum_ba.verl against verl 0.9.1's own code (installed with --no-deps plus what core_algos
imports): the plugin entry point, `agg_loss` for the modes both have, and BA through verl's
vanilla policy loss over micro-batches and data-parallel shards, with clipping and dual clip."""

import os
import random
import subprocess
import sys

import fulcrum_ba
import numpy as np
import pytest
from conftest import random_batch, require

torch = require("torch")
core_algos = require("verl.trainer.ppo.core_algos")
omegaconf = require("omegaconf")
import fulcrum_ba.verl as fverl  # noqa: E402
from fulcrum_ba.torch import agg_loss  # noqa: E402

# fulcrum rule -> the verl loss_agg_mode that is the same formula (spec, "The rules").
SHARED_MODES = {
    "token": "token-mean",
    "seq": "seq-mean-token-mean",
    "seq-sum": "seq-mean-token-sum",
    "drgrpo": "seq-mean-token-sum-norm",
}
L_NORM = 64.0


def test_installing_the_package_registers_the_estimators_at_import_verl():
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print(sorted(n for n in ('ba', 'ba-batch', 'token-group') if get_adv_estimator_fn(n)))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "['ba', 'ba-batch', 'token-group']"


def batch_tensors(groups, rewards, lengths, width):
    """verl's shapes: token_level_rewards with the score on the last response token, a 0/1 mask."""
    n = len(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()
    token_rewards = torch.zeros(n, width)
    for i, (r, n) in enumerate(zip(rewards, lengths)):
        if n > 0:
            token_rewards[i, n - 1] = r
    return token_rewards, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", sorted(SHARED_MODES))
def test_shared_modes_equal_verls_agg_loss(rule, seed):
    rng = random.Random(seed)
    groups, rewards, lengths = random_batch(rng)
    width = max(lengths) + 2
    _, mask = batch_tensors(groups, rewards, lengths, width)
    gen = torch.Generator().manual_seed(seed)
    loss_mat = torch.randn(len(lengths), width, generator=gen, dtype=torch.float64)
    adv = fulcrum_ba.advantages(groups, rewards)
    w = fulcrum_ba.weights(groups, adv, lengths, rule=rule, l_norm=L_NORM)
    ours = agg_loss(loss_mat, mask, w).item()
    theirs = core_algos.agg_loss(loss_mat, mask, SHARED_MODES[rule], loss_scale_factor=L_NORM).item()
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-9)


def test_token_estimator_is_verls_grpo_under_token_mean():
    rng = random.Random(7)
    groups, rewards, lengths = random_batch(rng, string_ids=True, zero_lengths=False)
    counts = {g: groups.count(g) for g in groups}
    keep = [i for i, g in enumerate(groups) if counts[g] >= 2]  # verl gives a singleton group A = R
    groups, rewards, lengths = ([x[i] for i in keep] for x in (groups, rewards, lengths))
    token_rewards, mask = batch_tensors(groups, rewards, lengths, max(lengths))
    index = np.array(groups, dtype=object)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index)
    ours, _ = fverl.make_estimator("token")(
        token_level_rewards=token_rewards, response_mask=mask, index=index
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)  # A * w * T = A under token


def spec_token_loss(adv, log_prob, old_log_prob, eps_low=0.2, eps_high=0.28, c=3.0):
    """The spec's PPO token loss with dual clip, written out independently of verl."""
    a = adv[:, None]
    r = torch.exp(log_prob - old_log_prob)
    loss = torch.maximum(-a * r, -a * torch.clamp(r, 1 - eps_low, 1 + eps_high))
    return torch.where(a < 0, torch.minimum(loss, -a * c), loss)


def verl_actor_config(dp_size, batch_num_tokens, global_batch_size):
    return omegaconf.OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "global_batch_info": {
                "dp_size": dp_size,
                "batch_num_tokens": batch_num_tokens,
                "global_batch_size": global_batch_size,
                "loss_scale_factor": None,
            },
        }
    )


@pytest.mark.parametrize("rule", list(fverl.DEFAULT_ESTIMATORS))
@pytest.mark.parametrize("perturb", [0.0, 1.5])
def test_rule_through_verls_vanilla_loss_over_shards_and_micro_batches_is_exact(rule, perturb):
    rng = random.Random(11)
    groups, rewards, lengths = random_batch(rng, n_groups=5, string_ids=True, zero_lengths=False)
    n, width = len(lengths), max(lengths) + 4
    token_rewards, mask = batch_tensors(groups, rewards, lengths, width)
    index = np.array(groups, dtype=object)
    folded, _ = core_algos.get_adv_estimator_fn(rule)(
        token_level_rewards=token_rewards, response_mask=mask, index=index, config=None
    )

    gen = torch.Generator().manual_seed(3)
    old = -torch.rand(n, width, generator=gen, dtype=torch.float32) * 3
    base = old + perturb * torch.randn(n, width, generator=gen)

    # fulcrum: J = sum_i w_i sum_t l(A_i) with the spec's loss and fulcrum's weights.
    adv = fulcrum_ba.advantages(groups, rewards)
    w = fulcrum_ba.weights(groups, adv, lengths, rule=rule)
    ref_in = base.clone().requires_grad_(True)
    ref = agg_loss(spec_token_loss(torch.tensor(adv), ref_in, old), mask, w)
    ref.backward()

    # verl: two data-parallel shards (the cut goes through a group), each in random micro-batches,
    # token-mean with the mini-batch's global token count; DDP averages the shards' gradients.
    dp = 2
    config = verl_actor_config(dp, float(mask.sum()), n)
    got_in = base.clone().requires_grad_(True)
    total = 0.0
    for shard in (list(range(0, n // 2 + 1)), list(range(n // 2 + 1, n))):
        start = 0
        while start < len(shard):
            micro = shard[start : start + rng.randint(1, 4)]
            start += len(micro)
            pg_loss, metrics = core_algos.compute_policy_loss_vanilla(
                old_log_prob=old[micro],
                log_prob=got_in[micro],
                advantages=folded[micro],
                response_mask=mask[micro].bool(),
                loss_agg_mode="token-mean",
                config=config,
            )
            total = total + pg_loss / dp
    total.backward()

    assert total.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(got_in.grad, ref_in.grad, rtol=1e-4, atol=1e-7)
    if perturb:
        a = torch.tensor(adv)[:, None]
        r = torch.exp(base - old)
        live = mask.bool() & torch.tensor([x > 0 for x in w])[:, None]
        assert bool((live & (a < 0) & (r > 3.0)).any()), (
            "dual clip never active: the case tests less than it says"
        )
        assert bool((live & (a > 0) & (r > 1.28)).any()), "upper clip never active"


def test_drgrpo_needs_an_explicit_l_norm_and_names_are_checked():
    with pytest.raises(ValueError, match="l_norm: drgrpo needs the maximum response length"):
        fverl.make_estimator("drgrpo")
    with pytest.raises(ValueError, match='rule: unknown rule "ba_batch"'):
        fverl.make_estimator("ba_batch")
    with pytest.raises(ValueError, match="index: the rule needs each response's group id"):
        fverl.make_estimator("ba")(token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3))
