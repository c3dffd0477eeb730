"""Chat formats: how an episode becomes the one token sequence the rollout worker samples in.

A format answers four questions for the worker (:func:`.rollout.rollout_batch`), the warm
start and evaluation, and nothing else depends on how a policy's chat looks:

- ``prompt(env, obs, info)``: token ids of the episode's start, up to and including the
  marker that opens the agent's first turn;
- ``stop_ids``: sampled tokens that end an agent turn (kept in the sequence, mask 1);
  ``close_ids``: appended with mask 0 when a turn reaches the token budget without one;
- ``parse(sampled)``: the sampled tokens of one turn as (text for the record, the environment's
  :class:`~sinkflex_lib.envs.actions.Action`); never raises: a malformed turn is a
  ``ParseError``, which the environment answers with an error observation;
- ``observation(obs, action)``: the token ids appended after the environment answered
  `action` with `obs`, up to and including the marker that opens the next agent turn;
- ``completion(action)``: the tokens a policy samples for `action` (an oracle turn in this
  format), stop token included.

Tokens accumulate and are never re-tokenized, so the trained sequence is the sampled one.
Two formats: :class:`CompactFormat` (the project tokenizer's role markers, :mod:`.chat`; the
tiny policies) and :class:`~.harmony.HarmonyFormat` (gpt-oss's own format).
"""

from __future__ import annotations

from ..envs.actions import Action, parse_action
from .chat import END, PAD, compact_system_prompt, render_message, render_observation


class ChatFormat:
    """The interface (module docstring)."""

    name: str
    pad_id: int
    stop_ids: frozenset[int]
    close_ids: list[int]

    def prompt(self, env, obs: str, info: dict) -> list[int]:
        raise NotImplementedError

    def parse(self, sampled: list[int]) -> tuple[str, Action]:
        raise NotImplementedError

    def observation(self, obs: str, action: Action) -> list[int]:
        raise NotImplementedError

    def completion(self, action: str) -> list[int]:
        raise NotImplementedError


def compact_prompt(env, obs: str, info: dict) -> str:
    """The compact format's first prompt: system text, the env's greeting, the first
    observation and <|assistant|>."""
    return (render_message("system", compact_system_prompt(info["tools"]))
            + render_message("assistant", env.messages[0]["content"]) + render_observation(obs))


class CompactFormat(ChatFormat):
    """The project tokenizer's format (:mod:`.chat`): a turn is the action's text and <|end|>."""

    name = "compact"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end_id = int(tokenizer.convert_tokens_to_ids(END))
        self.pad_id = int(tokenizer.convert_tokens_to_ids(PAD))
        self.stop_ids = frozenset({self.end_id})
        self.close_ids = [self.end_id]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt(self, env, obs: str, info: dict) -> list[int]:
        return self.encode(compact_prompt(env, obs, info))

    def parse(self, sampled: list[int]) -> tuple[str, Action]:
        text = self.tokenizer.decode([t for t in sampled if t != self.end_id], skip_special_tokens=False)
        return text, parse_action(text)

    def observation(self, obs: str, action: Action) -> list[int]:
        return self.encode(render_observation(obs))

    def completion(self, action: str) -> list[int]:
        return self.encode(action) + [self.end_id]
