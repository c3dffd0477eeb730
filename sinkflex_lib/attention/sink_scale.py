"""The zero-value sink as an output scale (paper eqs. 8-10 and 15-18).

With a learned per-head sink logit s whose value vector is zero,

    O_sink = sigmoid(l - s) * O_std,    l = log sum_k exp(q . k)  (visible keys only).

`sink_scale(z, lse, sinks)` applies that scale with a hand-written backward:

    dz = dz' * a;   da = sum_j dz'_j z_j;   dl = da * a(1 - a);   ds = -sum_{b,t} da * a(1 - a)

where a = sigmoid(l - s) and a(1 - a) is computed as sigmoid(x) * sigmoid(-x), which keeps its
full relative precision for |l - s| up to the dtype's range (1 - a would cancel).
"""

from __future__ import annotations

import torch


class _SinkScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, lse, sinks):
        x = lse - finite_sinks(sinks, lse.dtype)[None, :, None]
        out = z * torch.sigmoid(x).unsqueeze(-1).to(z.dtype)
        ctx.save_for_backward(z, x)
        ctx.sinks_dtype = sinks.dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        z, x = ctx.saved_tensors
        a = torch.sigmoid(x)
        a_one_minus_a = a * torch.sigmoid(-x)
        dz = dout * a.unsqueeze(-1).to(dout.dtype)
        da = torch.einsum("bhnd,bhnd->bhn", dout.to(x.dtype), z.to(x.dtype))
        g = da * a_one_minus_a
        ds = -g.sum(dim=(0, 2)).to(ctx.sinks_dtype)
        return dz, g, ds


def finite_sinks(sinks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`sinks` in `dtype` with +-inf clamped to the largest finite value (NaN stays NaN). The
    result is then the limit: a +inf sink takes all the attention (output 0), a -inf sink none,
    and a row that sees no key still gives 0 (not inf - inf = NaN)."""
    big = torch.finfo(dtype).max
    return sinks.to(dtype).clamp(-big, big)


def sink_scale(z: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Scale attention output z (B, H, N, D) by sigmoid(lse - sinks).

    lse: (B, H, N) float32 or float64 log-sum-exp over visible keys (-inf for rows that see
    no key: their output is 0). sinks: (H,) logits. Returns a tensor like z.
    """
    return _SinkScale.apply(z, lse, sinks)
