"""`make gpu-check` refuses cleanly without CUDA, keeps every check to its deadline, and its
paper-setup check also runs on the CPU."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from sinkflex_lib import gpu_check

from .conftest import SHARED_TAU2_DATA as TAU2_DATA

HAVE_TAU2 = (TAU2_DATA / "tau2" / "domains" / "retail" / "tasks.json").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_exits_2_with_a_clear_message(capsys):
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_checks_run_in_order_under_the_budget_and_are_skipped_when_it_is_spent(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(gpu_check.time, "monotonic", lambda: clock[0])
    given = []

    def fake_run(key, out_dir, timeout_s):      # each check uses 100 s of the fake clock
        given.append((key, timeout_s))
        clock[0] += 100
        return "pass", key

    rows = gpu_check.run_checks(list(gpu_check.CHECKS), tmp_path, budget_s=250, run=fake_run)
    caps = {k: c for k, (_, c, _) in gpu_check.CHECKS.items()}
    assert given == [("flex", min(caps["flex"], 250)), ("tests", min(caps["tests"], 150)), ("paper", 50)]
    assert [r[1] for r in rows] == ["pass", "pass", "pass", "SKIP"]
    assert rows[3][0] == gpu_check.CHECKS["sweep"][0]


def test_a_check_past_its_deadline_is_stopped_with_its_own_subprocesses(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
              f" open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    start = time.monotonic()
    assert gpu_check.run_in_group([sys.executable, "-c", script], timeout_s=3) is None
    assert time.monotonic() - start < 20
    pid = int(pid_file.read_text())
    time.sleep(0.5)
    stat = f"/proc/{pid}/stat"
    assert not os.path.exists(stat) or open(stat).read().split(") ")[1][0] == "Z"     # gone or a zombie
    assert gpu_check.run_in_group([sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30) == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_check_that_raises_in_its_process_is_reported_as_failed(tmp_path):
    status, detail = gpu_check.run_check_process("flex", tmp_path, timeout_s=300)
    assert status == "FAIL" and "Error" in detail
    assert json.loads((tmp_path / "flex.result.json").read_text()) == [status, detail]


def test_an_unknown_check_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "flex,nonsense"])
    assert "nonsense" in capsys.readouterr().err


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
