"""SinkMask against the definition written out with Python loops."""

import pytest
import torch

from sinkflex_lib.attention import SinkMask
from sinkflex_lib.attention.mask import BLOCK_MASK_CACHE, sink_mask


def loop_mask(n_q, n_k, window, prefix):
    out = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        t = n_k - n_q + i
        for j in range(n_k):
            out[i, j] = j <= t and (window is None or t - j < window or j < prefix)
    return out


CASES = [(1, 1, None, 0), (7, 7, 1, 0), (9, 20, 3, 2), (33, 33, 8, 4), (17, 40, None, 5), (40, 40, 50, 0)]


@pytest.mark.parametrize("n_q,n_k,window,prefix", CASES)
def test_dense_and_mask_mod_follow_the_definition(n_q, n_k, window, prefix):
    mask = SinkMask(window, prefix)
    want = loop_mask(n_q, n_k, window, prefix)
    assert torch.equal(mask.dense(n_q, n_k), want)
    mod = mask.mask_mod(q_offset=n_k - n_q)
    qi = torch.arange(n_q)[:, None]
    kj = torch.arange(n_k)[None, :]
    assert torch.equal(mod(0, 0, qi, kj), want)
    assert mask.visible_fraction(n_q, n_k) == pytest.approx(want.double().mean().item(), abs=1e-12)


@pytest.mark.parametrize("n_q,n_k,window,prefix", CASES)
@pytest.mark.parametrize("tile", [1, 4, 16])
def test_key_ranges_cover_exactly_the_visible_keys_of_a_tile(n_q, n_k, window, prefix, tile):
    mask = SinkMask(window, prefix)
    dense = loop_mask(n_q, n_k, window, prefix)
    offset = n_k - n_q
    for i0 in range(0, n_q, tile):
        i1 = min(i0 + tile, n_q)
        ranges = mask.key_ranges(offset + i0, offset + i1)
        covered = torch.zeros(n_k, dtype=torch.bool)
        for a, b in ranges:
            assert 0 <= a < b <= n_k
            assert not covered[a:b].any()  # disjoint
            covered[a:b] = True
        needed = dense[i0:i1].any(0)
        assert not (needed & ~covered).any()  # nothing visible is skipped
        # and nothing is loaded that a tile of one query would not need beyond the band
        if window is not None and tile == 1:
            assert covered.sum() == needed.sum()


def test_block_mask_is_broadcast_and_cached():
    mask = SinkMask(window=16, prefix=4)
    bm = mask.block_mask(300, 300, block_size=128)
    assert bm.kv_num_blocks.shape[:2] == (1, 1)  # B=None, H=None
    assert mask.block_mask(300, 300, block_size=128) is bm
    for n in range(1, 20):  # decoding: a new shape every step; the cache keeps the last few
        mask.block_mask(n, 300 + n, block_size=128)
    assert len(mask._block_masks) == BLOCK_MASK_CACHE
    assert sink_mask(16, 4) is sink_mask(16, 4) and sink_mask(16, 4) == mask
    dense = bm.to_dense()[0, 0].bool()  # (q blocks, kv blocks): blocks the kernel visits
    want = loop_mask(300, 300, 16, 4)
    for qb in range(dense.shape[0]):
        for kb in range(dense.shape[1]):
            block = want[qb * 128:(qb + 1) * 128, kb * 128:(kb + 1) * 128]
            assert bool(dense[qb, kb]) == bool(block.any())


@pytest.mark.parametrize("kwargs,match", [
    (dict(window=0), "window"), (dict(window=-3), "window"), (dict(window=2.5), "window"),
    (dict(prefix=-1), "prefix"), (dict(prefix=1.5), "prefix"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SinkMask(**kwargs)


def test_lengths_are_checked():
    with pytest.raises(ValueError, match="n_q must be <= n_k"):
        SinkMask().dense(5, 4)


def test_positions_count_real_keys_only():
    kpm = torch.tensor([[False, True, True, False, False, True], [True] * 6])
    assert SinkMask.positions(kpm).tolist() == [[-1, 0, 1, 1, 1, 2], [0, 1, 2, 3, 4, 5]]


@pytest.mark.parametrize("window,prefix", [(1, 0), (3, 0), (3, 2), (5, 4)])
@pytest.mark.parametrize("tile", [1, 4])
def test_key_ranges_with_pads_cover_every_row_s_visible_keys(window, prefix, tile):
    """With pads inside the rows the window reaches further back in slots; the ranges must
    still hold every key any row's query in the tile can see (checked against a loop)."""
    g = torch.Generator().manual_seed(window * 10 + prefix)
    kpm = torch.rand(3, 24, generator=g) > 0.5
    mask = SinkMask(window, prefix)
    pos = SinkMask.positions(kpm)
    for t0 in range(0, 24, tile):
        t1 = min(t0 + tile, 24)
        covered = torch.zeros(24, dtype=torch.bool)
        for a, b in mask.key_ranges(t0, t1, pos):
            covered[a:b] = True
        for row in range(3):
            p = [int(kpm[row, :j + 1].sum()) - 1 for j in range(24)]
            for t in range(t0, t1):
                for j in range(t + 1):
                    if kpm[row, j] and (p[t] - p[j] < window or p[j] < prefix):
                        assert covered[j], (row, t, j)
