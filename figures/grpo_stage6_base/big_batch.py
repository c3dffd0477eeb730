"""Sessions 42-44: GRPO with every training task in every update, one optimizer step a GRPO step
(B232), from the run's metrics in this folder.

    python figures/grpo_stage6_base/big_batch.py    # writes big_batch.md, prints it

The run: arm_script.py B232 12 sample_groups=232 groups_per_step=232 accumulation_steps=64 lr=3e-4
val_every=2 ckpt_every=1 threads_=2 (the `cpu` profile otherwise: beta 0.05, minibatches of 16),
at 8f22456 (session 43; session 42's start of it was lost), stopped after step 8 for time (the lr is
constant: no schedule depends on the step count); resumed in session 44 with 16 in place of 12 (the
same command; the library at f4ec38a, the same arithmetic) to step 16.
Each step rolls out one group of 8 of each of the 232 training tasks (train-world:1000, new user
seeds each step), trains on every group with reward spread, and averages all their minibatches'
gradients into one AdamW step (`TrainConfig.accumulation_steps`, 64 >= the minibatches of any step).
Per step: groups with spread, the gradient's norm (before clipping at 1), the KL to the base (k3),
the sampled success over the 232 training tasks (1,856 episodes at temperature 1: the training
tasks' own score, not held out), and greedy validation on the 55 tasks of eval-world:0 every second step.
Then per task kind (`kind_table`): the training tasks' sampled success at the first and last step beside
the held-out kinds of the 1,005 tasks (multi_world.py's files)."""
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.tables import markdown_table
from multi_world import kind_rewards, paired     # this folder's script: the 1,005 tasks, paired differences

HERE = Path(__file__).parent
METRICS = "arm_B232_metrics.jsonl"


def read_rows(metrics: str) -> list[dict]:
    return [json.loads(line) for line in (HERE / metrics).read_text().splitlines()]


def table(metrics: str = METRICS) -> str:
    rows = read_rows(metrics)
    vals = {r["step"]: r for r in rows if r["kind"] == "val"}
    out = [{"step": 0, "validation, 55 tasks (all / write)":
            f"{vals[0]['val_reward']:.3f} / {vals[0]['val_write_reward']:.3f}"}]
    for r in (r for r in rows if r["kind"] == "train"):
        v = vals.get(r["step"])
        out.append({"step": r["step"], "groups with spread": r["update_groups"],
                    "optimizer steps": r["optimizer_steps"], "gradient norm": f"{r['grad_norm']:.3f}",
                    "KL to the base": f"{r['kl']:.4f}", "sampled success, 232 training tasks": f"{r['reward_mean']:.3f}",
                    "validation, 55 tasks (all / write)":
                    f"{v['val_reward']:.3f} / {v['val_write_reward']:.3f}" if v else ""})
    columns = ["step", "groups with spread", "optimizer steps", "gradient norm", "KL to the base",
               "sampled success, 232 training tasks", "validation, 55 tasks (all / write)"]
    return markdown_table(out, columns) + "\n"


def training_kinds(row: dict) -> dict[str, list[float]]:
    """Per kind, the sampled rewards of one train row's groups (one group per training task)."""
    tasks, per = load_source("train-world:1000").tasks, defaultdict(list)
    for t, g in zip(row["tasks"], row["group_rewards"]):
        per[task_kind(tasks[t])] += g
    return per


def kind_table(metrics: str = METRICS, trained=(("step 8", "B232"), ("step 16", "B232s16"))) -> str:
    """Per kind: the training tasks' sampled success at the first and the last step's rollouts
    (the base's samples; the policy after all but the last update), beside greedy mean@1 on the
    1,005 held-out tasks: the base's, and each `trained` policy's (label, name of its multi_world
    files) minus the base's, paired by task as in multi_world.py (95% intervals)."""
    rows = read_rows(metrics)
    train, group_size = [r for r in rows if r["kind"] == "train"], rows[0]["group_size"]
    first, last = training_kinds(train[0]), training_kinds(train[-1])
    base = kind_rewards(["base"])
    after = {label: kind_rewards([name]) for label, name in trained}
    mean = lambda x: float(np.mean(x))
    out = [{"kind": k, "training tasks": len(first[k]) // group_size, "sampled, step 1": f"{mean(first[k]):.3f}",
            f"sampled, step {train[-1]['step']}": f"{mean(last[k]):.3f}",
            "held-out tasks": len(base[k]), "greedy, the base": f"{mean(base[k]):.3f}",
            **{f"{label} minus the base": paired(a[k], base[k]) for label, a in after.items()}} for k in base]
    return markdown_table(out) + "\n"


if __name__ == "__main__":
    text = table() + "\n" + kind_table()
    (HERE / "big_batch.md").write_text(text)
    print(text)
