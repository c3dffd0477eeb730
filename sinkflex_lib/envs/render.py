"""Compact text of JSON values, with an item's id right after what names it.

The tiny policy reads tool results as compact JSON (no quotes, no separator spaces:
``{order_id:#W1,status:pending}``). In an object with an ``item_id``, the id follows the key
that names the item: ``name`` in an order's items, ``options`` in a product's variants, so

    {name:Desk Lamp,item_id:5457421776,product_id:3665190898,price:...,options:{...}}
    5457421776:{options:{color:silver,brightness:high},item_id:5457421776,available:true,...}

Every field and value is kept; only the order of keys changes. The oracle's confirmation
requests name each item the same way (:func:`item_label` + the id), so stating an item's id
there continues a copy of the tool result's text, from the words that name the item, instead of
a look-up two keys away.
"""

from __future__ import annotations

import json

NAMING_KEYS = ("name", "options")      # the key an item's id is moved behind, first present wins


def _id_after_name(value):
    """`value` with, in every object holding an "item_id", that key moved behind its naming key."""
    if isinstance(value, list):
        return [_id_after_name(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _id_after_name(v) for k, v in value.items()}
    namer = next((k for k in NAMING_KEYS if k in out), None)
    if "item_id" not in out or namer is None:
        return out
    item_id = out.pop("item_id")
    keys = list(out)
    at = keys.index(namer) + 1
    return {**{k: out[k] for k in keys[:at]}, "item_id": item_id, **{k: out[k] for k in keys[at:]}}


def compact(value) -> str:
    """A JSON value as compact text: no quotes, no spaces after separators, ids after names."""
    return json.dumps(_id_after_name(value), separators=(",", ":"), ensure_ascii=False).replace('"', "")


def item_label(products: dict, item_id: str, new: bool = False) -> str:
    """The words that name `item_id` in a compact tool result, then ",item_id:" (the text right
    before the id there): an item already bought by its product's name (as in an order's items),
    a new item by its variant's options (as in the product's variants). "" for an unknown id."""
    for product in products.values():
        variant = (product.get("variants") or {}).get(item_id)
        if variant is not None:
            return (compact(variant.get("options", {})) if new else product.get("name", "")) + ",item_id:"
    return ""
