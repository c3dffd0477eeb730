"""The blocked backend's custom autograd Function: gradcheck, and tile size invariance."""

import pytest
import torch

from sinkflex_lib.attention import sink_attention
from sinkflex_lib.attention.blocked import blocked_attention
from sinkflex_lib.attention.mask import SinkMask


@pytest.mark.parametrize("window,prefix,n_q,n_k,tile", [
    (None, 0, 9, 9, 4), (3, 2, 10, 10, 4), (4, 0, 5, 12, 2), (1, 1, 6, 6, 3)])
def test_gradcheck_sink_attention_blocked(window, prefix, n_q, n_k, tile):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, n_q, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 2, n_k, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 2, n_k, 8, dtype=torch.float64, generator=g, requires_grad=True)
    s = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)

    def f(q, k, v, s):
        out, lse = sink_attention(q, k, v, s, window=window, prefix=prefix, backend="blocked",
                                  tile=tile, return_lse=True)
        return out, lse

    assert torch.autograd.gradcheck(f, (q, k, v, s), eps=1e-6, atol=1e-7)


def test_gradcheck_with_key_padding():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 2, 7, 4, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 1, 7, 4, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 1, 7, 4, dtype=torch.float64, generator=g, requires_grad=True)
    kpm = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)

    def f(q, k, v):
        z, lse = blocked_attention(q, k, v, SinkMask(window=3), 0.5, key_padding_mask=kpm, tile=3)
        return z, lse.masked_fill(torch.isinf(lse), 0.0)  # rows that see no key: lse = -inf

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7)


def test_tile_size_does_not_change_the_result():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 50, 16, dtype=torch.float64, generator=g)
    k = torch.randn(1, 4, 50, 16, dtype=torch.float64, generator=g)
    v = torch.randn(1, 4, 50, 16, dtype=torch.float64, generator=g)
    s = torch.randn(4, dtype=torch.float64, generator=g)
    outs = [sink_attention(q, k, v, s, window=8, prefix=3, backend="blocked", tile=t) for t in (1, 7, 64)]
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], rtol=1e-13, atol=1e-13)


def test_bf16_within_reference_tolerance():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 4, 64, 16, generator=g) for _ in range(3))
    s = torch.randn(4, generator=g)
    ref = sink_attention(q.double(), k.double(), v.double(), s.double(), window=16, backend="eager")
    out = sink_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), s.bfloat16(), window=16, backend="blocked")
    assert out.dtype == torch.bfloat16
    rel = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert rel < 1e-2
