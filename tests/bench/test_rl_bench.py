"""`python -m sinkflex_lib.bench rl`: its rows, files and report (smallest sizes; no timing asserted)."""

import csv

from sinkflex_lib.bench.__main__ import main
from sinkflex_lib.bench.rl import report, run_rl_bench


def test_rows_files_and_report(tmp_path):
    rows = run_rl_bench("micro", batch=2, max_turns=2, max_new_tokens=6, out=tmp_path, log=lambda m: None)
    assert [r["what"] for r in rows] == ["rollout (ours)", "generate() (transformers)", "update, sinkflex",
                                         "update, eager"]
    ours, gen, upd_s, upd_e = rows
    assert gen["tokens"] == 2 * 6 and gen["forwards"] == 6      # max_new_tokens for every row
    assert 0 < ours["tokens"] <= 2 * 2 * 6 and ours["forwards"] >= 6
    assert 0 < ours["forward_share"] + ours["sample_share"] + ours["env_share"] <= 1.0
    assert upd_s["tokens"] == upd_e["tokens"] > 0 and all(r["tokens_per_s"] > 0 for r in rows)
    with open(tmp_path / "bench_rl.csv") as f:
        assert [r["what"] for r in csv.DictReader(f)] == [r["what"] for r in rows]
    text = report(rows, "cpu")
    assert "ours / generate()" in text and "sinkflex / eager" in text and text.splitlines()[-1].startswith("device:")


def test_cli_rejects_a_bad_batch(capsys):
    assert main(["rl", "--policy", "micro", "--batch", "0"]) == 2
    assert "batch must be >= 1" in capsys.readouterr().err
