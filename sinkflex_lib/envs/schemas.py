"""OpenAI function schemas for the retail tools, generated from their signatures and docstrings.

Convention: a tool's description is its docstring up to ``Args:``; each argument's
description is its line under ``Args:``; ``str`` maps to ``{"type": "string"}`` and
``list[str]`` to an array of strings; every argument is required (as in tau2).
"""

from __future__ import annotations

import inspect
import re

from .tools import TOOL_FUNCTIONS


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    doc = inspect.cleandoc(doc or "")
    head, _, args = doc.partition("Args:")
    description = " ".join(line.strip() for line in head.strip().splitlines() if line.strip())
    params: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        m = re.match(r"\s{2,}(\w+):\s*(.*)", line)
        if m:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return description, params


def _json_type(annotation) -> dict:
    if annotation in ("list[str]", list[str]):
        return {"type": "array", "items": {"type": "string"}}
    if annotation in ("str", str):
        return {"type": "string"}
    raise TypeError(f"unsupported tool argument annotation {annotation!r}")


def tool_schema(name: str) -> dict:
    """The OpenAI function schema ``{"type": "function", "function": {...}}`` of tool `name`."""
    fn = TOOL_FUNCTIONS[name]
    description, arg_docs = _parse_docstring(fn.__doc__)
    properties, required = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.name not in arg_docs:
            raise ValueError(f"tool {name}: argument {p.name!r} is not documented under Args:")
        properties[p.name] = {**_json_type(p.annotation), "description": arg_docs[p.name]}
        required.append(p.name)
    return {"type": "function",
            "function": {"name": name, "description": description,
                         "parameters": {"type": "object", "properties": properties,
                                        "required": required}}}


def tool_schemas() -> list[dict]:
    """Schemas of all 16 tools, sorted by name."""
    return [tool_schema(name) for name in TOOL_FUNCTIONS]
