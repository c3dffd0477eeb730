"""Metrics rows: the per-step curve a figure plots."""

from sinkflex_lib.rl.runstate import curve


def test_curve_averages_each_steps_rows_of_one_kind_and_skips_missing_values():
    rows = [{"kind": "train", "step": 2, "loss": 1.0}, {"kind": "train", "step": 1, "loss": 4.0},
            {"kind": "train", "step": 2, "loss": 3.0}, {"kind": "val", "step": 2, "loss": 9.0},
            {"kind": "train", "step": 3, "loss": None}, {"kind": "train", "step": 3}]
    assert curve(rows, "train", "loss") == ([1, 2], [4.0, 2.0])
    assert curve(rows, "val", "loss") == ([2], [9.0]) and curve(rows, "eval", "loss") == ([], [])
