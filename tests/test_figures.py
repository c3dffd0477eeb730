"""The committed tables of figures/grpo_stage6_base are what their scripts compute from the
committed evidence beside them (runs' metrics, evaluation JSONs; generated worlds), so no table
there can be edited by hand or go stale. The scripts are that folder's own, imported from it."""
import importlib
from pathlib import Path

import pytest

FOLDER = Path(__file__).parents[1] / "figures" / "grpo_stage6_base"


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(FOLDER))
    monkeypatch.chdir(FOLDER)
    return importlib.import_module


@pytest.mark.parametrize("module, table, written", [
    ("multi_world", "table", "multi_world.md"),         # 1,005 held-out tasks a policy, paired by task
    ("arms_table", "table", "arms_table.md"),           # every arm on the 110 tasks
    ("kind_phases", "text", "kind_phases.md"),          # KP, phase by phase
    ("fresh_worlds", "text", "fresh_worlds.md"),        # FW's sampled success on new tasks
])
def test_a_committed_table_is_what_its_script_computes(script, module, table, written):
    assert getattr(script(module), table)() == (FOLDER / written).read_text()


def test_the_readmes_arms_table_is_the_scripts(script):
    arms = script("arms_table")
    readme = (FOLDER.parents[1] / "README.md").read_text()
    assert arms.with_table(readme, arms.table()) == readme
