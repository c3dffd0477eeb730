"""Data sources: mini, tau2 (TAU2_DATA_DIR), a folder in either layout, and clear errors."""

import shutil

import pytest

from sinkflex_lib.envs import RetailEnv, load_source
from sinkflex_lib.envs.data import REQUIRED_FILES, RETAIL_SUBDIR
from sinkflex_lib.paths import MINI_DIR

from .conftest import TAU2_DATA, needs_tau2_data


def test_tau2_unset(monkeypatch):
    monkeypatch.delenv("TAU2_DATA_DIR", raising=False)
    with pytest.raises(RuntimeError, match="TAU2_DATA_DIR"):
        RetailEnv(source="tau2")


def test_tau2_incomplete_names_missing_file(monkeypatch, tmp_path):
    folder = tmp_path / RETAIL_SUBDIR
    folder.mkdir(parents=True)
    for name in ("db.json", "tasks.json", "policy.md"):
        shutil.copy(MINI_DIR / RETAIL_SUBDIR / name, folder / name)
    monkeypatch.setenv("TAU2_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="split_tasks.json"):
        load_source("tau2")


def test_path_sources_both_layouts(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in REQUIRED_FILES:
        shutil.copy(MINI_DIR / RETAIL_SUBDIR / name, flat / name)
    a, b = load_source(flat), load_source(MINI_DIR)
    assert list(a.tasks) == list(b.tasks) and a.policy == b.policy
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_source(tmp_path / "nope")
    with pytest.raises(TypeError):
        load_source(3)


def test_splits():
    env = RetailEnv()
    train, test, base = env.task_ids("train"), env.task_ids("test"), env.task_ids("base")
    assert set(train).isdisjoint(test) and sorted(train + test) == sorted(base) == sorted(env.task_ids())
    assert RetailEnv(split="test").task_ids() == test
    with pytest.raises(ValueError, match="split must be one of"):
        RetailEnv(split="validation")


@needs_tau2_data
def test_tau2_source(monkeypatch):
    monkeypatch.setenv("TAU2_DATA_DIR", str(TAU2_DATA))
    data = load_source("tau2")
    assert len(data.tasks) == 114 and len(data.db.tables["orders"]) == 1000
    assert len(data.task_ids("train")) == 74 and len(data.task_ids("test")) == 40
