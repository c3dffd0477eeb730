"""Metrics rows: the per-step curve a figure plots."""

from sinkflex_lib.rl.runstate import column, curve


def test_curve_averages_each_steps_rows_of_one_kind_and_skips_missing_values():
    rows = [{"kind": "train", "step": 2, "loss": 1.0}, {"kind": "train", "step": 1, "loss": 4.0},
            {"kind": "train", "step": 2, "loss": 3.0}, {"kind": "val", "step": 2, "loss": 9.0},
            {"kind": "train", "step": 3, "loss": None}, {"kind": "train", "step": 3}]
    assert curve(rows, "train", "loss") == ([1, 2], [4.0, 2.0])
    assert curve(rows, "val", "loss") == ([2], [9.0]) and curve(rows, "eval", "loss") == ([], [])


def test_column_keeps_every_row_of_one_kind_in_order():
    rows = [dict(kind="warm_start", step=0, loss=3), dict(kind="warm_start", step=0, loss=1),
            dict(kind="train", step=1, loss=9), dict(kind="warm_start", step=0)]
    assert column(rows, "warm_start", "loss") == [3.0, 1.0] and column(rows, "val", "loss") == []
