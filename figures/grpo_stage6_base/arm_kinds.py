"""Sessions 45-47: per task kind, what the arms trained on, from their metrics in this folder.

    python figures/grpo_stage6_base/arm_kinds.py    # writes arm_kinds.md, prints it

Per arm and kind, over its first 30 steps (P0's runs went on to 60; its policies scored held out are
those of step 30): the groups drawn, those with reward spread, the groups trained on (a step keeps
the first `groups_per_step` of its drawn groups that have reward spread, in draw order, as the
trainer's dynamic sampling does; their total equals the metrics' `update_groups`), in runs with
`oracle_prefix` the groups that started after some of the oracle's turns (drawn, and with spread),
and the sampled success of the kind's drawn groups over steps 1-10, 11-20 and 21-30 (temperature 1:
the training tasks' own score, not held out)."""
from collections import Counter
from pathlib import Path

import numpy as np

from big_batch import read_rows, training_kinds     # this folder's script
from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
ARMS = ["arm_P0_positive_only", "arm_P0_positive_only_seed1", "arm_P0_positive_only_seed2",
        "arm_RP0_seed0", "control_RP0_seed0_shuffled", "arm_RP0_seed1", "arm_RRT_seed0", "control_RRT_seed0_shuffled",
        "arm_RRD_seed0", "control_RRD_seed0_shuffled", "arm_RP0FX_seed0", "control_RP0FX_seed0_shuffled",
        "arm_RP0FX_seed1", "control_RP0FX_seed1_shuffled", "arm_OP_seed0", "control_OP_seed0_shuffled",
        "arm_OP_seed1", "control_OP_seed1_shuffled"]


def arm_rows(stem: str) -> list[dict]:
    """One row per kind the arm drew: groups drawn, with spread, trained on; sampled success per third of its steps."""
    rows = read_rows(f"{stem}_metrics.jsonl")
    per_step = rows[0]["groups_per_step"]
    steps = [r for r in rows if r["kind"] == "train" and "tasks" in r and r["step"] <= 30]
    tasks, thirds = load_source("train-world:1000").tasks, {}
    drawn, trained, spread_kinds = Counter(), Counter(), Counter()
    given, given_spread = Counter(), Counter()   # groups started after oracle turns (`oracle_prefix` runs)
    prefixed = any("prefix_turns" in r for r in steps)
    for r in steps:                                             # (a step without a group with spread logs no tasks)
        drawn.update(task_kind(tasks[t]) for t in r["tasks"])
        spread = [t for t, g in zip(r["tasks"], r["group_rewards"]) if len(set(g)) > 1]
        spread_kinds.update(task_kind(tasks[t]) for t in spread)
        trained.update(task_kind(tasks[t]) for t in spread[:per_step])
        for t, g, k in zip(r["tasks"], r["group_rewards"], r.get("prefix_turns", [0] * len(r["tasks"]))):
            given[task_kind(tasks[t])] += k > 0
            given_spread[task_kind(tasks[t])] += k > 0 and len(set(g)) > 1
        for k, rewards in training_kinds(r).items():
            thirds.setdefault(k, {}).setdefault((r["step"] - 1) // 10, []).extend(rewards)
    return [{"arm": stem, "kind": k, "groups drawn": drawn[k], "groups with spread": spread_kinds[k],
             "groups trained on": trained[k],
             "of the drawn, after oracle turns: drawn / with spread":
                 f"{given[k]} / {given_spread[k]}" if prefixed else "–",
             "sampled success, steps 1-10 / 11-20 / 21-30": " / ".join(
                 f"{np.mean(v[i]):.3f}" if i in v else "–" for i in range(3))} for k, v in thirds.items()]


if __name__ == "__main__":
    text = markdown_table([row for stem in ARMS for row in arm_rows(stem)]) + "\n"
    (HERE / "arm_kinds.md").write_text(text)
    print(text)
