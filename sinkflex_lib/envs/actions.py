"""Parsing the agent's one-string action into a tool call, a message to the user, or an error.

Three forms, tried in this order on the stripped string:
1. JSON tool call: ``{"name": "get_order_details", "arguments": {"order_id": "#W1"}}``
   (``arguments`` may also be a JSON-encoded string, as OpenAI returns it). Anything that
   starts with ``{`` must be such an object.
2. Functional form: ``get_order_details(order_id='#W1')``, keyword arguments with Python
   literal values only. Anything of the shape ``identifier(...)``, or starting with
   ``tool_name(`` for one of the 16 tools, is taken as a call.
3. Otherwise plain text to the user. A message containing ``###STOP###`` ends the episode.
Malformed calls become :class:`ParseError` (the environment shows it as an error
observation); this module never raises on bad input.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Union

from .tools import TOOL_NAMES

STOP_TOKEN = "###STOP###"
_FUNCTIONAL = re.compile(r"^[A-Za-z_]\w*\(.*\)$", re.DOTALL)
_CALL_START = re.compile(r"^([A-Za-z_]\w*)\(")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    content: str

    @property
    def is_stop(self) -> bool:
        return STOP_TOKEN in self.content


@dataclass(frozen=True)
class ParseError:
    error: str


Action = Union[ToolCall, Message, ParseError]


def _parse_json(text: str) -> Action:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return ParseError(f"action starts with '{{' but is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParseError('a JSON action must be an object {"name": <tool>, "arguments": {...}}')
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return ParseError("'arguments' is a string that is not valid JSON")
    if not isinstance(args, dict):
        return ParseError(f"'arguments' must be an object, got {type(args).__name__}")
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        return ParseError(f"unexpected key(s) {extra} in JSON action; allowed: name, arguments")
    return ToolCall(obj["name"], args)


def _parse_functional(text: str) -> Action:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        return ParseError(f"could not parse functional tool call: {e.msg}")
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return ParseError("functional tool call must look like name(arg='value', ...)")
    if node.args:
        return ParseError("functional tool call takes keyword arguments only: name(arg='value')")
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            return ParseError("functional tool call cannot use **kwargs")
        try:
            args[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            return ParseError(f"argument {kw.arg!r} must be a Python literal")
    return ToolCall(node.func.id, args)


def parse_action(action: Any) -> Action:
    """Parse one agent action string (see module docstring). Never raises."""
    if not isinstance(action, str):
        return ParseError(f"action must be a string, got {type(action).__name__}")
    text = action.strip()
    if not text:
        return ParseError("empty action: send a tool call or a message to the user")
    if text.startswith("{"):
        return _parse_json(text)
    start = _CALL_START.match(text)
    if STOP_TOKEN not in text and (_FUNCTIONAL.match(text) or (start and start.group(1) in TOOL_NAMES)):
        return _parse_functional(text)
    return Message(text)


def format_call(call: ToolCall) -> str:
    """A tool call in functional form, as tau2 prints it: ``name(arg='v', n=['a'])``."""
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
