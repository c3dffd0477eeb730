"""CUDA only: flex trains, its peak is below eager's, and a CUDA OOM is a result."""

import pytest

from sinkflex_lib.bench import run_memory_sweep

pytestmark = pytest.mark.cuda


def test_cuda_sweep_flex_against_eager():
    sweep = run_memory_sweep(["eager", "flex"], [1024, 2048], config="micro", dtype="bfloat16", device="cuda",
                             warmup=1, steps=2, progress=None)
    assert all(p.status == "ok" for p in sweep.points), [(p.backend, p.seq, p.note) for p in sweep.points]
    assert all(p.reserved_gb >= p.peak_gb > 0 for p in sweep.points)
    assert "CUDA" in sweep.meta["device_name"]
    # absolute peaks include the (identical) weights and optimizer state; eager adds N x N tensors
    assert sweep.point("flex", 2048).peak_gb < sweep.point("eager", 2048).peak_gb


def test_cuda_out_of_memory_is_recorded():
    sweep = run_memory_sweep(["eager"], [4096], config="micro", device="cuda", budget_gb=0.01, warmup=0, steps=1,
                             progress=None)
    assert sweep.points[0].status == "oom", sweep.points[0].note
