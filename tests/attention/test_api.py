"""Argument checking of sink_attention: every bad input names its argument."""

import pytest
import torch

from sinkflex_lib.attention import resolve_backend, sink_attention


def tensors(b=1, hq=4, hkv=2, nq=5, nk=5, d=8):
    return torch.randn(b, hq, nq, d), torch.randn(b, hkv, nk, d), torch.randn(b, hkv, nk, d)


@pytest.mark.parametrize("make,kwargs,match", [
    (lambda: (torch.randn(4, 5, 8),) + tensors()[1:], {}, "q must be a 4-D tensor"),
    (lambda: tensors(hq=3, hkv=2), {}, "multiple of"),
    (lambda: tensors(nq=6, nk=5), {}, "Nq=6 must be <= "),
    (lambda: tensors(), dict(window=0), "window"),
    (lambda: tensors(), dict(prefix=-1), "prefix"),
    (lambda: tensors(), dict(backend="cuda-magic"), "backend must be one of"),
    (lambda: tensors(), dict(sinks=torch.zeros(3)), r"sinks must be a tensor of shape \(Hq,\)"),
    (lambda: tensors(), dict(scale=-1.0), "scale"),
    (lambda: tensors(), dict(key_padding_mask=torch.ones(1, 4, dtype=torch.bool)), "key_padding_mask"),
    (lambda: (lambda q, k, v: (q, k, v[..., :4]))(*tensors()), {}, "same shape"),
    (lambda: (lambda q, k, v: (q, k.double(), v.double()))(*tensors()), {}, "share a dtype"),
])
def test_bad_input_raises_value_error_naming_the_argument(make, kwargs, match):
    q, k, v = make()
    sinks = kwargs.pop("sinks", None)
    with pytest.raises(ValueError, match=match):
        sink_attention(q, k, v, sinks, **kwargs)


def test_auto_backend():
    assert resolve_backend("auto", "cpu") == "blocked"
    assert resolve_backend("auto", "cuda") == "flex"


def test_flex_backward_on_cpu_is_refused_clearly():
    q, k, v = (t.requires_grad_() for t in tensors())
    with pytest.raises(NotImplementedError, match="backend='blocked'"):
        sink_attention(q, k, v, backend="flex")


def test_decoding_against_a_cache_uses_the_last_key_positions():
    """One query against Nk keys equals the last row of the full computation."""
    q, k, v = tensors(nq=12, nk=12)
    s = torch.randn(4)
    full = sink_attention(q, k, v, s, window=4, backend="eager")
    for backend in ("eager", "blocked", "flex"):
        with torch.no_grad():
            last = sink_attention(q[:, :, -1:], k, v, s, window=4, backend=backend)
        torch.testing.assert_close(last, full[:, :, -1:], rtol=1e-5, atol=1e-6)
