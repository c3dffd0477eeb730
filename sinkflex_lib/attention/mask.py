"""`SinkMask`: the causal / sliding-window / always-visible-prefix mask of paper eq. 11.

Convention (Hugging Face's, so `window=W` equals gpt-oss's eager path): key j is visible to
the query at position t iff

    j <= t  and  (window is None  or  p(t) - p(j) < window  or  p(j) < prefix)

where p is a slot's token position. Without padding p(j) = j. With a key padding mask
(pads anywhere: a batched decode loop leaves them between a row's turns), p counts real keys
only (`positions`: pads do not advance it, as position ids do not), so the window spans
`window` real tokens and a padded row attends exactly as the same tokens would unpadded.

The paper writes `q - k <= w`; its w is W - 1. With Nq queries and Nk keys (Nq <= Nk), query i
sits at key slot t = Nk - Nq + i, so decoding against a KV cache uses the same mask.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch


BLOCK_MASK_CACHE = 8


@dataclass(frozen=True)
class SinkMask:
    """Causal mask with an optional sliding `window` (keys a query sees, itself included)
    and `prefix` keys that stay visible to every later query."""

    window: int | None = None
    prefix: int = 0
    _block_masks: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        check_window_prefix(self.window, self.prefix)

    # -- the predicate, in three forms ---------------------------------------------------
    def visible(self, t: torch.Tensor, j: torch.Tensor, pt: torch.Tensor | None = None,
                pj: torch.Tensor | None = None) -> torch.Tensor:
        """Elementwise visibility of key slot `j` to query slot `t` (broadcasting). pt, pj:
        their token positions (see `positions`; default the slots themselves)."""
        ok = j <= t
        if self.window is not None:
            pt, pj = (t, j) if pt is None else (pt, pj)
            ok = ok & ((pt - pj < self.window) | (pj < self.prefix))
        return ok

    @staticmethod
    def positions(key_padding_mask: torch.Tensor) -> torch.Tensor:
        """(B, Nk) bool, True = real key -> (B, Nk) long token positions: the number of real
        keys before each slot, minus one on a pad (a pad shares its predecessor's position)."""
        return key_padding_mask.long().cumsum(-1) - 1

    def mask_mod(self, q_offset: int = 0):
        """A FlexAttention `mask_mod(b, h, q_idx, kv_idx)`; query q_idx sits at q_idx + q_offset."""

        def mask_mod(b, h, q_idx, kv_idx):
            return self.visible(q_idx + q_offset, kv_idx)

        mask_mod.__name__ = f"sink_mask_w{self.window}_p{self.prefix}_o{q_offset}"
        return mask_mod

    def dense(self, n_q: int, n_k: int, device=None) -> torch.Tensor:
        """Boolean (n_q, n_k) mask; True where the key is visible."""
        _check_lengths(n_q, n_k)
        t = torch.arange(n_k - n_q, n_k, device=device)[:, None]
        j = torch.arange(n_k, device=device)[None, :]
        return self.visible(t, j)

    def block_mask(self, n_q: int, n_k: int, device=None, block_size: int = 128):
        """FlexAttention BlockMask built with B=None, H=None (broadcast over batch and heads).

        Cached per (n_q, n_k, device, block_size), the last `BLOCK_MASK_CACHE` shapes (decoding
        makes a new shape every step); `sink_mask` hands every layer with the same window and
        prefix the same `SinkMask`, so a model's layers share one.
        """
        from torch.nn.attention.flex_attention import create_block_mask

        _check_lengths(n_q, n_k)
        device = torch.device(device if device is not None else "cpu")
        key = (n_q, n_k, str(device), block_size)
        if key not in self._block_masks:
            while len(self._block_masks) >= BLOCK_MASK_CACHE:
                self._block_masks.pop(next(iter(self._block_masks)))  # the oldest shape
            self._block_masks[key] = create_block_mask(
                self.mask_mod(q_offset=n_k - n_q), B=None, H=None, Q_LEN=n_q, KV_LEN=n_k,
                device=device, BLOCK_SIZE=block_size)
        return self._block_masks[key]

    # -- what a tile of queries needs --------------------------------------------------
    def key_ranges(self, t0: int, t1: int, positions: torch.Tensor | None = None) -> list[tuple[int, int]]:
        """Half-open key slot ranges that queries at slots [t0, t1) can see, in order.

        At most two: the prefix [0, prefix) and the local band [t0 - window + 1, t1).
        Every key outside these ranges is hidden from all the queries in the tile.
        positions: (B, Nk) token positions; the ranges then cover what any row can see.
        """
        if self.window is None:
            return [(0, t1)]
        if positions is None:
            lo, hi_prefix = max(0, t0 - self.window + 1), self.prefix
        else:  # positions never decrease along a row, so each bound is one binary search
            band = (positions[:, t0] - self.window).unsqueeze(1)
            lo = int(torch.searchsorted(positions, band, right=True).min())
            pre = torch.full_like(band, self.prefix - 1)
            hi_prefix = int(torch.searchsorted(positions, pre, right=True).max()) if self.prefix else 0
        if lo <= hi_prefix:
            return [(0, t1)]
        return [(0, hi_prefix), (lo, t1)] if hi_prefix > 0 else [(lo, t1)]

    def visible_fraction(self, n_q: int, n_k: int) -> float:
        """Fraction of (query, key) pairs that are visible (closed form, no dense mask)."""
        _check_lengths(n_q, n_k)
        total = 0
        for t in range(n_k - n_q, n_k):
            if self.window is None:
                total += t + 1
            else:
                band_lo = max(0, t - self.window + 1)
                total += (t + 1 - band_lo) + min(self.prefix, band_lo)
        return total / (n_q * n_k)


def sink_mask(window: int | None = None, prefix: int = 0) -> SinkMask:
    """The shared `SinkMask` for (window, prefix): one instance, so its block masks are shared."""
    check_window_prefix(window, prefix)
    return _shared_mask(window, prefix)


@functools.lru_cache(maxsize=32)
def _shared_mask(window, prefix) -> SinkMask:
    return SinkMask(window=window, prefix=prefix)


INT64_MAX = 2**63 - 1


def _is_size(value, low: int) -> bool:
    """An integer (int, integral float, numpy or torch integer) in [low, 2**63 - 1]."""
    try:
        return not isinstance(value, bool) and int(value) == value and low <= value <= INT64_MAX
    except (TypeError, ValueError, OverflowError):
        return False


def check_window_prefix(window, prefix) -> None:
    """ValueError naming the argument unless window is None or in [1, 2**63 - 1] and prefix is
    in [0, 2**63 - 1] (positions are int64: a larger value would overflow, not mean more)."""
    if window is not None and not _is_size(window, 1):
        raise ValueError(f"window must be None or an integer in [1, 2**63 - 1], got {window!r}")
    if not _is_size(prefix, 0):
        raise ValueError(f"prefix must be an integer in [0, 2**63 - 1], got {prefix!r}")


def padding_to_bool(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """A (B, Nk) key padding mask as bool, True = real key.

    bool and integer masks: nonzero = real key (Hugging Face's 1/0 attention_mask). A
    floating-point mask is additive, PyTorch's meaning of a float mask: 0 = real key,
    -inf = pad; any other value is refused (a 1.0/0.0 mask would otherwise invert).
    """
    m = key_padding_mask
    if m.dtype == torch.bool:
        return m
    if not m.is_floating_point():
        return m != 0
    real = m == 0
    if not bool((real | (m == float("-inf"))).all()):
        raise ValueError("key_padding_mask: a floating-point mask is additive (0 = real key, -inf = pad) "
                         "and this one holds other values; pass a bool mask (True = real key)")
    return real


def _check_lengths(n_q: int, n_k: int) -> None:
    if n_q < 1 or n_k < 1:
        raise ValueError(f"n_q and n_k must be >= 1, got n_q={n_q}, n_k={n_k}")
    if n_q > n_k:
        raise ValueError(f"n_q must be <= n_k (queries are the last n_q key positions), got {n_q} > {n_k}")
