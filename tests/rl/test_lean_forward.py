"""`LeanGptOss` against the model's own forward (transformers' GptOssForCausalLM on sinkflex)."""

import pytest
import torch

from sinkflex_lib.models import build_gpt_oss
from sinkflex_lib.rl import lean_forward
from sinkflex_lib.rl.kv_cache import RolloutCache
from sinkflex_lib.rl.lean_forward import LeanGptOss, supports

# (new tokens per row, fed) for a sequence of feeds: a prompt, decode steps, observations; the
# micro model's window is 16, so windows bite from the second feed on
FEEDS = [(40, [40, 23, 0, 9]), (1, [1, 0, 1, 1]), (1, [1, 1, 1, 0]), (12, [12, 5, 0, 1]), (1, [1, 1, 0, 1]),
         ("drop", None), (1, [1, 1, 1, 1]), (7, [7, 2, 3, 0]), (1, [0, 1, 1, 1])]


def _feeds(vocab: int, pad: int, seed: int = 0):
    """(ids, fed mask, position ids) per feed, left-padded as the rollout feeds them."""
    g = torch.Generator().manual_seed(seed)
    next_pos = torch.zeros(4, dtype=torch.long)
    for width, fed in FEEDS:
        if width == "drop":
            yield "drop", None, None
            continue
        lens = torch.tensor(fed)
        am = (torch.arange(width)[None] >= (width - lens)[:, None]).long()
        ids = torch.randint(3, vocab, (4, width), generator=g) * am + pad * (1 - am)
        pos = next_pos[:, None] + (am.cumsum(1) - 1).clamp(min=0)
        next_pos += lens
        yield ids, am, pos


def _compare(model, atol):
    """Feed both forwards the same tokens into two caches; the last slot's logits of every row
    (a pad's too) must agree after each feed, through a repacking of the caches' pad slots."""
    lean, ref_cache, lean_cache = LeanGptOss(model), RolloutCache(), RolloutCache()
    hist = torch.zeros(4, 0, dtype=torch.long)
    n_checked = 0
    for ids, am, pos in _feeds(model.config.vocab_size, pad=0):
        if isinstance(ids, str):
            lean_cache.drop_pad_slots(hist)
            hist = ref_cache.drop_pad_slots(hist)
            continue
        hist = torch.cat([hist, am], 1)
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=hist, position_ids=pos, cache=ref_cache, use_cache=True,
                         logits_to_keep=1).logits[:, -1]
        got = lean(ids, hist, pos, lean_cache)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=atol, rtol=0)
        n_checked += 1
    assert n_checked == len(FEEDS) - 1


def test_logits_equal_the_models_forward():
    # float32 only: transformers' expert kernel (torch._grouped_mm) refuses float64 on the CPU
    model = build_gpt_oss("micro", attn_implementation="sinkflex", seed=1).eval()
    _compare(model, atol=1e-5)


def test_query_chunks_and_both_expert_forms_change_nothing(monkeypatch):
    """A score budget small enough to cut every row of a feed into query chunks, and the model's
    own expert module in place of the dense form (and the dense form for every feed)."""
    model = build_gpt_oss("micro", attn_implementation="sinkflex", seed=2).eval()
    monkeypatch.setattr(lean_forward, "SCORE_BUDGET", 64)
    for dense_up_to in (0, 10_000):
        monkeypatch.setattr(lean_forward, "DENSE_EXPERT_TOKENS", dense_up_to)
        _compare(model, atol=1e-5)


def test_supports_only_plain_gpt_oss_on_sinkflex():
    assert supports(build_gpt_oss("micro", attn_implementation="sinkflex"))
    assert supports(build_gpt_oss("micro", attn_implementation="sinkflex-blocked"))
    eager = build_gpt_oss("micro", attn_implementation="eager")
    assert not supports(eager) and not supports(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="sinkflex"):
        LeanGptOss(eager)
