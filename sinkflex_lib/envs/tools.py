"""The 16 retail agent tools, with tau2's names, arguments, checks, messages and outputs.

Conventions (those of tau2's retail domain, see the project's notes on tau2's tools)
- Every tool validates everything before it changes anything, so a failing call leaves the
  database untouched; failures raise :class:`ToolError` and reach the agent as
  ``"Error: <message>"`` through :func:`call_tool`.
- Records are returned as ``json.dumps(record)`` in tau2's field order; ids and plain values
  are returned as strings unchanged.
- Writes go through ``db.own(table, key)`` (copy-on-write, see :mod:`.db`).
- The method docstrings are the agent-facing tool descriptions; each signature with them is
  one validated pydantic model (:data:`ARGUMENTS`, :mod:`.signatures`), from which
  :mod:`.schemas` makes the OpenAI function schemas.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import operator
import time
import warnings
from typing import Any, Callable

import pydantic

from .db import RetailDB
from .signatures import arguments_model, validation_message

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."


class ToolError(ValueError):
    """A tool refused the call; the database is unchanged."""


def tool(kind: str) -> Callable:
    """Mark a :class:`RetailTools` method as an agent tool of `kind` "read", "write" or "generic"."""
    def mark(fn):
        fn.tool_kind = kind
        return fn
    return mark


# calculate: tau2 checks the characters, then evaluates with Python. This evaluator gives the
# same results and messages, within bounds (time and memory stay small for any input).
CALC_CHARS = frozenset("0123456789+-*/(). ")
MAX_EXPRESSION_LENGTH = 1000   # characters; also bounds operator chains (the evaluator loops)
MAX_INT_BITS = 10_000          # integers beyond this size (~3000 digits) are refused
MAX_EVAL_SECONDS = 1.0
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_UNOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _children(node: ast.AST) -> list:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Starred):
        return [node.value]
    if isinstance(node, ast.Call):
        return [node.func, *node.args]
    if isinstance(node, ast.Tuple):
        return list(node.elts)
    return []


def _int_bits(op: ast.operator, a, b) -> float:
    """The size in bits of int `a op b` for * and ** (0 otherwise), without computing it."""
    if type(a) is not int or type(b) is not int:
        return 0
    if isinstance(op, ast.Mult):
        return a.bit_length() + b.bit_length()
    if isinstance(op, ast.Pow) and b > 0 and abs(a) > 1:
        return b if b > MAX_INT_BITS else b * math.log2(abs(a))
    return 0


def _apply(node: ast.AST, args: list):
    """One node of the expression, its operands evaluated (Python's semantics and messages)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        if _int_bits(node.op, *args) > MAX_INT_BITS:
            raise ToolError(f"Result too large (integers are limited to {MAX_INT_BITS} bits)")
        return _BINOPS[type(node.op)](*args)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        return _UNOPS[type(node.op)](args[0])
    if isinstance(node, ast.Starred):
        return args[0]
    if isinstance(node, ast.Tuple):
        return tuple(args)
    if isinstance(node, ast.Call):
        raise TypeError(f"'{type(args[0]).__name__}' object is not callable")
    raise ToolError("Invalid expression")


def _evaluate(root: ast.AST):
    """Evaluate an expression tree in post-order with an explicit stack (no recursion)."""
    deadline = time.monotonic() + MAX_EVAL_SECONDS
    todo, values = [(root, False)], []
    while todo:
        if time.monotonic() > deadline:
            raise ToolError(f"Expression took longer than {MAX_EVAL_SECONDS} s to evaluate")
        node, ready = todo.pop()
        kids = _children(node)
        if not ready and kids:
            todo.append((node, True))
            todo.extend((k, False) for k in reversed(kids))
            continue
        args = values[len(values) - len(kids):]
        del values[len(values) - len(kids):]
        values.append(_apply(node, args))
    return values[0]


def calculate_expression(expression: str) -> str:
    """tau2's `calculate`: `str(round(float(eval(expression)), 2))` for expressions of digits,
    + - * / ( ) . and spaces, as Python evaluates them (// and ** included). Raises ToolError
    with Python's message on failure, and beyond MAX_EXPRESSION_LENGTH, MAX_INT_BITS and
    MAX_EVAL_SECONDS; parentheses nest at most 200 deep (Python's parser, as in tau2)."""
    if not all(c in CALC_CHARS for c in expression):
        raise ToolError("Invalid characters in expression")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ToolError(f"Expression too long ({len(expression)} characters; the limit is "
                        f"{MAX_EXPRESSION_LENGTH})")
    try:
        with warnings.catch_warnings():  # "'int' object is not callable; perhaps you missed a comma?"
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = compile(expression.lstrip(" "), "<string>", "eval", ast.PyCF_ONLY_AST)
        return str(round(float(_evaluate(tree.body)), 2))
    except (SyntaxError, ArithmeticError, TypeError, ValueError, RecursionError, MemoryError) as e:
        raise ToolError(str(e) or type(e).__name__) from None


class RetailTools:
    """The agent's tools bound to one episode's :class:`~.db.RetailDB`."""

    def __init__(self, db: RetailDB):
        self.db = db

    # ---- helpers (tau2's messages) -------------------------------------------------------
    def _order(self, order_id: str) -> dict:
        if order_id not in self.db.orders:
            raise ToolError("Order not found")
        return self.db.orders[order_id]

    def _user(self, user_id: str) -> dict:
        if user_id not in self.db.users:
            raise ToolError("User not found")
        return self.db.users[user_id]

    def _product(self, product_id: str) -> dict:
        if product_id not in self.db.products:
            raise ToolError("Product not found")
        return self.db.products[product_id]

    def _variant(self, product_id: str, item_id: str) -> dict:
        product = self._product(product_id)
        if item_id not in product["variants"]:
            raise ToolError("Variant not found")
        return product["variants"][item_id]

    def _payment_method(self, user_id: str, payment_method_id: str) -> dict:
        user = self._user(user_id)
        if payment_method_id not in user["payment_methods"]:
            raise ToolError("Payment method not found")
        return user["payment_methods"][payment_method_id]

    def _own_gift_card(self, user_id: str, payment_method_id: str) -> dict:
        return self.db.own("users", user_id)["payment_methods"][payment_method_id]

    @staticmethod
    def _address(address1, address2, city, country, state, zip) -> dict:
        return {"address1": address1, "address2": address2, "city": city, "country": country,
                "state": state, "zip": zip}

    @staticmethod
    def _count_check(order: dict, item_ids: list[str], message: Callable[[str], str]) -> None:
        in_order = [i["item_id"] for i in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > in_order.count(item_id):
                raise ToolError(message(item_id))

    # ---- generic -------------------------------------------------------------------------
    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: The expression, e.g. '12.5 * 3 + 4'; only digits, + - * /, parentheses, dots and spaces.
        """
        return calculate_expression(expression)

    @tool("generic")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent, with a short summary of the user's issue.

        Use only when the request is within the user's rights but outside what these tools can do,
        or when the user explicitly asks for a human.

        Args:
            summary: A short summary of the user's issue.
        """
        return "Transfer successful"

    # ---- read ----------------------------------------------------------------------------
    @tool("read")
    def find_user_id_by_email(self, email: str) -> str:
        """Look up a user id by email address (case-insensitive).

        Args:
            email: The user's email, e.g. 'jane.doe1234@example.com'.
        """
        for user_id, user in self.db.users.items():
            if user["email"].lower() == email.lower():
                return user_id
        raise ToolError("User not found")

    @tool("read")
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Look up a user id by first name, last name (case-insensitive) and zip code.

        Args:
            first_name: The user's first name, e.g. 'Jane'.
            last_name: The user's last name, e.g. 'Doe'.
            zip: The five-digit zip code of the user's default address, e.g. '12345'.
        """
        for user_id, user in self.db.users.items():
            name = user["name"]
            if (name["first_name"].lower() == first_name.lower()
                    and name["last_name"].lower() == last_name.lower()
                    and user["address"]["zip"] == zip):
                return user_id
        raise ToolError("User not found")

    @tool("read")
    def get_user_details(self, user_id: str) -> str:
        """Return a user's profile: name, default address, email, payment methods and order ids.

        Args:
            user_id: The user id, e.g. 'jane_doe_1234'.
        """
        return json.dumps(self._user(user_id))

    @tool("read")
    def get_order_details(self, order_id: str) -> str:
        """Return an order: items, status, fulfillments (tracking) and payment history.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
        """
        return json.dumps(self._order(order_id))

    @tool("read")
    def get_product_details(self, product_id: str) -> str:
        """Return a product type with all its variant items (options, availability, price).

        Args:
            product_id: The product id, e.g. '6086499569'. Not the same thing as an item id.
        """
        return json.dumps(self._product(product_id))

    @tool("read")
    def get_item_details(self, item_id: str) -> str:
        """Return one variant item (options, availability, price), searched across all products.

        Args:
            item_id: The item id, e.g. '1008292230'. Not the same thing as a product id.
        """
        for product in self.db.products.values():
            if item_id in product["variants"]:
                return json.dumps(product["variants"][item_id])
        raise ToolError("Item not found")

    @tool("read")
    def list_all_product_types(self) -> str:
        """List every product type in the store as a JSON map from product name to product id."""
        return json.dumps({p["name"]: p["product_id"] for p in self.db.products.values()},
                          sort_keys=True)

    # ---- write ---------------------------------------------------------------------------
    @tool("write")
    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        """Cancel a pending order and refund every payment to its original method.

        Only for status 'pending'. Gift card refunds are immediate, others take 5-7 business days.
        List the details and get an explicit 'yes' from the user before calling.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            reason: Either 'no longer needed' or 'ordered by mistake'.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolError("Invalid reason")
        methods = [self._payment_method(order["user_id"], p["payment_method_id"])
                   for p in order["payment_history"]]
        refunds = [{"transaction_type": "refund", "amount": p["amount"],
                    "payment_method_id": p["payment_method_id"]} for p in order["payment_history"]]
        for p, method in zip(order["payment_history"], methods):
            if method["source"] == "gift_card":
                card = self._own_gift_card(order["user_id"], p["payment_method_id"])
                card["balance"] = round(card["balance"] + p["amount"], 2)
        order = self.db.own("orders", order_id)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return json.dumps(order)

    @tool("write")
    def modify_pending_order_address(self, order_id: str, address1: str, address2: str, city: str,
                                     state: str, country: str, zip: str) -> str:
        """Replace the shipping address of a pending order.

        List the details and get an explicit 'yes' from the user before calling.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            address1: First address line, e.g. '12 Elm Street'.
            address2: Second address line, e.g. 'Apt 4'.
            city: City, e.g. 'Austin'.
            state: State code, e.g. 'TX'.
            country: Country, e.g. 'USA'.
            zip: Zip code, e.g. '78701'.
        """
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        order = self.db.own("orders", order_id)
        order["address"] = self._address(address1, address2, city, country, state, zip)
        return json.dumps(order)

    @tool("write")
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        """Pay a pending order with a different method of the same user; the old one is refunded.

        A gift card must cover the whole amount. List the details and get an explicit 'yes' first.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            payment_method_id: The new payment method id from the user's profile, e.g. 'gift_card_1234567'.
        """
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment_method(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        user_id = order["user_id"]
        order = self.db.own("orders", order_id)
        order["payment_history"].extend([
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
        ])
        if method["source"] == "gift_card":
            card = self._own_gift_card(user_id, payment_method_id)
            card["balance"] = round(card["balance"] - amount, 2)
        old = self.db.users[user_id]["payment_methods"].get(old_id)
        if old is not None and old["source"] == "gift_card":
            card = self._own_gift_card(user_id, old_id)
            card["balance"] = round(card["balance"] + amount, 2)
        return json.dumps(order)

    @tool("write")
    def modify_pending_order_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                   payment_method_id: str) -> str:
        """Swap items of a pending order for other available variants of the same products.

        Can be done once per order (status becomes 'pending (item modified)'); collect every item first.
        The price difference is charged or refunded on the given method (a gift card must cover it).
        List the details and get an explicit 'yes' from the user before calling.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            item_ids: Item ids to replace, e.g. ['1008292230', '1008292230'] (repeat an id for each unit).
            new_item_ids: Replacement item ids in the same order, same products, e.g. ['1008292231', '1008292232'].
            payment_method_id: Payment method id that pays or receives the difference, e.g. 'paypal_1234567'.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be modified")
        self._count_check(order, item_ids, lambda i: f"{i} not found")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff = 0
        variant = None
        for old_id, new_id in zip(item_ids, new_item_ids):
            if old_id == new_id:
                raise ToolError("The new item id should be different from the old item id")
            item = next(i for i in order["items"] if i["item_id"] == old_id)
            variant = self._variant(item["product_id"], new_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_id} not found or available")
            diff += variant["price"] - item["price"]
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        user_id = order["user_id"]
        order = self.db.own("orders", order_id)
        order["payment_history"].append({
            "transaction_type": "payment" if diff > 0 else "refund",
            "amount": float(abs(diff)), "payment_method_id": payment_method_id})
        if method["source"] == "gift_card":
            card = self._own_gift_card(user_id, payment_method_id)
            card["balance"] = round(card["balance"] - diff, 2)
        for old_id, new_id in zip(item_ids, new_item_ids):
            item = next(i for i in order["items"] if i["item_id"] == old_id)
            item["item_id"] = new_id
            # tau2 quirk, kept for comparability: every line takes the LAST variant's price/options
            item["price"] = variant["price"]
            item["options"] = dict(variant["options"])
        order["status"] = "pending (item modified)"
        return json.dumps(order)

    @tool("write")
    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str],
                                       new_item_ids: list[str], payment_method_id: str) -> str:
        """Request an exchange of delivered items for other available variants of the same products.

        Can be done once per order (status becomes 'exchange requested'); collect every item first.
        The price difference is settled on the given method (a gift card must cover it).
        List the details and get an explicit 'yes' from the user before calling.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            item_ids: Item ids to exchange, e.g. ['1008292230'] (repeat an id for each unit).
            new_item_ids: Replacement item ids in the same order, same products, e.g. ['1008292231'].
            payment_method_id: Payment method id that pays or receives the difference, e.g. 'gift_card_1234567'.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        self._count_check(order, item_ids, lambda i: f"Number of {i} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match.")
        diff = 0
        for old_id, new_id in zip(item_ids, new_item_ids):
            item = next(i for i in order["items"] if i["item_id"] == old_id)
            variant = self._variant(item["product_id"], new_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_id} not found or available")
            diff += variant["price"] - item["price"]
        diff = round(diff, 2)
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order = self.db.own("orders", order_id)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = float(diff)
        return json.dumps(order)

    @tool("write")
    def return_delivered_order_items(self, order_id: str, item_ids: list[str],
                                     payment_method_id: str) -> str:
        """Request a return of delivered items; the refund goes to the original method or a gift card.

        Status becomes 'return requested'. List the details and get an explicit 'yes' first.

        Args:
            order_id: The order id, starting with '#', e.g. '#W1234567'.
            item_ids: Item ids to return, e.g. ['1008292230'] (repeat an id for each unit).
            payment_method_id: The original payment method id or one of the user's gift cards.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] != "gift_card" \
                and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ToolError("Payment method should be the original payment method")
        self._count_check(order, item_ids, lambda i: "Some item not found")
        order = self.db.own("orders", order_id)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return json.dumps(order)

    @tool("write")
    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str,
                            state: str, country: str, zip: str) -> str:
        """Replace a user's default address (existing orders keep theirs).

        List the details and get an explicit 'yes' from the user before calling.

        Args:
            user_id: The user id, e.g. 'jane_doe_1234'.
            address1: First address line, e.g. '12 Elm Street'.
            address2: Second address line, e.g. 'Apt 4'.
            city: City, e.g. 'Austin'.
            state: State code, e.g. 'TX'.
            country: Country, e.g. 'USA'.
            zip: Zip code, e.g. '78701'.
        """
        self._user(user_id)
        user = self.db.own("users", user_id)
        user["address"] = self._address(address1, address2, city, country, state, zip)
        return json.dumps(user)


TOOL_FUNCTIONS: dict[str, Callable] = {
    name: fn for name, fn in sorted(inspect.getmembers(RetailTools, inspect.isfunction))
    if hasattr(fn, "tool_kind")
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_FUNCTIONS)
WRITE_TOOLS: frozenset[str] = frozenset(n for n, f in TOOL_FUNCTIONS.items() if f.tool_kind == "write")
READ_TOOLS: frozenset[str] = frozenset(n for n, f in TOOL_FUNCTIONS.items() if f.tool_kind == "read")


ARGUMENTS: dict[str, type[pydantic.BaseModel]] = {n: arguments_model(f) for n, f in TOOL_FUNCTIONS.items()}


def validate_arguments(name: str, arguments: Any) -> dict:
    """The arguments of a call of tool `name`, checked against its signature (:data:`ARGUMENTS`);
    ToolError (one line) when they do not fit."""
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments of {name} must be an object, got {type(arguments).__name__}")
    try:
        return ARGUMENTS[name].model_validate(arguments).model_dump()
    except pydantic.ValidationError as e:
        raise ToolError(validation_message(name, ARGUMENTS[name], e)) from None


def call_tool(db: RetailDB, name: str, arguments: Any) -> tuple[str, bool]:
    """Run tool `name` on `db`; return (text for the agent, error flag). Never raises: any
    exception becomes ``"Error: <message>"``, as tau2 reports it."""
    if name not in TOOL_FUNCTIONS:
        return f"Error: Tool '{name}' not found.", True
    try:
        args = validate_arguments(name, arguments)
        return TOOL_FUNCTIONS[name](RetailTools(db), **args), False
    except Exception as e:  # noqa: BLE001 (tau2 turns every tool exception into an error message)
        return f"Error: {e}", True
