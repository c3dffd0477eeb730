"""`python -m sinkflex_lib.bench memory` refuses bad values before any point runs (issue 14)."""

import pytest

from sinkflex_lib.bench import memory
from sinkflex_lib.bench.__main__ import main


@pytest.fixture
def no_points(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a sweep point started although the arguments were bad")
    monkeypatch.setattr(memory, "run_point_subprocess", refuse)


@pytest.mark.parametrize("extra,match", [
    (["--budget-gb", "inf"], "budget_gb must be a positive finite number"),
    (["--timeout-s", "-1"], "timeout_s must be a positive finite number"),
    (["--timeout-s", "inf"], "timeout_s"),
    (["--stem", "sub/table"], "stem must be a file name"),
    (["--stem", ""], "stem"),
])
def test_bad_values_are_refused_up_front(extra, match, no_points, capsys):
    assert main(["memory", "--backends", "eager", "--seq", "128", *extra]) == 2
    assert match in capsys.readouterr().err


def test_out_naming_a_file_is_refused_before_the_sweep(tmp_path, no_points, capsys):
    file = tmp_path / "results.csv"
    file.write_text("keep me")
    for out in (file, file / "sub"):
        assert main(["memory", "--backends", "eager", "--seq", "128", "--out", str(out)]) == 2
        assert "out must be a folder" in capsys.readouterr().err
    assert file.read_text() == "keep me"


def test_a_new_out_folder_is_fine(tmp_path):
    memory._check_out(tmp_path / "new" / "deeper", "table2_memory")  # created when the sweep writes
