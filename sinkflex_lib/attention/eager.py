"""The eager reference: materialize the scores and concatenate the sink column.

This is what gpt-oss's eager path does (Hugging Face `eager_attention_forward`): scores of
shape (B, Hq, Nq, Nk), one extra column holding the sink logit, a softmax over Nk + 1
entries, and the sink column dropped before multiplying by V (its value vector is zero).
Memory is O(B * Hq * Nq * Nk): the baseline the other backends are measured against.
"""

from __future__ import annotations

import torch

from .mask import SinkMask
from .sink_scale import finite_sinks


def eager_attention(q, k, v, sinks, mask: SinkMask, scale: float, key_padding_mask=None):
    """Returns (out (B, Hq, Nq, D) in q's dtype, lse (B, Hq, Nq) in float32/float64).

    Shapes are checked by `sink_attention`; see there.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if key_padding_mask is None:
        visible = mask.dense(n_q, n_k, device=q.device)[None, None]
    else:  # the window counts real keys (`SinkMask.positions`)
        pos = mask.positions(key_padding_mask)
        t = torch.arange(n_k - n_q, n_k, device=q.device)[:, None]
        j = torch.arange(n_k, device=q.device)[None, :]
        visible = mask.visible(t, j, pos[:, n_k - n_q:, None], pos[:, None, :])
        visible = (visible & key_padding_mask[:, None, :])[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores.to(_stat_dtype(q)), dim=-1)
    if sinks is not None:
        sink_col = finite_sinks(sinks, scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        combined = torch.cat([scores, sink_col], dim=-1)
        combined = combined - combined.amax(dim=-1, keepdim=True)
        probs = torch.softmax(combined, dim=-1)[..., :-1]
    else:
        empty = ~visible.any(-1, keepdim=True)  # rows that see no key (padding only): output 0
        probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return torch.matmul(probs.to(v.dtype), v), lse


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32
