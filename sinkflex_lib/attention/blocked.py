"""Exact block-sparse tiled attention in plain PyTorch: the CPU training path.

Queries are processed in tiles of `tile` rows. For each tile, `SinkMask.key_ranges` names the
only keys any of its queries can see (the prefix and the local band for a sliding window,
everything up to the tile's end for a full layer); all other keys are skipped.

Forward keeps only z (the normalized output, before any sink scale) and the log-sum-exp l.
Backward recomputes each tile's probabilities P = exp(S - l) (flash-style) and applies

    dV += P^T dZ,   dP = dZ V^T,   dS = P * ((dP - rowsum(P * dP)) + dl),   dQ = c dS K,   dK += c dS^T Q,

where dl is the gradient that reaches l (from the sink scale, or from a caller using the LSE)
and c the softmax scale. rowsum(P * dP) equals flash attention's rowsum(dZ * Z); forming it
from the same dP entries (a tile holds every key its rows see) makes dP - rowsum(P * dP)
cancel exactly where it should (one visible key), so a sink's small a(1 - a) term survives. Extra memory is O(B * Hq * tile * keys-per-tile): O(N * tile) for a full
layer and O(tile * (window + prefix + tile)) per tile for a sliding one.
Grouped-query attention folds the G = Hq / Hkv query heads of a KV head into one einsum.
"""

from __future__ import annotations

import torch

from .mask import SinkMask

DEFAULT_TILE = 128


def blocked_attention(q, k, v, mask: SinkMask, scale: float, key_padding_mask=None,
                      tile: int = DEFAULT_TILE):
    """Returns (z (B, Hq, Nq, D) in q's dtype, lse (B, Hq, Nq) in float32/float64).

    z is plain softmax attention (no sink); rows that see no key get z = 0 and lse = -inf.
    Differentiable in q, k, v and in the returned lse.
    """
    if tile < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    return _BlockedAttention.apply(q, k, v, key_padding_mask, mask, float(scale), int(tile))


def _acc_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class _Tiles:
    """Iterates query tiles with the keys they can see (views where the keys are contiguous)."""

    def __init__(self, q, k, v, key_padding_mask, mask: SinkMask, tile: int):
        self.b, self.hq, self.n_q, self.d = q.shape
        self.hkv, self.n_k = k.shape[1], k.shape[2]
        self.groups = self.hq // self.hkv
        self.offset = self.n_k - self.n_q
        self.k, self.v, self.kpm, self.mask, self.tile = k, v, key_padding_mask, mask, tile
        self.pos = None if key_padding_mask is None else mask.positions(key_padding_mask)

    def __iter__(self):
        for i0 in range(0, self.n_q, self.tile):
            i1 = min(i0 + self.tile, self.n_q)
            t0, t1 = self.offset + i0, self.offset + i1
            ranges = self.mask.key_ranges(t0, t1, self.pos)
            if len(ranges) == 1:
                a, b = ranges[0]
                kt, vt = self.k[:, :, a:b], self.v[:, :, a:b]
                kpos = torch.arange(a, b, device=self.k.device)
            else:
                kt = torch.cat([self.k[:, :, a:b] for a, b in ranges], dim=2)
                vt = torch.cat([self.v[:, :, a:b] for a, b in ranges], dim=2)
                kpos = torch.cat([torch.arange(a, b, device=self.k.device) for a, b in ranges])
            tpos = torch.arange(t0, t1, device=self.k.device)
            if self.kpm is None:
                visible = self.mask.visible(tpos[:, None], kpos[None, :])  # (T, S)
            else:
                visible = self.mask.visible(tpos[:, None], kpos[None, :], self.pos[:, t0:t1, None],
                                            self.pos[:, None, kpos])  # (B, T, S)
                visible = (visible & self.kpm[:, None, kpos])[:, None, None]  # (B, 1, 1, T, S)
            yield i0, i1, ranges, kt, vt, visible

    def grouped(self, x):
        """(B, Hq, N, ...) -> (B, Hkv, G, N, ...) view."""
        return x.view(self.b, self.hkv, self.groups, *x.shape[2:])


def _scores(qt, kt, scale, visible, acc):
    s = torch.einsum("bhgtd,bhsd->bhgts", qt.to(acc), kt.to(acc)) * scale
    return s.masked_fill(~visible, float("-inf"))


class _BlockedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, mask, scale, tile):
        acc = _acc_dtype(q)
        tiles = _Tiles(q, k, v, key_padding_mask, mask, tile)
        q5 = tiles.grouped(q)
        z = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)
        z5, lse5 = tiles.grouped(z), tiles.grouped(lse)
        for i0, i1, _, kt, vt, visible in tiles:
            s = _scores(q5[:, :, :, i0:i1], kt, scale, visible, acc)
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # rows that see nothing
            p = torch.exp(s - m)
            denom = p.sum(dim=-1, keepdim=True)
            out = torch.einsum("bhgts,bhsd->bhgtd", p, vt.to(acc)) / denom.clamp_min(torch.finfo(acc).tiny)
            z5[:, :, :, i0:i1] = out.to(q.dtype)
            lse5[:, :, :, i0:i1] = (m + torch.log(denom)).squeeze(-1)
        ctx.save_for_backward(q, k, v, key_padding_mask, lse)
        ctx.mask, ctx.scale, ctx.tile = mask, scale, tile
        return z, lse

    @staticmethod
    def backward(ctx, dz, dlse):
        q, k, v, key_padding_mask, lse = ctx.saved_tensors
        acc = _acc_dtype(q)
        tiles = _Tiles(q, k, v, key_padding_mask, ctx.mask, ctx.tile)
        dz_acc = torch.zeros(q.shape, dtype=acc, device=q.device) if dz is None else dz.to(acc)
        dlse_acc = torch.zeros_like(lse) if dlse is None else dlse.to(acc)
        lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        q5, dz5 = tiles.grouped(q), tiles.grouped(dz_acc)
        dlse5, lse5 = tiles.grouped(dlse_acc), tiles.grouped(lse_safe)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=k.device)
        dv = torch.zeros(v.shape, dtype=acc, device=v.device)
        dq5 = tiles.grouped(dq)
        for i0, i1, ranges, kt, vt, visible in tiles:
            qt = q5[:, :, :, i0:i1].to(acc)
            dzt = dz5[:, :, :, i0:i1]
            s = _scores(qt, kt, ctx.scale, visible, acc)
            p = torch.exp(s - lse5[:, :, :, i0:i1, None])
            dp = torch.einsum("bhgtd,bhsd->bhgts", dzt, vt.to(acc))
            ds = p * ((dp - (p * dp).sum(-1, keepdim=True)) + dlse5[:, :, :, i0:i1, None])
            dq5[:, :, :, i0:i1] = torch.einsum("bhgts,bhsd->bhgtd", ds, kt.to(acc)) * ctx.scale
            dk_t = torch.einsum("bhgts,bhgtd->bhsd", ds, qt) * ctx.scale
            dv_t = torch.einsum("bhgts,bhgtd->bhsd", p, dzt)
            start = 0
            for a, b in ranges:
                dk[:, :, a:b] += dk_t[:, :, start:start + b - a]
                dv[:, :, a:b] += dv_t[:, :, start:start + b - a]
                start += b - a
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None
