"""Look-up examples for pretraining: copy the value that follows a key in a tool result into a call.

An id made of digits only (item and product ids) has no token of its own to match on: the call's
``product_id='`` and the result's ``product_id:`` share the key two tokens before the value, not the
token just before it, so the one-back match the induction task teaches finds nothing. Two tasks
teach the look-up (EXPERIMENTS.md, section 2, measured):

- `flat_lookup`: a short record ``<|tool|>{k1:v1,...,kn:vn}<|end|>`` of the domain's keys with
  values shaped like its ids, then 1-3 calls ``f(k='v')``; loss on the values only. Dense and short:
  the circuit forms in a few hundred steps.
- `world_lookup`: tool results of a training world as the environment renders them
  (get_user_details, get_order_details, sometimes get_product_details), then 1-4 user hints, each
  the way the scripted user says it ("the T-Shirt (color white, size L)", "the variant with ...",
  "my visa credit card ending in 7860"), each followed by the real tool call whose value it picks.
- `item_lookup`: the same tool results, then a hint naming one of the order's items and the
  confirmation request of a return up to that item; loss on the item as the request states it
  (its name, ",item_id:", the id: :func:`~sinkflex_lib.envs.render.item_label`), the text right
  before the id in the order's tool result. Measured from the `names` stage (EXPERIMENTS.md, section 2):
  300 steps of these alone (batch 16, lr 1e-3) took the first token of the item ids that real
  confirmation requests state from 1 to 22 of 37 (whole ids 1 to 11), teacher-forced.
- `new_item_lookup`: the same with the item's product details, the user's "the T-Shirt (color
  white, size L) to the variant with color black, size M", and the confirmation request of an
  exchange or item change up to the new item; loss on the new item as the request states it (its
  options, ",item_id:", the id), the text right before the id in the product's variants. The
  stage-5 base stated 1 of 23 new items' first id token right, teacher-forced (EXPERIMENTS.md, section 2).
- `call_lookup`: an order's tool result (and its items' products), the whole confirmation request
  of a return, exchange or item change as the oracle states it, the user's "yes", then the write
  call; loss on the call. The call repeats the request's ids one line up, but in lists without the
  words before each id (``item_ids=['...', '...'], new_item_ids=['...']``): the stage-6 base got
  the first token of a new item's id wrong in the call even after a request that stated it right
  (teacher-forced item ids in calls 31%, EXPERIMENTS.md, section 2).
- `list_lookup`: the same request of two or three items, "yes" and the write call, without the
  order's tool results: short (~150 tokens), so many fit a step, and every one steps from an id
  of the call's list to the next. In the oracle's episodes no policy from the shipped base got
  the first token of a list's later id right (0 of 25, `figures/grpo_stage6_base/item_lists.md`), after 250 steps
  of `call_lookup` too; 200 steps of these alone from the shipped base (batch 32, lr 1e-3) took
  it to 139 of 142 in held-out look-ups and 12 of 25 in the episodes, where the requests' own ids
  were then mostly lost; the `lists` pretraining stage after them, 21 of 25 whole with the
  requests' ids back (`figures/grpo_stage6_base/list_probe.md`, `item_lists.md`).
- `request_lookup`: a user's and an order's tool results (and, for an exchange or item change, the
  products of the items asked about), the user's first message asking for a return, exchange or
  item change of 1-3 of the order's items in a generated task's words, then the confirmation
  request that states them; loss on the request from "I will " on. After the lists stage the
  requests' later item ids were the weak copy (13 of 34 whole in the oracle's episodes,
  `figures/grpo_stage6_base/item_lists.md`).

Each returns a `Rollout` layout whose `old_logp` carries the loss weights (as
`warmstart.demonstration`): `weight` on the value tokens, 0 elsewhere; mask 1 on the values.
"""

from __future__ import annotations

import numpy as np

from ..envs.db import RetailDB
from ..envs.oracle import CONFIRM_PREFIX, confirmation_request, tool_call_json
from ..envs.render import item_label
from ..envs.synthetic import item_text, method_text, options_text, return_text, swap_text
from ..envs.tools import call_tool
from ..envs.users import first_person
from .chat import ASSISTANT, END, canonical_action, render_message
from .rollout import Rollout

# keys of the retail tool results, and the call that takes each id-like one
LOOKUP_KEYS = ("product_id", "item_id", "order_id", "user_id", "payment_method_id", "name", "price", "zip",
               "city", "status", "email", "address1", "state", "country", "amount", "id", "source", "brand",
               "balance")
CALL_OF_KEY = {"product_id": "get_product_details", "order_id": "get_order_details",
               "user_id": "get_user_details", "item_id": "return_delivered_order_items",
               "payment_method_id": "modify_pending_order_payment"}


def _digits(rng, n: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, n))


def _value(rng) -> str:
    """A value shaped like the data's: a 10-digit id, an order id, a payment method id or a zip."""
    r = rng.random()
    if r < 0.5:
        return _digits(rng, 10)
    if r < 0.7:
        return "#W" + _digits(rng, 7)
    if r < 0.85:
        return str(rng.choice(["credit_card_", "paypal_", "gift_card_"])) + _digits(rng, 7)
    return _digits(rng, 5)


def _layout(tokenizer, context: str, queries: list[tuple[str, str, str]], weight: float, max_tokens: int,
            task: str, seed: int) -> Rollout:
    """Context tokens, then per (text before the value, value, text after it): the three in order,
    the value weighted (mask 1), then <|end|>; cut at `max_tokens`."""
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ids = enc(context)
    weights = [0.0] * len(ids)
    for head, value, close in queries:
        h, v, t = enc(head), enc(value), enc(close + END)
        ids += h + v + t
        weights += [0.0] * len(h) + [weight] * len(v) + [0.0] * len(t)
    r = Rollout(task, seed)
    for j, (x, w) in enumerate(zip(ids[:max_tokens], weights[:max_tokens])):
        r.append(int(x), 1, j, mask=int(w > 0), logp=w)
    return r


def flat_lookup(tokenizer, seed: int, weight: float = 1.0, max_tokens: int = 512) -> Rollout:
    """A flat record of 4-11 distinct keys and 1-3 calls that copy one of its values each."""
    rng = np.random.default_rng(seed)
    keys = [str(k) for k in rng.choice(LOOKUP_KEYS, int(rng.integers(4, 12)), replace=False)]
    values = [_value(rng) for _ in keys]
    context = render_message("tool", "{" + ",".join(f"{k}:{v}" for k, v in zip(keys, values)) + "}")
    picks = rng.permutation(len(keys))[: int(rng.integers(1, 4))]
    queries = [(f"{ASSISTANT}{CALL_OF_KEY.get(keys[i], 'lookup')}({keys[i]}='", values[i], "')") for i in picks]
    return _layout(tokenizer, context, queries, weight, max_tokens, "lookup", seed)


def _tool(db, name: str, **args) -> str:
    text, _ = call_tool(RetailDB(db), name, args)
    return render_message("tool", text)


def _user_order_item(db, rng, who: str) -> tuple[str, str, dict]:
    """A random user with an order, one of their orders and one of its items: (user id, order id, item)."""
    users = db.tables["users"]
    with_orders = [u for u, rec in users.items() if any(o in db.tables["orders"] for o in rec["orders"])]
    if not with_orders:
        raise ValueError(f"{who} needs a user with an order (every user of a generated world has 2-4)")
    uid = with_orders[int(rng.integers(len(with_orders)))]
    orders = [o for o in users[uid]["orders"] if o in db.tables["orders"]]
    oid = orders[int(rng.integers(len(orders)))]
    items = db.tables["orders"][oid]["items"]
    return uid, oid, items[int(rng.integers(len(items)))]


def world_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 1536) -> Rollout:
    """Tool results of a user and one of their orders in `data` (a training world's RetailData),
    then user hints and the calls whose id each hint picks (module docstring)."""
    rng = np.random.default_rng(seed)
    db = data.db
    uid, oid, item = _user_order_item(db, rng, "world_lookup")
    user = db.tables["users"][uid]
    context = [_tool(db, "get_user_details", user_id=uid), _tool(db, "get_order_details", order_id=oid)]
    said = render_message("user", f"the {item_text(item)}") + ASSISTANT
    queries = [(said + "get_product_details(product_id='", item["product_id"], "')"),
               (said + f"return_delivered_order_items(order_id='{oid}', item_ids=['", item["item_id"], "'])")]
    if rng.random() < 0.5:
        context.append(_tool(db, "get_product_details", product_id=item["product_id"]))
        variants = list(db.tables["products"][item["product_id"]]["variants"].values())
        v = variants[int(rng.integers(len(variants)))]
        queries.append((render_message("user", f"the variant with {options_text(v['options'])}") + ASSISTANT +
                        f"modify_pending_order_items(order_id='{oid}', item_ids=['{item['item_id']}'], "
                        f"new_item_ids=['", v["item_id"], "'])"))
    methods = list(user["payment_methods"].values())
    m = methods[int(rng.integers(len(methods)))]
    queries.append((render_message("user", f"my {method_text(m)}") + ASSISTANT +
                    f"modify_pending_order_payment(order_id='{oid}', payment_method_id='", m["id"], "')"))
    picks = rng.permutation(len(queries))[: int(rng.integers(1, len(queries) + 1))]
    return _layout(tokenizer, "".join(context), [queries[i] for i in picks], weight, max_tokens,
                   "world-lookup", seed)


def item_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 1536) -> Rollout:
    """Tool results of a user and one of their orders in `data`, a hint naming one of the order's
    items, then a return's confirmation request that states it (module docstring)."""
    rng = np.random.default_rng(seed)
    db = data.db
    uid, oid, item = _user_order_item(db, rng, "item_lookup")
    context = _tool(db, "get_user_details", user_id=uid) + _tool(db, "get_order_details", order_id=oid)
    head = (render_message("user", f"the {item_text(item)}") + ASSISTANT
            + f"{CONFIRM_PREFIX}return from order {oid} items ")
    stated = item_label(db.tables["products"], item["item_id"]) + item["item_id"]
    return _layout(tokenizer, context, [(head, stated, ", refund")], weight, max_tokens, "item-lookup", seed)


def _other_variants(products: dict, item: dict) -> list[dict]:
    """The variants of `item`'s product other than itself, those in stock only if any are (an
    exchange asks for one in stock)."""
    others = [v for v in products[item["product_id"]]["variants"].values() if v["item_id"] != item["item_id"]]
    return [v for v in others if v.get("available")] or others


def new_item_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 1536) -> Rollout:
    """Tool results of a user, one of their orders and one of its items' product in `data`, the
    user's request to change that item to another variant, then an exchange's or item change's
    confirmation request up to the new item, which is weighted (module docstring)."""
    rng = np.random.default_rng(seed)
    db, products = data.db, data.db.tables["products"]
    uid, oid, item = _user_order_item(db, rng, "new_item_lookup")
    others = _other_variants(products, item)
    if not others:
        raise ValueError(f"new_item_lookup: product {item['product_id']} has no other variant")
    new = others[int(rng.integers(len(others)))]
    context = "".join(_tool(db, name, **args) for name, args in (
        ("get_user_details", {"user_id": uid}), ("get_order_details", {"order_id": oid}),
        ("get_product_details", {"product_id": item["product_id"]})))
    old = item_label(products, item["item_id"]) + item["item_id"]
    write = (f"exchange in order {oid} items {old} for " if rng.random() < 0.5
             else f"modify order {oid}: items {old} become ")
    head = (render_message("user", f"the {item_text(item)} to the variant with {options_text(new['options'])}")
            + ASSISTANT + CONFIRM_PREFIX + write)
    stated = item_label(products, new["item_id"], new=True) + new["item_id"]
    return _layout(tokenizer, context, [(head, stated, ", price difference settled with")], weight, max_tokens,
                   "new-item-lookup", seed)


def _write_of(db, rng, order: dict, min_items: int = 1) -> dict:
    """A return or exchange (a delivered order) or an item change (a pending one) of `min_items`-3 of
    `order`'s items, each swapped for another variant of its product (`_other_variants`; itself if none),
    paid or refunded with the order's payment method or one of the user's gift cards: the write's
    action dict, its arguments in the tool's order."""
    products, items = db.tables["products"], order["items"]
    if len(items) < min_items:
        raise ValueError(f"order {order['order_id']} has {len(items)} items, fewer than {min_items}")
    picked = sorted(rng.choice(len(items), int(rng.integers(min_items, min(3, len(items)) + 1)), replace=False))
    args = {"order_id": order["order_id"], "item_ids": [items[i]["item_id"] for i in picked]}
    name = "modify_pending_order_items" if order["status"] == "pending" else (
        "return_delivered_order_items" if rng.random() < 0.4 else "exchange_delivered_order_items")
    if name != "return_delivered_order_items":
        news = []
        for i in picked:
            others = _other_variants(products, items[i]) or [items[i]]
            news.append(others[int(rng.integers(len(others)))]["item_id"])
        args["new_item_ids"] = news
    methods = db.tables["users"][order["user_id"]]["payment_methods"]
    paid = [order["payment_history"][0]["payment_method_id"]]
    choices = paid + sorted(m for m, rec in methods.items() if rec["source"] == "gift_card" and m not in paid)
    args["payment_method_id"] = choices[int(rng.integers(len(choices)))]
    return {"name": name, "arguments": args}


def _writable_orders(db, min_items: int = 1) -> list[dict]:
    """Pending and delivered orders with at least `min_items` items, in id order."""
    orders = [o for _, o in sorted(db.tables["orders"].items())
              if o["status"] in ("pending", "delivered") and len(o["items"]) >= min_items]
    if not orders:
        raise ValueError(f"no pending or delivered order with {min_items}+ items (a generated world has them)")
    return orders


def _confirmed_call(db, action: dict) -> tuple[str, str]:
    """(the confirmation request of `action` as the oracle states it, the user's "yes", up to the
    agent's turn; the write call as the agent renders it)."""
    head = (ASSISTANT + confirmation_request(action, db.tables["products"]) + END
            + render_message("user", "yes") + ASSISTANT)
    return head, canonical_action(tool_call_json(action))


def call_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 3072) -> Rollout:
    """The tool results of a pending or delivered order in `data` and of its items' products, a
    return's, exchange's or item change's confirmation request, the user's "yes", then the write
    call, which is weighted (module docstring). Up to ~2,200 tokens with three products' details."""
    rng = np.random.default_rng(seed)
    db = data.db
    orders = _writable_orders(db)
    order = orders[int(rng.integers(len(orders)))]
    action = _write_of(db, rng, order)
    context = _tool(db, "get_order_details", order_id=order["order_id"])
    if "new_item_ids" in action["arguments"]:
        pids = dict.fromkeys(i["product_id"] for i in order["items"] if i["item_id"] in action["arguments"]["item_ids"])
        context += "".join(_tool(db, "get_product_details", product_id=p) for p in pids)
    head, call = _confirmed_call(db, action)
    return _layout(tokenizer, context, [(head, call, "")], weight, max_tokens, "call-lookup", seed)


def list_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 512) -> Rollout:
    """A return's, exchange's or item change's confirmation request of 2-3 items of an order in
    `data`, the user's "yes", then the write call, which is weighted; no tool results (module docstring)."""
    rng = np.random.default_rng(seed)
    orders = _writable_orders(data.db, min_items=2)
    action = _write_of(data.db, rng, orders[int(rng.integers(len(orders)))], min_items=2)
    head, call = _confirmed_call(data.db, action)
    return _layout(tokenizer, "", [(head, call, "")], weight, max_tokens, "list-lookup", seed)


def _said(db, action: dict) -> str:
    """The user's first message asking for `action` (a return, exchange or item change), as the
    scripted user says a generated task's text (:func:`~sinkflex_lib.envs.users.first_person`)."""
    a = action["arguments"]
    order = db.tables["orders"][a["order_id"]]
    items = [next(i for i in order["items"] if i["item_id"] == x) for x in a["item_ids"]]
    method = db.tables["users"][order["user_id"]]["payment_methods"][a["payment_method_id"]]
    if action["name"] == "return_delivered_order_items":
        return first_person(return_text(a["order_id"], items, method))
    variants = [db.tables["products"][i["product_id"]]["variants"][x] for i, x in zip(items, a["new_item_ids"])]
    verb = "exchange" if action["name"] == "exchange_delivered_order_items" else "change"
    return first_person(swap_text(a["order_id"], items, variants, method, verb))


def request_lookup(tokenizer, data, seed: int, weight: float = 1.0, max_tokens: int = 3072) -> Rollout:
    """The tool results of a user, one of their orders of two or more items and (for a swap) the
    products of the items asked about, the user's request of 1-3 of them as a task states it, then
    the agent's confirmation request, which is weighted from "I will " on (module docstring)."""
    rng = np.random.default_rng(seed)
    db = data.db
    orders = _writable_orders(db, min_items=2)
    order = orders[int(rng.integers(len(orders)))]
    action = _write_of(db, rng, order)
    context = _tool(db, "get_user_details", user_id=order["user_id"])
    context += _tool(db, "get_order_details", order_id=order["order_id"])
    if "new_item_ids" in action["arguments"]:
        pids = dict.fromkeys(i["product_id"] for i in order["items"] if i["item_id"] in action["arguments"]["item_ids"])
        context += "".join(_tool(db, "get_product_details", product_id=p) for p in pids)
    request = confirmation_request(action, db.tables["products"])
    head = render_message("user", _said(db, action)) + ASSISTANT + CONFIRM_PREFIX
    return _layout(tokenizer, context, [(head, request[len(CONFIRM_PREFIX):], "")], weight, max_tokens,
                   "request-lookup", seed)
