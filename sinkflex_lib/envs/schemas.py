"""OpenAI function schemas for the retail tools, from their validated signatures.

A tool's schema is ``{"type": "function", "function": {"name", "description", "parameters"}}``
with the description from its docstring and ``parameters`` the JSON schema of its pydantic
argument model (:data:`.tools.ARGUMENTS`, :mod:`.signatures`): the same shape as tau2's.
"""

from __future__ import annotations

import functools
import json

from .signatures import parse_docstring
from .tools import ARGUMENTS, TOOL_FUNCTIONS


def tool_schema(name: str) -> dict:
    """The OpenAI function schema of tool `name`."""
    description, _ = parse_docstring(TOOL_FUNCTIONS[name].__doc__)
    return {"type": "function",
            "function": {"name": name, "description": description,
                         "parameters": ARGUMENTS[name].model_json_schema()}}


def tool_schemas() -> list[dict]:
    """Schemas of all 16 tools, sorted by name (fresh objects each call: pydantic builds them once,
    in ~12 ms, which every environment used to pay)."""
    return json.loads(_tool_schemas_json())


@functools.cache
def _tool_schemas_json() -> str:
    return json.dumps([tool_schema(name) for name in TOOL_FUNCTIONS])
