"""TRL's view of the policy's chat format: `prepare_tokenizer` for loaded HF tokenizers.

The tool-capable chat template and the response template live in
:mod:`sinkflex_lib.rl.tool_template` (the project tokenizer ships them); they are re-exported here.
"""

from __future__ import annotations

from ...envs import TOOL_NAMES
from ...rl.tool_template import TOOL_CHAT_TEMPLATE, USER_TOOL, response_template

__all__ = ["TOOL_CHAT_TEMPLATE", "USER_TOOL", "prepare_tokenizer", "response_template"]


def prepare_tokenizer(tokenizer, tool_names=(*TOOL_NAMES, USER_TOOL)):
    """Give the policy's tokenizer the tool-capable template and the response template (in
    place; returned). Messages without tool calls render as before."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = response_template(tool_names)
    return tokenizer
