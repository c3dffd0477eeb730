"""Parsing the three action forms and malformed actions."""

import pytest

from sinkflex_lib.envs.actions import Message, ParseError, ToolCall, format_call, parse_action


def test_json_tool_call():
    a = parse_action('{"name": "get_order_details", "arguments": {"order_id": "#W1"}}')
    assert a == ToolCall("get_order_details", {"order_id": "#W1"})
    # OpenAI returns arguments as a JSON string
    a = parse_action('  {"name": "calculate", "arguments": "{\\"expression\\": \\"1+1\\"}"}\n')
    assert a == ToolCall("calculate", {"expression": "1+1"})
    assert parse_action('{"name": "list_all_product_types"}') == ToolCall("list_all_product_types", {})


def test_functional_tool_call():
    a = parse_action("return_delivered_order_items(order_id='#W1', item_ids=['1', '2'], payment_method_id=\"paypal_1\")")
    assert a == ToolCall("return_delivered_order_items",
                         {"order_id": "#W1", "item_ids": ["1", "2"], "payment_method_id": "paypal_1"})
    assert parse_action("list_all_product_types()") == ToolCall("list_all_product_types", {})
    assert format_call(a) == ("return_delivered_order_items(order_id='#W1', item_ids=['1', '2'], "
                              "payment_method_id='paypal_1')")
    assert parse_action(format_call(a)) == a


def test_plain_text_and_stop():
    assert parse_action("Hello (how can I help?)") == Message("Hello (how can I help?)")
    assert parse_action("Thanks!").is_stop is False
    assert parse_action("Bye ###STOP###").is_stop is True
    assert isinstance(parse_action("###STOP###"), Message)
    assert parse_action('["a", "b"]') == Message('["a", "b"]')


@pytest.mark.parametrize("bad", [
    "", "   ", '{"name": "x", "arguments": {', '{"arguments": {}}',
    '{"name": "x", "arguments": [1]}', '{"name": "x", "arguments": "{oops"}', '{"name": "x", "extra": 1}',
    "get_order_details('#W1')", "get_order_details(order_id=os.system('ls'))",
    "get_order_details(order_id='#W1'", "f(**kw)", 42, None,
])
def test_malformed_gives_parse_error(bad):
    assert isinstance(parse_action(bad), ParseError)
