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
        assert params["type"] == "object" and set(params["required"]) == set(params["properties"])
        assert all(p["description"] for p in params["properties"].values())
    items = next(s for s in schemas if s["function"]["name"] == "modify_pending_order_items")
    assert items["function"]["parameters"]["properties"]["item_ids"]["type"] == "array"


@needs_tau2_data
def test_matches_tau2_names_arguments_and_types():
    ref = {t["name"]: t["openai_schema"]["function"]
           for t in json.loads((TAU2_DATA.parent / "tools_schema.json").read_text())}
    mine = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert set(ref) == set(mine)
    for name, f in ref.items():
        props = f["parameters"]["properties"]
        assert list(mine[name]["parameters"]["properties"]) == list(props), name
        assert mine[name]["parameters"]["required"] == f["parameters"].get("required", []), name
        for arg, spec in props.items():
            assert mine[name]["parameters"]["properties"][arg]["type"] == spec["type"], (name, arg)
