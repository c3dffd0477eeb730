"""explicit_sink_attention (the sink as a zero-value column) against the independent float64
reference of tests/attention/reference.py, and sink_mass against the column's probability."""

import itertools

import pytest
import torch

from sinkflex_lib.attention.explicit import explicit_sink_attention, sink_mass, visible_keys
from tests.attention.reference import reference_attention, reference_mask

CASES = list(itertools.product([None, 1, 5], [0, 3], ["none", "small", "large"], [(4, 4), (8, 2)]))


def inputs(seed, b=2, hq=4, hkv=4, n_q=9, n_k=13, d=8, sink_kind="small"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(b, hkv, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(b, hkv, n_k, d, generator=g, dtype=torch.float64)
    sinks = {"none": None, "small": 0.5 * torch.randn(hq, generator=g, dtype=torch.float64),
             "large": torch.linspace(-30.0, 30.0, hq, dtype=torch.float64)}[sink_kind]
    return q, k, v, sinks


@pytest.mark.parametrize("window,prefix,sink_kind,heads", CASES)
def test_matches_reference(window, prefix, sink_kind, heads):
    q, k, v, sinks = inputs(1, hq=heads[0], hkv=heads[1], sink_kind=sink_kind)
    out = explicit_sink_attention(q, k, v, sinks, window=window, prefix=prefix)
    ref, _ = reference_attention(q, k, v, sinks, window=window, prefix=prefix)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_padding_matches_reference():
    q, k, v, sinks = inputs(2)
    kpm = torch.ones(2, 13, dtype=torch.bool)
    kpm[1, :4] = False
    out = explicit_sink_attention(q, k, v, sinks, window=5, prefix=2, key_padding_mask=kpm)
    ref, _ = reference_attention(q, k, v, sinks, window=5, prefix=2, key_padding_mask=kpm)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_sink_column_probability_is_sink_mass():
    q, k, v, sinks = inputs(3, sink_kind="large")
    out, probs = explicit_sink_attention(q, k, v, sinks, window=4, prefix=1, return_probs=True)
    _, lse = reference_attention(q, k, v, sinks, window=4, prefix=1)
    assert probs.shape == (2, 4, 9, 14)
    torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs[..., 0]), rtol=0, atol=1e-14)
    torch.testing.assert_close(probs[..., 0], sink_mass(lse, sinks), rtol=1e-12, atol=1e-300)
    # mass of the sink plus the eq. 10 scale is one
    torch.testing.assert_close(sink_mass(lse, sinks) + torch.sigmoid(lse - sinks[None, :, None]),
                               torch.ones_like(lse), rtol=0, atol=1e-15)


def test_zero_value_identity_figure3():
    """eq. 10: the explicit column equals the plain softmax output scaled by sigmoid(l - s)."""
    q, k, v, sinks = inputs(4)
    with_sink = explicit_sink_attention(q, k, v, sinks, window=5)
    plain = explicit_sink_attention(q, k, v, None, window=5)
    _, lse = reference_attention(q, k, v, None, window=5)
    torch.testing.assert_close(with_sink, plain * torch.sigmoid(lse - sinks[None, :, None])[..., None],
                               rtol=1e-12, atol=1e-14)


def test_row_without_keys_gives_zero_without_sink():
    q, k, v, _ = inputs(5, b=1, n_q=3, n_k=3)
    kpm = torch.tensor([[False, True, True]])
    out = explicit_sink_attention(q, k, v, None, key_padding_mask=kpm)
    assert torch.all(out[:, :, 0] == 0) and torch.isfinite(out).all()


def test_visible_keys_matches_reference_mask():
    for n_q, n_k, w, p in [(5, 5, None, 0), (3, 11, 4, 2), (11, 11, 1, 0), (7, 20, 6, 9)]:
        assert torch.equal(visible_keys(n_q, n_k, w, p), reference_mask(n_q, n_k, w, p))


@pytest.mark.parametrize("kwargs,match", [
    (dict(hkv=3), "Hq"), (dict(n_q=14), "Nq")])
def test_bad_shapes_raise(kwargs, match):
    q, k, v, sinks = inputs(6, **kwargs) if "hkv" not in kwargs else inputs(6, hq=4, hkv=3)
    with pytest.raises(ValueError, match=match):
        explicit_sink_attention(q, k, v, sinks)


def test_bad_sinks_shape_raises():
    q, k, v, _ = inputs(7)
    with pytest.raises(ValueError, match="sinks"):
        explicit_sink_attention(q, k, v, torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("window,prefix", [(None, 0), (1, 0), (5, 3), (30, 0)])
def test_sink_as_token_equals_sink_attention(window, prefix):
    """The sink as a real KV row (one extra feature, prefix + 1), run as plain attention by the
    library's blocked backend, equals the independent reference with the sink."""
    from sinkflex_lib.attention import sink_attention
    from sinkflex_lib.attention.explicit import sink_as_token

    q, k, v, sinks = inputs(8, hq=8, hkv=2, sink_kind="large")
    tok = sink_as_token(q, k, v, sinks, window=window, prefix=prefix)
    assert tok.k.shape == (2, 2, 14, 9) and tok.prefix == prefix + 1
    out = sink_attention(tok.q, tok.k, tok.v, None, window=tok.window, prefix=tok.prefix,
                         scale=tok.scale, backend="blocked")
    ref, _ = reference_attention(q, k, v, sinks, window=window, prefix=prefix)
    torch.testing.assert_close(out[..., :tok.head_dim], ref, rtol=1e-12, atol=1e-12)
    assert torch.all(out[..., tok.head_dim:] == 0)


def test_sink_as_token_needs_sinks():
    from sinkflex_lib.attention.explicit import sink_as_token

    q, k, v, _ = inputs(9)
    with pytest.raises(ValueError, match="sinks"):
        sink_as_token(q, k, v, None)
