"""Look-up examples: the weighted tokens are exactly the values the context pairs with their keys
(or with what the user's words name), checked by parsing the decoded text independently."""

import copy
import re

import pytest

from sinkflex_lib.envs.data import load_source
from sinkflex_lib.envs.actions import parse_action
from sinkflex_lib.envs.db import RetailDB
from sinkflex_lib.envs.tools import call_tool
from sinkflex_lib.rl.lookups import (LOOKUP_KEYS, call_lookup, flat_lookup, item_lookup, list_lookup, new_item_lookup,
                                    request_lookup, world_lookup)
from sinkflex_lib.rl.pretrain import train_world


def _spans(tok, r):
    """The decoded text of each run of mask-1 tokens, and the text before it."""
    out, j = [], 0
    while j < len(r.mask):
        if r.mask[j]:
            k = j
            while k < len(r.mask) and r.mask[k]:
                k += 1
            out.append((tok.decode(r.ids[:j]), tok.decode(r.ids[j:k])))
            j = k
        else:
            j += 1
    return out


def _spoken(method) -> str:
    """How the scripted user names a payment method, written out by hand."""
    return {"credit_card": f"my {method.get('brand')} credit card ending in {method.get('last_four')}",
            "paypal": "my PayPal account", "gift_card": "my gift card"}[method["source"]]


def _hint(item) -> str:
    """How the scripted user names an ordered item, written out by hand."""
    return f"the {item['name']} ({', '.join(f'{k} {v}' for k, v in item['options'].items())})"


@pytest.mark.parametrize("seed", range(6))
def test_flat_lookup_weights_the_value_of_the_key_each_call_names(micro_policy, seed):
    tok = micro_policy.tokenizer
    r = flat_lookup(tok, seed, weight=3.0)
    text = tok.decode(r.ids)
    record = dict(kv.split(":", 1) for kv in re.search(r"<\|tool\|>\{(.*?)\}<\|end\|>", text).group(1).split(","))
    assert 4 <= len(record) <= 11 and set(record) <= set(LOOKUP_KEYS)
    spans = _spans(tok, r)
    assert 1 <= len(spans) <= 3
    for before, value in spans:
        key = re.search(r"\((\w+)='$", before).group(1)
        assert value == record[key]
    assert {w for w, m in zip(r.old_logp, r.mask) if m} == {3.0} and not any(w for w, m in zip(r.old_logp, r.mask) if not m)
    assert r.pos == list(range(len(r.ids))) and flat_lookup(tok, seed, weight=3.0).ids == r.ids


@pytest.mark.parametrize("seed", range(8))
def test_world_lookup_picks_the_id_the_users_words_name(micro_policy, seed):
    tok, data = micro_policy.tokenizer, load_source(train_world(0, 0))
    r = world_lookup(tok, data, seed)
    orders, products, users = (data.db.tables[t] for t in ("orders", "products", "users"))
    for before, value in _spans(tok, r):
        said = re.findall(r"<\|user\|>(.*?)<\|end\|>", before)[-1]
        call = before.rsplit("<|assistant|>", 1)[1]
        oid = re.search(r"order_id='(#W\d+)'", call)
        items = orders[oid.group(1)]["items"] if oid else [i for o in orders.values() for i in o["items"]]
        named = [i for i in items if said == _hint(i)]
        if call.startswith("get_product_details"):
            assert value in {i["product_id"] for i in named}
        elif "new_item_ids" in call:
            variants = [v for p in products.values() for v in p["variants"].values()
                        if said == "the variant with " + ", ".join(f"{k} {x}" for k, x in v["options"].items())]
            assert value in {v["item_id"] for v in variants}
        elif "item_ids" in call:
            assert value in {i["item_id"] for i in named}
        else:
            assert "payment_method_id" in call
            m = next(u["payment_methods"][value] for u in users.values() if value in u["payment_methods"])
            assert said == _spoken(m)
    assert r.task_id == "world-lookup" and r.ids and sum(r.mask) > 0


def test_world_lookup_refuses_a_world_without_orders(micro_policy):
    from types import SimpleNamespace

    db = SimpleNamespace(tables={"users": {"u": {"orders": [], "payment_methods": {}}}, "orders": {}, "products": {}})
    with pytest.raises(ValueError, match="needs a user with an order"):
        world_lookup(micro_policy.tokenizer, SimpleNamespace(db=db), 0)


def _one_stated_item(make, policy, seed):
    """An item look-up made by `make` in training world 0 (weight 3): (data, rollout, the text
    before its one weighted span, that span, the user's last words)."""
    data = load_source(train_world(0, 0))
    r = make(policy.tokenizer, data, seed, weight=3.0)
    [(before, value)] = _spans(policy.tokenizer, r)
    return data, r, before, value, re.findall(r"<\|user\|>(.*?)<\|end\|>", before)[-1]


@pytest.mark.parametrize("seed", range(6))
def test_item_lookup_states_the_named_item_as_the_order_details_show_it(micro_policy, seed):
    data, r, before, value, said = _one_stated_item(item_lookup, micro_policy, seed)
    oid = re.search(r"return from order (#W\d+) items $", before).group(1)
    named = [i for i in data.db.tables["orders"][oid]["items"]
             if said == _hint(i)]
    assert value in {f"{i['name']},item_id:{i['item_id']}" for i in named}
    details = re.findall(r"<\|tool\|>(\{order_id:.*?)<\|end\|>", before)[-1]
    assert "name:" + value in details                     # the order's tool result holds it verbatim
    assert {w for w, m in zip(r.old_logp, r.mask) if m} == {3.0} and r.task_id == "item-lookup"
    assert item_lookup(micro_policy.tokenizer, data, seed, weight=3.0).ids == r.ids


@pytest.mark.parametrize("seed", range(6))
def test_new_item_lookup_states_the_asked_variant_as_the_product_details_show_it(micro_policy, seed):
    data, r, before, value, said = _one_stated_item(new_item_lookup, micro_policy, seed)
    oid = re.search(r"(?:exchange in order|modify order) (#W\d+)", before).group(1)
    products = data.db.tables["products"]
    asked = [(i, v) for i in data.db.tables["orders"][oid]["items"]
             for v in products[i["product_id"]]["variants"].values()
             if v["item_id"] != i["item_id"]
             and said == _hint(i) + " to the variant with " + ", ".join(f"{k} {x}" for k, x in v["options"].items())]
    assert asked
    options = lambda v: "{" + ",".join(f"{k}:{x}" for k, x in v["options"].items()) + "}"  # noqa: E731
    assert value in {f"{options(v)},item_id:{v['item_id']}" for _, v in asked}
    details = re.findall(r"<\|tool\|>(\{name:.*?)<\|end\|>", before)[-1]  # the product's tool result
    assert "options:" + value in details                   # which holds it verbatim
    assert before.endswith(" for ") or before.endswith(" become ")
    assert {w for w, m in zip(r.old_logp, r.mask) if m} == {3.0} and r.task_id == "new-item-lookup"
    assert new_item_lookup(micro_policy.tokenizer, data, seed, weight=3.0).ids == r.ids


def _confirmed_write(tok, r):
    """(text before the weighted call, the confirmation request, the user's answer, the parsed call)
    of a call or list look-up."""
    [(before, value)] = _spans(tok, r)
    request, answer = re.search(r"<\|assistant\|>(Here are the details.*?)<\|end\|><\|user\|>(.*?)<\|end\|><\|assistant\|>$",
                                before).groups()
    return before, request, answer, parse_action(value)


@pytest.mark.parametrize("seed", range(10))
def test_call_lookup_weights_a_write_call_that_repeats_its_confirmed_request(micro_policy, seed):
    tok, data = micro_policy.tokenizer, load_source(train_world(0, 0))
    r = call_lookup(tok, data, seed, weight=3.0)
    before, request, answer, call = _confirmed_write(tok, r)
    args = call.arguments
    assert answer == "yes" and f"order {args['order_id']}" in request and args["payment_method_id"] in request
    stated = re.findall(r"item_id:(\d+)", request)                 # the ids in the order the request states them
    assert stated == args["item_ids"] + args.get("new_item_ids", [])
    order = data.db.tables["orders"][args["order_id"]]
    assert call.name in ({"modify_pending_order_items"} if order["status"] == "pending"
                         else {"return_delivered_order_items", "exchange_delivered_order_items"})
    for iid in stated:                                            # each stated as a tool result above shows it
        assert f"item_id:{iid}" in before[: before.index("Here are the details")]
    text, failed = call_tool(RetailDB(data.db), call.name, args)  # a write the tools accept
    assert not failed, text
    assert {w for w, m in zip(r.old_logp, r.mask) if m} == {3.0} and r.task_id == "call-lookup"
    assert call_lookup(tok, data, seed, weight=3.0).ids == r.ids


@pytest.mark.parametrize("seed", range(10))
def test_list_lookup_weights_a_call_of_two_or_three_items_right_after_its_request(micro_policy, seed):
    tok, data = micro_policy.tokenizer, load_source(train_world(0, 0))
    r = list_lookup(tok, data, seed, weight=3.0)
    before, request, answer, call = _confirmed_write(tok, r)
    assert before.startswith("<|assistant|>Here are the details")   # nothing before the request: no tool results
    args = call.arguments
    assert answer == "yes" and 2 <= len(args["item_ids"]) <= 3
    assert re.findall(r"item_id:(\d+)", request) == args["item_ids"] + args.get("new_item_ids", [])
    order = data.db.tables["orders"][args["order_id"]]
    assert set(args["item_ids"]) <= {i["item_id"] for i in order["items"]}
    text, failed = call_tool(RetailDB(data.db), call.name, args)  # a write the tools accept
    assert not failed, text
    assert {w for w, m in zip(r.old_logp, r.mask) if m} == {3.0} and r.task_id == "list-lookup"
    assert len(r.ids) < 400 and list_lookup(tok, data, seed, weight=3.0).ids == r.ids


def test_list_lookup_refuses_a_world_without_an_order_of_two_items(micro_policy):
    data = copy.deepcopy(load_source(train_world(0, 0)))   # the loaded world is cached: edit a copy
    for order in data.db.tables["orders"].values():
        order["items"] = order["items"][:1]
    with pytest.raises(ValueError, match="2\\+ items"):
        list_lookup(micro_policy.tokenizer, data, 0)


def _options(options: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


@pytest.mark.parametrize("seed", range(10))
def test_request_lookup_states_the_items_and_variants_the_users_words_name(micro_policy, seed):
    tok, data = micro_policy.tokenizer, load_source(train_world(0, 0))
    orders, products = data.db.tables["orders"], data.db.tables["products"]
    r = request_lookup(tok, data, seed, weight=3.0)
    [(before, request)] = _spans(tok, r)
    assert before.endswith("<|assistant|>Here are the details of the action: I will ")
    said = re.findall(r"<\|user\|>(.*?)<\|end\|>", before)[-1]
    oid = re.search(r"order (#W\d+)", said).group(1)
    assert said.startswith(("I want to return the ", f"In order {oid} I want to ")) and "you" not in said.lower().split()
    order = orders[oid]
    named = sorted((i for i in order["items"] if _hint(i) in said), key=lambda i: said.index(_hint(i)))
    assert 1 <= len(named) <= 3 and len(order["items"]) >= 2      # the ordered items the user names, in turn
    wanted = [next(v for v in products[i["product_id"]]["variants"].values()
                   if f"{_hint(i)} to the variant with {_options(v['options'])}" in said) for i in named
              if " to the variant with " in said]
    stated = re.findall(r"item_id:(\d+)", request)               # in the order the request states them
    assert stated == [i["item_id"] for i in named] + [v["item_id"] for v in wanted]
    for iid in stated:                                            # each stated as a tool result above shows it
        assert f"item_id:{iid}" in before
    method = re.search(r"(?:refund to|settled with) (\w+)", request).group(1)
    m = data.db.tables["users"][order["user_id"]]["payment_methods"][method]
    assert _spoken(m) in said and request.endswith("Please answer yes or no.")
    assert {w for w, k in zip(r.old_logp, r.mask) if k} == {3.0} and r.task_id == "request-lookup"
    assert request_lookup(tok, data, seed, weight=3.0).ids == r.ids
