"""Each tool's success and error paths on a hand-made database, against hand-computed results."""

import json

import pytest

from sinkflex_lib.envs.tools import READ_TOOLS, TOOL_NAMES, WRITE_TOOLS, call_tool


def ok(db, name, **args):
    out, err = call_tool(db, name, args)
    assert not err, out
    return out


def fails(db, name, message, **args):
    before, owned = db.hash(), set(db.owned)
    out, err = call_tool(db, name, args)
    assert err and out == f"Error: {message}", out
    assert db.hash() == before  # errors leave the database untouched
    assert db.owned == owned  # and copy no record


def test_sixteen_tools():
    assert len(TOOL_NAMES) == 16
    assert WRITE_TOOLS == {"cancel_pending_order", "exchange_delivered_order_items",
                           "modify_pending_order_address", "modify_pending_order_items",
                           "modify_pending_order_payment", "modify_user_address",
                           "return_delivered_order_items"}
    assert READ_TOOLS == {"find_user_id_by_email", "find_user_id_by_name_zip", "get_item_details",
                          "get_order_details", "get_product_details", "get_user_details", "list_all_product_types"}
    assert set(TOOL_NAMES) - READ_TOOLS - WRITE_TOOLS == {"calculate", "transfer_to_human_agents"}


def test_unknown_tool_and_bad_arguments(tiny_db):
    assert call_tool(tiny_db, "drop_table", {}) == ("Error: Tool 'drop_table' not found.", True)
    out, err = call_tool(tiny_db, "get_order_details", {})
    assert err and "missing required argument" in out and "order_id" in out
    out, err = call_tool(tiny_db, "get_order_details", {"order_id": "#W1", "x": 1})
    assert err and "unexpected argument" in out
    out, err = call_tool(tiny_db, "return_delivered_order_items",
                         {"order_id": "#W3", "item_ids": "s_red", "payment_method_id": "paypal_1"})
    assert err and "list of strings" in out
    out, err = call_tool(tiny_db, "get_order_details", {"order_id": 3})    # no coercion of a number
    assert err and out == "Error: get_order_details() argument 'order_id' must be a string", out
    out, err = call_tool(tiny_db, "return_delivered_order_items",
                         {"order_id": "#W3", "item_ids": ["s_red", 7], "payment_method_id": "paypal_1"})
    assert err and "'item_ids' must be a list of strings" in out
    assert call_tool(tiny_db, "get_order_details", ["#W1"]) == (
        "Error: arguments of get_order_details must be an object, got list", True)


def test_find_user(tiny_db):
    assert ok(tiny_db, "find_user_id_by_email", email="ann.lee@EXAMPLE.com") == "ann_lee_1"
    fails(tiny_db, "find_user_id_by_email", "User not found", email="nobody@example.com")
    assert ok(tiny_db, "find_user_id_by_name_zip", first_name="ann", last_name="LEE", zip="78701") == "ann_lee_1"
    fails(tiny_db, "find_user_id_by_name_zip", "User not found", first_name="Ann", last_name="Lee", zip="78702")


def test_get_details_render_records_in_field_order(tiny_db):
    order = json.loads(ok(tiny_db, "get_order_details", order_id="#W1"))
    assert list(order) == ["order_id", "user_id", "address", "items", "status", "fulfillments",
                           "payment_history", "cancel_reason", "exchange_items", "exchange_new_items",
                           "exchange_payment_method_id", "exchange_price_difference", "return_items",
                           "return_payment_method_id"]
    assert list(order["address"]) == ["address1", "address2", "city", "country", "state", "zip"]
    user = ok(tiny_db, "get_user_details", user_id="bob_ray_2")
    assert user.startswith('{"user_id": "bob_ray_2", "name": {"first_name": "Bob"')
    # integer prices in the file print as floats, as tau2's pydantic models make them
    assert '"price": 8.0' in ok(tiny_db, "get_product_details", product_id="p_mug")
    assert json.loads(ok(tiny_db, "get_item_details", item_id="s_blue"))["price"] == 12.5
    fails(tiny_db, "get_order_details", "Order not found", order_id="#W0")
    fails(tiny_db, "get_user_details", "User not found", user_id="zed")
    fails(tiny_db, "get_product_details", "Product not found", product_id="s_red")
    fails(tiny_db, "get_item_details", "Item not found", item_id="p_shirt")
    assert ok(tiny_db, "list_all_product_types") == '{"Mug": "p_mug", "Shirt": "p_shirt"}'


def test_calculate(tiny_db):
    assert ok(tiny_db, "calculate", expression="10 / 3") == "3.33"
    assert ok(tiny_db, "calculate", expression="(2 + 2)") == "4.0"
    assert ok(tiny_db, "calculate", expression="-1.005 * 2") == str(round(-2.01, 2))
    fails(tiny_db, "calculate", "Invalid characters in expression", expression="__import__('os')")
    assert call_tool(tiny_db, "calculate", {"expression": "1 / 0"})[1]
    assert call_tool(tiny_db, "calculate", {"expression": "9 ** 9 ** 9"})[1]


def test_transfer(tiny_db):
    assert ok(tiny_db, "transfer_to_human_agents", summary="help") == "Transfer successful"


def test_cancel(tiny_db):
    fails(tiny_db, "cancel_pending_order", "Order not found", order_id="#W0", reason="no longer needed")
    fails(tiny_db, "cancel_pending_order", "Non-pending order cannot be cancelled", order_id="#W3",
          reason="no longer needed")
    fails(tiny_db, "cancel_pending_order", "Invalid reason", order_id="#W1", reason="too expensive")
    out = json.loads(ok(tiny_db, "cancel_pending_order", order_id="#W2", reason="ordered by mistake"))
    assert out["status"] == "cancelled" and out["cancel_reason"] == "ordered by mistake"
    assert out["payment_history"][-1] == {"transaction_type": "refund", "amount": 8.0,
                                          "payment_method_id": "gift_card_1"}
    assert tiny_db.users["ann_lee_1"]["payment_methods"]["gift_card_1"]["balance"] == 13.0
    # the shared base is untouched (copy-on-write)
    assert tiny_db.base.tables["orders"]["#W2"]["status"] == "pending"


def test_modify_address(tiny_db):
    args = dict(address1="9 Elm", address2="Apt 1", city="Reno", state="NV", country="USA", zip="89501")
    fails(tiny_db, "modify_pending_order_address", "Non-pending order cannot be modified", order_id="#W3", **args)
    out = json.loads(ok(tiny_db, "modify_pending_order_address", order_id="#W1", **args))
    assert out["address"] == {"address1": "9 Elm", "address2": "Apt 1", "city": "Reno",
                              "country": "USA", "state": "NV", "zip": "89501"}
    assert out["status"] == "pending"
    out = json.loads(ok(tiny_db, "modify_user_address", user_id="ann_lee_1", **args))
    assert list(out["address"]) == ["address1", "address2", "city", "country", "state", "zip"]
    fails(tiny_db, "modify_user_address", "User not found", user_id="zed", **args)


def test_modify_payment(tiny_db):
    fails(tiny_db, "modify_pending_order_payment", "Non-pending order cannot be modified",
          order_id="#W3", payment_method_id="gift_card_1")
    fails(tiny_db, "modify_pending_order_payment", "Payment method not found",  # another user's method
          order_id="#W1", payment_method_id="paypal_2")
    fails(tiny_db, "modify_pending_order_payment", "The new payment method should be different from the current one",
          order_id="#W1", payment_method_id="credit_card_1")
    fails(tiny_db, "modify_pending_order_payment", "Insufficient gift card balance to pay for the order",
          order_id="#W1", payment_method_id="gift_card_1")  # 5.0 < 26.0
    out = json.loads(ok(tiny_db, "modify_pending_order_payment", order_id="#W2", payment_method_id="paypal_1"))
    assert out["payment_history"][1:] == [
        {"transaction_type": "payment", "amount": 8.0, "payment_method_id": "paypal_1"},
        {"transaction_type": "refund", "amount": 8.0, "payment_method_id": "gift_card_1"}]
    assert tiny_db.users["ann_lee_1"]["payment_methods"]["gift_card_1"]["balance"] == 13.0
    fails(tiny_db, "modify_pending_order_payment", "There should be exactly one payment for a pending order",
          order_id="#W2", payment_method_id="credit_card_1")


def test_modify_items_errors(tiny_db):
    base = dict(order_id="#W1", payment_method_id="credit_card_1")
    fails(tiny_db, "modify_pending_order_items", "Non-pending order cannot be modified",
          order_id="#W3", item_ids=["s_red"], new_item_ids=["s_blue"], payment_method_id="paypal_1")
    fails(tiny_db, "modify_pending_order_items", "m_small not found",  # duplicate id beyond the order's count
          item_ids=["m_small", "m_small"], new_item_ids=["m_big", "m_big"], **base)
    fails(tiny_db, "modify_pending_order_items", "The number of items to be exchanged should match",
          item_ids=["s_red"], new_item_ids=["s_blue", "s_blue"], **base)
    fails(tiny_db, "modify_pending_order_items", "The new item id should be different from the old item id",
          item_ids=["s_red"], new_item_ids=["s_red"], **base)
    fails(tiny_db, "modify_pending_order_items", "Variant not found",  # a mug is not a shirt variant
          item_ids=["s_red"], new_item_ids=["m_big"], **base)
    fails(tiny_db, "modify_pending_order_items", "New item s_gold not found or available",
          item_ids=["s_red"], new_item_ids=["s_gold"], **base)
    fails(tiny_db, "modify_pending_order_items", "Payment method not found",
          order_id="#W1", item_ids=["s_red"], new_item_ids=["s_blue"], payment_method_id="gift_card_9")


def test_modify_items_gift_card_boundary(tiny_db):
    # two shirts red->blue: difference 2 * 2.5 = 5.0 equals the balance 5.0: allowed
    out = json.loads(ok(tiny_db, "modify_pending_order_items", order_id="#W1",
                        item_ids=["s_red", "s_red"], new_item_ids=["s_blue", "s_blue"],
                        payment_method_id="gift_card_1"))
    assert out["status"] == "pending (item modified)"
    assert out["payment_history"][-1] == {"transaction_type": "payment", "amount": 5.0,
                                          "payment_method_id": "gift_card_1"}
    assert tiny_db.users["ann_lee_1"]["payment_methods"]["gift_card_1"]["balance"] == 0.0
    assert [i["item_id"] for i in out["items"]] == ["s_blue", "s_blue", "m_small"]
    fails(tiny_db, "modify_pending_order_items", "Non-pending order cannot be modified", order_id="#W1",
          item_ids=["m_small"], new_item_ids=["m_big"], payment_method_id="paypal_1")


def test_modify_items_refund_and_tau2_last_variant_quirk(tiny_db):
    out = json.loads(ok(tiny_db, "modify_pending_order_items", order_id="#W1",
                        item_ids=["m_small", "s_red"], new_item_ids=["m_big", "s_blue"],
                        payment_method_id="paypal_1"))
    # difference: (8 - 6) + (12.5 - 10) = 4.5, charged
    assert out["payment_history"][-1] == {"transaction_type": "payment", "amount": 4.5,
                                          "payment_method_id": "paypal_1"}
    # tau2 quirk: every modified line takes the price/options of the LAST new variant (s_blue)
    assert out["items"][2] == {"name": "Mug", "product_id": "p_mug", "item_id": "m_big",
                               "price": 12.5, "options": {"color": "blue"}}
    assert out["items"][0]["item_id"] == "s_blue" and out["items"][1]["item_id"] == "s_red"


def test_modify_items_insufficient_gift_card(tiny_db):
    fails(tiny_db, "modify_pending_order_items", "Insufficient gift card balance to pay for the new item",
          order_id="#W1", item_ids=["s_red", "s_red", "m_small"],
          new_item_ids=["s_blue", "s_blue", "m_big"], payment_method_id="gift_card_1")


def test_modify_items_refund_to_gift_card(tiny_db):
    out = json.loads(ok(tiny_db, "modify_pending_order_items", order_id="#W2", item_ids=["m_big"],
                        new_item_ids=["m_small"], payment_method_id="gift_card_1"))
    assert out["payment_history"][-1] == {"transaction_type": "refund", "amount": 2.0,
                                          "payment_method_id": "gift_card_1"}
    assert tiny_db.users["ann_lee_1"]["payment_methods"]["gift_card_1"]["balance"] == 7.0


def test_exchange(tiny_db):
    base = dict(order_id="#W3", payment_method_id="paypal_1")
    fails(tiny_db, "exchange_delivered_order_items", "Non-delivered order cannot be exchanged",
          order_id="#W1", item_ids=["s_red"], new_item_ids=["s_blue"], payment_method_id="paypal_1")
    fails(tiny_db, "exchange_delivered_order_items", "Number of s_red not found.",
          item_ids=["s_red", "s_red"], new_item_ids=["s_blue", "s_blue"], **base)
    fails(tiny_db, "exchange_delivered_order_items", "The number of items to be exchanged should match.",
          item_ids=["s_red"], new_item_ids=[], **base)
    fails(tiny_db, "exchange_delivered_order_items", "Variant not found",
          item_ids=["m_small"], new_item_ids=["s_blue"], **base)
    fails(tiny_db, "exchange_delivered_order_items", "New item s_gold not found or available",
          item_ids=["s_red"], new_item_ids=["s_gold"], **base)
    fails(tiny_db, "exchange_delivered_order_items", "Payment method not found",
          order_id="#W3", item_ids=["s_red"], new_item_ids=["s_blue"], payment_method_id="paypal_2")
    fails(tiny_db, "exchange_delivered_order_items",
          "Insufficient gift card balance to pay for the price difference",
          order_id="#W3", item_ids=["s_red"], new_item_ids=["s_black"],
          payment_method_id="gift_card_1")  # 20.0 - 10.0 = 10.0 > 5.0

def test_exchange_success(tiny_db):
    out = json.loads(ok(tiny_db, "exchange_delivered_order_items", order_id="#W3",
                        item_ids=["s_red", "m_small"], new_item_ids=["s_blue", "m_big"],
                        payment_method_id="gift_card_1"))
    assert out["status"] == "exchange requested"
    assert out["exchange_items"] == ["m_small", "s_red"] and out["exchange_new_items"] == ["m_big", "s_blue"]
    assert out["exchange_price_difference"] == 4.5 and out["exchange_payment_method_id"] == "gift_card_1"
    assert tiny_db.users["ann_lee_1"]["payment_methods"]["gift_card_1"]["balance"] == 5.0  # no money moves yet
    assert len(out["payment_history"]) == 1


def test_return(tiny_db):
    base = dict(order_id="#W3")
    fails(tiny_db, "return_delivered_order_items", "Non-delivered order cannot be returned",
          order_id="#W4", item_ids=["m_small"], payment_method_id="paypal_1")
    fails(tiny_db, "return_delivered_order_items", "Payment method not found",
          item_ids=["s_red"], payment_method_id="paypal_2", **base)
    fails(tiny_db, "return_delivered_order_items", "Payment method should be the original payment method",
          item_ids=["s_red"], payment_method_id="credit_card_1", **base)
    fails(tiny_db, "return_delivered_order_items", "Some item not found",
          item_ids=["s_red", "s_red"], payment_method_id="paypal_1", **base)
    out = json.loads(ok(tiny_db, "return_delivered_order_items", item_ids=["s_red", "m_small"],
                        payment_method_id="gift_card_1", **base))  # a gift card is always allowed
    assert out["status"] == "return requested"
    assert out["return_items"] == ["m_small", "s_red"] and out["return_payment_method_id"] == "gift_card_1"


def test_empty_item_lists_are_accepted(tiny_db):
    out = json.loads(ok(tiny_db, "return_delivered_order_items", order_id="#W3", item_ids=[],
                        payment_method_id="paypal_1"))
    assert out["status"] == "return requested" and out["return_items"] == []
