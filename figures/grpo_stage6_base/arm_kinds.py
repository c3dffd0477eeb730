"""Sessions 45-46: per task kind, what the kind-restricted arms trained on, from their metrics in this folder.

    python figures/grpo_stage6_base/arm_kinds.py    # writes arm_kinds.md, prints it

Per arm and kind: the groups trained on (a step keeps the first `groups_per_step` of its drawn groups that
have reward spread, in draw order, as the trainer's dynamic sampling does; their total equals the metrics'
`update_groups`), and the sampled success of the kind's drawn groups over steps 1-10, 11-20 and 21-30
(temperature 1: the training tasks' own score, not held out)."""
from collections import Counter
from pathlib import Path

import numpy as np

from big_batch import read_rows, training_kinds     # this folder's script
from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
ARMS = ["arm_RP0_seed0", "control_RP0_seed0_shuffled", "arm_RP0_seed1", "arm_RRT_seed0", "control_RRT_seed0_shuffled",
        "arm_RRD_seed0", "control_RRD_seed0_shuffled", "arm_RP0FX_seed0", "control_RP0FX_seed0_shuffled",
        "arm_RP0FX_seed1", "control_RP0FX_seed1_shuffled"]


def arm_rows(stem: str) -> list[dict]:
    """One row per kind the arm drew: groups trained on and sampled success per third of its steps."""
    rows = read_rows(f"{stem}_metrics.jsonl")
    per_step = rows[0]["groups_per_step"]
    steps = [r for r in rows if r["kind"] == "train" and "tasks" in r]   # a step without a group with spread logs no tasks
    tasks, trained, thirds = load_source("train-world:1000").tasks, Counter(), {}
    for r in steps:
        spread = [t for t, g in zip(r["tasks"], r["group_rewards"]) if len(set(g)) > 1][:per_step]
        trained.update(task_kind(tasks[t]) for t in spread)
        for k, rewards in training_kinds(r).items():
            thirds.setdefault(k, {}).setdefault((r["step"] - 1) // 10, []).extend(rewards)
    return [{"arm": stem, "kind": k, "groups trained on": trained[k],
             "sampled success, steps 1-10 / 11-20 / 21-30": " / ".join(
                 f"{np.mean(v[i]):.3f}" if i in v else "–" for i in range(3))} for k, v in thirds.items()]


if __name__ == "__main__":
    text = markdown_table([row for stem in ARMS for row in arm_rows(stem)]) + "\n"
    (HERE / "arm_kinds.md").write_text(text)
    print(text)
