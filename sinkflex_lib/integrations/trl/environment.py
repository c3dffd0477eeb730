"""`RetailToolEnv`: `RetailEnv` as a TRL `environment_factory` environment.

    GRPOTrainer(model, args=GRPOConfig(...), train_dataset=tool_env_dataset(),
                environment_factory=RetailToolEnv, processing_class=prepare_tokenizer(tok))

TRL makes one instance per rollout, calls `reset(**row)` with the dataset row, exposes every
public method as a tool (name, typed signature and docstring -> JSON schema), runs the tool
calls the model writes, and scores the rollout with `get_reward()`. The 16 retail tools are
methods here with the signatures and docstrings of :mod:`sinkflex_lib.envs.tools`; each call is
one `RetailEnv.step`, so the database, the scripted user and the reward are the environment's.

Role semantics, compared with `RetailRollout` (the rollout_func path):

- talking to the user is a tool call, `send_message_to_user(message=...)`; its result is the
  user's reply. TRL marks that reply as a tool result (mask 0, like every observation), and the
  project's template renders it with the `<|user|>` marker, so the tokens around a user turn
  read as in our rollouts; the agent's own message is written as a call, not as plain text;
- a turn without a tool call ends the rollout (TRL's tool loop stops), so a policy trained on
  the rollout path, which talks to the user in plain text, ends its rollouts at its first
  message here: this style needs its own warm start;
- an episode still open when the rollout ends (plain-text turn, `max_completion_length`,
  `max_tool_calling_iterations`) is closed by `get_reward()` as the agent's stop and scored,
  where the rollout path scores a `max_tokens` cut as 0;
- TRL hands `reset` only the dataset row, so the task seed is the row's (`task_seed` column,
  fixed per task), where the rollout path draws a new seed for every task at every step.
"""

from __future__ import annotations

import ast
import functools
import json

from ...envs import STOP_TOKEN, TOOL_NAMES, RetailEnv, tool_schemas
from ...envs.env import GREETING
from ...envs.tools import ARGUMENTS, TOOL_FUNCTIONS
from ...rl.chat import compact_json, compact_system_prompt, split_observation
from ...rl.rollout import RolloutConfig
from .chat import USER_TOOL
from .rollout import task_seed as seed_of_task

ENV_RULES = (" Talk to the customer only through send_message_to_user(message); "
             "a turn without a tool call ends the conversation.")


class _ToolEpisode:
    """One `RetailEnv` episode behind TRL's environment_factory protocol, without the 16
    retail tools (`RetailToolEnv` adds them as methods).

    source, max_turns: as `RetailEnv(source, max_steps=max_turns)`. Public methods are tools.
    """

    def __init__(self, source: str = "mini", max_turns: int = RolloutConfig.max_turns):
        self._env = RetailEnv(source, max_steps=max_turns)
        self._done, self._reward = True, 0.0

    def reset(self, task_id: str, task_seed: int = 0, **row) -> str:
        """Start the episode of `task_id`; returns the user's first message (TRL appends it to
        the prompt's last, empty, user message)."""
        obs, _ = self._env.reset(seed=int(task_seed), options={"task_id": str(task_id)})
        self._done, self._reward = False, 0.0
        return self._text(obs)

    def send_message_to_user(self, message: str) -> str:
        """Send a message to the customer and return the customer's reply.

        Args:
            message: The message for the customer. Include ###STOP### to end the conversation.
        """
        return self._act(message)

    def get_reward(self) -> float:
        """The environment's reward R = R_DB * R_COMM; an open episode is first closed as the
        agent's stop."""
        if not self._done:
            self._act(STOP_TOKEN)
        return self._reward

    # -- helpers (private: TRL exposes public methods as tools) ----------------------------
    def _act(self, action: str) -> str:
        if self._done:
            return "Error: the conversation is over."
        obs, reward, terminated, truncated, _ = self._env.step(action)
        if terminated or truncated:
            self._done, self._reward = True, float(reward)
        return self._text(obs)

    @staticmethod
    def _text(obs: str) -> str:
        """An observation's content without role prefixes; tool JSON compacted as in rollouts."""
        return "\n".join(compact_json(c) if r == "tool" else c for r, c in split_observation(obs))


def _tool_method(name: str):
    """A method for tool `name`: its signature and docstring, one env step."""
    props = ARGUMENTS[name].model_json_schema().get("properties", {})
    lists = {arg for arg, spec in props.items() if spec["type"] == "array"}

    @functools.wraps(TOOL_FUNCTIONS[name])
    def method(self, **arguments):
        for key in lists & arguments.keys():
            if isinstance(arguments[key], str):     # the response template gives list literals raw
                try:
                    arguments[key] = ast.literal_eval(arguments[key])
                except (ValueError, SyntaxError):
                    pass                            # the tool reports the type error
        return self._act(json.dumps({"name": name, "arguments": arguments}))

    return method


RetailToolEnv = type("RetailToolEnv", (_ToolEpisode,), {
    "__doc__": "One `RetailEnv` episode as a TRL environment: `_ToolEpisode` and the 16 retail tools as methods.",
    **{name: _tool_method(name) for name in TOOL_NAMES}})


def env_system_prompt() -> str:
    """The system text: our compact rules and tool signatures, plus send_message_to_user."""
    user_tool = {"function": {"name": USER_TOOL, "parameters": {"properties": {"message": {}}}}}
    return compact_system_prompt([*tool_schemas(), user_tool]) + ENV_RULES


def tool_env_dataset(source: str = "mini", split: str = "train", seed: int = 0):
    """A `datasets.Dataset` for RetailToolEnv: prompt (system text, greeting, an empty user
    message that `reset` fills), task_id and task_seed per task of `split`."""
    from datasets import Dataset

    ids = RetailEnv(source).task_ids(split)
    prompt = [{"role": "system", "content": env_system_prompt()},
              {"role": "assistant", "content": GREETING}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * len(ids), "task_id": ids,
                              "task_seed": [seed_of_task(seed, 0, t) for t in ids]})


def make_env_trainer(cfg, policy, out_dir, seed: int = 0, **grpo_overrides):
    """A GRPOTrainer on `policy` with `RetailToolEnv` as environment_factory (TRL drives the
    conversation): the mapped GRPOConfig (:mod:`.config`) plus `max_tool_calling_iterations` =
    max_turns and `max_new_tokens` per generated turn; the tokenizer gets the tool template."""
    from trl import GRPOTrainer

    from .chat import prepare_tokenizer
    from .config import grpo_config
    from .trainer import deterministic_backward_pass, distributed_state

    over = {"max_tool_calling_iterations": cfg.max_turns,
            "generation_kwargs": {"max_new_tokens": cfg.max_new_tokens}, **grpo_overrides}
    args = grpo_config(cfg, out_dir, seed, distributed_state().num_processes, **over)
    trainer = GRPOTrainer(model=policy.model, args=args,
                          train_dataset=tool_env_dataset(cfg.source, cfg.train_split, seed),
                          processing_class=prepare_tokenizer(policy.tokenizer),
                          environment_factory=functools.partial(RetailToolEnv, cfg.source, cfg.max_turns))
    return deterministic_backward_pass(trainer)
