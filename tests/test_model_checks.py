"""model_checks: the comparison is zero for a model against itself, small for sinkflex against
eager, and it notices an attention that differs in one respect (no window, or no padding mask)."""

import math

import pytest
import torch

from sinkflex_lib.model_checks import compare_attention_implementations, greedy_generate_match, padded_batch


def test_padded_batch():
    ids, mask = padded_batch([5, 3, 2], 5, 100, ["left", "left", "right"], seed=1)
    assert mask.tolist() == [[1] * 5, [0, 0, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert bool((ids[mask == 0] == 0).all()) and bool((ids[mask == 1] > 0).all())
    with pytest.raises(ValueError, match="side"):
        padded_batch([2], 4, 10, ["middle"])
    with pytest.raises(ValueError, match="lengths"):
        padded_batch([5], 4, 10, ["left"])


def test_self_comparison_is_exact():
    ids, mask = padded_batch([24, 17], 24, 256, ["left", "right"])
    r = compare_attention_implementations("eager", "eager", input_ids=ids, attention_mask=mask)
    assert r["logits_rel_err"] == 0.0 and r["grad_rel_err"] == 0.0 and r["n_params"] > 10


def test_sinkflex_blocked_matches_eager():
    ids, mask = padded_batch([40, 29], 40, 256, ["left", "right"])
    r = compare_attention_implementations("sinkflex-blocked", "eager", input_ids=ids, attention_mask=mask)
    assert r["logits_rel_err"] < 1e-5 and r["grad_rel_err"] < 1e-4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's backward needs CUDA")
def test_sinkflex_flex_gradients_match_eager_on_cuda():
    ids, mask = padded_batch([40, 29], 40, 256, ["left", "right"])
    r = compare_attention_implementations("sinkflex-flex", "eager", input_ids=ids, attention_mask=mask, device="cuda")
    assert r["logits_rel_err"] < 1e-4 and r["grad_rel_err"] < 1e-4


def _register_variant(name, drop):
    """sinkflex attention registered under AttentionInterface with one argument dropped."""
    from transformers import AttentionInterface

    from sinkflex_lib.attention import sinkflex_attention_forward

    def variant(module, q, k, v, attention_mask, **kw):
        kept = {n: kw[n] for n in ("scaling", "s_aux", "sliding_window") if n in kw and n != drop}
        return sinkflex_attention_forward(module, q, k, v, None if drop == "mask" else attention_mask,
                                          backend="blocked", **kept)

    AttentionInterface.register(name, variant)


@pytest.mark.parametrize("drop, lengths", [("sliding_window", [20, 20]), ("mask", [20, 13])])
def test_detects_a_different_attention(drop, lengths):
    """The check sees a model whose attention differs in one respect: no sliding window (a batch
    longer than the micro config's window of 16, no padding), or no padding mask (a left-padded
    row whose real tokens then attend to the pads)."""
    _register_variant(f"test-no-{drop}", drop)
    ids, mask = padded_batch(lengths, 20, 256, ["left", "left"])
    same = compare_attention_implementations("sinkflex-blocked", "eager", input_ids=ids, attention_mask=mask,
                                             with_grad=False)
    r = compare_attention_implementations(f"test-no-{drop}", "eager", input_ids=ids, attention_mask=mask,
                                          with_grad=False)
    assert same["logits_rel_err"] < 1e-5
    assert r["logits_rel_err"] > 1e-2 and math.isnan(r["grad_rel_err"])


def test_greedy_generate_match():
    ids, mask = padded_batch([12, 7], 12, 256, ["left", "left"])
    same, a, b = greedy_generate_match("sinkflex-blocked", input_ids=ids, attention_mask=mask, max_new_tokens=5)
    assert same and a.shape == (2, 5) and torch.equal(a, b)
