"""gpt-oss's own chat format, Harmony, for the rollout worker (a :class:`.formats.ChatFormat`).

The episode, as openai-harmony renders it (https://github.com/openai/harmony):

    <|start|>system<|message|>{identity, reasoning effort, channels}<|end|>
    <|start|>developer<|message|># Instructions {retail policy} # Tools {namespace functions}<|end|>
    <|start|>assistant<|channel|>final<|message|>Hi! How can I help you today?<|end|>
    <|start|>user<|message|>{first user message}<|end|>
    <|start|>assistant{SAMPLED ... <|call|> or <|return|>}
    <|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{tool result}<|end|>
    <|start|>user<|message|>...<|end|>  or  <|start|>system<|message|>error: ...<|end|>
    <|start|>assistant{SAMPLED ...} ...

A turn is everything sampled after ``<|start|>assistant`` up to ``<|call|>`` (a tool call: the
commentary channel to ``functions.<name>``, JSON arguments) or ``<|return|>`` (a final-channel
message to the user). Analysis-channel messages (reasoning) may come first inside the same turn;
they are sampled and trained (mask 1) and never shown to the user: only the turn's last message
acts. It is parsed by openai-harmony's own parser; a turn it cannot parse, or one without a
call or a final message, is a ``ParseError`` and the environment answers with an error, shown
as a system message.

``<|return|>``: Harmony ends a final message with ``<|return|>`` when sampled and rewrites it
to ``<|end|>`` when the conversation is rendered again as history. Here the sequence is never
re-rendered: the sampled ``<|return|>`` stays in it, so the sequence trained on is exactly the
one sampled. It equals openai-harmony's rendering of the same conversation
(``render_conversation(..., RenderConversationConfig(auto_drop_analysis=False))``: reasoning is
kept, never dropped from history) once every ``<|return|>`` is read as ``<|end|>``
(tests/rl/test_harmony.py, on oracle episodes).

The encoding loads offline (:func:`harmony_encoding`): openai-harmony needs the o200k_base
vocabulary file, taken from a local gpt-oss directory when it has one, else from the copy the
``bpe-openai`` package ships, checked against its sha256.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from pathlib import Path

from ..envs.actions import Action, Message, ParseError, ToolCall, parse_action
from .chat import split_observation
from .formats import ChatFormat

O200K_FILE = "o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
HARMONY_VOCAB_SIZE = 201088          # gpt-oss's embedding rows (o200k_harmony plus reserved ids)
CACHE_DIR = Path(os.environ.get("SINKFLEX_CACHE_DIR", Path.home() / ".cache" / "sinkflex"))
REASONING_EFFORTS = ("low", "medium", "high")


def _o200k_bytes(model_dir: str | os.PathLike | None) -> bytes:
    """The o200k_base vocabulary file: model_dir's own copy if it has one, else bpe-openai's."""
    if model_dir is not None and (Path(model_dir) / O200K_FILE).is_file():
        data = (Path(model_dir) / O200K_FILE).read_bytes()
    else:
        try:
            import bpe_openai
        except ImportError as e:
            raise ImportError("the Harmony format needs the o200k_base vocabulary: "
                              "`pip install bpe-openai` (pinned in pyproject.toml)") from e
        data = gzip.decompress((Path(bpe_openai.__file__).parent / "data" / f"{O200K_FILE}.gz").read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise ValueError(f"{O200K_FILE} has sha256 {digest}, expected {O200K_SHA256}")
    return data


def _vocabulary_folder(model_dir) -> Path:
    """A folder holding the checked o200k_base file: CACHE_DIR, or a temporary folder when
    CACHE_DIR cannot be written."""
    import tempfile

    for folder in (CACHE_DIR, Path(tempfile.gettempdir()) / f"sinkflex-{os.getuid()}"):
        path = folder / O200K_FILE
        try:
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != O200K_SHA256:
                folder.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_bytes(_o200k_bytes(model_dir))
                tmp.replace(path)
            return folder
        except OSError:     # not writable (permissions, a read-only file system)
            continue
    raise PermissionError(f"cannot write {O200K_FILE} to {CACHE_DIR} or the temporary folder; set SINKFLEX_CACHE_DIR")


_ENCODING = None


def harmony_encoding(model_dir: str | os.PathLike | None = None):
    """openai-harmony's gpt-oss encoding, loaded with no network: the checked o200k_base file
    is written once to `CACHE_DIR` (``$SINKFLEX_CACHE_DIR``, default ~/.cache/sinkflex) and
    TIKTOKEN_ENCODINGS_BASE points there. Loaded once per process."""
    global _ENCODING
    if _ENCODING is None:
        import openai_harmony as oh

        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(_vocabulary_folder(model_dir))
        _ENCODING = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    return _ENCODING


# tiktoken's o200k_base pre-tokenization pattern (the regex openai-harmony's encoding splits text with)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""])


def harmony_tokenizer(model_dir: str | os.PathLike | None = None):
    """o200k_harmony as a Hugging Face fast tokenizer (what a gpt-oss directory ships as
    tokenizer.json), built offline from the checked o200k_base file and openai-harmony's special
    tokens at their ids: for a processing class (TRL) or a test directory. Encodes as
    :func:`harmony_encoding` (tests/rl/test_harmony.py). Built in a few seconds, then cached
    next to the vocabulary file."""
    from transformers import PreTrainedTokenizerFast

    folder = _vocabulary_folder(model_dir)
    cached = folder / "o200k_harmony_tokenizer.json"
    if not cached.is_file():
        from transformers.convert_slow_tokenizer import TikTokenConverter

        class _FromFile(TikTokenConverter):
            @staticmethod
            def load_tiktoken_bpe(path):     # tiktoken's file format: "<base64 token> <rank>" per line
                return {base64.b64decode(tok): int(rank)
                        for tok, rank in (line.split() for line in Path(path).read_bytes().splitlines() if line)}

        enc = harmony_encoding(model_dir)
        specials = sorted(enc.special_tokens_set, key=lambda t: enc.encode(t, allowed_special="all")[0])
        tok = _FromFile(vocab_file=str(folder / O200K_FILE), pattern=O200K_PATTERN,
                        extra_special_tokens=specials).converted()
        wrong = [t for t in specials if tok.token_to_id(t) != enc.encode(t, allowed_special="all")[0]]
        if wrong:   # the converter numbers added tokens in order after the vocabulary: ids must be contiguous
            raise ValueError(f"{len(wrong)} Harmony special tokens would get other ids than openai-harmony's, "
                             f"e.g. {wrong[:3]}")
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tok.save(str(tmp))
        tmp.replace(cached)
    return PreTrainedTokenizerFast(tokenizer_file=str(cached), pad_token="<|endoftext|>")


def function_tools(schemas: list[dict]) -> list:
    """Our OpenAI-style tool schemas as Harmony `ToolDescription`s (namespace ``functions``)."""
    from openai_harmony import ToolDescription

    fns = [s.get("function", s) for s in schemas]
    return [ToolDescription.new(f["name"], f.get("description", ""), parameters=f.get("parameters")) for f in fns]


class HarmonyFormat(ChatFormat):
    """Harmony (module docstring). reasoning_effort: "low", "medium" or "high" (the system
    message's ``Reasoning:`` line); instructions: the developer message's text (default: the
    environment's policy)."""

    name = "harmony"

    def __init__(self, encoding=None, reasoning_effort: str = "low", instructions: str | None = None):
        if reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {REASONING_EFFORTS}, got {reasoning_effort!r}")
        self.enc = encoding or harmony_encoding()
        self.reasoning_effort, self.instructions = reasoning_effort, instructions
        sid = lambda s: self.enc.encode(s, allowed_special="all")[0]  # noqa: E731
        self.start_id, self.end_id, self.call_id, self.return_id = (
            sid(t) for t in ("<|start|>", "<|end|>", "<|call|>", "<|return|>"))
        self.pad_id = sid("<|endoftext|>")
        self.stop_ids = frozenset({self.call_id, self.return_id})
        self.close_ids = [self.end_id]
        self.open_turn = [self.start_id] + self.enc.encode("assistant")

    # -- messages ----------------------------------------------------------------------------

    def start_messages(self, env, info: dict) -> list:
        """System, developer (policy and tools) and the environment's greeting."""
        from openai_harmony import DeveloperContent, Message as HMessage, ReasoningEffort, Role, SystemContent

        system = SystemContent.new().with_reasoning_effort(ReasoningEffort(self.reasoning_effort.capitalize()))
        developer = (DeveloperContent.new().with_instructions(self.instructions or info["policy"])
                     .with_function_tools(function_tools(info["tools"])))
        return [HMessage.from_role_and_content(Role.SYSTEM, system),
                HMessage.from_role_and_content(Role.DEVELOPER, developer),
                HMessage.from_role_and_content(Role.ASSISTANT, env.messages[0]["content"]).with_channel("final")]

    def observation_messages(self, obs: str, action: Action | None) -> list:
        """The environment's answer as Harmony messages: the user's reply, the tool's result
        (from ``functions.<name>`` of the call it answers), or an error as a system message."""
        from openai_harmony import Author, Message as HMessage, Role

        out = []
        for role, content in split_observation(obs):
            if role == "tool" and isinstance(action, ToolCall):
                out.append(HMessage.from_author_and_content(Author.new(Role.TOOL, f"functions.{action.name}"), content)
                           .with_channel("commentary").with_recipient("assistant"))
            elif role == "user":
                out.append(HMessage.from_role_and_content(Role.USER, content))
            else:
                out.append(HMessage.from_role_and_content(Role.SYSTEM, f"{role}: {content}"))
        return out

    def render(self, messages: list) -> list[int]:
        from openai_harmony import RenderOptions

        opts = RenderOptions(conversation_has_function_tools=True)
        return [t for m in messages for t in self.enc.render(m, opts)]

    # -- the ChatFormat interface --------------------------------------------------------------

    def prompt(self, env, obs: str, info: dict) -> list[int]:
        return self.render(self.start_messages(env, info) + self.observation_messages(obs, None)) + self.open_turn

    def observation(self, obs: str, action: Action) -> list[int]:
        return self.render(self.observation_messages(obs, action)) + self.open_turn

    def parse(self, sampled: list[int]) -> tuple[str, Action]:
        from openai_harmony import HarmonyError, Role

        text = self.enc.decode(sampled)
        try:
            messages = self.enc.parse_messages_from_completion_tokens(sampled, Role.ASSISTANT, strict=False)
        except (HarmonyError, ValueError) as e:
            return text, ParseError(f"malformed Harmony completion: {e}")
        if not messages:
            return text, ParseError("malformed Harmony completion: no message")
        last = messages[-1]
        content = "".join(getattr(c, "text", "") for c in last.content)
        if last.recipient and last.recipient.startswith("functions."):
            name = last.recipient[len("functions."):]
            return text, parse_action(json.dumps({"name": name, "arguments": content}))
        if last.channel == "final" and last.recipient in (None, "", "user"):
            return text, Message(content)
        return text, ParseError("the turn ended without a tool call (commentary to functions.<name>) "
                                "or a final message to the user")

    def completion(self, action: str) -> list[int]:
        """The tokens a gpt-oss samples for `action` (a functional call or a message): what
        the oracle's turns are in this format. A call ends with <|call|>, a message with <|return|>."""
        from openai_harmony import Message as HMessage, Role

        parsed = parse_action(action)
        if isinstance(parsed, ToolCall):
            msg = (HMessage.from_role_and_content(Role.ASSISTANT, json.dumps(parsed.arguments))
                   .with_channel("commentary").with_recipient(f"functions.{parsed.name}")
                   .with_content_type("<|constrain|>json"))
            ids = self.render([msg])
        elif isinstance(parsed, Message):
            ids = self.render([HMessage.from_role_and_content(Role.ASSISTANT, parsed.content).with_channel("final")])
            ids = ids[:-1] + [self.return_id]
        else:
            raise ValueError(f"not an action: {parsed.error}")
        if ids[:len(self.open_turn)] != self.open_turn:
            raise AssertionError("a rendered assistant message does not start with <|start|>assistant")
        return ids[len(self.open_turn):]
