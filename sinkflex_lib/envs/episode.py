"""Running one episode with an agent, and simple statistics of its trajectory.

An agent is anything with ``act(observation: str) -> str``; `make_agent(task)` builds one
per episode (e.g. ``OracleAgent``). Token counts here are a tokenizer-free proxy:
``len(re.findall(r"\\w+|[^\\w\\s]", text))`` (words and single punctuation marks); characters
are ``len(text)``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .env import RetailEnv

_TOKEN = re.compile(r"\w+|[^\w\s]")


class Agent(Protocol):
    def act(self, observation: str) -> str: ...


def count_tokens(text: str) -> int:
    """Words plus punctuation marks (see module docstring)."""
    return len(_TOKEN.findall(text))


@dataclass
class Episode:
    task_id: str
    reward: float
    terminated: bool
    truncated: bool
    steps: int
    messages: list[dict]
    reward_info: dict = field(default_factory=dict)


def run_episode(env: RetailEnv, make_agent: Callable[[dict], Agent], task_id: str,
                seed: int = 0) -> Episode:
    """Play `task_id` on `env` with a fresh agent from `make_agent(task)` until the end."""
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    agent = make_agent(info["task"])
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        steps += 1
    return Episode(str(task_id), float(reward), terminated, truncated, steps,
                   list(env.messages), info.get("reward_info", {}))


def system_prompt(policy: str, tools: list[dict]) -> str:
    """The agent's system context: the policy then the tool schemas as JSON (for length counts)."""
    return policy + "\n\n# Tools\n" + json.dumps(tools)


def trajectory_stats(messages: list[dict], system: str = "") -> dict:
    """Turns, tool calls, and characters/tokens of the conversation and of the full context."""
    text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    return {
        "turns": sum(m["role"] in ("user", "assistant") and "tool_call" not in m for m in messages),
        "tool_calls": sum("tool_call" in m for m in messages),
        "conversation_chars": len(text),
        "conversation_tokens": count_tokens(text),
        "context_tokens": count_tokens(system) + count_tokens(text),
    }


def format_transcript(messages: list[dict], max_chars: int = 240) -> str:
    """The conversation as numbered "role: content" lines, each cut to `max_chars`."""
    lines = []
    for i, m in enumerate(messages):
        text = m["content"].replace("\n", " ")
        if len(text) > max_chars:
            text = text[:max_chars - 3] + "..."
        lines.append(f"{i:2d} {m['role']:>9}: {text}")
    return "\n".join(lines)


def collect_stats(env: RetailEnv, task_ids: list[str], make_agent: Callable[[dict], Agent],
                  seed: int = 0) -> list[dict]:
    """One row per task: task id, kind, reward and :func:`trajectory_stats` of the episode."""
    system = system_prompt(env.policy, env.tools)
    rows = []
    for tid in task_ids:
        ep = run_episode(env, make_agent, tid, seed=seed)
        kind = ((env.data.tasks[tid].get("description") or {}).get("purpose")) or "tau2"
        rows.append({"task_id": tid, "kind": kind, "reward": ep.reward,
                     **trajectory_stats(ep.messages, system)})
    return rows

