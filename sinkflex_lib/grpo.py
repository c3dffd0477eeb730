"""GRPO: group-relative advantages and the clipped policy loss (paper eqs. 3-7).

Advantage of rollout i in its group of G rollouts of one task (eq. 3):

    A_i = (R_i - mean(R_group)) / (std(R_group) + eps)          norm_by_std=True
    A_i =  R_i - mean(R_group)                                   norm_by_std=False (Dr. GRPO)

Per sampled token t of rollout i, with rho = exp(logp - old_logp) (eqs. 4-6):

    J_it  = min(rho * A_i, clip(rho, 1 - clip_low, 1 + clip_high) * A_i)
    KL_it = exp(ref - logp) - (ref - logp) - 1                   (k3, >= 0, unbiased for KL(pi||ref))
    loss  = -agg(J) + beta * agg(KL)                             (eq. 7, minimised)

`agg` (verl's `loss_agg_mode` names) reduces a (B, T) tensor over the tokens whose mask is 1:

    "token-mean"               sum_{i,t} x_it / sum_i T_i             the paper; TRL "bnpo"/"dapo"
    "seq-mean-token-mean"      (1/B) sum_i (sum_t x_it / T_i)          DeepSeekMath; TRL "grpo"
    "seq-mean-token-sum-norm"  (1/B) sum_i (sum_t x_it / norm_length)  Dr. GRPO; TRL "dr_grpo"

T_i is rollout i's number of mask-1 tokens. Conventions, and why:

- std is the unbiased (Bessel, n - 1) sample std, as TRL 1.16 (`trl.trainer.utils.nanstd`) and
  verl (`torch.std`) use. A group whose rewards are all equal, and so every group of size 1,
  gets advantage exactly 0 (no NaN, whatever eps is; TRL gets 0 for size 1 too and ~0 for
  constant groups). TRL adds 1e-4 to the std; our eps defaults to 1e-6 (the issue's value).
- "seq-mean-token-sum-norm" divides each rollout's token sum by a constant `norm_length`
  (default: T, the padded length of this batch) and averages over the B rollouts, as TRL's
  dr_grpo does (constant = `max_completion_length`, mean over the batch). verl's mode of the
  same name sums the rollouts' token sums and divides by the horizon without dividing by B: a
  loss B times ours (for a fixed batch size, a learning-rate factor; not tested against verl,
  which is not installed). Pass the budget's maximum response length as `norm_length` to keep
  the constant fixed across batches, which is what Dr. GRPO intends.
- A rollout with no mask-1 tokens contributes 0 to the seq-mean modes and still counts in B
  (TRL and verl alike); a batch with no mask-1 tokens gives loss 0, not NaN.
- Clip fractions (verl's `pg_clipfrac` split by side; TRL's `clip_ratio/low_mean` and
  `high_mean`): the fraction of mask-1 tokens where the clipped branch of the min is the one
  taken, i.e. A < 0 and rho < 1 - clip_low (low) or A > 0 and rho > 1 + clip_high (high).
- Positions whose mask is 0 are replaced (torch.where) before any arithmetic, so they get
  exactly zero gradient even when their log-probs are garbage (huge, inf or NaN).
- old_logp, ref_logp and advantages are constants: they are detached. Arithmetic runs in
  float32 at least (float64 inputs stay float64). The ratio is not clamped (as TRL).
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")

__all__ = ["AGG_MODES", "group_advantages", "scale_negative", "permute_within_groups", "kl_k3", "agg_loss", "grpo_loss"]


# -- advantages ----------------------------------------------------------------------------


def group_advantages(rewards, group_size: int, norm_by_std: bool = True, eps: float = 1e-6):
    """Group-relative advantages (paper eq. 3).

    rewards: 1-D tensor (or sequence) of length n_groups * group_size, group-contiguous
        (rollouts 0..G-1 are group 0, G..2G-1 group 1, ...).
    Returns a tensor like `rewards` (floating; integer or bool rewards become the default
    float dtype). See the module docstring for the std convention.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}")
    if not isinstance(norm_by_std, bool):
        raise ValueError(f"norm_by_std must be True or False, got {norm_by_std!r}")
    if not _is_real(eps) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if not isinstance(rewards, torch.Tensor):
        try:
            rewards = torch.as_tensor(rewards)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"rewards must be a 1-D tensor of numbers: {err}") from err
    if rewards.dim() != 1 or rewards.numel() == 0:
        raise ValueError(f"rewards must be a non-empty 1-D tensor, got shape {tuple(rewards.shape)}")
    if rewards.is_complex():
        raise ValueError(f"rewards must be real, got dtype {rewards.dtype}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if rewards.numel() % group_size:
        raise ValueError(
            f"len(rewards) = {rewards.numel()} is not a multiple of group_size = {group_size}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (found NaN or inf)")

    grouped = rewards.reshape(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if norm_by_std and group_size > 1:
        adv = adv / (grouped.std(dim=1, correction=1, keepdim=True) + eps)
    constant = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    adv = torch.where(constant, torch.zeros_like(adv), adv)
    return adv.reshape(-1)


def scale_negative(advantages, scale: float):
    """`advantages` with each negative entry multiplied by `scale` (0: only the rollouts above
    their group's mean are reinforced and none is pushed down; 1: unchanged)."""
    if not _is_real(scale) or not math.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    a = torch.as_tensor(advantages)
    return a if scale == 1 else torch.where(a < 0, a * scale, a)


def permute_within_groups(rewards, group_size: int, rng):
    """A control without signal: each group's rewards in a random order (numpy Generator `rng`).

    Every group keeps its rewards (mean, spread, so its advantages' sizes) but which rollout gets
    which is random: an update on them carries no information about the task. rewards: 1-D
    tensor, group-contiguous as in `group_advantages`; returns a new tensor like it.
    """
    r = torch.as_tensor(rewards)
    if r.dim() != 1 or group_size < 1 or r.numel() % group_size:
        raise ValueError(f"rewards ({tuple(r.shape)}) must be 1-D groups of {group_size}")
    order = np.stack([rng.permutation(group_size) for _ in range(r.numel() // group_size)])
    return torch.gather(r.reshape(-1, group_size), 1, torch.as_tensor(order, device=r.device)).reshape(-1)


# -- KL and aggregation ---------------------------------------------------------------------


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): exp(r - l) - (r - l) - 1 with r = ref, l = logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def agg_loss(values: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean",
             norm_length: float | None = None) -> torch.Tensor:
    """Reduce per-token `values` (B, T) over the tokens where `mask` (B, T) is 1 (module docstring).

    Positions with mask 0 are ignored (replaced by 0 before summing, so NaN/inf there is
    harmless). `norm_length` is used by "seq-mean-token-sum-norm" only (default: T).
    """
    _check_agg(agg)
    if values.dim() != 2 or tuple(mask.shape) != tuple(values.shape):
        raise ValueError(f"values and mask must both be (B, T); got values {tuple(values.shape)}, "
                         f"mask {tuple(mask.shape)}")
    m = _mask_bool(mask)
    norm_length = _check_norm_length(norm_length, values.shape[1])
    return _agg(values, m, agg, norm_length)


def _agg(values, m, agg, norm_length):
    x = torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))
    if agg == "token-mean":
        return x.sum() / m.sum().clamp(min=1).to(x.dtype)
    per_seq = x.sum(dim=1)
    if agg == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(dim=1).clamp(min=1).to(x.dtype)
    else:  # seq-mean-token-sum-norm
        per_seq = per_seq / norm_length
    return per_seq.mean()


# -- the loss ------------------------------------------------------------------------------


def _check_loss_inputs(logp, old_logp, advantages, mask, ref_logp, clip_low, clip_high, beta, agg,
                       entropy, norm_length) -> float:
    """`grpo_loss`'s checks of shapes, types and settings (ValueError on bad input; the advantages' finiteness
    is checked where they are cast); returns the resolved norm_length."""
    _check_agg(agg)
    if not isinstance(logp, torch.Tensor) or logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError("logp must be a floating-point tensor of shape (B, T), got "
                         + (f"shape {tuple(logp.shape)}, dtype {logp.dtype}"
                            if isinstance(logp, torch.Tensor) else type(logp).__name__))
    shape = tuple(logp.shape)
    _check_like("old_logp", old_logp, shape)
    _check_like("mask", mask, shape, floating=False)
    if ref_logp is not None:
        _check_like("ref_logp", ref_logp, shape)
    if entropy is not None:
        _check_like("entropy", entropy, shape)
    if not isinstance(advantages, torch.Tensor) or tuple(advantages.shape) != shape[:1]:
        got = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be a tensor of shape (B,) = {shape[:1]}, got {got}")
    if not _is_real(clip_low) or not 0 <= clip_low <= 1:
        raise ValueError(f"clip_low must be a number in [0, 1], got {clip_low!r}")
    if not _is_real(clip_high) or not 0 <= clip_high < math.inf:
        raise ValueError(f"clip_high must be a finite number >= 0, got {clip_high!r}")
    if not _is_real(beta) or not 0 <= beta < math.inf:
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    if beta > 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta > 0")
    return _check_norm_length(norm_length, shape[1])


def grpo_loss(logp, old_logp, advantages, mask, ref_logp=None, clip_low: float = 0.2,
              clip_high: float = 0.2, beta: float = 0.0, agg: str = "token-mean",
              entropy=None, norm_length: float | None = None):
    """Clipped GRPO loss (paper eqs. 4-7), to minimise.

    logp (B, T): per-token log-probs of the sampled tokens under the policy being trained.
    old_logp (B, T): the same under the policy that sampled them (constant).
    advantages (B,): one per rollout, e.g. from `group_advantages` (constant).
    mask (B, T): 1 on tokens the policy sampled, 0 elsewhere (prompt, tool, user, padding);
        bool or 0/1 numbers.
    ref_logp (B, T) or None: reference-policy log-probs; required when beta > 0.
    clip_low, clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].
    beta: weight of the k3 KL term.
    agg: one of AGG_MODES; norm_length: the Dr. GRPO constant (default T).
    entropy (B, T) or None: per-token policy entropy, reported in the metrics only.

    Returns (loss, metrics): loss is a 0-dim tensor; metrics is a dict of Python floats:
    policy_loss (-agg(J)), clip_frac_low, clip_frac_high, ratio_mean (mask-1 token mean), and
    when ref_logp is given kl (mask-1 token mean of k3) and kl_loss (agg(k3); loss =
    policy_loss + beta * kl_loss), and when entropy is given entropy (mask-1 token mean).
    """
    norm_length = _check_loss_inputs(logp, old_logp, advantages, mask, ref_logp, clip_low, clip_high,
                                     beta, agg, entropy, norm_length)
    m = _mask_bool(mask)

    dtype = torch.promote_types(logp.dtype, torch.float32)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    lp = logp.to(dtype)
    old = old_logp.detach().to(dtype)
    adv = advantages.detach().to(dtype)[:, None]
    if not bool(torch.isfinite(adv).all()):
        raise ValueError("advantages must be finite (found NaN or inf)")

    log_ratio = torch.where(m, lp - old, zero)  # masked positions: ratio 1, zero gradient
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    j = torch.minimum(ratio * adv, clipped * adv)
    policy_loss = -_agg(j, m, agg, norm_length)
    loss = policy_loss

    n_tok = m.sum().clamp(min=1).to(dtype)
    stats = {
        "policy_loss": policy_loss.detach(),
        "clip_frac_low": (m & (adv < 0) & (ratio < 1 - clip_low)).sum().to(dtype) / n_tok,
        "clip_frac_high": (m & (adv > 0) & (ratio > 1 + clip_high)).sum().to(dtype) / n_tok,
        "ratio_mean": torch.where(m, ratio.detach(), zero).sum() / n_tok,
    }
    if ref_logp is not None:
        # k3, 0 at masked positions (masked before the exp: garbage there cannot overflow)
        kl = kl_k3(torch.where(m, lp, zero), torch.where(m, ref_logp.detach().to(dtype), zero))
        kl_loss = _agg(kl, m, agg, norm_length)
        if beta > 0:
            loss = loss + beta * kl_loss
        stats["kl"] = kl.detach().sum() / n_tok
        stats["kl_loss"] = kl_loss.detach()
    if entropy is not None:
        stats["entropy"] = torch.where(m, entropy.detach().to(dtype), zero).sum() / n_tok
    values = torch.stack([v.to(dtype) for v in stats.values()]).tolist()  # one device sync
    return loss, dict(zip(stats.keys(), values))


# -- checks --------------------------------------------------------------------------------


def _is_real(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def _check_agg(agg):
    if agg not in AGG_MODES:
        raise ValueError(f"agg must be one of {', '.join(map(repr, AGG_MODES))}; got {agg!r}")


def _check_like(name, t, shape, floating=True):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of shape {shape}, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have the shape of logp {shape}, got {tuple(t.shape)}")
    if floating and not t.is_floating_point():
        raise ValueError(f"{name} must be floating point, got dtype {t.dtype}")


def _check_norm_length(norm_length, t_len):
    if norm_length is None:
        return float(max(t_len, 1))
    if not _is_real(norm_length) or not 0 < norm_length < math.inf:
        raise ValueError(f"norm_length must be a finite number > 0 or None, got {norm_length!r}")
    return float(norm_length)


def _mask_bool(mask):
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must be bool or hold only 0 and 1")
    return mask != 0
