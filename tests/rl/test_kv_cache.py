"""The rollout's KV cache against transformers' DynamicLayer and plain indexing."""

import torch
from transformers.cache_utils import DynamicLayer

from sinkflex_lib.rl.kv_cache import MIN_CAPACITY, GrowingLayer, RolloutCache


def _steps(seed=0, batch=3, widths=(5, 1, 1, 7, 1)):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 2, w, 4, generator=g), torch.randn(batch, 2, w, 4, generator=g)) for w in widths]


def test_growing_layer_returns_what_dynamic_layer_concatenates():
    for spare in (True, False):
        ours, ref = GrowingLayer(spare), DynamicLayer()
        for k, v in _steps():
            got, want = ours.update(k, v), ref.update(k, v)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert ours.get_seq_length() == ref.get_seq_length() == 15
        assert ours._kbuf.shape[2] == (max(MIN_CAPACITY, 2 * 15) if spare else 15)


def test_appends_write_in_place_until_the_buffer_is_full():
    layer = GrowingLayer()
    (k, v), *rest = _steps()
    layer.update(k, v)
    buf = layer._kbuf
    for k, v in rest:
        layer.update(k, v)
    assert layer._kbuf.data_ptr() == buf.data_ptr()   # 15 slots fit the first buffer


def test_keep_rows_and_drop_pad_slots_equal_plain_indexing():
    cache, steps = RolloutCache(), _steps()
    for k, v in steps:
        cache.update(k, v, layer_idx=0)
    keys = torch.cat([k for k, _ in steps], 2)
    attn = torch.ones(3, 15, dtype=torch.long)
    attn[0, [0, 1, 6, 7]] = 0   # pads in two places
    attn[2, 5:9] = 0
    hist = cache.keep_rows(attn, [2, 0])
    assert torch.equal(hist, attn[[2, 0]]) and torch.equal(cache.layers[0].keys, keys[[2, 0]])
    hist = cache.drop_pad_slots(hist)
    real = [attn[b].nonzero().squeeze(1) for b in (2, 0)]
    assert hist.shape == (2, 11) and hist.sum(1).tolist() == [11, 11]
    for row, idx in enumerate(real):
        torch.testing.assert_close(cache.layers[0].keys[row, :, 11 - len(idx):], keys[[2, 0][row]][:, idx], rtol=0, atol=0)
    more = _steps(seed=1, batch=2, widths=(1,))[0]
    k, _ = cache.update(*more, layer_idx=0)     # appends after the repacked slots
    assert k.shape[2] == 12 and torch.equal(k[:, :, -1:], more[0])
