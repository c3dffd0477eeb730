"""Teacher-forced, in the oracle's own episodes of the 110 tasks of eval-world:0: is the oracle's
call right after a failed call, as it is without one? For each task, the slip (a failed call,
`sinkflex_lib.envs.oracle.slipped_call`) before its first call with an id (a look-up) and before
its last (the write, on write tasks), and the same call in the clean episode: a call counts as
right when the argmax prediction is right at every one of its tokens and its <|end|>, each given
the oracle's text before it. Writes slip_probe.md beside itself.

python figures/grpo_stage6_base/slip_probe.py LABEL=POLICY [LABEL=POLICY ...]   (one thread, about a minute a policy)
"""
import sys
from pathlib import Path

import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.oracle import slip_points
from sinkflex_lib.rl.evaluate import balanced_task_ids
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.warmstart import demonstration
from sinkflex_lib.tables import markdown_table

SOURCE, MAX_TOKENS = "eval-world:0", 3072


def learned_turns(mask: list[int]) -> list[range]:
    """The token positions of each learned (mask-1) turn of a demonstration, in order."""
    turns, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            turns.append(range(start, i))
            start = None
    return turns


def call_right(policy, env, task_id: str, at: int, slip: bool, slip_text: str | None = None) -> bool | None:
    """Whether the oracle's call `at` of its script is predicted whole, teacher-forced (after its
    slip when `slip`: `slip_text`, or the oracle's own slip); None when the episode is cut before
    it. The episode is the pretraining's own demonstration (`warmstart.demonstration`), whose
    learned turns are the oracle's in order (a slip is not one of them), so the call is its
    learned turn number `at`."""
    r = demonstration(policy, env, task_id, 0, MAX_TOKENS, slip_at=at if slip else None, slip=slip_text)
    turns = learned_turns(r.mask)
    if at >= len(turns):
        return None
    with torch.no_grad():
        pred = policy.model(input_ids=torch.tensor([r.ids]), use_cache=False).logits[0].argmax(-1)
    return all(int(pred[p - 1]) == r.ids[p] for p in turns[at])


def rows_of(label: str, policy) -> list[dict]:
    env, rows = RetailEnv(SOURCE, max_steps=60), []
    policy.model.eval()
    for where, pick in (("a look-up (the first call with an id)", 0), ("the last call with an id (the write on write tasks)", -1)):
        counts = {False: [0, 0], True: [0, 0]}
        for tid in balanced_task_ids(SOURCE, 110):
            calls = slip_points(env.data.tasks[tid])
            for slip in (False, True):
                right = call_right(policy, env, tid, calls[pick], slip)
                if right is not None:
                    counts[slip][0] += right
                    counts[slip][1] += 1
        rows.append({"policy": label, "the call": where, "clean episode: right of calls": "%d of %d" % tuple(counts[False]),
                     "after its slip: right of calls": "%d of %d" % tuple(counts[True])})
    return rows


def main() -> None:
    torch.set_num_threads(1)
    rows = [r for arg in sys.argv[1:] for r in rows_of(*[(a, build_policy(p)) for a, p in [arg.split("=", 1)]][0])]
    text = ("# The oracle's call after a failed call, teacher-forced (110 tasks of eval-world:0)\n\n"
            "Written by `slip_probe.py`.\n\n" + markdown_table(rows) + "\n")
    (Path(__file__).parent / "slip_probe.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
