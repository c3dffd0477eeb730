"""An independent dense reference for sink attention, written apart from the library.

It materializes the explicit sink the way paper eq. 8 writes it: one extra key whose score is
the sink logit and whose value row is zero, then a plain softmax. The mask is spelled out
from the definition (j <= t and (t - j < window or j < prefix)), query i at t = Nk - Nq + i.
"""

import torch


def reference_mask(n_q, n_k, window, prefix):
    t = torch.arange(n_k - n_q, n_k).view(-1, 1).expand(n_q, n_k)
    j = torch.arange(n_k).view(1, -1).expand(n_q, n_k)
    allowed = j <= t
    if window is not None:
        allowed = allowed & ((t - j < window) | (j < prefix))
    return allowed


def reference_attention(q, k, v, sinks, window=None, prefix=0, key_padding_mask=None):
    """float64 dense attention with an explicit zero-value sink column; returns (out, lse)."""
    q, k, v = q.double(), k.double(), v.double()
    b, hq, n_q, d = q.shape
    group = hq // k.shape[1]
    k = torch.stack([k[:, h // group] for h in range(hq)], dim=1)
    v = torch.stack([v[:, h // group] for h in range(hq)], dim=1)
    n_k = k.shape[2]
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / d ** 0.5
    allowed = reference_mask(n_q, n_k, window, prefix).view(1, 1, n_q, n_k)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask.view(b, 1, 1, n_k)
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    if sinks is None:
        return torch.softmax(scores, dim=-1) @ v, lse
    sink_scores = sinks.double().view(1, hq, 1, 1).expand(b, hq, n_q, 1)
    zero_value = torch.zeros(b, hq, 1, d, dtype=torch.float64)
    probs = torch.softmax(torch.cat([scores, sink_scores], dim=-1), dim=-1)
    return probs @ torch.cat([v, zero_value], dim=2), lse
