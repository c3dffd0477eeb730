"""One validated signature per tool: a pydantic model of its arguments, built from the function.

Convention (as tau2's tools): a tool's description is its docstring up to ``Args:``; each
argument's description is its line(s) under ``Args:``; every argument is required; values are
checked strictly (a string must be a string, ``list[str]`` a list of strings; no coercion), and
unknown arguments are refused. The JSON schema of the model (`model_json_schema()`) is the
tool's ``parameters`` schema, titled ``"parameters"`` as tau2's are.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable

import pydantic


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description up to ``Args:`` as one line, {argument: its description})."""
    head, _, args = inspect.cleandoc(doc or "").partition("Args:")
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


_TYPES = {"str": str, "list[str]": list[str], str: str, list[str]: list[str]}   # annotation -> type
_TYPE_NAMES = {str: "a string", list[str]: "a list of strings"}


def arguments_model(fn: Callable) -> type[pydantic.BaseModel]:
    """The pydantic model of `fn`'s arguments (``self`` excluded), with the docstring's
    descriptions. Raises TypeError for an annotation other than str / list[str] and
    ValueError for an argument the docstring does not describe."""
    _, docs = parse_docstring(fn.__doc__)
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        kind = _TYPES.get(p.annotation)
        if kind is None:
            raise TypeError(f"{fn.__name__}: unsupported argument annotation {p.annotation!r} of {p.name!r}")
        if p.name not in docs:
            raise ValueError(f"{fn.__name__}: argument {p.name!r} is not documented under Args:")
        fields[p.name] = (kind, pydantic.Field(description=docs[p.name]))
    # unknown arguments are refused, as Python refuses them in tau2; its schemas do not say so
    config = pydantic.ConfigDict(extra="forbid", strict=True,
                                 json_schema_extra=lambda schema: schema.pop("additionalProperties", None))
    return pydantic.create_model("parameters", __config__=config, **fields)


def validation_message(name: str, model: type[pydantic.BaseModel], error: pydantic.ValidationError) -> str:
    """One line for the agent: what is missing, unexpected or of the wrong type in a call of
    tool `name` whose arguments `model` refused."""
    missing, unknown, wrong = [], [], []
    for e in error.errors():
        arg = str(e["loc"][0]) if e["loc"] else ""
        (missing if e["type"] == "missing" else unknown if e["type"] == "extra_forbidden" else wrong).append(arg)
    parts = [f"missing required argument(s) {missing}"] if missing else []
    if unknown:
        parts.append(f"got unexpected argument(s) {unknown}; allowed: {sorted(model.model_fields)}")
    parts += [f"argument {a!r} must be {_TYPE_NAMES[model.model_fields[a].annotation]}"
              for a in dict.fromkeys(wrong) if a in model.model_fields]
    return f"{name}() " + "; ".join(parts or [str(error)])
