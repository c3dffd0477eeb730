r"""Partial credit for the write calls of an unsolved episode: a training reward, never a score.

tau2's reward is 0 or 1, so a group whose eight episodes all fail has no spread and gives GRPO
nothing, however close some came. With `TrainConfig.write_credit` = c > 0 the trainer ranks a
group's episodes by

    r' = r                     where the episode is solved (r = 1),
    r' = c * match(calls, g)   otherwise,

where ``match`` (:func:`write_match`) is, averaged over the task's gold write actions g, the best
share of a gold action's arguments that a write call of the same tool gave exactly (an argument
the call adds or leaves out counts as one that differs; a gold action no call names scores 0).
A task without gold writes scores r alone (a write there is never credited). With c < 1, any solved
episode still ranks above every unsolved one. Evaluation and the logged training score stay tau2's r.
"""

from __future__ import annotations

import dataclasses

from ..envs.actions import ToolCall
from ..envs.reward import gold_writes
from .failures import differing_arguments


def argument_match(gold: dict, call: ToolCall) -> float:
    """The share of the argument names of a gold action and a call of its tool whose values agree."""
    names = set(gold.get("arguments") or {}) | set(call.arguments)
    return 1.0 - len(differing_arguments(gold, call)) / len(names) if names else 1.0


def write_match(write_calls: list[ToolCall], task: dict) -> float:
    """Mean over `task`'s gold writes of the best `argument_match` of a call of the same tool
    (0 for a gold write no call names); 0 for a task without gold writes. In [0, 1]."""
    gold = gold_writes(task)
    if not gold:
        return 0.0
    best = [max((argument_match(a, c) for c in write_calls if c.name == a["name"]), default=0.0) for a in gold]
    return sum(best) / len(best)


def check_credit(credit: float) -> None:
    """ValueError unless 0 <= `credit` < 1 (below 1: a solved episode ranks above every unsolved one)."""
    if not 0.0 <= credit < 1.0:
        raise ValueError(f"write_credit must be in [0, 1) so that a solved episode ranks first, got {credit}")


def credited(rollouts: list, tasks: dict, credit: float) -> list:
    """Copies of `rollouts` whose `reward` is the training reward r' above (`tasks`: task id ->
    task of the rollouts' source). credit = 0 returns the rollouts themselves."""
    check_credit(credit)
    if credit == 0.0:
        return rollouts
    return [r if r.reward >= 1.0 else dataclasses.replace(r, reward=credit * write_match(r.write_calls, tasks[r.task_id]))
            for r in rollouts]
