"""Dual-control retail environment (tau2-bench semantics) behind a Gymnasium interface.

Public API:
    RetailEnv                 the gymnasium.Env (registered as "sinkflex/Retail-v0")
    load_source, RetailData   the data sources ("mini", "tau2", or a folder)
    tool_schemas              the 16 tools as OpenAI function schemas
    call_tool, TOOL_NAMES     run a tool on an episode database
    parse_action              the three action forms (JSON, functional, text)
    evaluate                  tau2's DB x COMMUNICATE reward with its breakdown
    ScriptedUser, LLMUser     user simulators (UserSimulator protocol)
    OracleAgent               gold-action agent with policy-abiding messages
    run_episode, trajectory_stats
Modules: db, tools, signatures (validated tool arguments), schemas, data, actions, reward, users, oracle, env, episode,
synthetic (the generator of data/retail_mini), tau2_adapter (optional).
"""

import gymnasium as _gym

from .actions import STOP_TOKEN, Message, ParseError, ToolCall, parse_action
from .data import RetailData, load_source
from .env import RetailEnv
from .episode import Episode, run_episode, trajectory_stats
from .oracle import OracleAgent, gold_replay_script, oracle_script
from .reward import evaluate
from .schemas import tool_schemas
from .tools import TOOL_NAMES, WRITE_TOOLS, call_tool
from .users import LLMUser, ScriptedUser, UserSimulator

ENV_ID = "sinkflex/Retail-v0"
if ENV_ID not in _gym.registry:
    _gym.register(id=ENV_ID, entry_point="sinkflex_lib.envs.env:RetailEnv")

__all__ = [
    "ENV_ID", "Episode", "LLMUser", "Message", "OracleAgent", "ParseError", "RetailData",
    "RetailEnv", "STOP_TOKEN", "ScriptedUser", "TOOL_NAMES", "ToolCall", "UserSimulator",
    "WRITE_TOOLS", "call_tool", "evaluate", "gold_replay_script", "load_source",
    "oracle_script", "parse_action", "run_episode", "tool_schemas", "trajectory_stats",
]
