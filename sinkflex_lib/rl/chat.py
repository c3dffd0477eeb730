"""The policy's text format and the project's own tokenizer.

One episode is one token sequence, built turn by turn and never re-tokenized:

    <|system|>{system prompt}<|end|>
    <|assistant|>Hi! How can I help you today?<|end|>       (the environment's greeting)
    <|user|>{first user message}<|end|>
    <|assistant|>{SAMPLED action}<|end|>                     (mask 1 on the action and <|end|>)
    <|tool|>{tool result}<|end|>  or  <|user|>...<|end|>  or  <|error|>...<|end|>
    <|assistant|>{SAMPLED action}<|end|> ...

Role markers and observations are prompt (mask 0); only what the policy samples (the action
text and the <|end|> that closes it) has mask 1.

System prompt. For the tiny CPU policy the system text is a compact digest of the policy and
the 16 tool signatures (`compact_system_prompt`), not the full 4k-character policy plus JSON
schemas: a 1M-parameter model with a few thousand tokens of context budget gains nothing from
reading them and pays for every prompt token in every forward pass. A gpt-oss reads the full
policy and the tool schemas in its own format (:mod:`.harmony`).

Tool results. JSON results are shown compactly (no quotes, no spaces after separators):
`{order_id:#W123,status:pending,...}`, an item's id right after the name or options that name it
(:mod:`~sinkflex_lib.envs.render`). This is the rollout worker's "format observation" step; it
keeps every field and value and roughly halves the tokens of a tool result.

Tokenizer. A byte-level BPE (so any text round-trips, no unknown token) with vocabulary
`VOCAB_SIZE`, trained by `tokenizers` on text the project generates deterministically:
the system prompt and oracle episodes of the *train* split of the synthetic retail set
(rendered exactly as above), stored in data/tokenizer/ as a Hugging Face tokenizer directory
with a tool-capable chat template and the response template TRL parses tool calls with
(:mod:`.tool_template`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..envs.actions import ToolCall, format_call, parse_action
from ..envs.render import compact
from ..paths import TOKENIZER_DIR
from .tool_template import TOOL_CHAT_TEMPLATE, response_template

VOCAB_SIZE = 2048

PAD, SYSTEM, USER, ASSISTANT, TOOL, ERROR, END = (
    "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|error|>", "<|end|>")
SPECIAL_TOKENS = [PAD, SYSTEM, USER, ASSISTANT, TOOL, ERROR, END]
ROLE_TOKENS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL, "error": ERROR}

# Jinja chat template equivalent to `render_message`. The saved tokenizer ships the tool-capable
# template of :mod:`.tool_template`, which renders messages without tool calls exactly like this.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")

COMPACT_RULES = (
    "You are a retail support agent. Rules: identify the customer first (email, or first name, "
    "last name and zip) even if they give a user id; serve only that customer; before any write "
    "(cancel, modify, return, exchange, address change) state the exact details and ask them to "
    "confirm with yes; one tool call per turn, no message in the same turn; refuse what the "
    "policy forbids and say why; transfer to a human only when no tool can help. Reply with a "
    "tool call name(arg='value') or a message to the customer. Tools:")


def _signature(schema: dict) -> str:
    fn = schema.get("function", schema)
    return f"{fn['name']}({', '.join(fn['parameters'].get('properties', {}))})"


def compact_system_prompt(tools: list[dict]) -> str:
    """The tiny policy's system text: the rules in brief, then one signature per tool."""
    return COMPACT_RULES + " " + "; ".join(_signature(t) for t in tools) + "."


def compact_json(text: str) -> str:
    """A JSON tool result as :func:`~sinkflex_lib.envs.render.compact` text (no quotes or
    separator spaces, an item's id right after its name or options); other text unchanged."""
    s = text.strip()
    if not s or s[0] not in "{[":
        return text
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        return text
    return compact(obj)


_OBS_LINE = re.compile(r"^(user|tool|error|assistant): ", re.MULTILINE)


def split_observation(obs: str) -> list[tuple[str, str]]:
    """Split an environment observation ("role: content" lines) into (role, content) pairs."""
    starts = list(_OBS_LINE.finditer(obs))
    if not starts:
        return [("user", obs)] if obs else []
    out = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(obs)
        out.append((m.group(1), obs[m.end():end].rstrip("\n")))
    return out


def render_message(role: str, content: str) -> str:
    """One message as text: role marker, content (tool results compacted), <|end|>."""
    if role == "tool":
        content = compact_json(content)
    return ROLE_TOKENS[role] + content + END


def render_observation(obs: str) -> str:
    """An observation's messages, then the <|assistant|> marker that opens the agent's turn."""
    return "".join(render_message(r, c) for r, c in split_observation(obs)) + ASSISTANT


def canonical_action(action: str) -> str:
    """An oracle action in the policy's own form: tool calls in functional form."""
    parsed = parse_action(action)
    return format_call(parsed) if isinstance(parsed, ToolCall) else action


# -- tokenizer -----------------------------------------------------------------------------

# Pre-tokens, in two stages, so that an id, a name or an e-mail is the same token sequence
# wherever it appears (user text, tool result, tool call): copying it is an identity copy.
# Stage 1 cuts the text into identifiers (anything with a digit, '_', '#' or '@', inner dots
# allowed: user ids, order ids, e-mails, item ids, prices, zips), capitalised words (names,
# cities, products), lower-case words with GPT-2's optional leading space, runs of white space
# and single other characters; a space before an identifier or a capitalised word is its own
# token, so "Okafor" is one token in prose, in a tool result and in a call.
# Stage 2 cuts identifiers into letter runs, digit pairs (from the left of each run of digits)
# and single punctuation: "luis.okafor3544@example.com" is `luis . okafor 35 44 @ example . com`
# in every context, and "#W2378156" is `# W 23 78 15 6`.
# (The previous single-stage pattern left " luis" and " Okafor" with a space in prose but not
# in a call; in calibration runs no e-mail copy formed under it.)
_ID = r"[A-Za-z0-9_#@%$-]*[0-9_#@][A-Za-z0-9_#@%$-]*(?:\.[A-Za-z0-9_#@%$-]+)*"
PRETOKEN_PATTERN = (_ID + r"|[A-Z][A-Za-z]*| [a-z]+(?![A-Za-z0-9_#@%$.-]*[0-9_#@])|[a-z]+|\s+"
                    r"|[^\sA-Za-z0-9#@_]")
# stage 2 runs on every stage-1 piece; only identifiers and white-space runs are cut further
PIECE_PATTERN = r" ?[A-Za-z_]+|[0-9]{1,2}|[^A-Za-z0-9_]"


def oracle_transcript(env, task_id: str, seed: int = 0, name_items: bool = True,
                      slip_at: int | None = None, slip: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The oracle episode of `task_id` as (prompt, [(action, observation_after), ...]).

    The prompt is the system text, greeting, first user message and <|assistant|>. name_items:
    confirmation requests name each item as tool results do (:func:`~sinkflex_lib.envs.oracle.describe_write`).
    slip_at: the index of one of the oracle's actions in its script; a slip of it
    (:func:`~sinkflex_lib.envs.oracle.slipped_call`, answered with an error) comes first, as turn
    `slip_at`, and the episode goes on as the oracle's. slip: another action there instead (a
    policy's own, :mod:`.recovery`). A slip must leave the episode as it was: a refused call, an
    unparsed action or a look-up; a message or a write that goes through raises ValueError.
    """
    from ..envs.env import changes_nothing
    from ..envs.oracle import oracle_script, slipped_call
    from .formats import compact_prompt

    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    prompt = compact_prompt(env, obs, info)
    script = oracle_script(info["task"], env.db.products if name_items else None)
    if slip_at is not None:
        slip = slip if slip is not None else slipped_call(script[slip_at])
        if slip is None:
            raise ValueError(f"action {slip_at} of {task_id}'s script has no id to slip: {script[slip_at]!r}")
        script.insert(slip_at, slip)
    turns = []
    for k, action in enumerate(script):
        action = canonical_action(action)
        obs, reward, term, trunc, info = env.step(action)
        if k == slip_at and not changes_nothing(info, term or trunc):
            raise ValueError(f"the slip {action!r} of {task_id} changed the episode: {obs[:120]!r}")
        turns.append((action, render_observation(obs) if not (term or trunc) else ""))
        if term or trunc:
            break
    return prompt, turns


def tokenizer_corpus(source: str = "mini", split: str = "train") -> list[str]:
    """Deterministic training text for the tokenizer: oracle episodes of `split`, with
    confirmation requests that list bare item ids (the text the stored tokenizer was trained on
    before requests named items: the tokenizer, and the checkpoints trained with it, stay valid;
    an item's name is the same tokens either way)."""
    from ..envs import RetailEnv

    env = RetailEnv(source, max_steps=60)
    texts = []
    for tid in env.task_ids(split):
        prompt, turns = oracle_transcript(env, tid, name_items=False)
        texts.append(prompt + "".join(a + END + o for a, o in turns))
    return texts


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts` (deterministic)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKEN_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=END,
                                   additional_special_tokens=SPECIAL_TOKENS[1:-1])
    fast.chat_template = TOOL_CHAT_TEMPLATE
    fast.response_template = response_template()
    return fast


def build_tokenizer(path: str | Path = TOKENIZER_DIR, rebuild: bool = False):
    """Load the project tokenizer from `path`, training and saving it there first if absent."""
    from transformers import AutoTokenizer

    path = Path(path)
    if rebuild or not (path / "tokenizer.json").is_file():
        tok = train_tokenizer(tokenizer_corpus())
        path.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)
