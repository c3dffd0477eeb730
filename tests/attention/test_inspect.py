"""Block-mask inspection: states read from FlexAttention's BlockMask agree with states derived
from the dense mask, and with closed forms for causal and windowed masks."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from sinkflex_lib.attention import SinkMask  # noqa: E402
from sinkflex_lib.attention.inspect import (BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL,  # noqa: E402
                                            block_sparsity, block_states, dense_block_states,
                                            draw_block_states, draw_dense_mask)
from tests.attention.reference import reference_mask  # noqa: E402


@pytest.mark.parametrize("window,prefix,n_q,n_k,bs", [
    (None, 0, 512, 512, 128), (128, 0, 512, 512, 128), (128, 4, 1024, 1024, 128),
    (50, 4, 256, 384, 64), (16, 0, 128, 128, 16), (300, 200, 640, 640, 128), (1, 0, 256, 256, 64)])
def test_block_mask_states_match_dense(window, prefix, n_q, n_k, bs):
    mask = SinkMask(window=window, prefix=prefix)
    from_flex = block_states(mask.block_mask(n_q, n_k, device="cpu", block_size=bs))
    from_dense = dense_block_states(reference_mask(n_q, n_k, window, prefix), bs)
    assert torch.equal(from_flex, from_dense)


def test_dense_block_states_by_hand():
    dense = torch.tensor([[1, 0, 0, 0],
                          [1, 1, 0, 0],
                          [1, 1, 1, 0],
                          [1, 1, 1, 1]], dtype=torch.bool)
    expected = torch.tensor([[BLOCK_PARTIAL, BLOCK_EMPTY], [BLOCK_FULL, BLOCK_PARTIAL]])
    assert torch.equal(dense_block_states(dense, 2), expected)
    # ragged edge: padded with hidden entries, so the 1x1 corner tile of a 3x3 all-ones is
    # still a tile of a 2x2 grid and is partial
    ones = torch.ones(3, 3, dtype=torch.bool)
    assert torch.equal(dense_block_states(ones, 2), torch.tensor([[BLOCK_FULL, BLOCK_PARTIAL],
                                                                  [BLOCK_PARTIAL, BLOCK_PARTIAL]]))


@pytest.mark.parametrize("n_blocks", [1, 2, 5, 16])
def test_causal_sparsity_closed_form(n_blocks):
    # causal: the n(n-1)/2 tiles above the diagonal are skipped
    got = block_sparsity(SinkMask(), n_blocks * 64, block_size=64)
    assert got == pytest.approx(n_blocks * (n_blocks - 1) / 2 / n_blocks ** 2, abs=1e-15)


@pytest.mark.parametrize("n_blocks", [1, 2, 8, 16])
def test_window_equal_block_sparsity_closed_form(n_blocks):
    # window = block size: each query tile sees its own tile and the one before it
    got = block_sparsity(SinkMask(window=64), n_blocks * 64, block_size=64)
    computed = n_blocks + max(n_blocks - 1, 0)
    assert got == pytest.approx(1 - computed / n_blocks ** 2, abs=1e-15)


def test_sparsity_agrees_with_blockmask_own_count():
    mask = SinkMask(window=128, prefix=4)
    bm = mask.block_mask(1024, 1024, device="cpu", block_size=128)
    assert block_sparsity(mask, 1024, block_size=128) == pytest.approx(bm.sparsity() / 100, abs=1e-12)


def test_dense_block_states_rejects_bad_input():
    with pytest.raises(ValueError, match="dense"):
        dense_block_states(torch.ones(4, 4), 2)
    with pytest.raises(ValueError, match="block_size"):
        dense_block_states(torch.ones(4, 4, dtype=torch.bool), 0)


def test_draw_functions_run():
    mask = SinkMask(window=8, prefix=2)
    fig, axes = plt.subplots(1, 2)
    draw_dense_mask(axes[0], mask.dense(32, 32), title="dense", block_size=8, prefix=2)
    draw_block_states(axes[1], dense_block_states(mask.dense(32, 32), 8), 8, title="blocks")
    assert len(axes[0].images) == 1 and len(axes[1].images) == 1
    assert axes[1].get_legend() is not None
    # the dense picture's key says which shade is visible, and the prefix columns are outlined
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["visible", "masked", "prefix keys j < 2"]
    (outline,) = axes[0].patches
    assert (outline.get_x(), outline.get_width(), outline.get_height()) == (-0.5, 2, 32)
    plt.close(fig)
