"""The oracle agent: solves a task from its gold actions with policy-abiding messages.

Script (one environment step per line):
1. ask the user to authenticate (email, or first name + last name + zip);
2. replay the gold actions in order (look-ups included); before each write, list its
   details and ask for an explicit yes (given the database's products, items are stated as tool
   results show them, "Coffee Maker,item_id:3149864224": :func:`describe_write`);
3. report: every ``communicate_info`` string verbatim, then "Is there anything else ...?"
   (for a transfer: the report, the transfer call, then tau2's transfer sentence).
It reads the gold actions, so it is an upper bound for demonstrations and tests, not a
policy to learn from the data the agent would see. :func:`gold_replay_script` is the bare
replay (tool calls, one message with the information, ``###STOP###``).
"""

from __future__ import annotations

import json

from .actions import STOP_TOKEN, ToolCall, argument_value_spans, parse_action
from .render import item_label
from .reward import communicate_info, gold_actions, gold_writes
from .tools import TRANSFER_MESSAGE, WRITE_TOOLS

AUTH_REQUEST = ("I'd be happy to help. First I need to verify your identity: please give me "
                "your email address, or your first name, last name and zip code.")


def tool_call_json(action: dict) -> str:
    return json.dumps({"name": action["name"], "arguments": action.get("arguments") or {}})


def _items(ids: list[str], products: dict | None, new: bool = False) -> str:
    """Item ids as a list; each one after its :func:`~.render.item_label` when `products` is given."""
    label = (lambda i: item_label(products, i, new)) if products else (lambda i: "")  # noqa: E731
    return ", ".join(label(i) + i for i in ids) if ids else "(no items)"


def describe_write(action: dict, products: dict | None = None) -> str:
    """A plain-language description of a write action, listing every argument. With the
    database's `products`, each item id follows the words that name the item in a tool result
    (:mod:`.render`), so stating it continues a copy of those words."""
    n, a = action["name"], action.get("arguments") or {}
    old = lambda: _items(a.get("item_ids", []), products)  # noqa: E731
    new = lambda: _items(a.get("new_item_ids", []), products, new=True)  # noqa: E731
    addr = lambda: ", ".join(a.get(k, "") for k in ("address1", "address2", "city", "state",  # noqa: E731
                                                     "zip", "country") if a.get(k))
    if n == "cancel_pending_order":
        return f"cancel order {a.get('order_id')} with reason '{a.get('reason')}'"
    if n == "modify_pending_order_address":
        return f"change the shipping address of order {a.get('order_id')} to {addr()}"
    if n == "modify_pending_order_payment":
        return f"pay order {a.get('order_id')} with {a.get('payment_method_id')} instead"
    if n == "modify_pending_order_items":
        return (f"modify order {a.get('order_id')}: items {old()} become {new()}, price difference settled with "
                f"{a.get('payment_method_id')}. Please make sure these are all the items you "
                f"want to modify, as an order can be modified only once")
    if n == "exchange_delivered_order_items":
        return (f"exchange in order {a.get('order_id')} items {old()} for {new()}, price difference settled with "
                f"{a.get('payment_method_id')}. Please make sure these are all the items you "
                f"want to exchange")
    if n == "return_delivered_order_items":
        return (f"return from order {a.get('order_id')} items {old()}, refund to {a.get('payment_method_id')}")
    if n == "modify_user_address":
        return f"change the default address of {a.get('user_id')} to {addr()}"
    return f"call {n} with {json.dumps(a)}"


CONFIRM_PREFIX = "Here are the details of the action: I will "


def confirmation_request(action: dict, products: dict | None = None) -> str:
    return (f"{CONFIRM_PREFIX}{describe_write(action, products)}. Do you confirm that I should proceed? "
            "Please answer yes or no.")


def decision_spans(message: str, next_action: str, products: dict | None = None) -> list[tuple[str, int, int]]:
    """What the user's request decides, as (kind, start, end) character spans of `message`,
    if `message` is the confirmation request of the write call `next_action` (else []):
    "write_choice", the words naming the write (from after "I will " to its first argument
    value: "cancel order ", "change the shipping address of order ", ...), and for a cancel
    "cancel_reason", the reason's value. Neither can be copied from a tool result; the call
    after the confirmation only repeats them. Also "confirmed_<argument>", each other argument's
    value where the request states it (an address the user's first message gave, the payment method,
    the items): the copy a write depends on is made here, not in the call after it. `products`:
    the database's, when the request names items by them (:func:`describe_write`)."""
    call = parse_action(next_action)
    if not isinstance(call, ToolCall) or call.name not in WRITE_TOOLS:
        return []
    action = {"name": call.name, "arguments": call.arguments}
    if message != confirmation_request(action, products):
        return []
    text, start = describe_write(action, products), len(CONFIRM_PREFIX)
    # the words before the first argument: what the description reads with every value a marker
    probe = describe_write({"name": call.name, "arguments": {
        k: ["\0"] if isinstance(v, list) else "\0" for k, v in call.arguments.items()}}, products)
    first = probe.find("\0")
    spans = [("write_choice", start, start + (first if first >= 0 else len(probe)))]
    reason = call.arguments.get("reason") if call.name == "cancel_pending_order" else None
    if isinstance(reason, str) and text.endswith(f"'{reason}'"):     # the description's last words
        spans.append(("cancel_reason", start + len(text) - len(reason) - 1, start + len(text) - 1))
    for key, value in call.arguments.items():
        a, b = _value_span(action, key, products) if value and key != "reason" else (-1, -1)
        if a >= 0:
            spans.append((f"confirmed_{key}", start + a, start + b))
    return spans


ID_CHOICES = ("item_ids", "new_item_ids", "product_id")   # arguments whose value picks one of several records


def id_spans(message: str, next_action: str = "", products: dict | None = None) -> list[tuple[str, int, int]]:
    """(argument, start, end) character spans of the item and product ids in `message`, in order:
    each such argument value of a tool call in canonical form ("item_ids", "new_item_ids",
    "product_id"), and each item id the confirmation request of the write `next_action` states
    ("confirmed_item_ids", "confirmed_new_item_ids"; :func:`decision_spans`). An id's first token
    chooses which record it names; its later tokens continue a copy."""
    spans = [(name, a, b) for name, a, b in argument_value_spans(message) if name in ID_CHOICES]
    decided = {kind: (a, b) for kind, a, b in decision_spans(message, next_action, products)}
    for key in ("item_ids", "new_item_ids"):
        if f"confirmed_{key}" in decided:
            pos, end = decided[f"confirmed_{key}"]
            for item in parse_action(next_action).arguments[key]:
                pos = message.index(item, pos, end)
                spans.append((f"confirmed_{key}", pos, pos + len(item)))
                pos += len(item)
    return sorted(spans, key=lambda span: span[1])


def with_next_action(turns: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(action, observation, next action) for each (action, observation) turn; the next action
    is "" after the last turn. A confirmation request is paired with the write it is for."""
    nexts = [a for a, _ in turns[1:]] + [""]
    return [(a, o, n) for (a, o), n in zip(turns, nexts)]


def _value_span(action: dict, key: str, products: dict | None = None) -> tuple[int, int]:
    """Where argument `key`'s value lies in describe_write(action, products) (an item list with
    its labels): the description with that one value a marker has the same text before and after
    it. (-1, -1) if it is not there."""
    value = action["arguments"][key]
    probe = describe_write({**action, "arguments": {**action["arguments"],
                                                    key: ["\0"] if isinstance(value, list) else "\0"}}, products)
    a = probe.find("\0")
    return (a, len(describe_write(action, products)) - (len(probe) - a - 1)) if a >= 0 else (-1, -1)


def report(task: dict, closing: bool = True) -> str:
    info = communicate_info(task)
    notes = (task.get("description") or {}).get("notes") or ""
    if gold_writes(task):
        text = "Thank you, your request has been handled."
    elif (task.get("description") or {}).get("purpose") == "refuse":
        text = "I'm sorry, but I cannot do that under our policy: " + notes.split(" Tempting")[0]
    else:
        text = "Thank you for your patience."
    if info:
        text += " Here is the information you asked about: " + "; ".join(info) + "."
    if closing:
        text += " Is there anything else I can help you with?"
    return text


def oracle_script(task: dict, products: dict | None = None) -> list[str]:
    """The oracle's actions for `task`, in order (see module docstring); with the database's
    `products`, confirmation requests name items as tool results do (:func:`describe_write`)."""
    script = [AUTH_REQUEST]
    for action in gold_actions(task):
        if action["name"] == "transfer_to_human_agents":
            if communicate_info(task):
                script.append(report(task, closing=False))
            script += [tool_call_json(action), TRANSFER_MESSAGE]
            return script
        if action["name"] in WRITE_TOOLS:
            script.append(confirmation_request(action, products))
        script.append(tool_call_json(action))
    script.append(report(task))
    return script


# arguments that name a record: with a digit dropped, no record has the value (ids, e-mails)
ID_ARGUMENTS = ("order_id", "user_id", "email", "payment_method_id", "product_id", "item_id", "item_ids",
                "new_item_ids")


def slipped_call(action: str) -> str | None:
    """A slip of the oracle's tool call `action` (its JSON form): its first argument of
    :data:`ID_ARGUMENTS` (the first id of a list) with the last digit dropped, a value no record
    has, so the environment answers with an error and changes nothing. None for an action that
    is not a call with such an argument (a message, ``calculate``, ``list_all_product_types``)."""
    call = parse_action(action)
    if not isinstance(call, ToolCall):
        return None
    for name, value in call.arguments.items():
        first = value[0] if isinstance(value, list) and value else value
        if name in ID_ARGUMENTS and isinstance(first, str) and any(ch.isdigit() for ch in first):
            cut = max(i for i, ch in enumerate(first) if ch.isdigit())
            first = first[:cut] + first[cut + 1:]
            new = [first, *value[1:]] if isinstance(value, list) else first
            return tool_call_json({"name": call.name, "arguments": {**call.arguments, name: new}})
    return None


def slip_points(task: dict) -> list[int]:
    """The indices in :func:`oracle_script` of `task`'s calls that have a slip (:func:`slipped_call`)."""
    return [k for k, action in enumerate(oracle_script(task)) if slipped_call(action) is not None]


def gold_replay_script(task: dict) -> list[str]:
    """Gold actions as JSON tool calls, a message with the communicate_info, then ###STOP###."""
    script = [tool_call_json(a) for a in gold_actions(task)]
    if communicate_info(task):
        script.append("; ".join(communicate_info(task)))
    return script + [STOP_TOKEN]


class ScriptAgent:
    """An agent that plays a fixed list of actions, then ``###STOP###`` (ignores observations)."""

    def __init__(self, script: list[str]):
        self.script = list(script)
        self._i = 0

    def act(self, observation: str) -> str:
        self._i += 1
        return self.script[self._i - 1] if self._i <= len(self.script) else STOP_TOKEN


class OracleAgent(ScriptAgent):
    """The oracle for one task: ``OracleAgent(task).act(observation) -> action``."""

    def __init__(self, task: dict):
        super().__init__(oracle_script(task))


def tempting_action(task: dict) -> str | None:
    """The refused write a synthetic 'refuse' task tempts the agent with (functional form)."""
    notes = (task.get("description") or {}).get("notes") or ""
    return notes.split("Tempting action: ", 1)[1] if "Tempting action: " in notes else None


def unsafe_script(task: dict) -> list[str]:
    """The oracle's script, but it performs the refused write (asking for a 'yes') before reporting."""
    action = tempting_action(task)
    if action is None:
        raise ValueError(f"task {task.get('id')!r} has no tempting action in description.notes")
    script = oracle_script(task)
    return script[:-1] + [f"Sure, I can do that. Do you confirm that I should proceed with {action}? "
                          "Please answer yes or no.", action] + script[-1:]
