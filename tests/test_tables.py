"""save_table / markdown_table: fixed formatting, CSV at full precision; three_places: half-up shares."""

import csv
import math
from decimal import ROUND_HALF_UP, Decimal

import pytest

from sinkflex_lib.tables import markdown_table, save_table, three_places

ROWS = [dict(name="a", n=3, err=1.234e-7, ok=True), dict(name="b", n=10, err=math.nan, ok=False)]


def test_markdown_table():
    assert markdown_table(ROWS) == ("| name | n | err | ok |\n|---|---|---|---|\n"
                                    "| a | 3 | 1.23e-07 | True |\n| b | 10 | n/a | False |\n")
    assert markdown_table(ROWS, ["err", "name"], floatfmt=".1f") == (
        "| err | name |\n|---|---|\n| 0.0 | a |\n| n/a | b |\n")


def test_save_table(tmp_path):
    csv_path, md_path = save_table(ROWS, "t", directory=tmp_path)
    assert csv_path.name == "t.csv" and md_path.name == "t.md"
    with open(csv_path) as f:
        back = list(csv.DictReader(f))
    assert back[0]["err"] == repr(1.234e-7) and back[1]["name"] == "b"
    assert md_path.read_text() == markdown_table(ROWS)


def test_save_table_keeps_a_key_that_only_a_later_row_has(tmp_path):
    rows = [dict(what="rollout", s=1.0), dict(what="step", s=2.0, share=0.5)]
    csv_path, md_path = save_table(rows, "t", directory=tmp_path)
    with open(csv_path) as f:
        back = list(csv.DictReader(f))
    assert list(back[0]) == ["what", "s", "share"] and back[0]["share"] == "" and back[1]["share"] == "0.5"
    assert md_path.read_text().splitlines()[0] == "| what | s | share |"


@pytest.mark.parametrize("name", ["", "a/b", "x.md"])
def test_bad_name(tmp_path, name):
    with pytest.raises(ValueError, match="name"):
        save_table(ROWS, name, directory=tmp_path)


def test_empty_rows(tmp_path):
    with pytest.raises(ValueError, match="rows"):
        markdown_table([])


def test_markdown_alignment_row():
    from sinkflex_lib.tables import markdown_table

    md = markdown_table([{"n": 1, "name": "a"}], align="rl")
    assert md.splitlines()[1] == "|---:|:---|"
    with pytest.raises(ValueError, match="align"):
        markdown_table([{"n": 1}], align="rl")


def test_three_places_rounds_every_share_half_up():
    # reference: exact decimal division, rounded half up by the decimal module
    for n in range(1, 121):
        for k in range(n + 1):
            want = str((Decimal(k) / Decimal(n)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))
            assert three_places(k / n, n) == want, (k, n)
    assert three_places(23 / 80, 80) == "0.288" and format(23 / 80, ".3f") == "0.287"


def test_three_places_needs_tasks():
    with pytest.raises(ValueError, match="at least 1"):
        three_places(0.0, 0)
