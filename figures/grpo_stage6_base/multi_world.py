"""Scratch (session 39): the base, P0 (seeds 0-2) and P0's shuffled-reward controls (seeds 0-2) played
greedily on every task (335 each) of three held-out worlds no choice was ever made on
(eval-world:2, 3, 4): 1,005 tasks a policy, against the 110 every other table here counts. Also the
grpo-tiny of notebook 05's run at 773ebb0, and (session 41) the one of its run at d35ae5a, shipped now. Session 40: P0 with the anchor term
(`anchor_weight=1`, seeds 0-2, at 5c3eb55) and its shuffled-reward controls; the same at lr 3e-4
(seeds 0, 1); the soups of P0's three seeds and of their controls, at α = 1 and 2
(`soup_eval.py`'s policies of session 37, α chosen on eval-world:1). Session 43: B232 at step 8
(every training task in every update, `big_batch.py`). Session 44: B232 at step 16; every group
per task kind. Session 45: P0 trained on the training world's returns only (`train_kinds=["return"]`,
seed 0) and its shuffled-reward control; seed 1 (two threads, no control). Session 46: P0 on returns,
refusals and transfers (RRT) and its control; from RP0 seeds 0 and 1, 10 steps of P0 on refusals and
transfers (FX) and the same with shuffled rewards (CFX); P0 on the returns and 4 of the 24 refusals
(RRD) and its control; the base again, bit-identical per task, to
keep its failure causes, which `keep` keeps since then (evaluate's per-task `failures`). Session 48:
300 more steps of the base's last pretraining stage (seed 7, D4) and the same from the base grown to
six layers (D6, `sinkflex_lib.rl.grow`; `figures/pretrain_grown_base/`). Session 49: P0 one task kind at a
time (KP, `kind_phase_steps=5`, seed 0, at 1d2517a) and its shuffled-reward control, at steps 40 and 80; seed 1 to step 40 (two threads, no control).
Session 50: P0 on a fresh training world every step (FW, `world_steps=1`, seeds 0-2, at 2a9be67), each beside its
shuffled-reward control. Session 51: D4 run again (the same command at de040c6, float rounding apart) and
the same stage with the first token of each item and product id weighted 20 (IDS, profile `idstart`).
Session 52: D4's stage (seed 7) after 1,500 steps of new-item look-ups alone (NILV; profile
`new-item-lookups`, seed 14), and 600 more steps of the same stage after it (NILV2, seed 8).
Session 53: from NILV2, the stages that might teach the write call's copy of the new item: `idstart`
(seed 9), `calls` (seed 10, stopped after step 250) and `list-lookups` alone (seed 15), then `lists` (seed 16),
then 400 more steps of `lists` (seed 17).

    python multi_world.py keep DIR    # trim DIR's evaluate --json files ({policy}_w{S}.json, those
                                      # there) into multi_world/
    python multi_world.py             # the tables, from multi_world/, to multi_world.md and stdout

Differences are paired by task; their 95% interval is 1.96 standard errors of the mean difference
(the sample standard deviation of the per-task differences over the square root of the task count).
A seed group's reward on a task is the mean over its seeds."""
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.evaluate import is_write_task, task_kind
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
FOLDER = HERE / "multi_world"
WORLDS = (2, 3, 4)
GROUPS = {"base": ["base"], "P0 (3 seeds)": ["P0s0", "P0s1", "P0s2"],
          "P0's controls (3 seeds)": ["C0s0", "C0s1", "C0s2"], "grpo-tiny (773ebb0)": ["grpo_tiny"],
          "grpo-tiny (shipped, d35ae5a)": ["grpo_tiny_d35ae5a"],
          "P0 + anchor (3 seeds)": ["A1P0s0", "A1P0s1", "A1P0s2"],
          "P0 + anchor's controls (3 seeds)": ["A1C0s0", "A1C0s1", "A1C0s2"],
          "P0 + anchor, lr 3e-4 (2 seeds)": ["A1L3P0s0", "A1L3P0s1"],
          "P0 soup": ["soupP0a1"], "P0's controls' soup": ["soupC0a1"],
          "P0 soup, α = 2": ["soupP0a2"], "P0's controls' soup, α = 2": ["soupC0a2"],
          "B232 (every training task an update), step 8": ["B232"], "B232, step 16": ["B232s16"],
          "P0 on returns only (seed 0)": ["RP0s0"], "P0 on returns only's control": ["RC0s0"],
          "P0 on returns only, seed 1 (no control)": ["RP0s1"],
          "P0 on returns, refusals, transfers (RRT)": ["RRTs0"], "RRT's control": ["CRRTs0"],
          "P0 on returns only (2 seeds)": ["RP0s0", "RP0s1"],
          "P0 on returns, then on refusals and transfers (2 seeds)": ["FXs0", "FXs1"],
          "P0 on returns, then shuffled on refusals and transfers (2 seeds)": ["CFXs0", "CFXs1"],
          "P0 on returns and a few refusals (RRD)": ["RRDs0"], "RRD's control": ["CRRDs0"],
          "P0, seeds 0 and 1": ["P0s0", "P0s1"], "P0 with the oracle-prefix curriculum (OP, 2 seeds)": ["OPs0", "OPs1"],
          "OP's controls (2 seeds)": ["COPs0", "COPs1"],
          "the base, 300 more pretraining steps (seed 7, D4)": ["D4s7"],
          "the base grown to 6 layers, then 300 steps (seed 7, D6)": ["D6s7"],
          "P0 one kind at a time (KP, seed 0), step 40": ["KP40s0"], "KP's control, step 40": ["CKP40s0"],
          "P0 one kind at a time (KP, seed 0), step 80": ["KPs0"], "KP's control, step 80": ["CKPs0"],
          "KP seed 1, step 40 (two threads, no control)": ["KPs1"], "KP, step 40 (2 seeds)": ["KP40s0", "KPs1"],
          "P0 on a fresh training world every step (FW, 3 seeds)": ["FWs0", "FWs1", "FWs2"],
          "FW's controls (3 seeds)": ["CFWs0", "CFWs1", "CFWs2"],
          "D4 run again (at de040c6)": ["D4s7r"],
          "D4 with each item and product id's first token weighted 20 (IDS, seed 7)": ["IDSs7"],
          "D4 after 1,500 steps of new-item look-ups alone (NILV, seed 7)": ["NILVs7"],
          "NILV, then 600 more steps of D4's stage (NILV2, seed 8)": ["NILV2s8"],
          "NILV2, then the idstart stage (seed 9)": ["NILV2IDSs9"],
          "NILV2, then the calls stage (seed 10, step 250)": ["NILV2Cs10"],
          "NILV2, then list look-ups alone (seed 15) and the lists stage (seed 16)": ["NILV2Ls16"],
          "NILV2-LL-L, then 400 more steps of the lists stage (seed 17)": ["NILV2L2s17"]}
CONTROLS = {"P0 (3 seeds)": "P0's controls (3 seeds)", "P0 + anchor (3 seeds)": "P0 + anchor's controls (3 seeds)",
            "P0 soup": "P0's controls' soup", "P0 soup, α = 2": "P0's controls' soup, α = 2",
            "P0 on returns only (seed 0)": "P0 on returns only's control",
            "P0 on returns, refusals, transfers (RRT)": "RRT's control",
            "P0 on returns, then on refusals and transfers (2 seeds)":
                "P0 on returns, then shuffled on refusals and transfers (2 seeds)",
            "P0 on returns and a few refusals (RRD)": "RRD's control",
            "P0 with the oracle-prefix curriculum (OP, 2 seeds)": "OP's controls (2 seeds)",
            "P0 one kind at a time (KP, seed 0), step 40": "KP's control, step 40",
            "P0 one kind at a time (KP, seed 0), step 80": "KP's control, step 80",
            "P0 on a fresh training world every step (FW, 3 seeds)": "FW's controls (3 seeds)"}
ADDS_TO = {"P0 + anchor (3 seeds)": "P0 (3 seeds)",   # a group against the one it starts from or adds a term to
           "P0 on returns, then on refusals and transfers (2 seeds)": "P0 on returns only (2 seeds)",
           "P0 on returns, then shuffled on refusals and transfers (2 seeds)": "P0 on returns only (2 seeds)",
           "P0 with the oracle-prefix curriculum (OP, 2 seeds)": "P0, seeds 0 and 1",
           "the base grown to 6 layers, then 300 steps (seed 7, D6)": "the base, 300 more pretraining steps (seed 7, D4)",
           "P0 on a fresh training world every step (FW, 3 seeds)": "P0 (3 seeds)",
           "D4 run again (at de040c6)": "the base, 300 more pretraining steps (seed 7, D4)",
           "D4 with each item and product id's first token weighted 20 (IDS, seed 7)":
               "the base, 300 more pretraining steps (seed 7, D4)",
           "D4 after 1,500 steps of new-item look-ups alone (NILV, seed 7)":
               "the base, 300 more pretraining steps (seed 7, D4)",
           "NILV, then 600 more steps of D4's stage (NILV2, seed 8)":
               "D4 after 1,500 steps of new-item look-ups alone (NILV, seed 7)",
           **{group: "NILV, then 600 more steps of D4's stage (NILV2, seed 8)" for group in (
               "NILV2, then the idstart stage (seed 9)", "NILV2, then the calls stage (seed 10, step 250)",
               "NILV2, then list look-ups alone (seed 15) and the lists stage (seed 16)")},
           "NILV2-LL-L, then 400 more steps of the lists stage (seed 17)":
               "NILV2, then list look-ups alone (seed 15) and the lists stage (seed 16)"}
SEEDED = ["P0s0", "P0s1", "P0s2", "C0s0", "C0s1", "C0s2", "A1P0s0", "A1P0s1", "A1P0s2", "A1C0s0", "A1C0s1", "A1C0s2",
          "A1L3P0s0", "A1L3P0s1", "FXs0", "FXs1", "CFXs0", "CFXs1", "OPs0", "OPs1", "COPs0", "COPs1",
          "FWs0", "FWs1", "FWs2", "CFWs0", "CFWs1", "CFWs2"]
POLICIES = list(dict.fromkeys(n for g in GROUPS.values() for n in g))
KEEP = ("source", "n_tasks", "n_write_tasks", "mean_at_1", "write_mean_at_1", "do_nothing_mean_at_1",
        "do_nothing_write_mean_at_1", "oracle_mean_at_1", "oracle_write_mean_at_1", "per_kind", "per_task",
        "failures")   # failures: kept since session 46 (evaluate's failure causes, per task; earlier files lack it)


def keep(src: Path) -> None:
    FOLDER.mkdir(exist_ok=True)
    for name in POLICIES:
        for w in WORLDS:
            if not (src / f"{name}_w{w}.json").exists():
                continue
            res = json.loads((src / f"{name}_w{w}.json").read_text())
            if "failures" in res:   # its per-task causes and writes; the per-kind counts follow from them
                res["failures"] = {k: res["failures"][k] for k in ("per_task", "per_task_writes")}
            (FOLDER / f"{name}_w{w}.json").write_text(json.dumps({k: res[k] for k in KEEP if k in res}, indent=1) + "\n")


def rewards(names: list[str], write_only: bool) -> np.ndarray:
    """Per task of the three worlds (in order), the mean reward over `names`' policies."""
    per_policy = []
    for name in names:
        row = []
        for w in WORLDS:
            res, tasks = json.loads((FOLDER / f"{name}_w{w}.json").read_text()), load_source(f"eval-world:{w}").tasks
            row += [r for t, r in res["per_task"].items() if not write_only or is_write_task(tasks[t])]
        per_policy.append(row)
    return np.mean(per_policy, axis=0)


def kind_rewards(names: list[str]) -> dict[str, np.ndarray]:
    """Per task kind (in the worlds' order), the mean reward over `names`' policies on its tasks."""
    kinds = [task_kind(load_source(f"eval-world:{w}").tasks[t])
             for w in WORLDS for t in json.loads((FOLDER / f"base_w{w}.json").read_text())["per_task"]]
    r = rewards(names, False)
    return {k: r[[i for i, x in enumerate(kinds) if x == k]] for k in dict.fromkeys(kinds)}


def kind_table() -> str:
    """Per group and kind, greedy mean@1 minus the base's (session 44): where what moves, moves."""
    base = kind_rewards(["base"])
    rows = [{"policy": "base (mean@1; tasks)", **{k: f"{x.mean():.3f}; {len(x)}" for k, x in base.items()}}]
    for label, names in GROUPS.items():
        if label != "base":
            rows.append({"policy": label, **{k: f"{x.mean() - base[k].mean():+.3f}"
                                             for k, x in kind_rewards(names).items()}})
    return markdown_table(rows)


def failed_writes(name: str, kind: str) -> Counter | None:
    """Over the three worlds, `name`'s unsolved tasks of `kind` counted by what the episode wrote
    (evaluate's `failures.per_task_writes`: e.g. 'wrote on a no-write task'); None for a file kept
    before failures were."""
    counts = Counter()
    for w in WORLDS:
        res = json.loads((FOLDER / f"{name}_w{w}.json").read_text())
        if "failures" not in res:
            return None
        tasks = load_source(f"eval-world:{w}").tasks
        counts.update(res["failures"]["per_task_writes"][t] for t, r in res["per_task"].items()
                      if r < 1 and task_kind(tasks[t]) == kind)
    return counts


def refusal_table() -> str:
    """The unsolved refusals of every policy whose files keep failures, by what they wrote."""
    rows = [{"policy": n, "unsolved refusals": sum(c.values()), **c}
            for n in POLICIES if (c := failed_writes(n, "refuse")) is not None]
    return markdown_table(rows)


def paired(a: np.ndarray, b: np.ndarray) -> str:
    d = a - b
    half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
    return f"{d.mean():+.3f} ± {half:.3f}"


def table() -> str:
    rows = []
    for write_only in (False, True):
        r = {label: rewards(names, write_only) for label, names in GROUPS.items()}
        base = r["base"]
        for label, x in r.items():
            rows.append({"tasks": f"{'write' if write_only else 'all'} ({len(x)})", "policy": label,
                         "mean@1": f"{x.mean():.3f}", "minus the base": "" if x is base else paired(x, base),
                         "minus its controls": paired(x, r[CONTROLS[label]]) if label in CONTROLS else "",
                         "minus the group it adds to": f"{ADDS_TO[label]}: {paired(x, r[ADDS_TO[label]])}"
                         if label in ADDS_TO else ""})
    base = rewards(["base"], False)
    for name in SEEDED:
        x = rewards([name], False)
        rows.append({"tasks": f"all ({len(x)})", "policy": name, "mean@1": f"{x.mean():.3f}",
                     "minus the base": paired(x, base), "minus its controls": "", "minus the group it adds to": ""})
    res = {(n, w): json.loads((FOLDER / f"{n}_w{w}.json").read_text()) for n in POLICIES for w in WORLDS}
    per_world = [{"policy": label, **{f"eval-world:{w}": f"{res[name, w][key]:.3f}" for w in WORLDS}}
                 for label, name, key in [("do-nothing", "base", "do_nothing_mean_at_1"),
                                          ("oracle", "base", "oracle_mean_at_1")]
                 + [(n, n, "mean_at_1") for n in POLICIES]]
    return (markdown_table(rows) + "\n\nPer world (all 335 tasks, greedy mean@1):\n\n" + markdown_table(per_world)
            + "\n\nPer kind (all three worlds), minus the base:\n\n" + kind_table()
            + "\n\nUnsolved refusals (all three worlds), by what the episode wrote:\n\n" + refusal_table() + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["keep"]:
        keep(Path(sys.argv[2]))
    text = table()
    (HERE / "multi_world.md").write_text(text)
    print(text)
