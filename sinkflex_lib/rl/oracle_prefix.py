"""Reverse curriculum: GRPO episodes that start partway through the oracle's episode.

A task kind the policy never solves gives GRPO no reward spread, so no gradient (the shipped
base samples no success on item changes and exchanges). Starting a group's episodes after the
oracle's first k turns, given and not sampled (mask 0: no loss on them), leaves the policy only
the rest of the job; the largest k shrinks linearly over the run, to the job from scratch, as
evaluation plays it (a reverse curriculum: Florensa et al. 2017, arXiv:1707.05300; Xi et al. 2024,
arXiv:2402.05808).

Conventions: a task's oracle turns are its `oracle_script` actions in the policy's chat format
(`fmt.completion`), n of them; k is drawn uniformly from 0..floor(fraction * (n - 2)), so the
policy always plays at least the oracle's last two turns (a write's call and the report, or a
transfer's call and its message): a prefix never ends the episode.
"""

from __future__ import annotations

import math

import numpy as np

from ..envs.oracle import oracle_script
from .chat import canonical_action


def oracle_turns(fmt, task: dict, products: dict) -> list[list[int]]:
    """The oracle's turns for `task`, each the token list a policy in format `fmt` would sample."""
    return [fmt.completion(canonical_action(a)) for a in oracle_script(task, products)]


def prefix_fraction(start: float, step: int, steps: int) -> float:
    """The curriculum's fraction at GRPO step `step` of 1..steps: `start` at step 1, falling
    linearly to 0 at the last step."""
    if not 0.0 <= start <= 1.0:
        raise ValueError(f"the oracle prefix fraction must lie in [0, 1], got {start}")
    return start * (steps - step) / max(1, steps - 1)


def prefix_length(n_turns: int, fraction: float, rng: np.random.Generator) -> int:
    """k, the oracle turns given: uniform over 0..floor(fraction * (n_turns - 2)) (0 if n_turns < 2)."""
    return int(rng.integers(0, math.floor(fraction * max(0, n_turns - 2)) + 1))


def oracle_prefixes(fmt, tasks: dict, products: dict, task_ids: list[str], fraction: float,
                    rng: np.random.Generator) -> list[list[list[int]]]:
    """Per task id, its first k oracle turns (k by :func:`prefix_length`, one draw per task)."""
    out = []
    for tid in task_ids:
        turns = oracle_turns(fmt, tasks[tid], products)
        out.append(turns[:prefix_length(len(turns), fraction, rng)])
    return out
