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
observation); this module never raises on bad input: invalid JSON or Python, integers beyond
Python's 4300-digit limit, nesting deeper than the parsers allow, and arguments nested more
than MAX_NESTING levels are all parse errors.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any, Union

from .tools import TOOL_NAMES

STOP_TOKEN = "###STOP###"
MAX_NESTING = 32  # containers inside an argument value; every tool takes strings or lists of strings
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


def _nesting(value: Any) -> int:
    """How deeply lists, tuples, sets and dicts nest in `value` (iterative: any depth)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (list, tuple, set, frozenset)):
            deepest = max(deepest, depth + 1)
            todo.extend((x, depth + 1) for x in v)
    return deepest


def _call(name: str, args: dict) -> Action:
    depth = max((_nesting(v) for v in args.values()), default=0)
    if depth > MAX_NESTING:
        return ParseError(f"tool call arguments nest {depth} levels deep; the limit is {MAX_NESTING}")
    return ToolCall(name, args)


def _loads(text: str) -> Any:
    """json.loads, with every failure (syntax, too deep, too long an integer) a ValueError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{e.msg} at char {e.pos}") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(str(e) or type(e).__name__) from None


def _parse_json(text: str) -> Action:
    try:
        obj = _loads(text)
    except ValueError as e:
        return ParseError(f"action starts with '{{' but is not valid JSON ({e})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParseError('a JSON action must be an object {"name": <tool>, "arguments": {...}}')
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = _loads(args) if args.strip() else {}
        except ValueError:
            return ParseError("'arguments' is a string that is not valid JSON")
    if not isinstance(args, dict):
        return ParseError(f"'arguments' must be an object, got {type(args).__name__}")
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        return ParseError(f"unexpected key(s) {extra} in JSON action; allowed: name, arguments")
    return _call(obj["name"], args)


# What Python's parser raises on pathological input: deep nesting (MemoryError "parser stack
# overflow", RecursionError), null bytes and 4300+ digit integers (ValueError, SyntaxError).
_PARSE_FAILURES = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError)


def _parse_functional(text: str) -> Action:
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal": the agent's typo, not ours
            warnings.simplefilter("ignore", SyntaxWarning)
            node = ast.parse(text, mode="eval").body
    except _PARSE_FAILURES as e:
        reason = getattr(e, "msg", None) or str(e) or type(e).__name__
        return ParseError(f"could not parse functional tool call: {reason}")
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
        except _PARSE_FAILURES:
            return ParseError(f"argument {kw.arg!r} must be a Python literal")
    return _call(node.func.id, args)


def parse_action(action: Any) -> Action:
    """Parse one agent action string (see module docstring). Never raises. An already parsed
    :data:`Action` (a chat format's parse of a turn, :mod:`sinkflex_lib.rl.formats`) is returned as is."""
    if isinstance(action, (ToolCall, Message, ParseError)):
        return action
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


def argument_value_spans(action: str) -> list[tuple[str, int, int]]:
    """(argument name, start, end) character spans of the string values of a tool call in the
    canonical functional form (`format_call`'s: ``name(arg='v', n=['a'])``), list elements one by
    one, in order; [] for anything else (a message, a JSON call, other spacing or quoting)."""
    call = parse_action(action)
    if not isinstance(call, ToolCall):
        return []
    spans, pos = [], 0
    try:
        for name, value in call.arguments.items():
            pos = action.index(f"{name}=", pos)
            for v in (value if isinstance(value, list) else [value]):
                if isinstance(v, str) and v:
                    start = action.index(repr(v), pos) + 1
                    spans.append((name, start, start + len(v)))
                    pos = start + len(v)
    except ValueError:      # not the canonical form
        return []
    return spans


def format_call(call: ToolCall) -> str:
    """A tool call in functional form, as tau2 prints it: ``name(arg='v', n=['a'])``."""
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"
