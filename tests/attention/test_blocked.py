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


def _decode_case(seed, b=3, hq=4, hkv=2, n_q=1, n_k=40, d=8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, n_q, d, dtype=torch.float64, generator=g)
    k, v = (torch.randn(b, hkv, n_k, d, dtype=torch.float64, generator=g) for _ in range(2))
    kpm = torch.rand(b, n_k, generator=g) > 0.3      # pads anywhere, as a decode loop leaves them
    kpm[0, :5] = False                               # one row starts with left pads
    kpm[:, -n_q:] = True                             # the queries themselves are real tokens
    return q, k, v, kpm, torch.randn(hq, dtype=torch.float64, generator=g)


@pytest.mark.parametrize("window,prefix,n_q", [(None, 0, 1), (6, 0, 1), (6, 3, 2), (1, 0, 3), (100, 0, 1)])
def test_no_grad_one_tile_matches_reference_and_tiles(window, prefix, n_q):
    """Without autograd a small score matrix takes the one-tile path (decode steps); it must agree
    with the independent reference and with the tiled autograd path, pads, window and prefix included."""
    from tests.attention.reference import reference_attention

    q, k, v, kpm, s = _decode_case(5, n_q=n_q)
    with torch.no_grad():
        out, lse = sink_attention(q, k, v, s, window=window, prefix=prefix, backend="blocked",
                                  key_padding_mask=kpm, return_lse=True)
    ref, ref_lse = reference_attention(q, k, v, s, window=window, prefix=prefix, key_padding_mask=kpm)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-12, atol=1e-12)
    tiled = sink_attention(q.requires_grad_(), k, v, s, window=window, prefix=prefix, backend="blocked",
                           key_padding_mask=kpm, tile=1)
    torch.testing.assert_close(out, tiled.detach(), rtol=1e-12, atol=1e-12)


def test_no_grad_one_tile_row_that_sees_nothing_and_bf16():
    q, k, v, kpm, s = _decode_case(6)
    kpm[1] = False                                   # a row of pads only: z = 0, lse = -inf
    with torch.no_grad():
        z, lse = blocked_attention(q, k, v, SinkMask(window=4), 0.5, key_padding_mask=kpm)
        zb, _ = blocked_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), SinkMask(window=4), 0.5,
                                  key_padding_mask=kpm)
    assert torch.equal(z[1], torch.zeros_like(z[1])) and bool(torch.isneginf(lse[1]).all())
    assert zb.dtype == torch.bfloat16
    assert ((zb.double() - z).abs().max() / z.abs().max()).item() < 1e-2
