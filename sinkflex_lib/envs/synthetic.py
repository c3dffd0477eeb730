"""Deterministic generator of the synthetic retail set (``data/retail_mini``).

``python -m sinkflex_lib.envs.synthetic [--seed 0] [--out data/retail_mini]`` writes
``<out>/tau2/domains/retail/{db.json,tasks.json,policy.md,split_tasks.json}`` in tau2's
schema. Everything comes from one ``random.Random(seed)``, so the files are identical
bit for bit on every run (:func:`generate` returns their text; a test compares it with the
committed files).

Task kinds (``description.purpose``): cancel, modify_address, modify_items, modify_payment,
return, exchange, user_address, info (with ``communicate_info``), refuse (requests the policy
forbids; gold actions are look-ups only, and ``description.notes`` holds the tempting write
in functional form), transfer, compound (two writes). Every gold write is checked to succeed
and change the database; every tempting refused write is checked to succeed (so doing it
costs the reward).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import zlib
from pathlib import Path

from .db import BaseDB
from .mini_policy import policy_text
from .tools import CANCEL_REASONS, WRITE_TOOLS, call_tool

CATALOG = {  # name -> option axes (our own small catalog)
    "T-Shirt": {"color": ["black", "white", "blue", "red"], "size": ["S", "M", "L", "XL"],
                "material": ["cotton", "polyester"]},
    "Water Bottle": {"capacity": ["500ml", "750ml", "1000ml"],
                     "material": ["glass", "plastic", "stainless steel"],
                     "color": ["black", "blue", "green"]},
    "Desk Lamp": {"color": ["black", "white", "silver"], "brightness": ["low", "medium", "high"],
                  "power source": ["USB", "battery", "AC adapter"]},
    "Running Shoes": {"size": ["7", "8", "9", "10", "11"], "color": ["black", "white", "red"],
                      "material": ["mesh", "leather"]},
    "Backpack": {"color": ["black", "grey", "navy"], "size": ["small", "medium", "large"],
                 "material": ["nylon", "polyester"]},
    "Headphones": {"type": ["over-ear", "on-ear", "in-ear"], "connectivity": ["wired", "wireless"],
                   "color": ["black", "white", "blue"]},
    "Coffee Maker": {"color": ["black", "stainless steel"], "capacity": ["4 cups", "8 cups", "12 cups"],
                     "type": ["drip", "espresso", "french press"]},
    "Yoga Mat": {"thickness": ["4mm", "6mm", "8mm"], "material": ["PVC", "TPE", "natural rubber"],
                 "color": ["green", "purple", "pink"]},
    "Mechanical Keyboard": {"switch type": ["linear", "tactile", "clicky"],
                            "backlight": ["none", "white", "RGB"], "size": ["full size", "80%", "60%"]},
    "Smart Watch": {"color": ["black", "silver", "gold"], "band material": ["silicone", "leather", "metal"],
                    "display": ["LCD", "AMOLED"]},
}
BASE_PRICE = {"T-Shirt": 50, "Water Bottle": 30, "Desk Lamp": 90, "Running Shoes": 140,
              "Backpack": 110, "Headphones": 200, "Coffee Maker": 170, "Yoga Mat": 60,
              "Mechanical Keyboard": 180, "Smart Watch": 320}
FIRST = ["Ada", "Bruno", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas",
         "Keiko", "Luis", "Maya", "Nikhil", "Olga", "Pablo", "Quinn", "Rosa", "Samir", "Tara"]
LAST = ["Alvarez", "Brennan", "Castillo", "Dubois", "Eriksen", "Fontaine", "Gupta", "Haddad",
        "Ibarra", "Jensen", "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov"]
STREETS = ["Oak Street", "Maple Avenue", "Cedar Lane", "Birch Road", "Pine Court", "Elm Drive",
           "Willow Way", "Aspen Place", "Lakeshore Drive", "Hillcrest Road"]
CITIES = [("Portland", "OR", "972"), ("Austin", "TX", "787"), ("Columbus", "OH", "432"),
          ("Denver", "CO", "802"), ("Raleigh", "NC", "276"), ("Madison", "WI", "537"),
          ("Tucson", "AZ", "857"), ("Boise", "ID", "837")]
BRANDS = ["visa", "mastercard", "amex", "discover"]

COUNTS = {"cancel": 35, "modify_address": 30, "modify_items": 35, "modify_payment": 25,
          "return": 35, "exchange": 35, "user_address": 25, "info": 45, "refuse": 35,
          "transfer": 15, "compound": 20}


PARTITIONS = ("train", "eval")


def id_partition(digits: str) -> str:
    """The partition a numeric id part belongs to: "eval" for 1 in 8 of them (by CRC-32),
    "train" for the rest. Worlds generated for one partition draw only its numbers, so no user
    id, e-mail, order, item, product or payment-method id of an eval world occurs in any
    train world (names and the catalogue are shared)."""
    return "eval" if zlib.crc32(digits.encode()) % 8 == 0 else "train"


def _digits(rng: random.Random, n: int, used: set, partition: str | None = None) -> str:
    while True:
        s = str(rng.randint(10 ** (n - 1), 10 ** n - 1))
        if s not in used and (partition is None or id_partition(s) == partition):
            used.add(s)
            return s


def _address(rng: random.Random, city=None) -> dict:
    city, state, prefix = city or rng.choice(CITIES)
    suite = rng.choice(["", f"Suite {rng.randint(100, 999)}", f"Apt {rng.randint(1, 40)}"])
    return {"address1": f"{rng.randint(10, 999)} {rng.choice(STREETS)}", "address2": suite,
            "city": city, "country": "USA", "state": state, "zip": f"{prefix}{rng.randint(10, 99)}"}


def build_db(rng: random.Random, n_users: int = 40, partition: str | None = None) -> dict:
    """Products, users and orders in tau2's record layout (optional order fields omitted).
    partition: draw every numeric id from that :func:`id_partition` (None: any number)."""
    used: set = set()
    digits = lambda n, used: _digits(rng, n, used, partition)  # noqa: E731
    products = {}
    for name, axes in CATALOG.items():
        pid = digits(10, used)
        combos = list(itertools.product(*axes.values()))
        rng.shuffle(combos)
        variants = {}
        for combo in sorted(combos[:rng.randint(7, 12)]):
            iid = digits(10, used)
            variants[iid] = {"item_id": iid, "options": dict(zip(axes, combo)),
                             "available": rng.random() < 0.75,
                             "price": round(BASE_PRICE[name] * rng.uniform(0.8, 1.25), 2)}
        products[pid] = {"name": name, "product_id": pid, "variants": variants}

    names = rng.sample(list(itertools.product(FIRST, LAST)), n_users)
    users, orders = {}, {}
    for first, last in names:
        uid = f"{first.lower()}_{last.lower()}_{digits(4, used)}"
        sources = rng.choice([["credit_card"], ["paypal"], ["credit_card", "gift_card"],
                              ["paypal", "gift_card"], ["credit_card", "paypal"],
                              ["credit_card", "paypal", "gift_card"]])
        methods = {}
        for src in sources:
            pmid = f"{src}_{digits(7, used)}"
            m = {"source": src, "id": pmid}
            if src == "credit_card":
                m.update(brand=rng.choice(BRANDS), last_four=digits(4, set()))
            if src == "gift_card":
                m["balance"] = round(rng.uniform(20, 600), 2)
            methods[pmid] = m
        user = {"user_id": uid, "name": {"first_name": first, "last_name": last},
                "address": _address(rng), "email": f"{first.lower()}.{last.lower()}{digits(4, set())}@example.com",
                "payment_methods": methods, "orders": []}
        for _ in range(rng.randint(2, 4)):
            oid = "#W" + digits(7, used)
            items = []
            for pid in rng.sample(sorted(products), rng.randint(1, 4)):
                p = products[pid]
                v = p["variants"][rng.choice(sorted(p["variants"]))]
                items.append({"name": p["name"], "product_id": pid, "item_id": v["item_id"],
                              "price": v["price"], "options": dict(v["options"])})
            status = rng.choices(["pending", "processed", "delivered", "cancelled"], [4, 2, 4, 1])[0]
            total = round(sum(i["price"] for i in items), 2)
            pm = rng.choice(sorted(methods))
            history = [{"transaction_type": "payment", "amount": total, "payment_method_id": pm}]
            if status == "cancelled":
                history.append({"transaction_type": "refund", "amount": total, "payment_method_id": pm})
            fulfil = [] if status == "pending" else [
                {"tracking_id": [digits(12, used)], "item_ids": [i["item_id"] for i in items]}]
            orders[oid] = {"order_id": oid, "user_id": uid,
                           "address": dict(user["address"]) if rng.random() < 0.8 else _address(rng),
                           "items": items, "status": status, "fulfillments": fulfil,
                           "payment_history": history}
            user["orders"].append(oid)
        users[uid] = user
    return {"products": products, "users": users, "orders": orders}


# ---- task building ---------------------------------------------------------------------------

def _act(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def options_text(options: dict) -> str:
    """Options as the scripted user says them: "color white, size L"."""
    return ", ".join(f"{k} {v}" for k, v in options.items())


def item_text(item: dict) -> str:
    """An ordered item as the scripted user names it: "T-Shirt (color white, size L)"."""
    return f"{item['name']} ({options_text(item['options'])})"


def swap_text(order_id: str, items: list[dict], news: list[dict], method: dict, verb: str) -> str:
    """An exchange's or item change's task text (`verb` "exchange" or "change"): each of `items` to
    its variant in `news`, the price difference through `method`."""
    changes = "; and ".join(f"the {item_text(i)} to the variant with {options_text(v['options'])}"
                            for i, v in zip(items, news))
    return (f"In order {order_id} you want to {verb} {changes}. Any price difference "
            f"should go through your {method_text(method)}. These are all the items you want to {verb}.")


def return_text(order_id: str, items: list[dict], method: dict) -> str:
    """A return's task text: `items` of the order, the refund to `method`."""
    names = " and the ".join(item_text(i) for i in items)
    return f"You want to return the {names} from order {order_id}, with the refund to your {method_text(method)}."


def method_text(m: dict) -> str:
    """A payment method as the scripted user names it."""
    if m["source"] == "credit_card":
        return f"{m['brand']} credit card ending in {m['last_four']}"
    return "gift card" if m["source"] == "gift_card" else "PayPal account"


def _addr_text(a: dict) -> str:
    return ", ".join(x for x in (a["address1"], a["address2"], a["city"], a["state"], a["zip"],
                                 a["country"]) if x)


class GenerationError(RuntimeError):
    """A generated task broke an invariant (a gold write failed, a write did not change the
    database, a tempting write would not succeed): a bug in the generator."""


@dataclasses.dataclass
class TaskSpec:
    """One task as a maker draws it (the user's authentication is added by `build_tasks`).

    reason: the user's reason for calling; actions: the gold actions after authentication;
    communicate: values the agent must tell the user; tempting: a write that would succeed but
    the policy forbids (refuse tasks); notes: why the request is refused; user: the calling
    user, where the last action does not name it through an order or a user id."""
    reason: str
    actions: list[dict]
    communicate: list[str] = dataclasses.field(default_factory=list)
    tempting: dict | None = None
    notes: str | None = None
    user: dict | None = None


class _TaskMaker:
    def __init__(self, rng: random.Random, db: dict):
        self.rng, self.db = rng, db
        self.orders_by_status: dict[str, list[str]] = {}
        for oid, o in db["orders"].items():
            self.orders_by_status.setdefault(o["status"], []).append(oid)

    def _identity(self, user: dict) -> tuple[str, list[dict]]:
        n, a = user["name"], user["address"]
        if self.rng.random() < 0.5:
            known = self.rng.choice([f"You are {n['first_name']} {n['last_name']}, living in zip code {a['zip']}.",
                                     f"Your name is {n['first_name']} {n['last_name']} and your zip code is {a['zip']}."])
            auth = _act("find_user_id_by_name_zip", first_name=n["first_name"],
                        last_name=n["last_name"], zip=a["zip"])
        else:
            known = f"Your name is {n['first_name']} {n['last_name']} and your email is {user['email']}."
            auth = _act("find_user_id_by_email", email=user["email"])
        return known, [auth, _act("get_user_details", user_id=user["user_id"])]

    def _order(self, statuses: tuple[str, ...]) -> tuple[dict, dict]:
        oid = self.rng.choice(sorted(itertools.chain(*(self.orders_by_status.get(s, []) for s in statuses))))
        order = self.db["orders"][oid]
        return order, self.db["users"][order["user_id"]]

    def _swap(self, order: dict, k: int) -> tuple[list, list, list] | None:
        """Pick up to k items with another available variant: (items, new variants, product ids)."""
        cands = []
        for item in order["items"]:
            p = self.db["products"][item["product_id"]]
            alts = [v for v in p["variants"].values() if v["available"] and v["item_id"] != item["item_id"]]
            if alts:
                cands.append((item, alts))
        if not cands:
            return None
        chosen = self.rng.sample(cands, min(k, len(cands)))
        chosen.sort(key=lambda c: order["items"].index(c[0]))
        news = [self.rng.choice(alts) for _, alts in chosen]
        return [c[0] for c in chosen], news, list(dict.fromkeys(c[0]["product_id"] for c in chosen))

    def _pay_for(self, user: dict, diff: float) -> dict:
        ok = [m for m in user["payment_methods"].values()
              if m["source"] != "gift_card" or m["balance"] >= diff]
        return self.rng.choice(ok)

    # each maker returns a TaskSpec, or None when this draw cannot make its kind
    def cancel(self, order=None, user=None):
        if order is None:
            order, user = self._order(("pending",))
        reason = self.rng.choice(CANCEL_REASONS)
        why = "you no longer need it" if reason == "no longer needed" else "you ordered it by mistake"
        text = (f"You want to cancel your order {order['order_id']} because {why}." if self.rng.random() < 0.7
                else f"You want to cancel your pending order that contains the {item_text(order['items'][0])}, because {why}.")
        return TaskSpec(text, [_act("get_order_details", order_id=order["order_id"]),
                                       _act("cancel_pending_order", order_id=order["order_id"], reason=reason)])

    def modify_address(self):
        order, user = self._order(("pending",))
        new = _address(self.rng)
        return TaskSpec(f"You want the order {order['order_id']} shipped to {_addr_text(new)} instead.",
                        [_act("get_order_details", order_id=order["order_id"]),
                         _act("modify_pending_order_address", order_id=order["order_id"], address1=new["address1"],
                              address2=new["address2"], city=new["city"], state=new["state"],
                              country=new["country"], zip=new["zip"])])

    def _swap_task(self, order, user, tool, verb):
        picked = self._swap(order, self.rng.randint(1, 2))
        if picked is None:
            return None
        items, news, pids = picked
        diff = sum(v["price"] - i["price"] for i, v in zip(items, news))
        pm = self._pay_for(user, max(diff, 0))
        text = swap_text(order["order_id"], items, news, pm, verb)
        acts = [_act("get_order_details", order_id=order["order_id"])]
        acts += [_act("get_product_details", product_id=p) for p in pids]
        acts.append(_act(tool, order_id=order["order_id"], item_ids=[i["item_id"] for i in items],
                         new_item_ids=[v["item_id"] for v in news], payment_method_id=pm["id"]))
        return TaskSpec(text, acts)

    def modify_items(self):
        order, user = self._order(("pending",))
        return self._swap_task(order, user, "modify_pending_order_items", "change")

    def exchange(self):
        order, user = self._order(("delivered",))
        return self._swap_task(order, user, "exchange_delivered_order_items", "exchange")

    def modify_payment(self):
        order, user = self._order(("pending",))
        amount = order["payment_history"][0]["amount"]
        old = order["payment_history"][0]["payment_method_id"]
        ok = [m for m in user["payment_methods"].values() if m["id"] != old
              and (m["source"] != "gift_card" or m["balance"] >= amount)]
        if not ok:
            return None
        m = self.rng.choice(ok)
        return TaskSpec(f"You want to pay for order {order['order_id']} with your {method_text(m)} instead.",
                        [_act("get_order_details", order_id=order["order_id"]),
                         _act("modify_pending_order_payment", order_id=order["order_id"], payment_method_id=m["id"])])

    def return_(self):
        order, user = self._order(("delivered",))
        items = self.rng.sample(order["items"], self.rng.randint(1, len(order["items"])))
        items.sort(key=order["items"].index)
        gift = [m for m in user["payment_methods"].values() if m["source"] == "gift_card"]
        original = user["payment_methods"][order["payment_history"][0]["payment_method_id"]]
        m = gift[0] if gift and self.rng.random() < 0.4 else original
        return TaskSpec(return_text(order["order_id"], items, m),
                        [_act("get_order_details", order_id=order["order_id"]),
                         _act("return_delivered_order_items", order_id=order["order_id"],
                              item_ids=[i["item_id"] for i in items], payment_method_id=m["id"])])

    def user_address(self, user=None):
        if user is None:
            user = self.db["users"][self.rng.choice(sorted(self.db["users"]))]
        new = _address(self.rng)
        return TaskSpec(f"You moved and want your default address changed to {_addr_text(new)}.",
                        [_act("modify_user_address", user_id=user["user_id"], address1=new["address1"],
                              address2=new["address2"], city=new["city"], state=new["state"],
                              country=new["country"], zip=new["zip"])])

    def info(self):
        sub = self.rng.choice(["total", "tracking", "gift_balance", "price", "count", "sum"])
        if sub == "total":
            order, user = self._order(("pending", "processed", "delivered", "cancelled"))
            amt = order["payment_history"][0]["amount"]
            return TaskSpec(f"You want to know how much you paid for order {order['order_id']}.",
                            [_act("get_order_details", order_id=order["order_id"])], [str(round(amt, 2))], user=user)
        if sub == "tracking":
            order, user = self._order(("processed", "delivered"))
            return TaskSpec(f"You want the tracking number of your order {order['order_id']}.",
                            [_act("get_order_details", order_id=order["order_id"])],
                            [order["fulfillments"][0]["tracking_id"][0]], user=user)
        if sub == "gift_balance":
            users = [u for u in self.db["users"].values()
                     if any(m["source"] == "gift_card" for m in u["payment_methods"].values())]
            user = self.rng.choice(users)
            bal = next(m["balance"] for m in user["payment_methods"].values() if m["source"] == "gift_card")
            return TaskSpec("You want to know the balance left on your gift card.", [], [str(round(bal, 2))], user=user)
        if sub in ("price", "count"):
            order, user = self._order(("pending", "processed", "delivered", "cancelled"))
            item = self.rng.choice(order["items"])
            p = self.db["products"][item["product_id"]]
            acts = [_act("get_order_details", order_id=order["order_id"]),
                    _act("get_product_details", product_id=p["product_id"])]
            if sub == "price":
                v = self.rng.choice(sorted(p["variants"]))
                v = p["variants"][v]
                return TaskSpec(f"You bought a {p['name']} in order {order['order_id']} and want to know the current "
                                f"price of the {p['name']} variant with {options_text(v['options'])}.",
                                acts, [str(round(v["price"], 2))], user=user)
            n = sum(v["available"] for v in p["variants"].values())
            return TaskSpec(f"You bought a {p['name']} in order {order['order_id']} and want to know how many "
                            f"{p['name']} variants are available right now. Ask for the number.",
                            acts, [str(n)], user=user)
        user = self.rng.choice([u for u in self.db["users"].values() if len(u["orders"]) >= 2])
        o1, o2 = (self.db["orders"][o] for o in user["orders"][:2])
        a1, a2 = o1["payment_history"][0]["amount"], o2["payment_history"][0]["amount"]
        return TaskSpec(f"You want to know how much you paid in total for your orders {o1['order_id']} and "
                        f"{o2['order_id']} together.",
                        [_act("get_order_details", order_id=o1["order_id"]),
                         _act("get_order_details", order_id=o2["order_id"]),
                         _act("calculate", expression=f"{a1} + {a2}")], [str(round(a1 + a2, 2))], user=user)

    def refuse(self):
        sub = self.rng.choice(["cancel_not_pending", "bad_reason", "return_not_delivered",
                               "other_user", "other_product"])
        if sub == "cancel_not_pending":
            order, user = self._order(("processed", "delivered"))
            return TaskSpec(f"You want to cancel your order {order['order_id']} because you no longer need it.",
                            [_act("get_order_details", order_id=order["order_id"])], [],
                            None, "A non-pending order cannot be cancelled.", user=user)
        if sub == "bad_reason":
            order, user = self._order(("pending",))
            return TaskSpec(f"You want to cancel your order {order['order_id']} because you found it cheaper in "
                            f"another store. That is your only reason and you will not give another one.",
                            [_act("get_order_details", order_id=order["order_id"])], [],
                            _act("cancel_pending_order", order_id=order["order_id"], reason="no longer needed"),
                            "The reason is not one of the two accepted ones.", user=user)
        if sub == "return_not_delivered":
            order, user = self._order(("pending", "processed"))
            return TaskSpec(f"You want to return everything in your order {order['order_id']} with the refund to "
                            f"the original payment method.",
                            [_act("get_order_details", order_id=order["order_id"])], [],
                            None, "Only delivered orders can be returned.", user=user)
        if sub == "other_user":
            order, owner = self._order(("pending",))
            user = self.rng.choice([u for u in self.db["users"].values() if u["user_id"] != owner["user_id"]])
            return TaskSpec(f"Your neighbour {owner['name']['first_name']} asked you to cancel their order "
                            f"{order['order_id']} because they no longer need it. You want it cancelled.",
                            [], [], _act("cancel_pending_order", order_id=order["order_id"], reason="no longer needed"),
                            "The order belongs to another customer.", user=user)
        order, user = self._order(("pending",))
        item = order["items"][0]
        other = self.rng.choice([p for p in self.db["products"].values() if p["product_id"] != item["product_id"]])
        return TaskSpec(f"In order {order['order_id']} you want to swap the {item_text(item)} for a "
                        f"{other['name']} instead.",
                        [_act("get_order_details", order_id=order["order_id"])], [], None,
                        "Items can only change to variants of the same product.", user=user)

    def transfer(self):
        order, user = self._order(("delivered", "processed"))
        topic = self.rng.choice([
            ("the package for order {oid} arrived damaged and you want compensation for the trouble, "
             "which you insist a human agent must handle", "compensation for a damaged package"),
            ("you want to split the payment of order {oid} across two payment methods, and if the "
             "agent cannot, you ask for a human agent", "split payment of an order"),
            ("you want to speak to a human agent about order {oid}; you will not explain more",
             "the user asked for a human agent")])
        summary = f"Order {order['order_id']}: {topic[1]}."
        return TaskSpec(f"You contact the store because {topic[0].format(oid=order['order_id'])}.",
                        [_act("get_order_details", order_id=order["order_id"]),
                         _act("transfer_to_human_agents", summary=summary)], user=user)

    def compound(self):
        order, user = self._order(("pending",))
        first, second = self.cancel(order, user), self.user_address(user)
        text1, text2 = first.reason, second.reason
        return TaskSpec(text1 + " Also, " + text2[0].lower() + text2[1:], first.actions + second.actions, user=user)


def _caller(db: dict, arguments: dict) -> dict:
    """The user a write is for: the owner of its order, else its user id's."""
    oid = arguments.get("order_id")
    return db["users"][db["orders"][oid]["user_id"]] if oid else db["users"][arguments["user_id"]]


def _check(base: BaseDB, fresh: str, kind: str, actions: list[dict], tempting: dict | None) -> None:
    """Raise GenerationError unless every gold action succeeds, the database changes exactly when
    a gold action writes, and a tempting write would succeed (so doing it costs the reward)."""
    ep = base.episode()
    for a in actions:
        result, err = call_tool(ep, a["name"], a["arguments"])
        if err:
            raise GenerationError(f"{kind}: gold action {a} fails: {result}")
    if (ep.hash() != fresh) != any(a["name"] in WRITE_TOOLS for a in actions):
        raise GenerationError(f"{kind}: the database changes iff a gold action writes, broken by {actions}")
    if tempting is not None and call_tool(base.episode(), tempting["name"], tempting["arguments"])[1]:
        raise GenerationError(f"{kind}: the tempting write {tempting} would fail")


def build_tasks(rng: random.Random, db: dict) -> list[dict]:
    maker = _TaskMaker(rng, db)
    base = BaseDB(db)
    fresh = base.episode().hash()
    tasks = []
    for kind, count in COUNTS.items():
        made = 0
        while made < count:
            spec = getattr(maker, "return_" if kind == "return" else kind)()
            if spec is None:
                continue
            user = spec.user if spec.user is not None else _caller(db, spec.actions[-1]["arguments"])
            known, auth = maker._identity(user)
            actions = auth + spec.actions
            _check(base, fresh, kind, actions, spec.tempting)
            notes = spec.notes
            if spec.tempting is not None:
                notes = f"{notes} Tempting action: {spec.tempting['name']}(" + ", ".join(
                    f"{k}={v!r}" for k, v in spec.tempting["arguments"].items()) + ")"
            tid = f"{kind}_{made:03d}"
            tasks.append({
                "id": tid,
                "description": {"purpose": kind, "relevant_policies": None, "notes": notes},
                "user_scenario": {"persona": None, "instructions": {
                    "task_instructions": "You are polite and answer the agent's questions briefly.",
                    "domain": "retail", "reason_for_call": spec.reason, "known_info": known,
                    "unknown_info": "You do not remember your user id."}},
                "initial_state": None,
                "evaluation_criteria": {
                    "actions": [{"action_id": f"{tid}_{i}", "name": a["name"], "arguments": a["arguments"],
                                 "info": None} for i, a in enumerate(actions)],
                    "communicate_info": spec.communicate, "nl_assertions": None},
            })
            made += 1
    return tasks


def build_splits(rng: random.Random, tasks: list[dict]) -> dict[str, list[str]]:
    train, test = [], []
    for kind in COUNTS:
        ids = [t["id"] for t in tasks if t["description"]["purpose"] == kind]
        rng.shuffle(ids)
        cut = round(0.7 * len(ids))
        train += sorted(ids[:cut])
        test += sorted(ids[cut:])
    return {"train": train, "test": test, "base": [t["id"] for t in tasks]}


def _dump(obj) -> str:
    return json.dumps(obj, indent=1) + "\n"


def generate_world(seed: int, partition: str | None = None) -> tuple[dict, list[dict], dict]:
    """(db, tasks, splits) of the world generated from `seed`, its ids drawn from `partition`
    ("train", "eval", or None: any number, as data/retail_mini)."""
    if partition not in (None, *PARTITIONS):
        raise ValueError(f"partition must be one of {PARTITIONS} or None, got {partition!r}")
    rng = random.Random(seed)
    db = build_db(rng, partition=partition)
    tasks = build_tasks(rng, db)
    return db, tasks, build_splits(rng, tasks)


def generate(seed: int = 0) -> dict[str, str]:
    """The text of the four files of the synthetic set for `seed` (deterministic)."""
    db, tasks, splits = generate_world(seed)
    return {"db.json": _dump(db), "tasks.json": _dump(tasks),
            "policy.md": policy_text(len(db["products"])), "split_tasks.json": _dump(splits)}


def write(out: str | Path, seed: int = 0) -> Path:
    folder = Path(out) / "tau2" / "domains" / "retail"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in generate(seed).items():
        (folder / name).write_text(text)
    return folder


def main(argv: list[str] | None = None) -> None:
    from ..paths import MINI_DIR
    parser = argparse.ArgumentParser(description="Generate the synthetic retail set.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(MINI_DIR))
    args = parser.parse_args(argv)
    folder = write(args.out, args.seed)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
