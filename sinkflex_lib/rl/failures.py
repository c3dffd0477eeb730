"""Why an episode failed: one cause per episode, read from how it ended, the reward's breakdown
and its write calls against the task's gold actions.

The causes, the first that holds (:data:`CAUSES`, in this order):

- ``solved``: reward 1.
- ``out of turns``, ``out of tokens``, ``too many tool errors``: the episode did not end normally
  (``cut short`` for any other abnormal end): reward 0 whatever it did.
- ``communicate missed``: the database is the gold's, but a fact the user asked for was not said.
- ``wrote on a no-write task``: the gold makes no write; the policy's writes changed the database.
- ``no write``: the gold writes; the policy called no write tool.
- ``wrong write``: the policy called write tools, but not every one the gold calls.
- ``wrong arguments``: every write tool of the gold was called, but some gold write has no call
  with exactly its arguments: for the first such gold write, the arguments that differ from its
  closest call (the fewest differing names) are kept. Values compare exactly (a list of item ids
  in another order differs).
- ``extra write``: every gold write was called exactly; further write calls changed the database.
- ``other``: none of these (the database differs for another reason).

Whatever the cause, :func:`write_check` also says what the write calls did (``Failure.writes``):
an episode cut short may have made the right write, or garbled it first. A write call counts
whether or not the tool accepted it: a wrong order id that the tool refuses is a wrong argument too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..envs.actions import ToolCall
from ..envs.reward import gold_writes

CAUSES = ("solved", "out of turns", "out of tokens", "too many tool errors", "cut short", "communicate missed",
          "wrote on a no-write task", "no write", "wrong write", "wrong arguments", "extra write", "other")
NORMAL_ENDS = ("agent_stop", "user_stop")   # `envs.reward.evaluate`: any other end scores 0
WRITE_CHECKS = ("no write needed", "right writes", "wrote on a no-write task", "no write", "wrong write",
                "wrong arguments")
CUT_SHORT = {"max_steps": "out of turns", "max_tokens": "out of tokens",   # the env's and the
             "too_many_errors": "too many tool errors"}                    # rollout's end reasons


@dataclass(frozen=True)
class Failure:
    cause: str                          # one of CAUSES
    differences: tuple = ()             # where the write check is "wrong arguments": (name, gold value,
                                        # called value) per argument that differs, by name; None where
                                        # one side lacks it
    writes: str = ""                    # :func:`write_check`'s verdict, one of WRITE_CHECKS

    @property
    def arguments(self) -> tuple[str, ...]:
        return tuple(d[0] for d in self.differences)


def differing_arguments(gold: dict, call: ToolCall) -> tuple[tuple[str, object, object], ...]:
    """(name, gold value, called value) of each argument whose value differs between a gold action
    ({"name", "arguments"}) and a call of the same tool, missing or extra names included, sorted by
    name. None stands for the side that lacks the name (or gives it as None)."""
    want, got, missing = gold.get("arguments") or {}, call.arguments, object()
    return tuple((k, want.get(k), got.get(k)) for k in sorted(want.keys() | got.keys())
                 if want.get(k, missing) != got.get(k, missing))


def write_check(write_calls: list[ToolCall], task: dict) -> Failure:
    """What `write_calls` (every write-tool call of an episode) did against the gold writes of
    `task`, however the episode ended: its `cause` and `writes` are one of :data:`WRITE_CHECKS`."""
    gold = gold_writes(task)
    if not gold:
        verdict = "wrote on a no-write task" if write_calls else "no write needed"
    elif not write_calls:
        verdict = "no write"
    elif not {a["name"] for a in gold} <= {c.name for c in write_calls}:
        verdict = "wrong write"
    else:
        for a in gold:
            diffs = [differing_arguments(a, c) for c in write_calls if c.name == a["name"]]
            if all(diffs):
                return Failure("wrong arguments", min(diffs, key=len), "wrong arguments")
        verdict = "right writes"
    return Failure(verdict, writes=verdict)


def failure_cause(reward: float, end_reason: str, reward_info: dict, write_calls: list[ToolCall],
                  task: dict) -> Failure:
    """The cause of an episode's outcome (see the module docstring): `reward`, `end_reason` and
    `reward_info` as a rollout records them (`reward_info` empty when the episode was cut),
    `write_calls` every write-tool call it made, `task` the task with its gold actions."""
    check = write_check(write_calls, task)
    if reward == 1.0:
        return replace(check, cause="solved")
    if end_reason not in NORMAL_ENDS or not reward_info:
        return replace(check, cause=CUT_SHORT.get(end_reason, "cut short"))
    if reward_info["db"]["reward"] == 1.0:
        return replace(check, cause="communicate missed")
    if check.cause in ("right writes", "no write needed"):
        # every gold write was made exactly, yet the database differs: more calls than the gold's
        # (accepted or not; one of them changed it) or something else
        return replace(check, cause="extra write" if len(write_calls) > len(gold_writes(task)) else "other")
    return check


def tally(failures) -> dict:
    """How many of `failures` (:class:`Failure`s) had each cause (in :data:`CAUSES` order, only those
    seen); over the "wrong arguments" ones, how often each argument name differed; over those cut
    short, what their write calls had done (`writes`, :func:`write_check`)."""
    failures = list(failures)
    causes = [f.cause for f in failures]
    names = [n for f in failures if f.cause == "wrong arguments" for n in f.arguments]
    cut = [f.writes for f in failures if f.cause in (*CUT_SHORT.values(), "cut short")]
    return {"causes": {c: causes.count(c) for c in CAUSES if c in causes},
            "arguments": {n: names.count(n) for n in sorted(set(names))},
            "cut_short_writes": {w: cut.count(w) for w in WRITE_CHECKS if w in cut}}
