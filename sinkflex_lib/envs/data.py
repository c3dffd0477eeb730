"""Where the retail data comes from: the embedded synthetic set, tau2's data folder, or a path.

A source resolves to a folder holding ``db.json``, ``tasks.json``, ``policy.md`` and
``split_tasks.json``. Accepted ``source`` values:
- ``"mini"``: the project's synthetic set, ``data/retail_mini`` (see :mod:`.synthetic`);
- ``"tau2"``: ``$TAU2_DATA_DIR/tau2/domains/retail`` (tau2's own layout);
- a path: a folder laid out like tau2's data folder (``<path>/tau2/domains/retail``), or the
  retail folder itself.
Loaded sources are cached per resolved folder (they are read-only).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .db import BaseDB

REPO_ROOT = Path(__file__).resolve().parents[2]
MINI_DIR = REPO_ROOT / "data" / "retail_mini"
RETAIL_SUBDIR = Path("tau2") / "domains" / "retail"
REQUIRED_FILES = ("db.json", "tasks.json", "policy.md", "split_tasks.json")
ENV_VAR = "TAU2_DATA_DIR"


@dataclass
class RetailData:
    """One loaded source: shared base database, tasks by id, policy text and splits."""

    name: str
    folder: Path
    db: BaseDB
    tasks: dict[str, dict]
    policy: str
    splits: dict[str, list[str]]
    _gold_hash: dict[str, str] = field(default_factory=dict, repr=False)

    def task_ids(self, split: str | None = None) -> list[str]:
        """Task ids of `split` (None: every task, in file order)."""
        if split is None:
            return list(self.tasks)
        if split not in self.splits:
            raise ValueError(f"split must be one of {sorted(self.splits)} or None, got {split!r}")
        return list(self.splits[split])


def _retail_folder(path: Path) -> Path:
    nested = path / RETAIL_SUBDIR
    return nested if nested.is_dir() else path


def resolve_source(source: str | os.PathLike) -> tuple[str, Path]:
    """Return (name, retail folder) for `source`; raise a clear error if it is unusable."""
    if source == "mini":
        name, folder = "mini", _retail_folder(MINI_DIR)
    elif source == "tau2":
        root = os.environ.get(ENV_VAR)
        if not root:
            raise RuntimeError(
                f"source='tau2' needs the environment variable {ENV_VAR} set to tau2's data "
                f"folder (the one holding {RETAIL_SUBDIR}/db.json); it is unset")
        name, folder = "tau2", Path(root) / RETAIL_SUBDIR
    elif isinstance(source, (str, os.PathLike)):
        folder = _retail_folder(Path(source))
        name = str(folder)
        if not Path(source).exists():
            raise FileNotFoundError(
                f"source must be 'mini', 'tau2' or an existing data folder; {str(source)!r} "
                f"does not exist")
    else:
        raise TypeError(f"source must be 'mini', 'tau2' or a path, got {type(source).__name__}")
    for fname in REQUIRED_FILES:
        if not (folder / fname).is_file():
            raise FileNotFoundError(
                f"source {source!r} is incomplete: missing {folder / fname} "
                f"(a retail data folder needs {', '.join(REQUIRED_FILES)})")
    return name, folder


_CACHE: dict[Path, RetailData] = {}


def load_source(source: str | os.PathLike = "mini") -> RetailData:
    """Load (once per folder) the retail data named by `source` (see module docstring)."""
    name, folder = resolve_source(source)
    key = folder.resolve()
    if key not in _CACHE:
        with open(folder / "db.json") as f:
            db = BaseDB(json.load(f))
        with open(folder / "tasks.json") as f:
            tasks = {str(t["id"]): t for t in json.load(f)}
        with open(folder / "split_tasks.json") as f:
            splits = {k: [str(i) for i in v] for k, v in json.load(f).items()}
        policy = (folder / "policy.md").read_text()
        _CACHE[key] = RetailData(name, folder, db, tasks, policy, splits)
    return _CACHE[key]
