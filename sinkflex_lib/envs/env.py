"""``RetailEnv``: the dual-control retail domain behind gymnasium's reset/step interface.

One episode is one task. ``reset(seed, options={"task_id": ...})`` starts a conversation
(the agent's fixed greeting, then the user's first message) and returns the user's message
as the observation; ``info`` carries the task, the tool schemas and the policy text.
``step(action)`` takes one string (see :mod:`.actions`), or an already parsed ``Action``: a tool call runs against this
episode's database and its result is observed as ``tool: ...``; a message goes to the user
and the reply is observed as ``user: ...``. The episode terminates when the agent's message
contains ``###STOP###``, the user ends (``###STOP###`` in the reply), or ``max_errors`` tool
errors occurred; it is truncated after ``max_steps`` steps. The reward (see :mod:`.reward`)
arrives on the final step, with its breakdown in ``info["reward_info"]``; other steps give 0.
Each step's ``info`` also says how the action was read (``info["action"]``: a ToolCall, Message or
ParseError) and whether it was a failed tool call (``info["tool_error"]``).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

from .actions import Action, Message, ParseError, ToolCall, format_call, parse_action
from .data import RetailData, load_source
from .reward import evaluate
from .schemas import tool_schemas
from .tools import READ_TOOLS, call_tool
from .users import UserSimulator, make_user

GREETING = "Hi! How can I help you today?"


class TextSpace(gym.spaces.Space):
    """Any Python string (sampling is not meaningful for this environment)."""

    def __init__(self):
        super().__init__(shape=None, dtype=None)

    def sample(self, mask=None, probability=None) -> str:
        return ""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)


class RetailEnv(gym.Env):
    """tau2-style retail customer-service environment (see module docstring).

    Args:
        source: "mini" (embedded synthetic set), "tau2" (``$TAU2_DATA_DIR``) or a data folder.
        split: task split used when reset() is not given a task_id (None: all tasks).
        user: "scripted", "llm" or a :class:`~.users.UserSimulator` instance.
        max_steps: agent actions per episode before truncation.
        max_errors: tool errors per episode before termination (reward 0), as tau2's default.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, source: str | os.PathLike = "mini", split: str | None = None,
                 user: str | UserSimulator = "scripted", max_steps: int = 60,
                 max_errors: int = 10, render_mode: str | None = None):
        for name, value in (("max_steps", max_steps), ("max_errors", max_errors)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.data: RetailData = load_source(source)
        self.data.task_ids(split)  # validates split
        self.split = split
        self.user = make_user(user)
        self.max_steps, self.max_errors = max_steps, max_errors
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self.tools = tool_schemas()
        self.policy = self.data.policy
        self.task: dict | None = None
        self.messages: list[dict] = []
        self._done = True

    def task_ids(self, split: str | None = None) -> list[str]:
        """Task ids of `split` (default: this env's split; None for all)."""
        return self.data.task_ids(split if split is not None else self.split)

    def _info(self) -> dict:
        return {"task_id": self.task["id"], "task": self.task, "tools": self.tools,
                "policy": self.policy, "source": self.data.name}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if options.get("task_id") is not None:
            task_id = str(options["task_id"])
            if task_id not in self.data.tasks:
                raise ValueError(f"options['task_id'] {task_id!r} is not a task of source "
                                 f"{self.data.name!r}")
        else:
            ids = self.task_ids()
            task_id = ids[int(self.np_random.integers(len(ids)))]
        self.task = self.data.tasks[task_id]
        self.db = self.data.db.episode()
        self.steps = self.errors = 0
        self._done = False
        first = self.user.start(self.task, seed=seed)
        self.messages = [{"role": "assistant", "content": GREETING},
                         {"role": "user", "content": first}]
        return f"user: {first}", self._info()

    def _finish(self, termination: str, info: dict) -> tuple[float, dict]:
        self._done = True
        texts = [m["content"] for m in self.messages if m["role"] == "assistant" and "tool_call" not in m]
        result = evaluate(self.data, self.task, self.db, texts, termination)
        info["reward_info"] = result
        return result["reward"], info

    def _act(self, parsed: Action) -> tuple[list[dict], bool, str | None]:
        """The messages one parsed action adds, whether it was a failed tool call, and the
        termination it causes (None: none). Changes nothing but the database (a valid write)."""
        if isinstance(parsed, ToolCall):
            result, error = call_tool(self.db, parsed.name, parsed.arguments)
            call = {"role": "assistant", "content": format_call(parsed),
                    "tool_call": {"name": parsed.name, "arguments": parsed.arguments}}
            return [call, {"role": "tool", "content": result}], error, None
        if isinstance(parsed, Message):
            said = {"role": "assistant", "content": parsed.content}
            if parsed.is_stop:
                return [said], False, "agent_stop"
            reply = self.user.respond(parsed.content)
            return [said, {"role": "user", "content": reply}], False, \
                "user_stop" if "###STOP###" in reply else None
        return [{"role": "error", "content": f"Invalid action: {parsed.error}"}], False, None

    def step(self, action: str):
        """One agent action (module docstring). Never raises for any action: malformed ones
        and failing tool calls are error observations (a failed call counts once toward
        max_errors). The episode's state changes only after the action was fully handled."""
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        info = self._info()
        if self._done:
            return "error: the episode is over; call reset()", 0.0, True, False, info
        parsed = parse_action(action)
        new, error, termination = self._act(parsed)
        info["action"], info["tool_error"] = parsed, bool(error)   # how the action was read; a failed call
        self.steps += 1
        self.errors += error
        self.messages += new
        if error and self.errors >= self.max_errors:
            termination = "too_many_errors"
        obs = "\n".join(f"{m['role']}: {m['content']}" for m in new if m["role"] != "assistant")
        if termination is not None:
            reward, info = self._finish(termination, info)
            return obs, reward, True, False, info
        if self.steps >= self.max_steps:
            reward, info = self._finish("max_steps", info)
            return obs, reward, False, True, info
        return obs, 0.0, False, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages)
        return None


def changes_nothing(info: dict, ended: bool) -> bool:
    """Whether the action just stepped (`info` of its :meth:`RetailEnv.step`; `ended`: the episode
    ended with it) changed nothing the user saw, the reward reads or a human would act on: a
    refused call, an unparsed action, or a look-up (a tool of kind "read"; not a write, a transfer
    or ``calculate``), and the episode goes on."""
    action = info["action"]
    quiet = isinstance(action, ParseError) or (isinstance(action, ToolCall) and
                                               (info["tool_error"] or action.name in READ_TOOLS))
    return quiet and not ended
