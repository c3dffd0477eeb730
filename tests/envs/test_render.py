"""Compact tool-result text: every field kept, an item's id right after what names it."""

import json

from sinkflex_lib.envs.render import compact, item_label

PRODUCTS = {"p1": {"name": "Desk Lamp", "product_id": "p1", "variants": {
    "111": {"item_id": "111", "options": {"color": "black"}, "available": True, "price": 5.0},
    "222": {"item_id": "222", "options": {"color": "white"}, "available": False, "price": 6.5}}}}
ORDER_ITEM = {"name": "Desk Lamp", "product_id": "p1", "item_id": "111", "price": 5.0, "options": {"color": "black"}}


def _unquoted(obj) -> str:
    """The same value written out by hand: keys in the given order, no quotes, no spaces."""
    if isinstance(obj, dict):
        return "{" + ",".join(f"{k}:{_unquoted(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_unquoted(v) for v in obj) + "]"
    return obj if isinstance(obj, str) else json.dumps(obj)


def test_an_order_item_id_follows_its_name():
    assert compact({"items": [ORDER_ITEM]}) == _unquoted({"items": [
        {"name": "Desk Lamp", "item_id": "111", "product_id": "p1", "price": 5.0, "options": {"color": "black"}}]})


def test_a_variant_id_follows_its_options():
    variant = PRODUCTS["p1"]["variants"]["222"]
    assert compact(variant) == "{options:{color:white},item_id:222,available:false,price:6.5}"


def test_objects_without_an_item_id_keep_their_order():
    value = {"order_id": "#W1", "status": "pending", "item_ids": ["111", "222"], "address": {"zip": "12345"}}
    assert compact(value) == _unquoted(value)


def test_item_labels_are_the_text_before_the_id_in_a_tool_result():
    assert item_label(PRODUCTS, "111") == "Desk Lamp,item_id:"
    assert item_label(PRODUCTS, "222", new=True) == "{color:white},item_id:"
    assert item_label(PRODUCTS, "999") == ""
    assert item_label(PRODUCTS, "111") + "111" in compact({"items": [ORDER_ITEM]})
    assert item_label(PRODUCTS, "222", new=True) + "222" in compact(PRODUCTS["p1"])
