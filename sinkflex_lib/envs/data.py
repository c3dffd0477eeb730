"""Where the retail data comes from: the embedded synthetic set, tau2's data folder, or a path.

A source resolves to a folder holding ``db.json``, ``tasks.json``, ``policy.md`` and
``split_tasks.json``. Accepted ``source`` values:
- ``"mini"``: the project's synthetic set, ``data/retail_mini`` (see :mod:`.synthetic`);
- ``"tau2"``: ``$TAU2_DATA_DIR/tau2/domains/retail`` (tau2's own layout);
- ``"train-world:S"`` / ``"eval-world:S"``: a world generated in memory from seed S (the
  generator of the synthetic set, :func:`.synthetic.generate_world`), its numeric ids drawn
  from the train or the eval partition, so an eval world shares no user, order, item or
  payment id and no e-mail with any train world (:func:`world_source`);
- a path: a folder laid out like tau2's data folder (``<path>/tau2/domains/retail``), or the
  retail folder itself.
Loaded sources are cached per resolved folder (they are read-only); generated worlds, the last
`WORLD_CACHE` of them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import MINI_DIR
from .db import BaseDB

RETAIL_SUBDIR = Path("tau2") / "domains" / "retail"
REQUIRED_FILES = ("db.json", "tasks.json", "policy.md", "split_tasks.json")
ENV_VAR = "TAU2_DATA_DIR"
WORLD_PARTITIONS = {"train-world": "train", "eval-world": "eval"}
WORLD_CACHE = 4


@dataclass
class RetailData:
    """One loaded source: shared base database, tasks by id, policy text and splits."""

    name: str
    folder: Path | None               # None for a generated world
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
_WORLDS: dict[str, RetailData] = {}


def world_source(partition: str, seed: int) -> str:
    """The source name of the world generated from `seed` in `partition` ("train" or "eval")."""
    prefix = {v: k for k, v in WORLD_PARTITIONS.items()}.get(partition)
    if prefix is None:
        raise ValueError(f"partition must be one of {sorted(WORLD_PARTITIONS.values())}, got {partition!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"world seed must be an integer >= 0, got {seed!r}")
    return f"{prefix}:{seed}"


def parse_world(source: str) -> tuple[str, int] | None:
    """(partition, seed) of a generated world's source name ("train-world:7": ("train", 7)), or None
    if `source` names no world; ValueError for a world prefix without an integer seed >= 0."""
    prefix, _, seed = source.partition(":")
    if prefix not in WORLD_PARTITIONS:
        return None
    if not seed.isdigit():
        raise ValueError(f"a world source is '<{'|'.join(WORLD_PARTITIONS)}>:<seed>' with an integer "
                         f"seed >= 0, got {source!r}")
    return WORLD_PARTITIONS[prefix], int(seed)


def _world(source: str) -> RetailData | None:
    """The generated world named by `source`, or None if `source` names no world."""
    world = parse_world(source)
    if world is None:
        return None
    if source not in _WORLDS:
        from .mini_policy import policy_text
        from .synthetic import generate_world

        db, tasks, splits = generate_world(world[1], world[0])
        while len(_WORLDS) >= WORLD_CACHE:
            _WORLDS.pop(next(iter(_WORLDS)))
        _WORLDS[source] = RetailData(source, None, BaseDB(db), {t["id"]: t for t in tasks},
                                     policy_text(len(db["products"])), splits)
    return _WORLDS[source]


def load_source(source: str | os.PathLike = "mini") -> RetailData:
    """Load (once per folder) the retail data named by `source` (see module docstring)."""
    world = _world(source) if isinstance(source, str) else None
    if world is not None:
        return world
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
