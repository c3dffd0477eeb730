"""`make gpu-check` refuses cleanly without CUDA; its paper-setup check also runs on the CPU."""

import json

import pytest
import torch

from sinkflex_lib import gpu_check

from .conftest import SHARED_TAU2_DATA as TAU2_DATA

HAVE_TAU2 = (TAU2_DATA / "tau2" / "domains" / "retail" / "tasks.json").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_exits_2_with_a_clear_message(capsys):
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.cuda
def test_flex_matches_float64_reference_on_cuda():
    result = gpu_check.compare_flex_eager(n=1024)
    assert result["flex_rel_err"] < 2e-2


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TAU2, reason="../shared/tau2/data is absent")
def test_paper_setup_check_runs_on_the_cpu_at_the_micro_shape(tmp_path, monkeypatch):
    """The paper-setup check's own logic, on the CPU at the micro shape with the real vocabulary:
    the forced update moves every adapter and no base weight, and the log-probs it recomputes
    (blocked attention in bf16) match the sampling ones."""
    monkeypatch.setenv("TAU2_DATA_DIR", str(TAU2_DATA))
    status, detail = gpu_check.paper_setup_check(tmp_path, preset="micro", group_size=2, device="cpu")
    result = json.loads((tmp_path / "paper_setup.json").read_text())
    forced = result["forced_update"]
    assert status == "pass", detail
    assert result["tau2"] and forced["adapters"] > 0 and forced["adapters_moved"] == forced["adapters"]
    assert forced["base_moved"] == 0 and forced["tokens"] > 0 and forced["logp_gap_mean"] < 0.05
