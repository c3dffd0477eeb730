"""FlexAttention backend: block-sparse fused attention that also returns the LSE.

`flex_attention(q, k, v, block_mask=SinkMask.block_mask(...), return_aux=AuxRequest(lse=True))`
gives z and l; the sink is then applied as an output scale (`sink_scale`). On CUDA the
FlexAttention call is wrapped in torch.compile (`compile_flex`: automatic dynamic shapes, head
dims under 16 zero-padded, short queries with many rows per KV head on the standard kernel);
the LSE stays in float32.

Platform facts (torch 2.13): on the CPU, FlexAttention has no backward ("FlexAttention does
not support backward on CPU"); uncompiled, it runs forward and returns the LSE. So on the CPU
this backend serves forward checks and the blocked backend trains.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask
from torch.nn.attention.flex_attention import flex_attention as _flex_attention

from .mask import SinkMask


MIN_HEAD_DIM = 16          # the Triton kernels' least head dim (tl.dot); smaller ones are zero-padded
RECOMPILE_LIMIT = 64       # dynamo's compiled variants of the flex call kept before it falls back


def compile_flex(backend="inductor"):
    """flex_attention under torch.compile with automatic dynamic shapes (torch's default): a
    rollout calls it with a new key length every decode step and new batch and query sizes every
    turn. Compiled static (dynamic=False), every call compiled anew up to dynamo's limit of 8
    variants, then ran unfused, with whole score matrices (seen on an H200, torch 2.11).
    Automatically dynamic, the variants stay few and stop growing (on the CPU, a rollout-like
    run compiles 16, the same after 66 calls as after 192: two windows, sizes of one specialised;
    tests/attention/test_flex_compile.py), so dynamo's limit is raised above that."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(_flex_attention, backend=backend)


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    return compile_flex()


def pad_head_dim(t: torch.Tensor, d: int) -> torch.Tensor:
    """t (..., D) zero-padded to (..., d) when D < d. Zero features leave every q.k score, so the
    attention weights and the log-sum-exp, unchanged (the scale is passed explicitly), and add
    zero output features, sliced off after."""
    return torch.nn.functional.pad(t, (0, d - t.shape[-1])) if t.shape[-1] < d else t


def kernel_options(n_q: int, group: int) -> dict:
    """FlexAttention's kernel options for `n_q` queries, `group` query heads per KV head.

    For queries shorter than 128, inductor picks its flex-decoding kernel, which puts the
    n_q * group query rows of a KV head in one block of next_power_of_2(n_q * group) rows; above
    the 128-row sparse block no kernel config remains (NoValidChoicesError: seen on an H200, torch
    2.11, prefilling 106 queries with gpt-oss's 8 query heads per KV head). Such calls take the
    standard Triton kernel; single-token decoding (8 rows) keeps the decoding kernel."""
    return {"BACKEND": "TRITON"} if n_q * group > 128 else {}


def flex_block_mask(mask: SinkMask, n_q: int, n_k: int, device, key_padding_mask=None):
    """The BlockMask for `mask`; broadcast over batch and heads (B=None, H=None) unless a key
    padding mask (B, Nk) makes it batch-dependent, in which case B is the batch size (and the
    window counts real keys, `SinkMask.positions`)."""
    if key_padding_mask is None:
        return mask.block_mask(n_q, n_k, device=device)
    offset = n_k - n_q
    kpm, pos = key_padding_mask, mask.positions(key_padding_mask)

    def padded_mask_mod(b, h, q_idx, kv_idx):
        t = q_idx + offset
        return mask.visible(t, kv_idx, pos[b, t], pos[b, kv_idx]) & kpm[b, kv_idx]

    return create_block_mask(padded_mask_mod, B=kpm.shape[0], H=None, Q_LEN=n_q, KV_LEN=n_k,
                             device=device)


def flex_attention(q, k, v, mask: SinkMask, scale: float, key_padding_mask=None):
    """Returns (z (B, Hq, Nq, D) in q's dtype, lse (B, Hq, Nq) float32, float64 for float64 q).

    Rows that see no key give z = 0 and lse = -inf.
    """
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and q.device.type != "cuda":
        raise NotImplementedError(
            "backend='flex' has no backward off CUDA (FlexAttention's CPU path is forward-only); "
            "use backend='blocked' to train on the CPU, or run under torch.no_grad()")
    if q.device.type != "cuda":  # FlexAttention checks requires_grad even under no_grad
        q, k, v = q.detach(), k.detach(), v.detach()
    n_q, n_k = q.shape[-2], k.shape[-2]
    block_mask = flex_block_mask(mask, n_q, n_k, q.device, key_padding_mask)
    kwargs = dict(block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                  return_aux=AuxRequest(lse=True))
    if q.device.type == "cuda":
        options = kernel_options(n_q, q.shape[1] // k.shape[1])
        d_v = v.shape[-1]
        q, k, v = (pad_head_dim(t, MIN_HEAD_DIM) for t in (q, k, v))
        z, aux = _compiled_flex()(q, k, v, **kwargs, **({"kernel_options": options} if options else {}))
        z = z[..., :d_v]
    else:  # the unfused CPU reference warns that it is unfused: known, and only for checks
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            z, aux = _flex_attention(q, k, v, **kwargs)
    lse = aux.lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
    return z, lse
