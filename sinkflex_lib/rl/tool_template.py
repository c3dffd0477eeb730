"""The policy's chat template with tool calls, and the response template TRL parses them with.

The project tokenizer (data/tokenizer, :func:`sinkflex_lib.rl.chat.train_tokenizer`) ships both;
`sinkflex_lib.integrations.trl.prepare_tokenizer` gives them to a loaded HF tokenizer.

Our text format (:mod:`sinkflex_lib.rl.chat`): `<|role|>content<|end|>` per message, one action
per assistant turn, a tool call written `name(arg='value', items=['a', 'b'])`. TRL's tool loop
(`environment_factory`, `tools=`) needs three things from the tokenizer:

- a chat template that renders an assistant message with `tool_calls` and a `tool` message
  (`trl.chat_template_utils.supports_tool_calling`), and is prefix-preserving: earlier messages
  render to the same tokens whatever follows (`is_chat_template_prefix_preserving`; TRL cuts the
  tool-result tokens out of a rendered conversation and appends them, never re-tokenizing);
- a `response_template` (transformers >= 5.13) that parses a generated turn back into
  `{"role": "assistant", "content": ...}` or `{"role": "assistant", "tool_calls": [...]}`.

`TOOL_CHAT_TEMPLATE` renders messages without tool calls exactly as the project's plain
template does; a tool call as `<|assistant|>name(k='v')<|end|>` (values as Python's repr
writes them: a string with an apostrophe and no double quote in double quotes, lists of
strings in brackets); a tool result as `<|tool|>result<|end|>`, except the result of
`send_message_to_user`, which is the user's reply and is rendered as `<|user|>reply<|end|>`.
One action per turn: an assistant message with more than one tool call, or with both text and a
tool call, is an error. Tools are not listed by the template: the system message lists them
(`compact_system_prompt`), as in our own rollouts.

`response_template(names)` recognises a call only at the start of a turn and only for the
given tool names, closed by `)<|end|>`; anything else is text. Arguments: a quoted string
gives its text (escape sequences such as \n are kept as written), a list `['a', 'b']` or a bare
literal its raw text, which `RetailToolEnv` reads with `ast.literal_eval` where the tool's
signature asks for a list.
"""

from __future__ import annotations

import re

from ..envs import TOOL_NAMES

USER_TOOL = "send_message_to_user"

TOOL_CHAT_TEMPLATE = (
    "{%- macro value(v) -%}"
    "{%- if v is string -%}"
    "{%- if \"'\" in v and '\"' not in v -%}{{ '\"' + v.replace('\\\\', '\\\\\\\\').replace('\\n', '\\\\n') + '\"' }}"
    "{%- else -%}{{ \"'\" + v.replace('\\\\', '\\\\\\\\').replace('\\n', '\\\\n').replace(\"'\", \"\\\\'\") + \"'\" }}"
    "{%- endif -%}"
    "{%- elif v is mapping -%}{{ v | tojson }}"
    "{%- elif v is iterable -%}[{%- for x in v -%}{{ value(x) }}{%- if not loop.last %}, {% endif -%}{%- endfor -%}]"
    "{%- else -%}{{ v | tojson }}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' and m.get('tool_calls') -%}"
    "{%- if m['tool_calls'] | length != 1 or m.get('content') -%}"
    "{{ raise_exception('one action per assistant turn: a single tool call and no text') }}"
    "{%- endif -%}"
    "{%- set call = m['tool_calls'][0] -%}"
    "{%- set f = call['function'] if call['function'] is defined else call -%}"
    "{%- if f['arguments'] is string -%}"
    "{{ raise_exception('tool call arguments must be a mapping, not a JSON string') }}"
    "{%- endif -%}"
    "{{- '<|assistant|>' + f['name'] + '(' -}}"
    "{%- for k, v in f['arguments'].items() -%}{{ k + '=' }}{{ value(v) }}{%- if not loop.last %}, {% endif -%}"
    "{%- endfor -%}"
    "{{- ')<|end|>' -}}"
    "{%- elif m['role'] == 'tool' and m.get('name') == '" + USER_TOOL + "' -%}"
    "{{- '<|user|>' + m['content'] + '<|end|>' -}}"
    "{%- else -%}"
    "{{- '<|' + m['role'] + '|>' + m['content'] + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)

# key=value pairs of a call. `regex` (which transformers compiles these with) allows the repeated
# group name: a quoted string gives its inner text, a list or a bare literal its raw text.
_ARGUMENT = (r"(?P<key>[A-Za-z_]\w*)=(?:'(?P<value>(?:[^'\\]|\\.)*)'|\"(?P<value>(?:[^\"\\]|\\.)*)\""
             r"|(?P<value>\[(?:[^\]'\"]|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")*\])|(?P<value>[^,)\s]+))")


def response_template(tool_names=(*TOOL_NAMES, USER_TOOL)) -> dict:
    """A transformers `response_template` for our turns (module docstring)."""
    names = sorted(tool_names, key=len, reverse=True)
    if not names or not all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in names):
        raise ValueError(f"tool_names must be non-empty identifiers, got {list(tool_names)!r}")
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|assistant|>",
        "fields": {
            "tool_calls": {
                "open_pattern": r"\A(?P<name>" + "|".join(names) + r")\(",
                "close_pattern": r"\)<\|end\|>",
                "repeats": True,
                "content": "xml-inline",
                "content_args": {"tag_pattern": _ARGUMENT},
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
            },
            "content": {"close_pattern": r"<\|end\|>", "content": "text"},
        },
    }

