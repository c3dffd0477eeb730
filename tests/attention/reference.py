"""An independent dense reference for sink attention, written apart from the library.

It materializes the explicit sink the way paper eq. 8 writes it: one extra key whose score is
the sink logit and whose value row is zero, then a plain softmax. The mask is spelled out
from the definition (j <= t and (p(t) - p(j) < window or p(j) < prefix)), query i at slot
t = Nk - Nq + i, where p(j) = j, or with a key padding mask the number of real keys among
slots 0..j minus one (pads do not advance positions).
"""

import torch


def reference_mask(n_q, n_k, window, prefix, real=None):
    """(n_q, n_k) allowed keys; real: optional (n_k,) bool row of the key padding mask."""
    pos = list(range(n_k)) if real is None else [int(real[:j + 1].sum()) - 1 for j in range(n_k)]
    allowed = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        t = n_k - n_q + i
        for j in range(t + 1):
            near = window is None or pos[t] - pos[j] < window or pos[j] < prefix
            allowed[i, j] = near and (real is None or bool(real[j]))
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
    if key_padding_mask is None:
        allowed = reference_mask(n_q, n_k, window, prefix).view(1, 1, n_q, n_k)
    else:
        allowed = torch.stack([reference_mask(n_q, n_k, window, prefix, real)
                               for real in key_padding_mask.cpu()]).view(b, 1, n_q, n_k)
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    if sinks is None:
        return torch.softmax(scores, dim=-1) @ v, lse
    sink_scores = sinks.double().view(1, hq, 1, 1).expand(b, hq, n_q, 1)
    zero_value = torch.zeros(b, hq, 1, d, dtype=torch.float64)
    probs = torch.softmax(torch.cat([scores, sink_scores], dim=-1), dim=-1)
    return probs @ torch.cat([v, zero_value], dim=2), lse
