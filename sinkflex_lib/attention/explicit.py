"""The explicit sink column: paper eq. 8 materialized, as a dense reference.

The learned sink is written out as one extra key placed before every real key: its score is
the sink logit s (whatever the query) and its value row is zero. A plain softmax over the
Nk + 1 scores then gives

    O_sink = (sum_i exp(q.k_i) v_i + exp(s) * 0) / (sum_i exp(q.k_i) + exp(s))      (eq. 8)

which the library computes instead as sigmoid(l - s) * O_std (eqs. 9-10). This module keeps the
explicit form so notebooks can compare the two; it builds the (B, Hq, Nq, 1 + Nk) score matrix,
so use it only at sizes where that fits. It shares no attention code with the library's
backends (only how inputs are read: `padding_to_bool`, `finite_sinks`): the mask is spelled out
from its definition and grouped-query heads are expanded by indexing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .mask import padding_to_bool
from .sink_scale import finite_sinks


def explicit_sink_attention(q, k, v, sinks=None, *, window=None, prefix=0, scale=None,
                            key_padding_mask=None, return_probs=False):
    """Dense attention with the sink as an explicit zero-value column (paper eq. 8).

    q: (B, Hq, Nq, D); k, v: (B, Hkv, Nk, D) with Hq a multiple of Hkv; query i sits at key
    slot Nk - Nq + i. Key j is visible to slot t iff j <= t and (window is None or
    p(t) - p(j) < window or p(j) < prefix), p the token position (p(j) = j without padding);
    key_padding_mask (B, Nk), True = real key (as `sink_attention` reads it): pads are hidden and
    do not advance p. sinks: (Hq,) logits or None (no sink column); an infinite one gives its
    limit. scale defaults to D ** -0.5. Computes in q's dtype.

    Returns out (B, Hq, Nq, D); with return_probs=True also the probabilities
    (B, Hq, Nq, 1 + Nk) whose column 0 is the sink's share (absent when sinks is None).
    Rows that see no key and have no sink get zero output.
    """
    b, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    if hq % hkv != 0:
        raise ValueError(f"q's head count Hq={hq} must be a multiple of k's Hkv={hkv}")
    if n_q > n_k:
        raise ValueError(f"q's length Nq={n_q} must be <= k's length Nk={n_k}")
    if sinks is not None and tuple(sinks.shape) != (hq,):
        raise ValueError(f"sinks must have shape (Hq,) = ({hq},), got {tuple(sinks.shape)}")
    scale = d ** -0.5 if scale is None else scale
    head_of = torch.arange(hq, device=q.device) // (hq // hkv)  # query head -> its KV head
    k, v = k[:, head_of], v[:, head_of]

    if key_padding_mask is None:
        visible = visible_keys(n_q, n_k, window, prefix, device=q.device)[None, None]
    else:
        real = padding_to_bool(key_padding_mask)
        visible = visible_keys(n_q, n_k, window, prefix, device=q.device, positions=real.long().cumsum(-1) - 1)
        visible = (visible & real[:, None, :])[:, None]

    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        sink_col = finite_sinks(sinks, q.dtype).view(1, hq, 1, 1).expand(b, hq, n_q, 1)
        scores = torch.cat([sink_col, scores], dim=-1)
        v = torch.cat([torch.zeros_like(v[:, :, :1]), v], dim=2)  # the sink's zero value row
    empty = torch.isinf(scores).all(dim=-1, keepdim=True)  # only without a sink
    probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    out = probs @ v
    return (out, probs) if return_probs else out


def visible_keys(n_q, n_k, window=None, prefix=0, device=None, positions=None):
    """(n_q, n_k) bool: key j visible to query i (at slot t = n_k - n_q + i) iff j <= t and
    (window is None or p(t) - p(j) < window or p(j) < prefix), spelled out from the definition.
    positions: optional (B, n_k) token positions p (default p(j) = j); the result is then
    (B, n_q, n_k)."""
    t = torch.arange(n_k - n_q, n_k, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    visible = j <= t
    if window is not None:
        pt, pj = (t, j) if positions is None else (positions[:, n_k - n_q:, None], positions[:, None, :])
        visible = visible & ((pt - pj < window) | (pj < prefix))
    return visible


def sink_mass(lse, sinks):
    """Share of attention the zero-value sink takes: exp(s) / (exp(l) + exp(s)) = sigmoid(s - l).

    lse: (B, H, N) log-sum-exp over the visible keys (the paper's l, as `sink_attention(...,
    return_lse=True)` returns it); sinks: (H,). Returns (B, H, N), equal to 1 - sigmoid(l - s)
    but without its cancellation when the sink takes almost nothing.
    """
    return torch.sigmoid(sinks.to(lse.dtype)[None, :, None] - lse)


class SinkToken(NamedTuple):
    """Inputs that put the sink into the KV cache as a real token (see `sink_as_token`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    window: int | None
    prefix: int
    scale: float
    head_dim: int  # slice the output back to this many features


def sink_as_token(q, k, v, sinks, *, window=None, prefix=0, scale=None) -> SinkToken:
    """Materialize the sink as one extra key/value row at position 0 of the cache.

    Plain attention (no sink) over the returned inputs equals sink attention over the given
    ones, in its first `head_dim` output features. One feature is appended to every head:
    q_h' = [q_h, s_h / scale], k_sink' = [0, ..., 0, 1], k_i' = [k_i, 0], so the sink's score is
    scale * q_h' . k_sink' = s_h for every query (per query head, so grouped-query KV heads
    can share the row), and the real scores are unchanged; v_sink' = 0 (the zero value).
    The sink row sits at position 0 and must stay visible to every query: the prefix grows
    by one, and the window (a difference of positions) is unchanged.
    """
    b, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    if sinks is None or tuple(sinks.shape) != (hq,):
        raise ValueError(f"sinks must be a tensor of shape (Hq,) = ({hq},), got "
                         f"{None if sinks is None else tuple(sinks.shape)}")
    scale = d ** -0.5 if scale is None else float(scale)
    extra_q = (sinks.to(q.dtype) / scale).view(1, hq, 1, 1).expand(b, hq, n_q, 1)
    q_aug = torch.cat([q, extra_q], dim=-1)
    sink_key = torch.zeros(b, hkv, 1, d + 1, dtype=k.dtype, device=k.device)
    sink_key[..., -1] = 1.0
    k_aug = torch.cat([sink_key, torch.nn.functional.pad(k, (0, 1))], dim=2)
    v_aug = torch.cat([torch.zeros_like(sink_key), torch.nn.functional.pad(v, (0, 1))], dim=2)
    assert k_aug.shape == (b, hkv, n_k + 1, d + 1)
    return SinkToken(q_aug, k_aug, v_aug, window, prefix + 1, scale, d)
