"""The retail database: tau2's record layout, a copy-on-write episode view, and its hash.

Conventions
- A database is a dict of three tables, ``{"products", "users", "orders"}``, each a dict
  from id to a plain JSON record. :func:`normalize_db` puts every record's keys in tau2's
  model field order (which is the order tools print them in), adds the seven optional order
  fields as ``None`` and turns money into floats, as tau2's pydantic models do on load.
- :class:`RetailDB` is one episode's database: it shares the (never mutated) base records
  and deep-copies a record only the first time a tool writes it (:meth:`RetailDB.own`).
  Tools read ``db.orders[...]`` and write only through ``db.own(...)``.
- :meth:`RetailDB.hash` is tau2's database hash, sha256 of ``json.dumps(db, sort_keys=True)``;
  it reuses cached per-record dumps of untouched base records, so hashing a 1000-order
  database after an episode costs a few milliseconds.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

TABLES = ("orders", "products", "users")  # sorted, as json sort_keys orders them

ORDER_FIELDS = ("order_id", "user_id", "address", "items", "status", "fulfillments",
                "payment_history")
ORDER_OPTIONAL_FIELDS = ("cancel_reason", "exchange_items", "exchange_new_items",
                         "exchange_payment_method_id", "exchange_price_difference",
                         "return_items", "return_payment_method_id")
ADDRESS_FIELDS = ("address1", "address2", "city", "country", "state", "zip")
ITEM_FIELDS = ("name", "product_id", "item_id", "price", "options")
PAYMENT_FIELDS = ("transaction_type", "amount", "payment_method_id")
FULFILLMENT_FIELDS = ("tracking_id", "item_ids")
USER_FIELDS = ("user_id", "name", "address", "email", "payment_methods", "orders")
NAME_FIELDS = ("first_name", "last_name")
PAYMENT_METHOD_FIELDS = {
    "credit_card": ("source", "id", "brand", "last_four"),
    "gift_card": ("source", "id", "balance"),
    "paypal": ("source", "id"),
}
PRODUCT_FIELDS = ("name", "product_id", "variants")
VARIANT_FIELDS = ("item_id", "options", "available", "price")


def _pick(record: dict, fields: tuple[str, ...], what: str) -> dict:
    missing = [f for f in fields if f not in record]
    if missing:
        raise ValueError(f"{what} record lacks field(s) {missing}: {record!r:.200}")
    return {f: record[f] for f in fields}


def _money(x: Any) -> Any:
    return None if x is None else float(x)


def normalize_address(a: dict) -> dict:
    return _pick(a, ADDRESS_FIELDS, "address")


def normalize_order(o: dict) -> dict:
    out = _pick(o, ORDER_FIELDS, "order")
    out["address"] = normalize_address(o["address"])
    out["items"] = [dict(_pick(i, ITEM_FIELDS, "order item"), price=float(i["price"]))
                    for i in o["items"]]
    out["fulfillments"] = [_pick(f, FULFILLMENT_FIELDS, "fulfillment") for f in o["fulfillments"]]
    out["payment_history"] = [dict(_pick(p, PAYMENT_FIELDS, "payment"), amount=float(p["amount"]))
                              for p in o["payment_history"]]
    for f in ORDER_OPTIONAL_FIELDS:
        out[f] = o.get(f)
    out["exchange_price_difference"] = _money(out["exchange_price_difference"])
    return out


def normalize_user(u: dict) -> dict:
    out = _pick(u, USER_FIELDS, "user")
    out["name"] = _pick(u["name"], NAME_FIELDS, "user name")
    out["address"] = normalize_address(u["address"])
    methods = {}
    for pid, pm in u["payment_methods"].items():
        if pm.get("source") not in PAYMENT_METHOD_FIELDS:
            raise ValueError(f"payment method {pid!r} has unknown source {pm.get('source')!r}")
        rec = _pick(pm, PAYMENT_METHOD_FIELDS[pm["source"]], "payment method")
        if "balance" in rec:
            rec["balance"] = float(rec["balance"])
        methods[pid] = rec
    out["payment_methods"] = methods
    out["orders"] = list(u["orders"])
    return out


def normalize_product(p: dict) -> dict:
    out = _pick(p, PRODUCT_FIELDS, "product")
    out["variants"] = {vid: dict(_pick(v, VARIANT_FIELDS, "variant"), price=float(v["price"]))
                       for vid, v in p["variants"].items()}
    return out


def normalize_db(raw: dict) -> dict:
    """Return a new database dict in tau2's canonical record layout (see module docstring)."""
    missing = [t for t in TABLES if t not in raw]
    if missing:
        raise ValueError(f"database lacks table(s) {missing}; expected {list(TABLES)}")
    return {
        "orders": {k: normalize_order(v) for k, v in raw["orders"].items()},
        "products": {k: normalize_product(v) for k, v in raw["products"].items()},
        "users": {k: normalize_user(v) for k, v in raw["users"].items()},
    }


def canonical_hash(db: dict) -> str:
    """tau2's hash of a whole database dict: sha256 of ``json.dumps(db, sort_keys=True)``."""
    return hashlib.sha256(json.dumps(db, sort_keys=True).encode()).hexdigest()


class BaseDB:
    """A normalized database shared read-only by many episodes, with cached record dumps."""

    def __init__(self, raw: dict):
        self.tables = normalize_db(raw)
        self.sorted_keys = {t: sorted(self.tables[t]) for t in TABLES}
        self._dumps: dict[str, dict[str, str]] | None = None

    def dumps(self) -> dict[str, dict[str, str]]:
        """Per-record ``json.dumps(record, sort_keys=True)``, computed once."""
        if self._dumps is None:
            self._dumps = {t: {k: json.dumps(v, sort_keys=True) for k, v in self.tables[t].items()}
                           for t in TABLES}
        return self._dumps

    def episode(self) -> "RetailDB":
        return RetailDB(self)


class RetailDB:
    """One episode's database: a copy-on-write view over a :class:`BaseDB`."""

    def __init__(self, base: BaseDB):
        self.base = base
        self.orders = dict(base.tables["orders"])
        self.products = dict(base.tables["products"])
        self.users = dict(base.tables["users"])
        self.owned: set[tuple[str, str]] = set()

    def table(self, name: str) -> dict:
        return getattr(self, name)

    def own(self, table: str, key: str) -> dict:
        """Return a private, writable copy of record ``table[key]`` (copied once)."""
        t = self.table(table)
        if (table, key) not in self.owned:
            t[key] = copy.deepcopy(t[key])
            self.owned.add((table, key))
        return t[key]

    def to_dict(self) -> dict:
        """The whole database as a plain dict (shares untouched records with the base)."""
        return {"orders": self.orders, "products": self.products, "users": self.users}

    def canonical_json(self) -> str:
        """Exactly ``json.dumps(self.to_dict(), sort_keys=True)``, built from cached dumps."""
        dumps = self.base.dumps()
        parts = []
        for t in TABLES:
            table = self.table(t)
            body = ", ".join(
                f"{json.dumps(k)}: "
                + (json.dumps(table[k], sort_keys=True) if (t, k) in self.owned else dumps[t][k])
                for k in self.base.sorted_keys[t])
            parts.append(f"{json.dumps(t)}: {{{body}}}")
        return "{" + ", ".join(parts) + "}"

    def hash(self) -> str:
        """tau2's database hash (sha256 hex of the canonical sorted-key JSON dump)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()
