"""GRPO training of this project on Hugging Face TRL's `GRPOTrainer` (trl 1.16).

Two ways to plug `RetailEnv` into TRL:

- `RetailRollout` (a `rollout_func`): our rollout worker plays each episode; user turns are real
  user turns, tool results are tool turns, and an `env_mask` marks the sampled tokens. Same
  episodes, masks and loss as our own trainer (`train_trl`, the CLI, notebook 06).
- `RetailToolEnv` (an `environment_factory`): TRL's own multi-turn tool loop drives the
  conversation; the 16 tools are typed, documented methods and the user is reached through a
  `send_message_to_user(message)` tool, whose reply TRL inserts as a tool result.

Modules: rollout (rollout_func, reward function), config (TrainConfig -> GRPOConfig, the
name-for-name table), chat (tool-capable chat template and response template), environment
(environment_factory), trainer (train_trl, per-rank logging, validation), compare (both trainers
from one warm start, notebook 06), __main__ (the command line). Importing this package makes
sure the policy's attention name ("sinkflex") is registered in the importing process; every
torchrun process imports it.
"""

from ...models import ensure_registered as _ensure_registered
from .chat import TOOL_CHAT_TEMPLATE, prepare_tokenizer, response_template
from .config import LOSS_TYPES, batch_geometry, grpo_config, trl_profile
from .environment import RetailToolEnv, make_env_trainer, tool_env_dataset
from .rollout import DECODE_MODES, RetailRollout, env_reward, play, task_seed, to_trl
from .trainer import make_trainer, train_trl, warm_start_run

_ensure_registered("sinkflex")      # attention + mask function, under one name, in every importing process

__all__ = ["DECODE_MODES", "LOSS_TYPES", "RetailRollout", "RetailToolEnv", "TOOL_CHAT_TEMPLATE", "batch_geometry", "trl_profile",
           "env_reward", "grpo_config", "make_env_trainer", "make_trainer", "play", "prepare_tokenizer",
           "response_template", "task_seed", "to_trl", "tool_env_dataset", "train_trl", "warm_start_run"]
