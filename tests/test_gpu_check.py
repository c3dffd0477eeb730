"""`make gpu-check` refuses cleanly without CUDA (its checks themselves need a GPU)."""

import pytest
import torch

from sinkflex_lib import gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_exits_2_with_a_clear_message(capsys):
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.cuda
def test_flex_matches_float64_reference_on_cuda():
    result = gpu_check.compare_flex_eager(n=1024)
    assert result["flex_rel_err"] < 2e-2
