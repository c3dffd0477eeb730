"""The sweep: subprocess isolation, the OOM path, the CSV and Markdown tables, the CLI."""

import csv
import os

import pytest

from sinkflex_lib.bench import run_memory_sweep
from sinkflex_lib.bench.__main__ import main
from sinkflex_lib.bench.memory import CSV_COLUMNS

from .conftest import SMALL_CASE, SMALL_SEQ


def test_points_run_in_separate_fresh_processes(small_sweep):
    eager, blocked = small_sweep.point("eager", SMALL_SEQ), small_sweep.point("blocked", SMALL_SEQ)
    assert eager.status == "ok" and blocked.status == "ok", (eager.note, blocked.note)
    assert len({eager.pid, blocked.pid, os.getpid()}) == 3
    # both start from the same model in a fresh interpreter: the same resident baseline
    assert abs(eager.baseline_gb - blocked.baseline_gb) < 0.15 * eager.baseline_gb
    # blocked ran after eager and its whole process never held eager's N x N tensors
    assert eager.peak_gb > blocked.peak_gb + 0.15
    assert blocked.process_peak_gb < eager.process_peak_gb - 0.15


def test_a_budget_too_small_to_start_is_recorded_as_oom():
    sweep = run_memory_sweep(["blocked", "eager"], [256, 512], budget_gb=0.05, progress=None,
                             **dict(SMALL_CASE, layers=None))
    status = {(p.backend, p.seq): p.status for p in sweep.points}
    assert status == {("blocked", 256): "oom", ("eager", 256): "oom",
                      ("blocked", 512): "skipped", ("eager", 512): "skipped"}
    assert all(p.peak_gb is None for p in sweep.points)
    assert "budget 0.05 GB" in sweep.point("eager", 256).note
    assert "| 256 | eager |  |  | OOM |" in sweep.to_markdown()


def test_eager_over_budget_is_oom_and_the_sweep_goes_on(small_sweep):
    eager, blocked = small_sweep.point("eager", SMALL_SEQ), small_sweep.point("blocked", SMALL_SEQ)
    # a budget halfway between the two processes' peaks: eager must fail, blocked must fit
    budget = (eager.process_peak_gb + blocked.process_peak_gb) / 2
    lines = []
    sweep = run_memory_sweep(["eager", "blocked"], [SMALL_SEQ], budget_gb=budget, progress=lines.append,
                             **SMALL_CASE)
    assert [p.status for p in sweep.points] == ["oom", "ok"], [p.note for p in sweep.points]
    assert sweep.point("blocked", SMALL_SEQ).peak_gb > 0
    assert sweep.reduction_vs_eager(sweep.point("blocked", SMALL_SEQ)) == "eager OOM"
    assert len(lines) == 2 and "OOM" in lines[0] and "analytic attention" in lines[1]


def test_csv_and_markdown(small_sweep, tmp_path):
    csv_path, md_path = small_sweep.write(tmp_path, stem="t2")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["seq"], r["backend"], r["status"]) for r in rows] == [
        (str(SMALL_SEQ), "eager", "ok"), (str(SMALL_SEQ), "blocked", "ok")]
    eager_gb, blocked_gb = float(rows[0]["peak_gb"]), float(rows[1]["peak_gb"])
    assert blocked_gb < eager_gb and float(rows[1]["step_s"]) > 0
    # the reduction is computed from the unrounded peaks (the CSV's peaks are rounded)
    pe, pb = (small_sweep.point(b, SMALL_SEQ).peak_gb for b in ("eager", "blocked"))
    assert rows[1]["reduction_vs_eager"] == f"{100 * (pb / pe - 1):+.1f}%"
    assert rows[0]["config"] == "micro" and rows[0]["torch"].startswith("2.") and "CPU" in rows[0]["device_name"]
    md = md_path.read_text()
    assert "| seq | backend | peak GB | step s | status | vs eager | analytic attn GB |" in md
    assert md.startswith("Device: CPU") and "torch 2." in md and "Config: micro" in md
    assert f"| {SMALL_SEQ} | blocked |" in md and rows[1]["reduction_vs_eager"] in md


def test_cli_flex_on_cpu_is_unsupported_not_a_crash(tmp_path, capsys):
    assert main(["memory", "--backends", "flex", "--seq", "128,256", "--config", "micro", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "UNSUPPORTED" in out and "Analytic attention memory" in out
    with open(tmp_path / "table2_memory.csv") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["unsupported", "unsupported"]
    assert (tmp_path / "table2_memory.md").exists()


def test_bad_arguments_name_the_allowed_values(capsys):
    assert main(["memory", "--backends", "eager,sdpa", "--seq", "128"]) == 2
    assert "('eager', 'blocked', 'flex')" in capsys.readouterr().err
    with pytest.raises(ValueError, match="config must be one of"):
        run_memory_sweep(["eager"], [128], config="huge")
    with pytest.raises(ValueError, match="seqs must be integers"):
        run_memory_sweep(["eager"], [0])
