"""The copy-on-write database and tau2's canonical hash, against a plain json.dumps reference."""

import hashlib
import json

from sinkflex_lib.envs.db import ORDER_OPTIONAL_FIELDS, canonical_hash, normalize_db
from sinkflex_lib.envs.tools import call_tool


def test_normalize_adds_optional_fields_and_floats(tiny_raw):
    db = normalize_db(tiny_raw)
    order = db["orders"]["#W1"]
    assert list(order)[-7:] == list(ORDER_OPTIONAL_FIELDS)
    assert all(order[f] is None for f in ORDER_OPTIONAL_FIELDS)
    assert isinstance(db["products"]["p_mug"]["variants"]["m_big"]["price"], float)


def test_hash_equals_reference_after_writes(tiny_base):
    db = tiny_base.episode()
    reference = lambda d: hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()  # noqa: E731
    assert db.canonical_json() == json.dumps(db.to_dict(), sort_keys=True)
    assert db.hash() == reference(tiny_base.tables) == canonical_hash(tiny_base.tables)
    call_tool(db, "cancel_pending_order", {"order_id": "#W2", "reason": "no longer needed"})
    assert db.owned == {("orders", "#W2"), ("users", "ann_lee_1")}
    assert db.canonical_json() == json.dumps(db.to_dict(), sort_keys=True)
    assert db.hash() != reference(tiny_base.tables)
    # a second episode starts fresh
    assert tiny_base.episode().hash() == reference(tiny_base.tables)
