"""FlexAttention training path: needs CUDA (FlexAttention has no CPU backward)."""

import pytest
import torch

from sinkflex_lib.attention import sink_attention

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype,out_tol,grad_tol", [(torch.float32, 1e-5, 1e-4), (torch.bfloat16, 1e-2, 2e-2)])
@pytest.mark.parametrize("window,prefix", [(None, 0), (128, 0), (128, 4)])
def test_flex_forward_and_backward_match_blocked_float64(dtype, out_tol, grad_tol, window, prefix):
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 8, 1025, 64), (2, 2, 1025, 64), (2, 2, 1025, 64)]
    base = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
    sinks = torch.linspace(-8.0, 8.0, 8, dtype=torch.float64)
    grad_out = torch.randn(2, 8, 1025, 64, generator=g, dtype=torch.float64)

    ref_in = [t.clone().requires_grad_() for t in base + [sinks]]
    ref = sink_attention(*ref_in[:3], ref_in[3], window=window, prefix=prefix, backend="blocked")
    ref_grads = torch.autograd.grad(ref, ref_in, grad_out)

    dev_in = [t.to("cuda", dtype).requires_grad_() for t in base + [sinks]]
    out = sink_attention(*dev_in[:3], dev_in[3], window=window, prefix=prefix, backend="flex")
    grads = torch.autograd.grad(out, dev_in, grad_out.to("cuda", dtype))

    def rel(a, b):
        return ((a.double().cpu() - b).abs().max() / b.abs().max()).item()

    assert rel(out, ref) < out_tol
    for got, want in zip(grads, ref_grads):
        assert rel(got, want) < grad_tol
