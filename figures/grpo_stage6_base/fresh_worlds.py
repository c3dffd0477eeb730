"""Session 50: P0 on a fresh training world every step (FW, `world_steps=1`), seeds 0-2, each
beside its shuffled-reward control, from their metrics in this folder.

    python figures/grpo_stage6_base/fresh_worlds.py    # writes fresh_worlds.md, prints it

With `world_steps=1` step k draws its 8 groups from the training tasks of train-world:(999 + k),
a world no earlier step saw, so every group's sampled success (temperature 1, the policy before
that step's update) is a score on tasks new to the run: a training curve that memorising cannot
raise. Arm and control share the seed, so they draw the same worlds, tasks and task seeds at
every step: their groups pair one to one. Per block of steps and for the write tasks: the
sampled success of each, and the arm's minus the control's, paired by group (95% interval, 1.96
standard errors of the mean difference). Then the validation rows (greedy, 55 tasks of
eval-world:0)."""
from functools import cache
from pathlib import Path

import numpy as np

from big_batch import read_rows     # this folder's scripts
from kind_phases import report, val_rows
from multi_world import paired       # the paired difference and its 95% interval
from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.evaluate import is_write_task
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
RUNS = {f"seed {s}": (f"arm_FW_seed{s}", f"control_FW_seed{s}_shuffled") for s in (0, 1, 2)}
BLOCKS = [(1, 10), (11, 20), (21, 30)]


@cache
def write_tasks(source: str) -> set[str]:
    """The write tasks of a training world (the seeds share their worlds: one generation each)."""
    return {t for t, task in load_source(source).tasks.items() if is_write_task(task)}


def groups(stem: str) -> list[tuple[int, bool, float]]:
    """(step, write task?, mean sampled reward) per group rolled out, in step order."""
    out = []
    for r in (r for r in read_rows(f"{stem}_metrics.jsonl") if r["kind"] == "train"):
        writes = write_tasks(r["source"])
        out += [(r["step"], t in writes, float(np.mean(g))) for t, g in zip(r["tasks"], r["group_rewards"])]
    return out


def block_rows(pairs: list[tuple[str, str]]) -> list[dict]:
    """The blocks' rows over the groups of every (arm, control) pair in `pairs`."""
    ga, gc = [], []
    for arm, control in pairs:
        a, c = groups(arm), groups(control)
        assert [g[:2] for g in a] == [g[:2] for g in c], "arm and control drew different tasks"
        ga, gc = ga + a, gc + c
    rows = []
    for (lo, hi) in BLOCKS + [(1, 30)]:
        for write_only in (False, True):
            pick = [i for i, g in enumerate(ga) if lo <= g[0] <= hi and (g[1] or not write_only)]
            a, c = np.array([ga[i][2] for i in pick]), np.array([gc[i][2] for i in pick])
            rows.append({"steps": f"{lo}-{hi}", "tasks": f"{'write' if write_only else 'all'} ({len(pick)} groups)",
                         "arm": f"{a.mean():.3f}", "control": f"{c.mean():.3f}", "arm minus control": paired(a, c)})
    return rows


def drift_rows(pairs: list[tuple[str, str]]) -> list[dict]:
    """Each side's sampled success in the last block minus the first, over the groups of `pairs`
    (other tasks: unpaired, 1.96 times the square root of the two blocks' squared standard errors)."""
    (lo1, hi1), (lo2, hi2) = BLOCKS[0], BLOCKS[-1]
    rows = []
    for side, stems in (("arm", [a for a, _ in pairs]), ("control", [c for _, c in pairs])):
        g = [x for stem in stems for x in groups(stem)]
        first = np.array([r for step, _, r in g if lo1 <= step <= hi1])
        last = np.array([r for step, _, r in g if lo2 <= step <= hi2])
        half = 1.96 * np.sqrt(first.var(ddof=1) / len(first) + last.var(ddof=1) / len(last))
        rows.append({"side": side, f"steps {lo2}-{hi2} minus steps {lo1}-{hi1}": f"{last.mean() - first.mean():+.3f} ± {half:.3f}"})
    return rows


def text() -> str:
    pairs = list(RUNS.values())
    parts = ["### The three seeds' groups together", "", markdown_table(block_rows(pairs)).rstrip(), "",
             "Each side against its own first block:", "", markdown_table(drift_rows(pairs)).rstrip(), ""]
    for name, (arm, control) in RUNS.items():
        parts += [f"### {name} (`{arm}_metrics.jsonl`, `{control}_metrics.jsonl`)", "",
                  "Sampled success on each step's fresh tasks:", "", markdown_table(block_rows([(arm, control)])).rstrip(), "",
                  "Validation, arm:", "", markdown_table(val_rows(arm)).rstrip(), "",
                  "Validation, control:", "", markdown_table(val_rows(control)).rstrip(), ""]
    return report("FW: P0 on a fresh training world every step (`world_steps=1`)", __doc__, parts)


if __name__ == "__main__":
    out = text()
    (HERE / "fresh_worlds.md").write_text(out)
    print(out)
