"""Exact block-sparse tiled attention in plain PyTorch: the CPU training path.

Queries are processed in tiles of `tile` rows. For each tile, `SinkMask.key_ranges` names the
only keys any of its queries can see (the prefix and the local band for a sliding window,
everything up to the tile's end for a full layer); all other keys are skipped. A tile is
further cut along the batch so that its score matrix holds at most `SCORE_BUDGET` entries:
the working set stays in cache and is reused, rather than allocated afresh at full size.

Grouped-query attention folds the G = Hq / Hkv query heads of a KV head into the rows of one
matrix: a tile is a batched matrix product over (batch x KV head) of (G * rows, D) queries,
pre-multiplied by the softmax scale c, with (S, D) keys. The mask is applied in place, and only
to the key columns where some entry is hidden (a full layer's off-diagonal keys need none).

Without autograd, when the whole score matrix fits `SCORE_BUDGET` (a decode step: one or a few
queries a row), the batch is a single tile computed with a handful of batched ops (`_one_tile`);
the tiling's per-tile bookkeeping would cost more than the arithmetic (decode attention of the tiny
policy, 32 rows, 200-1,500 cached keys, 2 threads: 1.2-1.6x faster).

Forward keeps only z (the normalized output, before any sink scale) and the log-sum-exp l.
Backward recomputes each tile's probabilities P = exp(S - l) (flash-style) and applies

    dV += P^T dZ,   dP = dZ V^T,   dS = P * ((dP - rowsum(P * dP)) + dl),   dQ = c dS K,   dK += dS^T (c Q),

where dl is the gradient that reaches l (from the sink scale, or from a caller using the LSE).
rowsum(P * dP) equals flash attention's rowsum(dZ * Z); forming it from the same dP entries (a
tile holds every key its rows see) makes dP - rowsum(P * dP) cancel exactly where it should
(one visible key), so a sink's small a(1 - a) term survives. Extra memory is
O(min(B, budget) * Hq * tile * keys-per-tile): O(N * tile) for a full layer and
O(tile * (window + prefix + tile)) per tile for a sliding one.
"""

from __future__ import annotations

import torch

from .mask import SinkMask

# Query rows per tile. Forward+backward of the tiny policy's attention shape (8/2 heads, head dim 16),
# 2 threads, quiet AMD EPYC, one run: tile 64 against 128 is 1.0-1.3x faster on full layers and
# 1.1-1.9x on window-128 layers at B x T = 16x256 .. 2x2048; 32 is close to 64, slower at 2x2048.
DEFAULT_TILE = 64
SCORE_BUDGET = 1 << 21   # score entries per (batch chunk, query tile): 8 MB in float32


def blocked_attention(q, k, v, mask: SinkMask, scale: float, key_padding_mask=None,
                      tile: int = DEFAULT_TILE):
    """Returns (z (B, Hq, Nq, D) in q's dtype, lse (B, Hq, Nq) in float32/float64).

    z is plain softmax attention (no sink); rows that see no key get z = 0 and lse = -inf.
    Differentiable in q, k, v and in the returned lse.
    """
    if tile < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if not needs_grad and q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] <= SCORE_BUDGET:
        return _one_tile(q, k, v, key_padding_mask, mask, float(scale))
    return _BlockedAttention.apply(q, k, v, key_padding_mask, mask, float(scale), int(tile))


def _one_tile(q, k, v, key_padding_mask, mask: SinkMask, scale: float):
    """(z, lse) without autograd when all the scores fit `SCORE_BUDGET` (a decode step: one or a few
    queries per row): the whole batch is one tile over the keys any query sees, computed with a
    handful of batched ops rather than the tiling's per-tile bookkeeping. Same math as the tiles."""
    acc = _acc_dtype(q)
    b, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    pos = None if key_padding_mask is None else mask.positions(key_padding_mask)
    ranges = mask.key_ranges(n_k - n_q, n_k, pos)
    kpos = torch.cat([torch.arange(a, e, device=k.device) for a, e in ranges])
    sel = _selection(ranges, kpos)
    kt, vt = k[:, :, sel].to(acc), v[:, :, sel].to(acc)                    # (B, Hkv, S, D)
    visible = _visible(mask, n_k - n_q, n_k, ranges, kpos, pos, key_padding_mask)
    visible = visible if visible.dim() == 3 else visible[None]           # (B or 1, Nq, S)
    qs = q.to(acc).reshape(b, hkv, (hq // hkv) * n_q, d) * scale
    hidden = torch.zeros(visible.shape, dtype=acc, device=q.device).masked_fill_(~visible, float("-inf"))
    s = torch.matmul(qs, kt.transpose(-1, -2)).view(b, hkv, hq // hkv, n_q, -1)
    s.add_(hidden[:, None, None])         # adding -inf: faster than a broadcast masked_fill_ here
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)               # rows that see nothing
    p = s.sub_(m).exp_()
    denom = p.sum(dim=-1, keepdim=True)
    z = torch.matmul(p.view(b, hkv, -1, p.shape[-1]), vt).view(b, hkv, hq // hkv, n_q, d)
    z = z.div_(denom.clamp_min(torch.finfo(acc).tiny)).view(b, hq, n_q, d)
    return z.to(q.dtype), (m + torch.log(denom)).view(b, hq, n_q)


def _acc_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def batch_chunk(batch: int, rows: int, keys: int, budget: int = SCORE_BUDGET) -> int:
    """Batch rows per chunk so that a chunk's scores, `rows` x `keys` per batch row, fit `budget`
    (at least one batch row)."""
    return max(1, min(batch, budget // max(1, rows * keys)))


def _selection(ranges, kpos):
    """The key slots of `ranges` as an index: a slice where they are contiguous, else `kpos`."""
    return slice(*ranges[0]) if len(ranges) == 1 else kpos


def _visible(mask: SinkMask, t0: int, t1: int, ranges, kpos, pos=None, kpm=None) -> torch.Tensor:
    """Visibility of key slots `kpos` (in `ranges`) to query slots [t0, t1): (T, S) without
    padding, else (b, T, S) from the rows' token positions `pos` and key padding `kpm` (b, Nk)."""
    tpos = torch.arange(t0, t1, device=kpos.device)
    if kpm is None:
        return mask.visible(tpos[:, None], kpos[None, :])
    sel = _selection(ranges, kpos)
    visible = mask.visible(tpos[:, None], kpos[None, :], pos[:, t0:t1, None], pos[:, None, sel])
    return visible & kpm[:, None, sel]


class _Tile:
    """One (batch chunk, query tile): the keys its queries can see, as (b*Hkv, S, D) matrices,
    and where it is hidden."""

    def __init__(self, b0, b1, i0, i1, ranges, kt, vt, hidden, cols):
        self.b0, self.b1, self.i0, self.i1, self.ranges = b0, b1, i0, i1, ranges
        self.kt, self.vt = kt, vt
        self.hidden, self.cols = hidden, cols   # (T, S') or (b, T, S') bool over columns cols


class _Tiles:
    """Iterates (batch chunk, query tile) pairs with the keys they can see."""

    def __init__(self, q, k, v, key_padding_mask, mask: SinkMask, tile: int, acc):
        self.b, self.hq, self.n_q, self.d = q.shape
        self.hkv, self.n_k = k.shape[1], k.shape[2]
        self.groups = self.hq // self.hkv
        self.offset = self.n_k - self.n_q
        self.k, self.v, self.kpm, self.mask, self.tile, self.acc = k, v, key_padding_mask, mask, tile, acc
        self.pos = None if key_padding_mask is None else mask.positions(key_padding_mask)

    def __iter__(self):
        for i0 in range(0, self.n_q, self.tile):
            i1 = min(i0 + self.tile, self.n_q)
            t0, t1 = self.offset + i0, self.offset + i1
            ranges = self.mask.key_ranges(t0, t1, self.pos)
            kpos = torch.cat([torch.arange(a, b, device=self.k.device) for a, b in ranges])
            step = batch_chunk(self.b, self.hq * (i1 - i0), len(kpos))
            for b0 in range(0, self.b, step):
                yield self._tile(b0, min(b0 + step, self.b), i0, i1, t0, t1, ranges, kpos)

    def _keys(self, x, b0, b1, ranges):
        parts = [x[b0:b1, :, a:b] for a, b in ranges]
        xt = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
        return xt.to(self.acc).reshape((b1 - b0) * self.hkv, xt.shape[2], self.d)

    def _tile(self, b0, b1, i0, i1, t0, t1, ranges, kpos):
        if self.kpm is None:
            visible = _visible(self.mask, t0, t1, ranges, kpos)                                # (T, S)
        else:
            visible = _visible(self.mask, t0, t1, ranges, kpos, self.pos[b0:b1], self.kpm[b0:b1])  # (b, T, S)
        hidden_cols = (~visible).flatten(0, -2).any(0) if visible.dim() == 3 else (~visible).any(0)
        where = hidden_cols.nonzero()
        cols = (0, 0) if where.numel() == 0 else (int(where[0]), int(where[-1]) + 1)
        hidden = ~visible[..., cols[0]:cols[1]]
        return _Tile(b0, b1, i0, i1, ranges, self._keys(self.k, b0, b1, ranges),
                     self._keys(self.v, b0, b1, ranges), hidden, cols)

    def rows(self, x, t: _Tile, dtype=None):
        """(B, Hq, N, ...) -> this tile's (b*Hkv, G*T, ...) matrix (a copy, in `dtype`)."""
        x5 = x.view(self.b, self.hkv, self.groups, *x.shape[2:])[t.b0:t.b1, :, :, t.i0:t.i1]
        return x5.to(dtype or x.dtype).reshape((t.b1 - t.b0) * self.hkv, self.groups * (t.i1 - t.i0), *x.shape[3:])

    def put(self, dst, t: _Tile, value):
        """Write a (b*Hkv, G*T, ...) tile result into dst (B, Hq, N, ...)."""
        d5 = dst.view(self.b, self.hkv, self.groups, *dst.shape[2:])[t.b0:t.b1, :, :, t.i0:t.i1]
        d5.copy_(value.view(d5.shape))

    def scores(self, qs, t: _Tile):
        """(b*Hkv, G*T, S) scores c q k^T of pre-scaled queries `qs`, hidden entries -inf (in place)."""
        s = torch.bmm(qs, t.kt.transpose(1, 2))
        c0, c1 = t.cols
        if c1 > c0:
            n_t = t.i1 - t.i0
            s5 = s.view(t.b1 - t.b0, self.hkv, self.groups, n_t, s.shape[-1])[..., c0:c1]
            hidden = t.hidden if t.hidden.dim() == 2 else t.hidden[:, None, None]
            s5.masked_fill_(hidden, float("-inf"))
        return s


class _BlockedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, mask, scale, tile):
        acc = _acc_dtype(q)
        tiles = _Tiles(q, k, v, key_padding_mask, mask, tile, acc)
        z = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=acc, device=q.device)
        for t in tiles:
            s = tiles.scores(tiles.rows(q, t, acc) * scale, t)
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # rows that see nothing
            p = s.sub_(m).exp_()
            denom = p.sum(dim=-1, keepdim=True)
            out = torch.bmm(p, t.vt).div_(denom.clamp_min(torch.finfo(acc).tiny))
            tiles.put(z, t, out)
            tiles.put(lse, t, (m + torch.log(denom)).squeeze(-1))
        ctx.save_for_backward(q, k, v, key_padding_mask, lse)
        ctx.mask, ctx.scale, ctx.tile = mask, scale, tile
        return z, lse

    @staticmethod
    def backward(ctx, dz, dlse):
        q, k, v, key_padding_mask, lse = ctx.saved_tensors
        acc = _acc_dtype(q)
        tiles = _Tiles(q, k, v, key_padding_mask, ctx.mask, ctx.tile, acc)
        dz = torch.zeros(q.shape, dtype=acc, device=q.device) if dz is None else dz
        dlse = torch.zeros_like(lse) if dlse is None else dlse.to(acc)
        lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        dq = torch.empty(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=k.device)
        dv = torch.zeros(v.shape, dtype=acc, device=v.device)
        for t in tiles:
            qs = tiles.rows(q, t, acc) * ctx.scale
            dzt = tiles.rows(dz, t, acc)
            p = tiles.scores(qs, t).sub_(tiles.rows(lse_safe, t)[..., None]).exp_()
            ds = torch.bmm(dzt, t.vt.transpose(1, 2))                      # dP
            row = (p * ds).sum(-1, keepdim=True)
            ds.sub_(row).add_(tiles.rows(dlse, t)[..., None]).mul_(p)     # P * ((dP - rowsum) + dl)
            tiles.put(dq, t, torch.bmm(ds, t.kt).mul_(ctx.scale))
            _scatter_keys(dk, t, torch.bmm(ds.transpose(1, 2), qs), tiles.hkv)
            _scatter_keys(dv, t, torch.bmm(p.transpose(1, 2), dzt), tiles.hkv)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def _scatter_keys(dst, t: _Tile, value, hkv: int):
    """Add a tile's (b*Hkv, S, D) key gradient into dst (B, Hkv, Nk, D) at its key ranges."""
    value = value.view(t.b1 - t.b0, hkv, *value.shape[1:])
    start = 0
    for a, b in t.ranges:
        dst[t.b0:t.b1, :, a:b] += value[:, :, start:start + b - a]
        start += b - a
