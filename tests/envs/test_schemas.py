"""Tool schemas: generated from our docstrings; names/arguments/types equal tau2's when its file is here."""

import json

from sinkflex_lib.envs.schemas import tool_schemas
from sinkflex_lib.envs.tools import TOOL_NAMES

from .conftest import TAU2_DATA, needs_tau2_data


def test_schema_shape():
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_NAMES)
    for s in schemas:
        f = s["function"]
        assert s["type"] == "function" and f["description"]
        params = f["parameters"]
        assert params["type"] == "object" and set(params.get("required", [])) == set(params["properties"])
        assert all(p["description"] for p in params["properties"].values())
    items = next(s for s in schemas if s["function"]["name"] == "modify_pending_order_items")
    assert items["function"]["parameters"]["properties"]["item_ids"]["type"] == "array"


def _without_descriptions(schema):
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    return schema


@needs_tau2_data
def test_parameters_equal_tau2s_but_for_our_descriptions():
    """Names, argument order, types, titles and required lists: exactly tau2's schemas."""
    ref = {t["name"]: t["openai_schema"]["function"]
           for t in json.loads((TAU2_DATA.parent / "tools_schema.json").read_text())}
    mine = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert list(ref) == list(mine)
    for name, f in ref.items():
        assert list(mine[name]["parameters"]["properties"]) == list(f["parameters"]["properties"]), name
        assert _without_descriptions(mine[name]["parameters"]) == _without_descriptions(f["parameters"]), name


def test_tool_schemas_are_fresh_objects_each_call():
    from sinkflex_lib.envs.schemas import tool_schema, tool_schemas

    first = tool_schemas()
    first[0]["function"]["name"] = "changed"
    again = tool_schemas()
    assert again[0]["function"]["name"] != "changed"
    assert again == [tool_schema(s["function"]["name"]) for s in again]
