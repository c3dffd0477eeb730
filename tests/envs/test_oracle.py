"""The oracle's confirmation requests: where they name the write that the request decides."""

import pytest

from sinkflex_lib.envs import WRITE_TOOLS
from sinkflex_lib.envs.actions import ToolCall, format_call, parse_action
from sinkflex_lib.envs.oracle import confirmation_request, decision_spans, with_next_action

ADDR = dict(address1="1 Elm St", address2="Apt 2", city="Austin", state="TX", country="USA", zip="78701")
ITEMS = dict(item_ids=["111"], new_item_ids=["222"], payment_method_id="paypal_9")
# (tool, arguments, the words naming the write, written out by hand)
WRITES = [
    ("cancel_pending_order", dict(order_id="#W1", reason="no longer needed"), "cancel order "),
    ("modify_pending_order_address", dict(order_id="#W1", **ADDR), "change the shipping address of order "),
    ("modify_pending_order_payment", dict(order_id="#W1", payment_method_id="gift_card_3"), "pay order "),
    ("modify_pending_order_items", dict(order_id="#W1", **ITEMS), "modify order "),
    ("exchange_delivered_order_items", dict(order_id="#W1", **ITEMS), "exchange in order "),
    ("return_delivered_order_items", dict(order_id="#W1", item_ids=["111"], payment_method_id="paypal_9"),
     "return from order "),
    ("modify_user_address", dict(user_id="ann_lee_1", **ADDR), "change the default address of "),
]


def test_every_write_tool_is_covered():
    assert {w[0] for w in WRITES} == set(WRITE_TOOLS)


@pytest.mark.parametrize("name,args,words", WRITES)
def test_decision_spans_name_the_write_and_a_cancels_reason(name, args, words):
    message, call = confirmation_request({"name": name, "arguments": args}), format_call(ToolCall(name, args))
    spans = {k: message[s:e] for k, s, e in decision_spans(message, call)}
    assert spans["write_choice"] == words
    assert spans.get("cancel_reason") == args.get("reason")


@pytest.mark.parametrize("name,args,words", WRITES)
def test_confirmed_values_are_every_other_argument_as_the_request_states_it(name, args, words):
    message, call = confirmation_request({"name": name, "arguments": args}), format_call(ToolCall(name, args))
    got = {k: message[s:e] for k, s, e in decision_spans(message, call) if k.startswith("confirmed_")}
    # written out by hand: lists are joined with ", " in the description
    want = {f"confirmed_{k}": ", ".join(v) if isinstance(v, list) else v for k, v in args.items() if v and k != "reason"}
    assert got == want


def test_no_spans_unless_the_message_confirms_that_very_write():
    name, args, _ = WRITES[0]
    message = confirmation_request({"name": name, "arguments": args})
    other = format_call(ToolCall(name, {**args, "order_id": "#W2"}))
    assert decision_spans(message, other) == []
    assert decision_spans(message, "get_order_details(order_id='#W1')") == []
    assert decision_spans("Hello", format_call(ToolCall(name, args))) == []
    assert decision_spans(message, "not a call") == []


def test_a_value_inside_the_words_does_not_cut_them_short():
    for args in (dict(order_id="#W1", reason="order"), dict(order_id="cancel", reason="no longer needed")):
        name = "cancel_pending_order"
        message = confirmation_request({"name": name, "arguments": args})
        spans = {k: message[s:e] for k, s, e in decision_spans(message, format_call(ToolCall(name, args)))}
        assert spans == {"write_choice": "cancel order ", "cancel_reason": args["reason"],
                         "confirmed_order_id": args["order_id"]}


def test_each_turn_is_paired_with_the_action_after_it():
    turns = [("a1", "o1"), ("a2", "o2"), ("a3", "o3")]
    assert with_next_action(turns) == [("a1", "o1", "a2"), ("a2", "o2", "a3"), ("a3", "o3", "")]
    assert with_next_action([]) == []


ITEM_WRITES = ("return_delivered_order_items", "exchange_delivered_order_items", "modify_pending_order_items")


def test_with_products_a_request_states_each_item_as_a_tool_result_showed_it():
    """Every item a confirmation request lists ("<name or options>,item_id:<id>") is text an
    earlier tool result of the same oracle episode contains verbatim: stating it is a copy."""
    from sinkflex_lib.envs import RetailEnv
    from sinkflex_lib.rl.chat import oracle_transcript

    env, checked = RetailEnv("eval-world:0", max_steps=60), 0
    for tid in [f"{kind}_{i:03d}" for kind in ("return", "exchange", "modify_items") for i in range(4)]:
        prompt, turns = oracle_transcript(env, tid)
        seen = prompt
        for action, obs, nxt in with_next_action(turns):
            call = parse_action(nxt) if nxt else None
            if action.startswith("Here are the details") and call.name in ITEM_WRITES:
                spans = {k: action[s:e] for k, s, e in decision_spans(action, nxt, env.db.products)}
                for key in ("item_ids", "new_item_ids"):
                    ids = call.arguments.get(key, [])
                    items = spans[f"confirmed_{key}"].split(", ") if ids else []
                    assert len(items) == len(ids)
                    for text, item_id in zip(items, ids):
                        assert text.endswith(",item_id:" + item_id) and text in seen, (tid, text)
                        checked += 1
            seen += action + obs
    assert checked >= 20


def test_a_slip_drops_the_last_digit_of_the_first_id_and_leaves_the_rest():
    from sinkflex_lib.envs.oracle import slipped_call, tool_call_json
    call = lambda name, **args: tool_call_json({"name": name, "arguments": args})  # noqa: E731
    # (call, its slip), written out by hand
    cases = [(call("get_order_details", order_id="#W9112821"), call("get_order_details", order_id="#W911282")),
             (call("find_user_id_by_email", email="ann.lee3378@example.com"),
              call("find_user_id_by_email", email="ann.lee337@example.com")),
             (call("return_delivered_order_items", order_id="#W1", item_ids=["111", "222"], payment_method_id="paypal_9"),
              call("return_delivered_order_items", order_id="#W", item_ids=["111", "222"], payment_method_id="paypal_9")),
             (call("modify_user_address", user_id="ann_lee_1", **ADDR),
              call("modify_user_address", user_id="ann_lee_", **ADDR)),
             (call("exchange_delivered_order_items", order_id="W", **ITEMS),      # no digit in the order id: the next id
              call("exchange_delivered_order_items", order_id="W", item_ids=["11"], new_item_ids=["222"],
                   payment_method_id="paypal_9"))]
    for action, slip in cases:
        assert slipped_call(action) == slip
    for action in ("I'd be happy to help.", call("calculate", expression="1 + 2"), call("list_all_product_types"),
                   call("find_user_id_by_name_zip", first_name="Ann", last_name="Lee", zip="78701")):
        assert slipped_call(action) is None


def test_slip_points_are_the_calls_with_an_id():
    from sinkflex_lib.envs import RetailEnv
    from sinkflex_lib.envs.oracle import oracle_script, slip_points
    task = RetailEnv("eval-world:3").data.tasks["cancel_000"]
    # greeting, find by e-mail, user, order, confirmation request, cancel, report (read by hand)
    assert len(oracle_script(task)) == 7 and slip_points(task) == [1, 2, 3, 5]


def test_id_spans_give_each_item_and_product_id_in_calls_and_requests():
    """Reference by hand: in a call, each item_ids / new_item_ids / product_id value (the other
    arguments not); in the confirmation request of an item write, each id right after its label's
    "item_id:", in the call's order; nothing in other messages."""
    from sinkflex_lib.envs import RetailEnv
    from sinkflex_lib.envs.oracle import id_spans
    from sinkflex_lib.rl.chat import oracle_transcript

    env, found = RetailEnv("eval-world:0", max_steps=60), 0
    for tid in [f"{kind}_{i:03d}" for kind in ("return", "exchange", "modify_items", "cancel") for i in range(3)]:
        _, turns = oracle_transcript(env, tid)
        for action, _, nxt in with_next_action(turns):
            spans = id_spans(action, nxt, env.db.products)
            got = [(kind, action[a:b]) for kind, a, b in spans]
            call, after = parse_action(action), parse_action(nxt) if nxt else None
            keys = ("item_ids", "new_item_ids")
            if isinstance(call, ToolCall):
                want = [(k, v) for k in keys for v in call.arguments.get(k, [])]
                want += [("product_id", call.arguments["product_id"])] if "product_id" in call.arguments else []
                assert got == want, (tid, action)
            elif action.startswith("Here are the details") and after.name in ITEM_WRITES:
                assert got == [(f"confirmed_{k}", v) for k in keys for v in after.arguments.get(k, [])], (tid, action)
                assert all(action[:a].endswith(",item_id:") for _, a, _ in spans)
            else:
                assert got == [], (tid, action)
            found += len(got)
    assert found >= 30
    assert id_spans("get_order_details(order_id='#W1')") == [] and id_spans("not a call") == []
