"""Why the greedy episodes on the 110 tasks of eval-world:0 fail, for the shipped base and
policies trained from it (`sinkflex_lib.rl.failures`: one cause per episode). Writes
failure_causes.md from the failures_*.json files in this folder; with STEM=POLICY arguments it
first plays those policies and writes their JSON files.

python figures/grpo_stage6_base/failure_causes.py [STEM=POLICY ...]   (one thread, about a minute a policy)

The GRPO validation's budgets (12 turns, 128 tokens a turn, 3,072 an episode), greedy, user seed 0:
the episodes behind the arms table's and pass_at_k.md's greedy numbers. How each policy was made:
README.md here ("not held out": trained on these very tasks).
"""
import json
import sys
from pathlib import Path

import torch

from sinkflex_lib.envs import load_source
from sinkflex_lib.envs.reward import gold_writes
from sinkflex_lib.rl.evaluate import (balanced_task_ids, causes_by_group, evaluate_policy, is_write_task,
                                      solved_by_failed_calls, solved_changes, task_kind)
from sinkflex_lib.rl.failures import CAUSES, WRITE_CHECKS
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import RolloutConfig
from sinkflex_lib.tables import markdown_table

HERE, SOURCE = Path(__file__).parent, "eval-world:0"
# (file stem, label)
POLICIES = [("base", "the shipped base"), ("grpo_tiny_12e62f0", "GRPO, the cpu profile (grpo-tiny of the run at 12e62f0)"),
            ("grpo_tiny_d73b107", "GRPO, the cpu profile (grpo-tiny of the run at d73b107)"),
            ("grpo_tiny_773ebb0", "GRPO, the cpu profile (grpo-tiny of the run at 773ebb0)"),
            ("grpo_tiny_d35ae5a", "GRPO, the cpu profile (grpo-tiny of the run at d35ae5a, shipped)"),
            ("P0_seed2", "P0 seed 2 (only successes reinforced), from the training world"),
            ("W225P0_seed0", "P0 seed 0 on the other 225 tasks of this world, 90 steps"),
            ("T110P0_trained_on_these", "not held out: P0 trained on these 110 tasks, 90 steps"),
            *((f"W5P0_seed{s}", f"P0 with write credit 0.5, seed {s}, from the training world") for s in range(3)),
            ("L13", "L13: make pretrain-lists (list look-ups, then the lists stage twice; seeds 11, 12, 13)"),
            *((f"L13P0_seed{s}", f"P0 from L13, seed {s}, from the training world") for s in range(3)),
            ("slips7", "slips: the variants stage with a failed call first in half its episodes (seed 7, 300 steps)"),
            ("recover22", "recover: the variants stage with the base's own slips and the way back (seed 22, 300 steps)")]


def play(stem: str, policy: str) -> None:
    """Greedy episodes of `policy` on the 110 tasks; their rewards and causes to failures_<stem>.json."""
    torch.set_num_threads(1)
    res = evaluate_policy(build_policy(policy), SOURCE, balanced_task_ids(SOURCE, 110),
                          RolloutConfig(max_turns=12), with_baselines=False)
    keep = {k: res[k] for k in ("source", "n_tasks", "mean_at_1", "write_mean_at_1", "per_task", "failures",
                                "per_task_failed_calls")}
    (HERE / f"failures_{stem}.json").write_text(json.dumps({"policy": policy, **keep}, indent=1) + "\n")
    print(f"{stem}: mean@1 {res['mean_at_1']:.3f}, write {res['write_mean_at_1']:.3f}")


def policy_rows(results: dict[str, dict], write: bool) -> list[dict]:
    """Per policy, how many of the write tasks (or of the others) ended with each cause."""
    group, rows = "write tasks" if write else "other tasks", []
    for stem, label in POLICIES:
        if stem in results:
            counts = causes_by_group(results[stem], SOURCE)[group]
            rows.append({"policy": label, "tasks": sum(counts.values()), **counts})
    return rows


def cut_short_rows(results: dict[str, dict]) -> list[dict]:
    """Per policy, its write tasks that ran out of turns, by what their write calls had done."""
    tasks, rows = load_source(SOURCE).tasks, []
    for stem, label in POLICIES:
        if stem in results:
            f = results[stem]["failures"]
            writes = [f["per_task_writes"][t] for t, c in f["per_task"].items()
                      if c == "out of turns" and is_write_task(tasks[t])]
            rows.append({"policy": label, "out of turns": len(writes),
                         **{w: writes.count(w) for w in WRITE_CHECKS if w != "no write needed"}})
    return rows


def failed_call_rows(results: dict[str, dict]) -> list[dict]:
    """Per policy played since the evaluator counts failed calls: its tasks with and without a failed
    call (a tool error or an unparsed call), and how many of each it solved."""
    rows = []
    for stem, label in POLICIES:
        if "per_task_failed_calls" in results.get(stem, {}):
            split = solved_by_failed_calls(results[stem])
            rows.append({"policy": label, **{f"{g}: solved of tasks": f"{row['solved']} of {row['tasks']}"
                                               for g, row in split.items()}})
    return rows


def change_rows(results: dict[str, dict]) -> list[dict]:
    """Per trained policy: the tasks it gained over the base, by the base's cause there, and the
    tasks it lost, by its own cause."""
    rows = []
    for stem, label in POLICIES[1:]:
        if stem not in results:
            continue
        for what, by_task in solved_changes(results["base"], results[stem]).items():
            causes = list(by_task.values())
            rows.append({"policy": label, "tasks": f"{what} {len(causes)}",
                         **{c: causes.count(c) for c in CAUSES if c != "solved"}})
    return rows


def items_listed(task: dict) -> int:
    """The most item ids one gold write of `task` lists (0 for writes without items)."""
    return max([len(a["arguments"].get("item_ids", [])) for a in gold_writes(task)] or [0])


def reach_rows() -> list[dict]:
    """From the pass_at_k_*.json files here: per kind and items listed in the gold write, the tasks
    that each policy solves greedily or in one of its 32 samples, and the union over the policies."""
    from pass_at_k import POLICIES as SAMPLED, load
    tasks, runs = load_source(SOURCE).tasks, {label: load(stem) for stem, label in SAMPLED if load(stem)}
    reached = {label: {t for t, w in r["sampled"]["per_task_successes"].items() if w or r["per_task"][t] == 1}
               for label, r in runs.items()}
    groups: dict[tuple[str, int], list[str]] = {}
    for t in next(iter(runs.values()))["per_task"]:
        groups.setdefault((task_kind(tasks[t]), items_listed(tasks[t])), []).append(t)
    rows = []
    for (kind, n), ids in sorted(groups.items(), key=lambda kv: (kv[0][1] == 0, kv[0])):
        rows.append({"kind": kind, "items in the write": n, "tasks": len(ids),
                     **{label: len(reached[label] & set(ids)) for label in runs},
                     "any of them": len(set().union(*reached.values()) & set(ids))})
    rows.append({"kind": "all", "items in the write": "", "tasks": sum(r["tasks"] for r in rows),
                 **{k: sum(r[k] for r in rows) for k in [*runs, "any of them"]}})
    return rows


def drop_empty_columns(rows: list[dict]) -> list[dict]:
    keep = [k for k in rows[0] if any(r[k] not in (0, None) for r in rows)]
    return [{k: r[k] for k in keep} for r in rows]


def main() -> None:
    for arg in sys.argv[1:]:
        play(*arg.split("=", 1))
    results = {s: json.loads((HERE / f"failures_{s}.json").read_text())
               for s, _ in POLICIES if (HERE / f"failures_{s}.json").exists()}
    base = results["base"]["failures"]["per_kind"]
    kinds = [{"kind": k, **{c: row["causes"].get(c, 0) for c in CAUSES},
              "arguments that differed": ", ".join(f"{n} {c}" for n, c in row["arguments"].items())}
             for k, row in base.items()]
    parts = ["# Why the greedy episodes fail (110 tasks of eval-world:0, 12 turns)\n",
             "Written by `failure_causes.py` from `failures_*.json`; one cause per episode, "
             "`sinkflex_lib.rl.failures`.\n",
             "## The 80 write tasks\n", markdown_table(drop_empty_columns(policy_rows(results, True))),
             "\n## The write tasks that ran out of turns, by what their write calls had done\n",
             markdown_table(drop_empty_columns(cut_short_rows(results))),
             "\n## The 30 other tasks (information, refuse, transfer)\n",
             markdown_table(drop_empty_columns(policy_rows(results, False))),
             "\n## Solved with and without a failed call (a tool error or an unparsed call; "
             "policies played since the evaluator counts them)\n", markdown_table(failed_call_rows(results)),
             "\n## The base, per kind\n", markdown_table(drop_empty_columns(kinds)),
             "\n## Tasks gained over the base (by the base's cause) and lost (by the policy's cause)\n",
             markdown_table(drop_empty_columns(change_rows(results))),
             "\n## Reached by greedy or one of 32 samples, by the items a task's write lists "
             "(from `pass_at_k_*.json`)\n", markdown_table(reach_rows()),
             "\n## The base's wrong arguments, whatever the cause: the gold's value, then the call's "
             "(the closest call)\n",
             *(f"- {t}: " + "; ".join(f"{n} {g!r} -> {c!r}" for n, (g, c) in diffs.items())
               for t, diffs in results["base"]["failures"]["differences"].items()), ""]
    (HERE / "failure_causes.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
