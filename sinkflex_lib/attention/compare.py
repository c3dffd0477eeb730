"""Backends against a float64 reference: the forward and gradient error table.

`backend_errors(cases, backends, dtypes)` runs every backend of `sink_attention` in every dtype
on seeded random inputs and compares its output, LSE and the gradients of q, k, v and the sink
logits with the explicit-sink-column reference (`explicit_sink_attention`) computed in float64
from the same inputs. Errors are relative to the reference's largest entry: max|x - ref| /
max|ref|, per tensor. A backend that cannot differentiate on this device (flex off CUDA) gets
its forward errors and NaN gradient errors, with `grads=False` in its row.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from .api import sink_attention
from .explicit import explicit_sink_attention, visible_keys

DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
               torch.float16: "float16"}


@dataclass(frozen=True)
class AttentionCase:
    """One input shape for the error table. sink_range: sinks are linspace(-r, r, Hq)."""

    name: str
    b: int = 1
    hq: int = 4
    hkv: int = 4
    n_q: int = 128
    n_k: int = 128
    d: int = 16
    window: int | None = None
    prefix: int = 0
    sink_range: float | None = 2.0


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max|x - ref| / max|ref| in float64 (absolute error where ref is all zero)."""
    x, ref = x.detach().double(), ref.detach().double()
    # -inf LSE rows (no visible key) agree when both are -inf
    both_inf = torch.isinf(x) & torch.isinf(ref) & (torch.sign(x) == torch.sign(ref))
    diff = torch.where(both_inf, torch.zeros_like(x), x - ref).abs().max().item()
    finite = ref[torch.isfinite(ref)]
    scale = finite.abs().max().item() if finite.numel() else 0.0
    return diff / scale if scale > 0 else diff


def per_head_rel_err(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """`rel_err` of each head: x, ref (B, H, ...) -> (H,) float64."""
    return torch.tensor([rel_err(x[:, h], ref[:, h]) for h in range(ref.shape[1])], dtype=torch.float64)


def make_case_inputs(case: AttentionCase, seed: int = 0):
    """Seeded float64 (q, k, v, sinks, grad_out) for `case`."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(case.b, case.hq, case.n_q, case.d, generator=g, dtype=torch.float64)
    k = torch.randn(case.b, case.hkv, case.n_k, case.d, generator=g, dtype=torch.float64)
    v = torch.randn(case.b, case.hkv, case.n_k, case.d, generator=g, dtype=torch.float64)
    sinks = (None if case.sink_range is None
             else torch.linspace(-case.sink_range, case.sink_range, case.hq, dtype=torch.float64))
    grad_out = torch.randn(case.b, case.hq, case.n_q, case.d, generator=g, dtype=torch.float64)
    return q, k, v, sinks, grad_out


def _reference(case, q, k, v, sinks, grad_out):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    s = sinks.clone().requires_grad_() if sinks is not None else None
    out = explicit_sink_attention(*leaves, s, window=case.window, prefix=case.prefix)
    grads = torch.autograd.grad(out, leaves + ([s] if s is not None else []), grad_out)
    # the LSE over visible keys, from the same definition, in float64
    scores = torch.einsum("bhid,bhjd->bhij", q, k[:, torch.arange(case.hq) // (case.hq // case.hkv)])
    vis = visible_keys(case.n_q, case.n_k, case.window, case.prefix)
    lse = torch.logsumexp((scores * case.d ** -0.5).masked_fill(~vis, float("-inf")), dim=-1)
    return out.detach(), lse, grads


def backend_errors(cases, backends=("eager", "blocked", "flex"), dtypes=(torch.float64, torch.float32),
                   seed: int = 0, tile: int = 64, device: str = "cpu") -> list[dict]:
    """One row per (case, backend, dtype): the case's fields, `backend`, `dtype`, `grads`
    (whether gradients were checked: flex's backward needs CUDA) and the relative errors `out`,
    `lse`, `dq`, `dk`, `dv`, `dsinks` (NaN where not applicable). The backends run on `device`;
    the float64 reference runs on the CPU."""
    rows = []
    for ci, case in enumerate(cases):
        q, k, v, sinks, grad_out = make_case_inputs(case, seed=seed + ci)
        for dtype in dtypes:
            # the reference sees the same rounded inputs, so the table measures the kernel's
            # arithmetic, not the rounding of q, k, v, sinks and grad_out to `dtype`
            rounded = [t.to(dtype).double() if t is not None else None for t in (q, k, v, sinks, grad_out)]
            ref_out, ref_lse, ref_grads = _reference(case, *rounded)
            for backend in backends:
                can_grad = backend != "flex" or torch.device(device).type == "cuda"
                tensors = [t.to(device, dtype) for t in (q, k, v)]
                s = sinks.to(device, dtype) if sinks is not None else None
                leaves = tensors + ([s] if s is not None else [])
                if can_grad:
                    leaves = [t.requires_grad_() for t in leaves]
                    tensors, s = leaves[:3], (leaves[3] if s is not None else None)
                with torch.set_grad_enabled(can_grad):
                    out, lse = sink_attention(*tensors, s, window=case.window, prefix=case.prefix,
                                              backend=backend, return_lse=True, tile=tile)
                errs = dict(out=rel_err(out.cpu(), ref_out), lse=rel_err(lse.cpu(), ref_lse))
                names = ["dq", "dk", "dv"] + (["dsinks"] if s is not None else [])
                if can_grad:
                    grads = torch.autograd.grad(out, leaves, grad_out.to(out.device, out.dtype))
                    errs.update({n: rel_err(g.cpu(), r) for n, g, r in zip(names, grads, ref_grads)})
                for n in ("dq", "dk", "dv", "dsinks"):
                    errs.setdefault(n, math.nan)
                rows.append(dict(asdict(case), backend=backend, dtype=DTYPE_NAMES.get(dtype, str(dtype)),
                                 grads=can_grad, **errs))
    return rows
