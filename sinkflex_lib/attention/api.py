"""`sink_attention`: one entry point, four backends, checked arguments."""

from __future__ import annotations

import math

import torch

from .blocked import DEFAULT_TILE, blocked_attention
from .eager import eager_attention
from .flex import flex_attention
from .mask import padding_to_bool, sink_mask
from .sink_scale import sink_scale

BACKENDS = ("auto", "eager", "flex", "blocked")


def resolve_backend(backend: str, device) -> str:
    """'auto' means flex on CUDA and blocked elsewhere; other names pass through checked."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "flex" if torch.device(device).type == "cuda" else "blocked"
    return backend


def sink_attention(q, k, v, sinks=None, *, window=None, prefix=0, scale=None, backend="auto",
                   return_lse=False, key_padding_mask=None, tile=DEFAULT_TILE):
    """Attention with a learned zero-value sink per head, causal with optional window and prefix.

    q: (B, Hq, Nq, D); k, v: (B, Hkv, Nk, D), Hq a multiple of Hkv (grouped-query attention),
    Nq <= Nk with query i at key position Nk - Nq + i. sinks: (Hq,) logits or None.
    Key j is visible to query position t iff j <= t and (window is None or t - j < window or
    j < prefix) -- see `SinkMask`. key_padding_mask: optional (B, Nk), True = real key; integer
    masks count nonzero as real, float masks are additive (0 = real, -inf = pad; see
    `padding_to_bool`). An infinite sink gives the limit on every backend: +inf output 0, -inf
    no sink. scale defaults to D ** -0.5. tile: query rows per tile of the blocked backend.
    Every size must be >= 1 (B, heads, Nq, Nk, D) and Hq a multiple of Hkv.

    Returns out (B, Hq, Nq, D) in q's dtype, and with return_lse=True also the log-sum-exp over
    visible keys without the sink (the paper's l), float32 (float64 for float64 input).
    """
    _check_inputs(q, k, v, sinks, key_padding_mask)
    mask = sink_mask(window, prefix)
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"tile must be an integer >= 1, got {tile!r}")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    elif not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    backend = resolve_backend(backend, q.device)
    if key_padding_mask is not None:
        key_padding_mask = padding_to_bool(key_padding_mask).to(q.device)

    if backend == "eager":
        out, lse = eager_attention(q, k, v, sinks, mask, scale, key_padding_mask)
        return (out, lse) if return_lse else out
    if backend == "flex":
        z, lse = flex_attention(q, k, v, mask, scale, key_padding_mask)
    else:
        z, lse = blocked_attention(q, k, v, mask, scale, key_padding_mask, tile=tile)
    out = z if sinks is None else sink_scale(z, lse, sinks)
    return (out, lse) if return_lse else out


def _check_inputs(q, k, v, sinks, key_padding_mask):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, H, N, D), got {shape}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, hq, n_q, d = q.shape
    for name, size in (("batch size B", b), ("head count Hq", hq), ("head dim D", d),
                       ("KV head count Hkv", k.shape[1])):
        if size < 1:
            raise ValueError(f"{name} must be >= 1, got {size} (q: {tuple(q.shape)}, k: {tuple(k.shape)})")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k must be (B={b}, Hkv, Nk, D={d}) to match q, got {tuple(k.shape)}")
    hkv, n_k = k.shape[1], k.shape[2]
    if hq % hkv != 0:
        raise ValueError(f"q's head count Hq={hq} must be a multiple of k's Hkv={hkv}")
    if n_q > n_k:
        raise ValueError(f"q's length Nq={n_q} must be <= k's length Nk={n_k}")
    if n_q < 1:
        raise ValueError("q must have at least one query (Nq >= 1)")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (hq,):
            shape = tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__
            raise ValueError(f"sinks must be a tensor of shape (Hq,) = ({hq},), got {shape}")
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, torch.Tensor) or tuple(key_padding_mask.shape) != (b, n_k):
            raise ValueError(f"key_padding_mask must be a (B, Nk) = ({b}, {n_k}) tensor")
