"""Tool signatures: docstring parsing and the pydantic argument models built from functions."""

import pydantic
import pytest

from sinkflex_lib.envs.signatures import arguments_model, parse_docstring


def _tool(self, order_id: str, item_ids: list[str]) -> str:
    """Do a thing
    over two lines.

    Args:
        order_id: The order id,
            e.g. '#W1'.
        item_ids: Item ids.
    """


def test_parse_docstring_joins_lines():
    assert parse_docstring(_tool.__doc__) == ("Do a thing over two lines.",
                                              {"order_id": "The order id, e.g. '#W1'.", "item_ids": "Item ids."})


def test_model_checks_strictly_and_gives_the_schema():
    model = arguments_model(_tool)
    assert model.model_validate({"order_id": "#W1", "item_ids": ["1"]}).model_dump() == {"order_id": "#W1",
                                                                                         "item_ids": ["1"]}
    for bad in ({"order_id": 1, "item_ids": []}, {"order_id": "#W1", "item_ids": "1"},
                {"order_id": "#W1"}, {"order_id": "#W1", "item_ids": [], "x": "y"}):
        with pytest.raises(pydantic.ValidationError):
            model.model_validate(bad)
    assert model.model_json_schema() == {
        "title": "parameters", "type": "object", "required": ["order_id", "item_ids"],
        "properties": {"order_id": {"title": "Order Id", "type": "string", "description": "The order id, e.g. '#W1'."},
                       "item_ids": {"title": "Item Ids", "type": "array", "items": {"type": "string"},
                                    "description": "Item ids."}}}


def test_model_refuses_undocumented_and_unsupported_arguments():
    def undocumented(self, a: str) -> str:
        """No args section."""

    def unsupported(self, a: int) -> str:
        """X.

        Args:
            a: A number.
        """
    with pytest.raises(ValueError, match="not documented"):
        arguments_model(undocumented)
    with pytest.raises(TypeError, match="unsupported"):
        arguments_model(unsupported)
