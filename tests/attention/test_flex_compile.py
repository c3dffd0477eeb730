"""The compiled flex call's dynamo variants stay bounded over a rollout, and the CUDA path's
head-dim padding is exact (both checked on the CPU; the kernels themselves: `make gpu-check`)."""

import torch
from torch._dynamo.testing import CompileCounter

from sinkflex_lib.attention import flex
from sinkflex_lib.attention.mask import SinkMask


def rollout_like_calls(call, turns: int) -> int:
    """Prefill then five decode steps per turn, rows finishing (batch 8 -> 1), both window kinds
    of gpt-oss's alternating layers, key padding; then three update-sized batches. Returns calls."""
    calls, n_k = 0, 0
    for rep in range(turns):
        for batch, prefill in [(8, 300), (8, 37), (6, 52), (3, 21), (1, 64)]:
            for n_q in [prefill + rep] + [1] * 5:
                n_k += n_q
                for window in (128, None):
                    call(batch, n_q, n_k, window)
                    calls += 1
    for t in (333, 512, 700):
        for window in (128, None):
            call(4, t, t, window)
            calls += 1
    return calls


def test_compiled_variants_stay_bounded_over_a_rollout():
    counter = CompileCounter()
    compiled = flex.compile_flex(backend=counter)
    g = torch.Generator().manual_seed(0)

    def call(batch, n_q, n_k, window):
        q, k, v = (torch.randn(batch, h, n, 16, generator=g) for h, n in ((8, n_q), (2, n_k), (2, n_k)))
        kpm = torch.ones(batch, n_k, dtype=torch.bool)
        kpm[0, :2] = False
        block = flex.flex_block_mask(SinkMask(window=window), n_q, n_k, q.device, kpm)
        compiled(q, k, v, block_mask=block, scale=0.25, enable_gqa=True, return_aux=flex.AuxRequest(lse=True))

    torch._dynamo.reset()
    calls = rollout_like_calls(call, 1)
    once = counter.frame_count
    calls += rollout_like_calls(call, 2)
    assert calls == 192 and once == counter.frame_count <= flex.RECOMPILE_LIMIT // 2   # static: one per call
    assert torch._dynamo.config.recompile_limit >= flex.RECOMPILE_LIMIT


def test_zero_padding_the_head_dim_changes_no_output_and_no_lse():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 4, 9, 8, generator=g), torch.randn(2, 2, 9, 8, generator=g), torch.randn(2, 2, 9, 8, generator=g)
    mask = SinkMask(window=4)
    z, lse = flex.flex_attention(q, k, v, mask, 0.35)
    padded = [flex.pad_head_dim(t, 16) for t in (q, k, v)]
    zp, lsep = flex.flex_attention(*padded, mask, 0.35)
    assert padded[0].shape[-1] == 16 and flex.pad_head_dim(padded[0], 16) is padded[0]
    torch.testing.assert_close(zp[..., :8], z, rtol=0, atol=1e-6)
    assert zp[..., 8:].abs().max() == 0
    torch.testing.assert_close(lsep, lse, rtol=0, atol=1e-6)
