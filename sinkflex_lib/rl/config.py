"""The GRPO trainer's configuration: `TrainConfig`, its run profiles, the paper's setup, and the
argument types the command lines share. (The trainer is :mod:`.train`; the integrations read
this module, not the trainer.)"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ..envs.data import parse_world
from .rollout import RolloutConfig
from .write_credit import check_credit


@dataclass
class TrainConfig:
    profile: str = "cpu"
    policy: str = "tiny"               # a preset, a shipped checkpoint or a local HF directory
    policy_overrides: dict = field(default_factory=dict)
    attn_implementation: str = "sinkflex"
    chat_format: str = "auto"          # build_policy's format: auto (Harmony for gpt-oss), compact, harmony
    reasoning_effort: str = "low"      # Harmony's system message
    lora: int | None = None            # LoRA rank (peft), None: full fine-tuning
    dtype: str = "float32"
    user: str = "scripted"             # user simulator: scripted, or llm (an OpenAI-compatible endpoint)
    source: str = "mini"               # training tasks (a source of :mod:`sinkflex_lib.envs.data`)
    train_split: str = "train"
    train_kinds: list | None = None    # train only on tasks of these kinds (None: all); validation keeps all
    train_tasks: list | None = None    # train only on these task ids of `source` (None: all of train_split)
    kind_phase_steps: int = 0          # one task kind at a time, in turn (train_kinds' order, else sorted by name):
                                       # each kind's tasks alone for this many GRPO steps; 0: every kind every step
    world_steps: int = 0               # a fresh training world every this many GRPO steps (source "train-world:S":
                                       # steps 1..n draw from world S, the next n from S+1, ...); 0: `source` throughout
    val_source: str = "eval-world:0"   # held-out world: no id of it occurs in any training source
    val_split: str | None = None       # a split of val_source (e.g. tau2's "test"): all its tasks
    # warm start (behaviour cloning on oracle episodes; 0 episodes: none, e.g. from a base policy)
    bc_episodes: int = 232
    bc_epochs: int = 4
    bc_batch_size: int = 8
    bc_lr: float = 3e-3
    bc_max_tokens: int = 1024      # demonstrations are cut at the last agent turn that fits
    # GRPO
    steps: int = 20
    groups_per_step: int = 4
    group_size: int = 8
    sample_groups: int | None = None   # dynamic sampling: roll out this many groups, train on the
                                       # first groups_per_step with reward spread (None: off)
    ppo_epochs: int = 1
    minibatch_size: int = 16
    accumulation_steps: int = 1        # minibatches whose gradients are averaged into one optimizer step (the
                                       # update's last step takes what is left): a large batch at a minibatch's memory
    lr: float = 5e-4
    warmup_steps: int = 0              # GRPO steps over which the lr rises linearly to `lr` (0: none)
    grad_clip: float = 1.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    beta: float = 0.0
    loss_agg_mode: str = "token-mean"
    norm_adv_by_std: bool = True
    negative_advantage_scale: float = 1.0   # negative advantages times this (0: reinforce only the rollouts
                                            # above their group's mean; `grpo.scale_negative`)
    shuffle_rewards: bool = False      # a control without signal: each group's rewards permuted before the advantages
    write_credit: float = 0.0          # an unsolved episode trains on this times its write calls' argument match to
                                       # the gold writes (`write_credit`); 0: tau2's 0/1 reward alone
    anchor_weight: float = 0.0         # each minibatch's loss plus this times the supervised loss on `anchor_batch`
                                       # oracle episodes of fresh training worlds (`train.anchor_loss`; InstructGPT's
                                       # pretraining mix): a pull back to the job against the update's drift; 0: none
    anchor_batch: int = 4
    oracle_prefix: float = 0.0         # reverse curriculum: each group starts after its task's first k oracle turns
                                       # (given, no loss), k uniform up to this fraction of them at step 1, falling
                                       # linearly to none at the last step (`oracle_prefix`); 0: all from scratch
    # rollouts
    max_turns: int = RolloutConfig.max_turns       # the rollout budgets' one source: RolloutConfig
    max_tokens: int = RolloutConfig.max_tokens
    max_new_tokens: int = RolloutConfig.max_new_tokens
    temperature: float = RolloutConfig.temperature
    # validation, logging, checkpoints
    val_temperature: float = 0.0   # 0: greedy decoding
    val_tasks: int = 110           # round-robin over the task kinds (evaluate.balanced_task_ids)
    val_every: int = 5
    traj_window: int = 64
    ckpt_every: int = 5
    threads: int | None = None     # None: machine.choose_threads picks (a core per thread, none busy elsewhere)

    def __post_init__(self):
        check_credit(self.write_credit)
        if not 0.0 <= self.oracle_prefix <= 1.0:
            raise ValueError(f"oracle_prefix must lie in [0, 1], got {self.oracle_prefix!r}")
        if self.kind_phase_steps < 0:
            raise ValueError(f"kind_phase_steps must be >= 0, got {self.kind_phase_steps!r}")
        if self.world_steps < 0:
            raise ValueError(f"world_steps must be >= 0, got {self.world_steps!r}")
        if self.world_steps:
            self._check_world_steps()
        if self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {self.accumulation_steps!r}")
        if self.anchor_weight < 0 or (self.anchor_weight > 0 and self.anchor_batch < 1):
            raise ValueError(f"anchor_weight must be >= 0 and anchor_batch >= 1 when it is on, got "
                             f"anchor_weight={self.anchor_weight!r}, anchor_batch={self.anchor_batch!r}")

    def _check_world_steps(self) -> None:
        world = parse_world(str(self.source))
        if world is None or world[0] != "train":
            raise ValueError(f"world_steps needs source='train-world:<seed>' (a generated training world), got {self.source!r}")
        if self.train_tasks is not None:
            raise ValueError("world_steps draws each world's own training tasks; train_tasks (the ids of one source) "
                             "cannot be combined with it")

    @classmethod
    def from_profile(cls, profile: str, policy_dir: str | None = None, **overrides) -> "TrainConfig":
        """The profile's config. On the gpu profile a local model directory, `policy_dir` (default
        ``$SINKFLEX_POLICY``; "" for none), switches to the paper's setup (`paper_setup`).
        ``steps=None`` keeps the profile's GRPO steps; a given count must be at least 1."""
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
        if "steps" in overrides and overrides["steps"] is None:
            del overrides["steps"]
        if "steps" in overrides and overrides["steps"] < 1:
            raise ValueError(f"steps must be at least 1 (None: the profile's), got {overrides['steps']}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {sorted(unknown)}")
        if policy_dir is None:
            policy_dir = os.environ.get("SINKFLEX_POLICY")
        paper = paper_setup(policy_dir) if profile == "gpu" else {}
        return cls(**{**PROFILES[profile], **paper, "profile": profile, **overrides})

    def on_fixed_tasks(self, tasks: list, steps: int, shuffle_rewards: bool = False) -> "TrainConfig":
        """This config trained on exactly `tasks`, every one of them every step (a group each, new
        user seeds each step), for `steps` steps, validated at its start and end; with
        `shuffle_rewards`, the control without signal of the same run."""
        return dataclasses.replace(self, train_tasks=list(tasks), groups_per_step=len(tasks), sample_groups=None,
                                   steps=steps, val_every=steps, ckpt_every=steps, shuffle_rewards=shuffle_rewards)

    def rollout_config(self, temperature: float | None = None) -> RolloutConfig:
        return RolloutConfig(max_turns=self.max_turns, max_tokens=self.max_tokens,
                             max_new_tokens=self.max_new_tokens,
                             temperature=self.temperature if temperature is None else temperature,
                             source=self.source, user=self.user)


# The profile picks sizes, never what is computed.
PROFILES = {
    # pipeline check in well under two minutes
    "smoke": dict(policy="micro", bc_episodes=4, bc_epochs=1, bc_batch_size=4, bc_max_tokens=512, steps=2,
                  groups_per_step=2, group_size=2, minibatch_size=4, max_turns=3, max_tokens=512,
                  max_new_tokens=12, val_tasks=2, val_every=1, ckpt_every=1, traj_window=16),
    # the 2-core CPU reproduction (under 30 minutes): GRPO from the shipped pretrained base
    # (data/checkpoints/base-tiny, :mod:`.pretrain`) on a training world, validated greedily on
    # 55 tasks (5 per kind) of the held-out world. The budgets are round numbers under which the
    # oracle's own turns score 1 on every task of the training and held-out worlds
    # (`evaluate.oracle_in_budget_rewards`; its longest turn is 151 tokens, cut at 128 in 53 of 4,592
    # turns and still confirmed, its longest episode 2,727): at the earlier 1,536 tokens and 48 a turn, imitating the oracle scored 0.527
    # on the 55 validation tasks, 0 on five of the eight write kinds. lr, dynamic sampling and the
    # KL term from four calibration arms from the stage-2 base shipped then (EXPERIMENTS.md, section 4): with 8 groups
    # sampled a step and the first 4 with reward spread trained on, lr 3e-4 fell to 0.109 by step
    # 10; lr 1e-4 and 5e-5 (beta 0) rose, then fell back by step 30 (0.182, 0.200); lr 1e-4 with
    # the paper's KL term to the base (beta 0.05) held 0.236 at steps 10, 20 and 30 (write tasks
    # 0.05 -> 0.10). From the stage-3 base, no arm lifted validation: this profile, lr 5e-5, 16
    # groups sampled, 90 steps, five kinds only, temperature 0.7 or 0.5, lr 3e-4 or 1e-3 warmed up
    # (EXPERIMENTS.md, section 4); from the stage-6 base shipped now: README, "Results".
    "cpu": dict(policy="base-tiny", bc_episodes=0, source="train-world:1000", steps=30,
                groups_per_step=4, group_size=8, sample_groups=8, minibatch_size=16, lr=1e-4, beta=0.05, max_turns=12,
                max_tokens=3072, max_new_tokens=128, val_tasks=55, val_every=10, ckpt_every=10),
    # a CUDA box: the same from the shipped base, more groups and steps, all tasks of the held-out world
    "gpu": dict(policy="base-tiny", bc_episodes=0, source="train-world:1000", steps=200, groups_per_step=16,
                group_size=8, minibatch_size=32, max_turns=16, max_tokens=4096, max_new_tokens=128,
                val_tasks=335, val_every=10, ckpt_every=20, traj_window=256),
}


def paper_setup(policy_dir: str | None) -> dict:
    """The paper's experiment, for the gpu profile given a local gpt-oss directory
    (``SINKFLEX_POLICY``): that model in its own Harmony format with LoRA in bf16 on the sinkflex
    attention (flex on CUDA), the real tau2 retail tasks (``TAU2_DATA_DIR``: tau2's train split,
    validated on every task of its test split), no warm start. The paper gives no optimiser
    settings; these are ours (LoRA rank 32, lr 1e-5, 4 groups of 8, gpt-oss-length turns; sized so
    that the rollout's KV cache, about 49 KB a token for gpt-oss-20b in bf16, stays near 25 GB).
    None or "": {} (the gpu profile trains the tiny policy)."""
    if not policy_dir:
        return {}
    if not Path(policy_dir).is_dir():
        raise FileNotFoundError(f"SINKFLEX_POLICY={policy_dir!r} is not a directory (a local gpt-oss checkpoint)")
    return dict(policy=str(policy_dir), chat_format="harmony", lora=32, dtype="bfloat16", bc_episodes=0,
                source="tau2", train_split="train", val_source="tau2", val_split="test", steps=100,
                groups_per_step=4, group_size=8, minibatch_size=8, lr=1e-5, max_turns=30,
                max_tokens=16384, max_new_tokens=2048, val_every=10, ckpt_every=10, traj_window=256)


def int_arg(low: int, high: int | None = None):
    """An argparse type: an integer in [low, high] (None: no upper bound)."""
    def parse(text: str) -> int:
        value = int(text) if text.strip().lstrip("+-").isdigit() else None
        if value is None or value < low or (high is not None and value > high):
            bounds = f"[{low}, {'inf' if high is None else high}]"
            raise argparse.ArgumentTypeError(f"expected an integer in {bounds}, got {text!r}")
        return value
    return parse


SEED = int_arg(0, 2**32 - 1)  # numpy's seed range


def field_value(item: str) -> tuple[str, object]:
    """A command line's FIELD=VALUE as (FIELD, VALUE read as JSON, else kept as a string)."""
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise ValueError(f"expected FIELD=VALUE, got {item!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def _fits(value, kind) -> bool:
    """`value` is a valid TrainConfig value of type `kind`: integers >= 1 (every int field is a
    count), finite numbers for floats, and the type itself otherwise."""
    if kind in (bool, type(None)) or isinstance(value, bool):
        return type(value) is kind
    if kind is int:
        return isinstance(value, int) and value >= 1
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, kind)


def train_config_overrides(items: list[str]) -> dict:
    """--set FIELD=VALUE items as TrainConfig overrides, each checked against its field's type;
    ValueError naming the field otherwise."""
    hints = typing.get_type_hints(TrainConfig)
    over = {}
    for name, value in map(field_value, items):
        if name not in hints:
            raise ValueError(f"--set {name}: not a TrainConfig field; fields: {', '.join(hints)}")
        kinds = typing.get_args(hints[name]) if isinstance(hints[name], types.UnionType) else (hints[name],)
        if not any(_fits(value, kind) for kind in kinds):
            want = " or ".join("null" if k is type(None) else "an integer >= 1" if k is int else k.__name__
                               for k in kinds)
            raise ValueError(f"--set {name}: expected {want}, got {value!r}")
        over[name] = float(value) if kinds == (float,) else value
    return over
