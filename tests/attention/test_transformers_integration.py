"""The micro gpt-oss with "sinkflex" attention against transformers' own eager gpt-oss path."""

import pytest
import torch
import torch.nn.functional as F

from sinkflex_lib.attention import register_transformers
from sinkflex_lib.attention.transformers_integration import sinkflex_padding_mask
from sinkflex_lib.models import build_gpt_oss, set_attention


def padded_batch(vocab, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, n), generator=g)
    attention_mask = torch.ones(2, n, dtype=torch.long)
    attention_mask[0, :9] = 0  # left padding
    attention_mask[1, -6:] = 0  # right padding
    return ids, attention_mask


def loss_and_grads(model, ids, attention_mask):
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=attention_mask).logits
    keep = attention_mask[:, 1:].bool()
    loss = F.cross_entropy(logits[:, :-1][keep], ids[:, 1:][keep])
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("impl", ["sinkflex", "sinkflex-blocked", "sinkflex-eager"])
def test_logits_and_every_gradient_match_eager(impl):
    model = build_gpt_oss("micro", attn_implementation="eager", seed=0)
    ids, am = padded_batch(model.config.vocab_size)
    ref_logits, ref_grads = loss_and_grads(model, ids, am)
    set_attention(model, impl)
    logits, grads = loss_and_grads(model, ids, am)
    valid = am.bool()
    assert rel(logits[valid], ref_logits[valid]) < 1e-4
    assert grads.keys() == ref_grads.keys()
    assert any("sinks" in n for n in grads)
    for name in ref_grads:
        assert rel(grads[name], ref_grads[name]) < 1e-4, name


def test_without_our_mask_function_the_padding_would_be_lost():
    """The reason register_transformers registers a mask function too: with attention-only
    registration transformers passes attention_mask=None and logits silently change."""
    from transformers import AttentionInterface
    from sinkflex_lib.attention.transformers_integration import sinkflex_attention_forward

    AttentionInterface.register("sinkflex-no-mask", sinkflex_attention_forward)
    model = build_gpt_oss("micro", attn_implementation="eager", seed=0)
    ids, am = padded_batch(model.config.vocab_size)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=am).logits
        model.set_attn_implementation("sinkflex-no-mask")
        wrong = model(input_ids=ids, attention_mask=am).logits
    valid = am.bool()
    assert rel(wrong[valid], ref[valid]) > 1e-2


def test_greedy_generate_gives_the_same_tokens():
    model = build_gpt_oss("micro", attn_implementation="eager", seed=1)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 30), generator=g)
    am = torch.ones_like(ids)
    am[0, :7] = 0  # generate() pads on the left
    kwargs = dict(input_ids=ids, attention_mask=am, max_new_tokens=24, do_sample=False)
    ref = model.generate(**kwargs)  # 54 tokens > the tiny preset's sliding window of 16
    set_attention(model, "sinkflex")
    out = model.generate(**kwargs)
    assert torch.equal(out, ref)


def test_padding_mask_function_slices_the_cache_window():
    am = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    assert sinkflex_padding_mask(2, 6, 6, attention_mask=am).tolist() == am.bool().tolist()
    # a sliding cache holding keys 3..5 for the query at position 5
    assert sinkflex_padding_mask(2, 1, 3, q_offset=5, kv_offset=3, attention_mask=am) is None
    assert sinkflex_padding_mask(2, 6, 6, attention_mask=torch.ones(2, 6)) is None
    with pytest.raises(NotImplementedError, match="last keys of the cache"):
        sinkflex_padding_mask(2, 1, 8, q_offset=3, kv_offset=0, attention_mask=am)


def test_register_checks_its_arguments():
    with pytest.raises(ValueError, match="backend"):
        register_transformers("x", backend="nope")
    with pytest.raises(ValueError, match="name"):
        register_transformers("")
