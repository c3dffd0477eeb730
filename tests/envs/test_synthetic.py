"""The committed synthetic set is regenerated bit for bit by its generator; its content is sane."""

import json
import random
from collections import Counter

import pytest

from sinkflex_lib.envs.data import RETAIL_SUBDIR
from sinkflex_lib.paths import MINI_DIR
from sinkflex_lib.envs.synthetic import COUNTS, generate, main


def test_committed_files_regenerate_bit_for_bit():
    for name, text in generate(0).items():
        assert (MINI_DIR / RETAIL_SUBDIR / name).read_text() == text, name


def test_cli_writes_same_files(tmp_path):
    main(["--seed", "0", "--out", str(tmp_path)])
    for name in generate(0):
        assert (tmp_path / RETAIL_SUBDIR / name).read_bytes() == (MINI_DIR / RETAIL_SUBDIR / name).read_bytes()


def test_seed_changes_data_and_content_is_sane():
    files = generate(0)
    assert generate(1)["db.json"] != files["db.json"]
    db, tasks = json.loads(files["db.json"]), json.loads(files["tasks.json"])
    assert 20 <= len(db["users"]) <= 99 and 20 <= len(db["orders"]) <= 199
    assert Counter(t["description"]["purpose"] for t in tasks) == COUNTS
    assert 200 <= len(tasks) <= 500
    assert sum(bool(t["evaluation_criteria"]["communicate_info"]) for t in tasks) >= 40
    assert all(len(text) < 1_000_000 for text in files.values())
    assert "10 product types" in files["policy.md"]


def test_check_raises_on_a_broken_task():
    from sinkflex_lib.envs.db import BaseDB
    from sinkflex_lib.envs.synthetic import GenerationError, _check, build_db

    db = build_db(random.Random(0), n_users=4)
    base = BaseDB(db)
    fresh = base.episode().hash()
    order = next(o for o in db["orders"].values() if o["status"] == "pending")
    cancel = {"name": "cancel_pending_order", "arguments": {"order_id": order["order_id"], "reason": "no longer needed"}}
    look = {"name": "get_order_details", "arguments": {"order_id": order["order_id"]}}
    _check(base, fresh, "cancel", [look, cancel], None)               # a good task passes
    with pytest.raises(GenerationError, match="fails"):
        _check(base, fresh, "cancel", [{**cancel, "arguments": {**cancel["arguments"], "reason": "bored"}}], None)
    with pytest.raises(GenerationError, match="would fail"):
        _check(base, fresh, "refuse", [look], {**look, "arguments": {"order_id": "#W0"}})
