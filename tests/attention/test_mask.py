"""SinkMask against the definition written out with Python loops."""

import pytest
import torch

from sinkflex_lib.attention import SinkMask


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
