"""One small sweep shared by the bench tests (each point is a subprocess: seconds apiece)."""

import pytest

from sinkflex_lib.bench import run_memory_sweep

# micro config, 2 layers (one sliding, one full), batch 1, N = 2048: eager's N x N tensors
# (~67 MB each) dominate its step, so the analytic model can be checked against it.
SMALL_CASE = dict(config="micro", layers=2, batch=1, dtype="float32", device="cpu", warmup=0, steps=1)
SMALL_SEQ = 2048


@pytest.fixture(scope="session")
def small_sweep():
    """eager then blocked at N=2048, each in its own subprocess."""
    return run_memory_sweep(["eager", "blocked"], [SMALL_SEQ], progress=None, **SMALL_CASE)
