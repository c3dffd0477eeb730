"""The rollout's KV cache: appends in place, and drops decode pads when asked.

transformers' `DynamicLayer` appends a step's keys with `torch.cat`, copying the whole cache
every decode step (a third of a tiny policy's decode forward at 800 cached tokens). Here each
layer's keys and values are views (B, Hkv, n, D) of a buffer with room to grow: a step writes
its new slots in place, and a full buffer doubles (amortised O(1) a token). With
`spare=False` the buffer holds exactly the cache, so every step copies it (as `torch.cat` does):
the flag-off baseline of the speed bench.

`drop_pad_slots` repacks every row to its real tokens only, right-aligned behind as few left
pads as the longest row needs. The decode loop leaves pad slots where a row waited for the
others (its turn ended first, or its observation was shorter); on an attention whose window
counts real tokens (the sinkflex one, `SinkMask.positions`) a pad changes nothing, so dropping
them changes no log-prob beyond float rounding and shortens every later forward.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_CAPACITY = 64   # slots a buffer starts with


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of a buffer with spare slots."""

    def __init__(self, spare: bool = True):
        super().__init__()
        self.spare = spare

    def _capacity(self, n: int) -> int:
        return max(MIN_CAPACITY, 2 * n) if self.spare else n

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._set(key_states[:, :, :0].clone(), value_states[:, :, :0].clone(), 0)
        self.is_initialized = True

    def _set(self, kbuf: torch.Tensor, vbuf: torch.Tensor, n: int) -> None:
        self._kbuf, self._vbuf = kbuf, vbuf
        self.keys, self.values = kbuf[:, :, :n], vbuf[:, :, :n]

    def _repack(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        """New buffers of `capacity` slots holding keys/values (B, Hkv, n, D) first."""
        n = keys.shape[2]
        kbuf = keys.new_empty(*keys.shape[:2], capacity, keys.shape[3])
        vbuf = values.new_empty(*values.shape[:2], capacity, values.shape[3])
        kbuf[:, :, :n], vbuf[:, :, :n] = keys, values
        self._set(kbuf, vbuf, n)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, add = self.keys.shape[2], key_states.shape[2]
        if n + add > self._kbuf.shape[2]:
            self._repack(self.keys, self.values, self._capacity(n + add))
        self._kbuf[:, :, n:n + add] = key_states
        self._vbuf[:, :, n:n + add] = value_states
        self._set(self._kbuf, self._vbuf, n + add)
        return self.keys, self.values

    def gather(self, rows: torch.Tensor | None = None, slots: torch.Tensor | None = None) -> None:
        """Keep batch `rows` (indices), then per row the cache `slots` (B', n') in that order."""
        if not self.is_initialized or self.keys.shape[2] == 0:
            return
        keys, values = self.keys, self.values
        if rows is not None:
            keys, values = keys.index_select(0, rows), values.index_select(0, rows)
        if slots is not None:
            idx = slots[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
            keys, values = keys.gather(2, idx), values.gather(2, idx)
        self._repack(keys, values, self._capacity(keys.shape[2]))


class RolloutCache(Cache):
    """A cache of `GrowingLayer`s (one per model layer, made on first use), with the two
    reshapings the decode loop needs: drop finished rows, drop pad slots."""

    def __init__(self, spare: bool = True):
        super().__init__(layer_class_to_replicate=lambda: GrowingLayer(spare))

    def keep_rows(self, attn_hist: torch.Tensor, keep: list[int]) -> torch.Tensor:
        """Keep batch rows `keep` (in that order) of the cache and of the attention history."""
        idx = torch.tensor(keep, device=attn_hist.device)
        for layer in self.layers:
            layer.gather(rows=idx)
        return attn_hist.index_select(0, idx)

    def drop_pad_slots(self, attn_hist: torch.Tensor) -> torch.Tensor:
        """Repack every row to its real slots (attention 1), in order, behind the fewest left pads;
        returns the new attention history (B, n') with n' the longest row's real count."""
        width = int(attn_hist.sum(1).max())
        order = torch.sort(attn_hist, dim=1, stable=True).indices   # pads first, then real slots in order
        slots = order[:, attn_hist.shape[1] - width:]
        for layer in self.layers:
            layer.gather(slots=slots)
        return attn_hist.gather(1, slots)
