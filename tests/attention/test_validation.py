"""Inputs at the edges (issue 14): float and integer padding masks, infinite sinks, impossible sizes."""

import pytest
import torch

from sinkflex_lib.attention import SinkMask, sink_attention
from sinkflex_lib.attention.explicit import explicit_sink_attention

BACKENDS = ("eager", "blocked", "flex")


def inputs(b=2, hq=4, hkv=2, n=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g) for h in (hq, hkv, hkv))


# row 1 starts with two pads: its first two queries see no key
REAL = torch.tensor([[True] * 6, [False, False, True, True, False, True]])


def attend(backend, *args, **kwargs):
    with torch.no_grad():  # flex runs forward only on the CPU
        return sink_attention(*args, backend=backend, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_padding_mask_is_additive(backend):
    q, k, v = inputs()
    additive = torch.zeros(REAL.shape).masked_fill(~REAL, float("-inf"))
    want = attend(backend, q, k, v, torch.zeros(4), window=3, key_padding_mask=REAL)
    for mask in (additive, REAL.long()):
        torch.testing.assert_close(attend(backend, q, k, v, torch.zeros(4), window=3, key_padding_mask=mask), want)


def test_explicit_reference_reads_masks_the_same_way():
    q, k, v = inputs()
    additive = torch.zeros(REAL.shape).masked_fill(~REAL, float("-inf"))
    torch.testing.assert_close(explicit_sink_attention(q, k, v, torch.zeros(4), key_padding_mask=additive),
                               explicit_sink_attention(q, k, v, torch.zeros(4), key_padding_mask=REAL))


@pytest.mark.parametrize("values", [(1.0, 0.0), (0.0, -1e9)])
def test_float_mask_of_other_values_is_refused(values):
    q, k, v = inputs()
    mask = torch.where(REAL, *values)
    with pytest.raises(ValueError, match="key_padding_mask.*additive"):
        sink_attention(q, k, v, key_padding_mask=mask)


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_sinks_give_their_limit_on_every_backend(backend):
    q, k, v = inputs()
    inf = torch.tensor([float("inf"), float("-inf"), float("inf"), float("-inf")])
    out = attend(backend, q, k, v, inf, key_padding_mask=REAL)
    plain = attend(backend, q, k, v, None, key_padding_mask=REAL)
    assert torch.isfinite(out).all()
    assert (out[:, 0::2] == 0).all()                           # +inf: the sink takes everything
    torch.testing.assert_close(out[:, 1::2], plain[:, 1::2])   # -inf: no sink (rows seeing nothing: 0)
    torch.testing.assert_close(out, explicit_sink_attention(q, k, v, inf, key_padding_mask=REAL))


@pytest.mark.parametrize("backend", ("eager", "blocked"))
def test_infinite_sinks_have_finite_gradients(backend):
    q, k, v = (t.requires_grad_() for t in inputs())
    sinks = torch.tensor([float("inf"), float("-inf"), 0.0, 1.0], requires_grad=True)
    sink_attention(q, k, v, sinks, backend=backend, key_padding_mask=REAL).square().sum().backward()
    for t in (q, k, v, sinks):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("shape,match", [
    (dict(d=0), "head dim D"), (dict(hkv=0), "KV head count Hkv"), (dict(hq=0, hkv=1), "head count Hq"),
    (dict(b=0), "batch size B"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_impossible_sizes_are_value_errors_naming_the_size(shape, match, backend):
    with pytest.raises(ValueError, match=match):
        attend(backend, *inputs(**shape))


@pytest.mark.parametrize("kwargs,match", [
    (dict(window=2**63), "window"), (dict(window=2**70), "window"), (dict(prefix=2**64), "prefix"),
    (dict(window=float("inf")), "window"), (dict(window=float("nan")), "window"),
    (dict(window=[4]), "window"), (dict(prefix=None), "prefix"), (dict(tile=0), "tile"),
    (dict(tile=2.5), "tile"),
])
def test_out_of_range_arguments_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sink_attention(*inputs(), backend="blocked", **kwargs)


def test_the_largest_window_and_prefix_work():
    q, k, v = inputs()
    big = 2**63 - 1
    torch.testing.assert_close(sink_attention(q, k, v, window=big, prefix=big, backend="blocked"),
                               sink_attention(q, k, v, backend="blocked"))
    assert SinkMask(window=big).dense(3, 3).tolist() == SinkMask().dense(3, 3).tolist()
