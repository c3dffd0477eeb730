"""`SinkMask`: the causal / sliding-window / always-visible-prefix mask of paper eq. 11.

Convention (Hugging Face's, so `window=W` equals gpt-oss's eager path): key j is visible to
the query at position t iff

    j <= t  and  (window is None  or  t - j < window  or  j < prefix).

The paper writes `q - k <= w`; its w is W - 1. With Nq queries and Nk keys (Nq <= Nk), query i
sits at key position t = Nk - Nq + i, so decoding against a KV cache uses the same mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SinkMask:
    """Causal mask with an optional sliding `window` (keys a query sees, itself included)
    and `prefix` keys that stay visible to every later query."""

    window: int | None = None
    prefix: int = 0
    _block_masks: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        if self.window is not None and (isinstance(self.window, bool) or int(self.window) != self.window
                                        or self.window < 1):
            raise ValueError(f"window must be None or an integer >= 1, got {self.window!r}")
        if isinstance(self.prefix, bool) or int(self.prefix) != self.prefix or self.prefix < 0:
            raise ValueError(f"prefix must be an integer >= 0, got {self.prefix!r}")

    @property
    def is_causal_only(self) -> bool:
        """True when the mask is plain causal (no window)."""
        return self.window is None

    # -- the predicate, in three forms ---------------------------------------------------
    def visible(self, t: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """Elementwise visibility of key position `j` to query position `t` (broadcasting)."""
        ok = j <= t
        if self.window is not None:
            ok = ok & ((t - j < self.window) | (j < self.prefix))
        return ok

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

        Cached per (n_q, n_k, device, block_size), so a model's layers share one.
        """
        from torch.nn.attention.flex_attention import create_block_mask

        _check_lengths(n_q, n_k)
        device = torch.device(device if device is not None else "cpu")
        key = (n_q, n_k, str(device), block_size)
        if key not in self._block_masks:
            self._block_masks[key] = create_block_mask(
                self.mask_mod(q_offset=n_k - n_q), B=None, H=None, Q_LEN=n_q, KV_LEN=n_k,
                device=device, BLOCK_SIZE=block_size)
        return self._block_masks[key]

    # -- what a tile of queries needs --------------------------------------------------
    def key_ranges(self, t0: int, t1: int) -> list[tuple[int, int]]:
        """Half-open key ranges that queries at positions [t0, t1) can see, in order.

        At most two: the prefix [0, prefix) and the local band [t0 - window + 1, t1).
        Every key outside these ranges is hidden from all the queries in the tile.
        """
        if self.window is None:
            return [(0, t1)]
        lo = max(0, t0 - self.window + 1)
        if lo <= self.prefix:
            return [(0, t1)]
        return [(0, self.prefix), (lo, t1)] if self.prefix > 0 else [(lo, t1)]

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


def _check_lengths(n_q: int, n_k: int) -> None:
    if n_q < 1 or n_k < 1:
        raise ValueError(f"n_q and n_k must be >= 1, got n_q={n_q}, n_k={n_k}")
    if n_q > n_k:
        raise ValueError(f"n_q must be <= n_k (queries are the last n_q key positions), got {n_q} > {n_k}")
