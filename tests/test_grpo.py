"""Tests for sinkflex_lib.grpo: advantages, k3 KL, aggregation, the clipped loss, and TRL parity."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sinkflex_lib.grpo import (AGG_MODES, agg_loss, group_advantages, grpo_loss, kl_k3, permute_within_groups,
                               scale_negative)

F64 = torch.float64


# -- a tiny example, and the loss written out by hand in plain Python ------------------------

# B = 3 rollouts, T = 5 positions; rollout 2 has a gap (a tool result) in the middle.
MASK = [[1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
        [0, 1, 0, 1, 1]]
LOGP = [[-0.5, -1.2, -0.1, 9.0, 9.0],
        [-2.0, -0.3, -0.7, -1.1, -0.05],
        [9.0, -0.9, 9.0, -1.5, -0.2]]
OLD = [[-0.9, -1.0, -0.1, 0.0, 0.0],    # ratios e^0.4 (> 1.2), e^-0.2, 1
       [-1.5, -0.35, -0.2, -1.0, -0.3],  # e^-0.5 (< 0.8), e^0.05, e^-0.5, e^-0.1, e^0.25 (> 1.2)
       [0.0, -1.0, 0.0, -1.2, -0.25]]
REF = [[-0.6, -1.1, -0.3, 0.0, 0.0],
       [-1.8, -0.5, -0.6, -1.0, -0.2],
       [0.0, -0.8, 0.0, -1.4, -0.4]]
ENT = [[0.5, 1.0, 1.5, 7.0, 7.0],
       [0.2, 0.4, 0.6, 0.8, 1.0],
       [7.0, 2.0, 7.0, 3.0, 4.0]]
ADV = [1.5, -0.75, 0.4]


def hand_loss(logp, old, adv, mask, ref, clip_low, clip_high, beta, agg, norm_length=None):
    """Paper eqs. 4-7 with loops, independent of the library (floats, no torch)."""
    n_b, n_t = len(mask), len(mask[0])
    norm_length = n_t if norm_length is None else norm_length
    j = [[0.0] * n_t for _ in range(n_b)]
    kl = [[0.0] * n_t for _ in range(n_b)]
    n_low = n_high = 0
    ratio_sum = 0.0
    for i in range(n_b):
        for t in range(n_t):
            if not mask[i][t]:
                continue
            rho = math.exp(logp[i][t] - old[i][t])
            clipped = min(max(rho, 1 - clip_low), 1 + clip_high)
            j[i][t] = min(rho * adv[i], clipped * adv[i])
            d = ref[i][t] - logp[i][t]
            kl[i][t] = math.exp(d) - d - 1
            ratio_sum += rho
            n_low += adv[i] < 0 and rho < 1 - clip_low
            n_high += adv[i] > 0 and rho > 1 + clip_high

    def reduce(x):
        lengths = [sum(row) for row in mask]
        if agg == "token-mean":
            return sum(sum(row) for row in x) / sum(lengths)
        if agg == "seq-mean-token-mean":
            return sum(sum(x[i]) / max(lengths[i], 1) for i in range(n_b)) / n_b
        return sum(sum(x[i]) / norm_length for i in range(n_b)) / n_b

    n_tok = sum(sum(row) for row in mask)
    policy = -reduce(j)
    kl_term = reduce(kl)
    return policy + beta * kl_term, {
        "policy_loss": policy, "kl_loss": kl_term,
        "kl": sum(sum(row) for row in kl) / n_tok,
        "clip_frac_low": n_low / n_tok, "clip_frac_high": n_high / n_tok,
        "ratio_mean": ratio_sum / n_tok,
    }


def t64(x, grad=False):
    return torch.tensor(x, dtype=F64, requires_grad=grad)


# -- advantages ------------------------------------------------------------------------------


def test_constant_groups_give_zero_advantage_and_no_nan():
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.5], dtype=F64)
    for norm in (True, False):
        for eps in (1e-6, 0.0):
            adv = group_advantages(rewards, 3, norm_by_std=norm, eps=eps)
            assert torch.isfinite(adv).all()
            assert torch.equal(adv[:9], torch.zeros(9, dtype=F64))  # exactly 0, even for 0.1 * 3
            assert adv[9:].abs().sum() > 0
    for norm in (True, False):  # group_size 1: every group is constant
        adv = group_advantages(torch.tensor([0.3, 1.0, -2.0]), 1, norm_by_std=norm)
        assert torch.equal(adv, torch.zeros(3))
    adv = group_advantages(torch.ones(4, dtype=torch.float32), 4)
    assert torch.equal(adv, torch.zeros(4)) and adv.dtype == torch.float32


def test_advantages_against_hand_computation():
    groups = [[1.0, 0.0, 0.0, 1.0, 1.0], [0.2, 0.9, 0.4, 0.4, 0.0]]
    flat = [r for g in groups for r in g]
    eps = 1e-6
    want_std, want_mean = [], []
    for g in groups:
        mean = sum(g) / len(g)
        std = math.sqrt(sum((r - mean) ** 2 for r in g) / (len(g) - 1))  # unbiased (n - 1)
        want_std += [(r - mean) / (std + eps) for r in g]
        want_mean += [r - mean for r in g]
    got = group_advantages(t64(flat), 5, eps=eps)
    torch.testing.assert_close(got, t64(want_std), rtol=1e-12, atol=1e-12)
    got = group_advantages(t64(flat), 5, norm_by_std=False)
    torch.testing.assert_close(got, t64(want_mean), rtol=1e-12, atol=1e-12)
    # integer rewards (a list, even) are accepted and become floating point
    got = group_advantages([1, 0, 0, 1], 2, norm_by_std=False)
    assert got.dtype == torch.get_default_dtype() and got.tolist() == [0.5, -0.5, -0.5, 0.5]


@pytest.mark.parametrize("kwargs, name", [
    (dict(rewards=torch.zeros(6), group_size=4), "group_size"),
    (dict(rewards=torch.zeros(6), group_size=0), "group_size"),
    (dict(rewards=torch.zeros(6), group_size=2.0), "group_size"),
    (dict(rewards=torch.zeros(2, 3), group_size=3), "rewards"),
    (dict(rewards=torch.zeros(0), group_size=1), "rewards"),
    (dict(rewards=torch.tensor([0.0, float("nan")]), group_size=2), "rewards"),
    (dict(rewards=torch.zeros(4), group_size=2, eps=-1.0), "eps"),
    (dict(rewards=torch.zeros(4), group_size=2, norm_by_std="yes"), "norm_by_std"),
])
def test_advantages_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        group_advantages(**kwargs)


# -- KL, aggregation -------------------------------------------------------------------------


def test_kl_k3_against_hand_computation():
    logp = [-0.1, -2.0, -0.7, -3.0]
    ref = [-0.3, -1.0, -0.7, -0.2]
    want = [math.exp(r - l) - (r - l) - 1 for l, r in zip(logp, ref)]
    got = kl_k3(t64(logp), t64(ref))
    torch.testing.assert_close(got, t64(want), rtol=1e-14, atol=0)
    assert (got >= 0).all() and got[2] == 0


def test_each_agg_mode():
    x = t64([[1.0, 2.0, 3.0, 100.0], [4.0, 0.0, 0.0, 0.0], [5.0, 6.0, 7.0, 8.0]])
    m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert agg_loss(x, m, "token-mean").item() == pytest.approx((6 + 4 + 26) / 8, rel=1e-14)
    assert agg_loss(x, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4 + 6.5) / 3, rel=1e-14)
    want = (6 + 4 + 26) / 4 / 3
    assert agg_loss(x, m, "seq-mean-token-sum-norm").item() == pytest.approx(want, rel=1e-14)
    assert agg_loss(x, m, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(36 / 30, rel=1e-14)
    # a rollout with no sampled token contributes 0 and still counts in B; an empty batch gives 0
    m_empty = m.clone()
    m_empty[1] = 0
    assert agg_loss(x, m_empty, "seq-mean-token-mean").item() == pytest.approx((2 + 6.5) / 3, rel=1e-14)
    for agg in AGG_MODES:
        assert agg_loss(x, torch.zeros_like(m), agg).item() == 0.0
        # garbage at masked positions does not leak
        y = x.clone()
        y[0, 3] = float("nan")
        assert agg_loss(y, m, agg) == agg_loss(x, m, agg)
    with pytest.raises(ValueError, match="agg must be one of 'token-mean', 'seq-mean-token-mean'"):
        agg_loss(x, m, "seq-mean-token-sum")
    with pytest.raises(ValueError, match="norm_length"):
        agg_loss(x, m, "seq-mean-token-sum-norm", norm_length=0)


# -- the loss --------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("clip_low, clip_high, beta, norm_length",
                         [(0.2, 0.2, 0.0, None), (0.2, 0.28, 0.05, None), (0.1, 0.3, 0.5, 12)])
def test_loss_against_hand_computation(agg, clip_low, clip_high, beta, norm_length):
    want, want_metrics = hand_loss(LOGP, OLD, ADV, MASK, REF, clip_low, clip_high, beta, agg, norm_length)
    loss, metrics = grpo_loss(t64(LOGP), t64(OLD), t64(ADV), torch.tensor(MASK), ref_logp=t64(REF),
                              clip_low=clip_low, clip_high=clip_high, beta=beta, agg=agg,
                              entropy=t64(ENT), norm_length=norm_length)
    assert loss.dtype == F64 and loss.dim() == 0
    assert loss.item() == pytest.approx(want, rel=1e-12, abs=1e-14)
    for key, value in want_metrics.items():
        assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-14), key
    assert metrics["entropy"] == pytest.approx((3.0 + 3.0 + 9.0) / 11, rel=1e-14)
    assert metrics["clip_frac_high"] > 0 and metrics["clip_frac_low"] > 0
    if beta == 0.0:  # the KL is reported but does not enter the loss
        assert loss.item() == pytest.approx(metrics["policy_loss"], rel=1e-14)


def test_metrics_keys_follow_what_was_given():
    _, metrics = grpo_loss(t64(LOGP), t64(OLD), t64(ADV), torch.tensor(MASK))
    assert set(metrics) == {"policy_loss", "clip_frac_low", "clip_frac_high", "ratio_mean"}
    assert all(isinstance(v, float) for v in metrics.values())


def test_clip_fractions_by_side():
    # A > 0: ratio above 1 + clip_high is clipped (high); A < 0: below 1 - clip_low (low)
    log_ratio = t64([[math.log(1.5), math.log(0.5), 0.0], [math.log(0.5), math.log(1.5), 0.0]])
    loss, metrics = grpo_loss(log_ratio.clone().requires_grad_(), torch.zeros(2, 3, dtype=F64),
                              t64([1.0, -1.0]), torch.ones(2, 3), clip_low=0.2, clip_high=0.2)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 6)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 6)
    # A = 0 never counts as clipped
    _, metrics = grpo_loss(log_ratio, torch.zeros(2, 3, dtype=F64), t64([0.0, 0.0]), torch.ones(2, 3))
    assert metrics["clip_frac_high"] == 0 and metrics["clip_frac_low"] == 0


@pytest.mark.parametrize("agg", AGG_MODES)
def test_masked_tokens_get_no_gradient(agg):
    mask = torch.tensor(MASK, dtype=torch.bool)
    garbage = t64([[0.0, 0.0, 0.0, 1e30, -1e30], [0.0] * 5, [float("inf"), 0.0, float("nan"), 0.0, 0.0]])
    clean = [t64(LOGP), t64(OLD), t64(REF)]
    dirty = [torch.where(mask, c, garbage) for c in clean]
    ent = torch.where(mask, t64(ENT), garbage)
    results = []
    for logp, old, ref in (clean, dirty):
        logp = logp.clone().requires_grad_()
        loss, metrics = grpo_loss(logp, old, t64(ADV), mask, ref_logp=ref, clip_high=0.28, beta=0.1,
                                  agg=agg, entropy=ent)
        loss.backward()
        assert torch.isfinite(loss) and all(math.isfinite(v) for v in metrics.values())
        assert torch.isfinite(logp.grad).all()
        assert torch.equal(logp.grad[~mask], torch.zeros(int((~mask).sum()), dtype=F64))
        assert (logp.grad[mask] != 0).any()
        results.append((loss.detach(), logp.grad, metrics))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert results[0][2] == results[1][2]


def test_gradient_passes_gradcheck_and_constants_are_detached():
    old, adv, mask, ref = t64(OLD, grad=True), t64(ADV, grad=True), torch.tensor(MASK), t64(REF, grad=True)
    for agg in AGG_MODES:
        torch.autograd.gradcheck(
            lambda lp: grpo_loss(lp, old, adv, mask, ref_logp=ref, beta=0.1, agg=agg)[0],
            (t64(LOGP, grad=True),))
    loss, _ = grpo_loss(t64(LOGP, grad=True), old, adv, mask, ref_logp=ref, beta=0.1)
    loss.backward()
    assert old.grad is None and adv.grad is None and ref.grad is None
    # float32 in, float32 out; bf16 is computed in float32
    loss32, _ = grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2), torch.ones(2, 3))
    loss16, _ = grpo_loss(torch.zeros(2, 3, dtype=torch.bfloat16), torch.zeros(2, 3), torch.ones(2),
                          torch.ones(2, 3))
    assert loss32.dtype == torch.float32 and loss16.dtype == torch.float32 and loss32.item() == -1.0


def _bad_loss_inputs():
    ok = dict(logp=torch.zeros(2, 3), old_logp=torch.zeros(2, 3), advantages=torch.zeros(2),
              mask=torch.ones(2, 3))
    cases = [
        (dict(old_logp=torch.zeros(2, 4)), "old_logp"),
        (dict(mask=torch.ones(3, 3)), "mask"),
        (dict(mask=torch.full((2, 3), 0.5)), "mask"),
        (dict(advantages=torch.zeros(2, 3)), "advantages"),
        (dict(advantages=torch.tensor([0.0, float("nan")])), "advantages"),
        (dict(logp=torch.zeros(2, 3, 1)), "logp"),
        (dict(ref_logp=torch.zeros(2, 2)), "ref_logp"),
        (dict(entropy=torch.zeros(3)), "entropy"),
        (dict(agg="sum"), "agg must be one of 'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'"),
        (dict(clip_low=-0.1), "clip_low"),
        (dict(clip_low=1.5), "clip_low"),
        (dict(clip_high=-0.2), "clip_high"),
        (dict(beta=-1.0), "beta"),
        (dict(beta=0.1), "ref_logp"),
        (dict(agg="seq-mean-token-sum-norm", norm_length=-3), "norm_length"),
    ]
    return [({**ok, **change}, name) for change, name in cases]


@pytest.mark.parametrize("kwargs, name", _bad_loss_inputs())
def test_loss_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        grpo_loss(**kwargs)


# -- parity with TRL 1.16's GRPOTrainer._compute_loss ----------------------------------------


class _OneProcess:
    """Stands in for accelerate's Accelerator in a single process: gather/reduce are identities."""
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def _trl_loss(loss_type, logp, old, adv, mask, ref, entropy, eps_low, eps_high, beta, max_len):
    """Runs TRL's own `GRPOTrainer._compute_loss` on our tensors.

    `_compute_loss` is called unbound on a namespace that carries exactly the attributes it
    reads; only the model forward (`_get_per_token_logps_and_entropies`) is replaced, by a
    function returning our per-token log-probs and entropies. One process, one accumulation
    step, training mode, token-level importance sampling, no vLLM, no entropy bonus.
    """
    grpo_trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    n_b, n_t = logp.shape

    def forward(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == n_t and input_ids.shape == (n_b, 1 + n_t)
        return logp, entropy, None

    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=forward,
        loss_type=loss_type, beta=beta, epsilon_low=eps_low, epsilon_high=eps_high,
        max_completion_length=max_len, importance_sampling_level="token",
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, aux_loss_enabled=False,
        use_vllm=False, vllm_importance_sampling_correction=False, _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1, model=SimpleNamespace(training=True),
        accelerator=_OneProcess(), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
    )
    inputs = {
        "prompt_ids": torch.zeros(n_b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n_b, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n_b, n_t, dtype=torch.long), "completion_mask": mask,
        "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref,
        # dapo divides by the token count of the whole generation batch (here: this batch)
        "num_items_in_batch": mask.sum(),
    }
    loss = grpo_trainer.GRPOTrainer._compute_loss(trainer, None, inputs)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


@pytest.mark.parametrize("loss_type, agg, max_len", [
    ("grpo", "seq-mean-token-mean", None),
    ("bnpo", "token-mean", None),
    ("dapo", "token-mean", None),
    ("dr_grpo", "seq-mean-token-sum-norm", None),   # TRL's constant = max_completion_length = T
    ("dr_grpo", "seq-mean-token-sum-norm", 16),     # a budget larger than this batch's T
])
def test_loss_matches_trl(loss_type, agg, max_len):
    gen = torch.Generator().manual_seed(0)
    n_b, n_t = 6, 7
    old = -torch.rand(n_b, n_t, generator=gen, dtype=F64) * 3
    logp_values = old + 0.4 * torch.randn(n_b, n_t, generator=gen, dtype=F64)
    ref = old + 0.3 * torch.randn(n_b, n_t, generator=gen, dtype=F64)
    entropy = torch.rand(n_b, n_t, generator=gen, dtype=F64) * 2
    mask = (torch.rand(n_b, n_t, generator=gen) < 0.7).to(F64)
    mask[4] = 0.0   # a rollout with no sampled token: both count it in B with zero loss
    mask[5] = 1.0
    adv = group_advantages(torch.rand(n_b, generator=gen, dtype=F64), 3)
    # masked positions hold large finite garbage (TRL masks by multiplication, so no inf/NaN)
    logp_values = torch.where(mask.bool(), logp_values, torch.full_like(logp_values, 30.0))
    eps_low, eps_high, beta = 0.2, 0.28, 0.04

    lp_trl = logp_values.clone().requires_grad_()
    loss_trl, metrics_trl = _trl_loss(loss_type, lp_trl, old, adv, mask, ref, entropy, eps_low, eps_high,
                                      beta, max_len or n_t)
    loss_trl.backward()
    lp_ours = logp_values.clone().requires_grad_()
    loss_ours, metrics = grpo_loss(lp_ours, old, adv, mask, ref_logp=ref, clip_low=eps_low,
                                   clip_high=eps_high, beta=beta, agg=agg, entropy=entropy,
                                   norm_length=max_len)
    loss_ours.backward()

    assert loss_trl.dtype == loss_ours.dtype == F64
    assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0  # both branches exercised
    torch.testing.assert_close(loss_ours, loss_trl, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(lp_ours.grad, lp_trl.grad, rtol=1e-12, atol=1e-15)
    for ours, theirs in [("kl", "kl"), ("entropy", "entropy"), ("clip_frac_low", "clip_ratio/low_mean"),
                         ("clip_frac_high", "clip_ratio/high_mean")]:
        assert metrics[ours] == pytest.approx(metrics_trl[theirs], rel=1e-12, abs=1e-15), ours


def test_std_convention_matches_trl():
    """TRL's group scaling: (r - mean) / (nanstd(group) + 1e-4), nanstd with Bessel's correction."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(4 * 5, generator=gen, dtype=F64)
    grouped = rewards.view(-1, 5)
    std = trl_utils.nanstd(grouped, dim=1).repeat_interleave(5)
    want = (rewards - grouped.mean(1).repeat_interleave(5)) / (std + 1e-4)
    torch.testing.assert_close(group_advantages(rewards, 5, eps=1e-4), want, rtol=1e-12, atol=1e-15)


def test_permute_within_groups_keeps_each_groups_rewards_and_draws_every_order():
    rewards = torch.tensor([0.0, 1.0, 2.0, 10.0, 11.0, 12.0])
    orders = set()
    for seed in range(200):
        out = permute_within_groups(rewards, 3, np.random.default_rng(seed))
        assert sorted(out[:3].tolist()) == [0.0, 1.0, 2.0] and sorted(out[3:].tolist()) == [10.0, 11.0, 12.0]
        orders.add(tuple(out[:3].tolist()))
    assert len(orders) == 6                                         # all 3! orders of a group occur
    again = [permute_within_groups(rewards, 3, np.random.default_rng(7)) for _ in range(2)]
    assert torch.equal(*again)                                      # seeded: reproducible
    strided = torch.arange(12.0)[::2]                               # not contiguous
    assert sorted(permute_within_groups(strided, 3, np.random.default_rng(0)).tolist()[:3]) == [0.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="groups of 4"):
        permute_within_groups(rewards, 4, np.random.default_rng(0))


def test_scale_negative_scales_only_the_negative_advantages():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]), 4)
    for scale in (0.0, 0.5, 2.0):
        want = [a * scale if a < 0 else a for a in adv.tolist()]
        assert scale_negative(adv, scale).tolist() == pytest.approx(want, rel=0, abs=0)
    assert scale_negative(adv, 1.0) is adv
    assert scale_negative(adv, 0.0).min() == 0 and scale_negative(adv, 0.0).max() == adv.max()
    for bad in (-0.1, math.nan, math.inf, "0", True):
        with pytest.raises(ValueError, match="scale"):
            scale_negative(adv, bad)
