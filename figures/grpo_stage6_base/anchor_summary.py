"""Session 40: P0 with the anchor term (`TrainConfig.anchor_weight=1`: each minibatch's loss plus
the supervised loss on 4 fresh oracle episodes, `sinkflex_lib.rl.train.anchor_loss`) beside P0,
each with its shuffled-reward controls, three seeds each, and the anchored arm at lr 3e-4 (two seeds),
from the run files in this folder.

    python figures/grpo_stage6_base/anchor_summary.py    # writes anchor_summary.md, prints it

Per run: greedy validation on the 55 tasks at steps 0/10/20/30, the 110-task score after step 30,
the KL to the base (k3, the trainer's `kl` with beta > 0) over the last five steps (a step
without an update left out), the sampled success on the training tasks over the last ten steps,
and (anchored runs) the anchor loss over the first and last five steps that updated."""
import json
import math
import statistics
from pathlib import Path

from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
RUNS = {  # label: (metrics file, 110-task file), seeds 0, 1, 2
    "P0": [("arm_P0_positive_only", "arm_P0_step30"), ("arm_P0_positive_only_seed1", "arm_P0_seed1_step30"),
           ("arm_P0_positive_only_seed2", "arm_P0_seed2_step30")],
    "P0's controls": [("control_P0_positive_only_shuffled", "control_P0_step30"),
                      ("control_P0_positive_only_seed1_shuffled", "control_P0_seed1_step30"),
                      ("control_P0_positive_only_seed2_shuffled", "control_P0_seed2_step30")],
    "A1-P0": [(f"arm_A1P0_seed{s}", f"arm_A1P0_seed{s}_step30") for s in range(3)],
    "A1-P0's controls": [(f"control_A1P0_seed{s}_shuffled", f"control_A1P0_seed{s}_step30") for s in range(3)],
    "A1-P0 at lr 3e-4": [(f"arm_A1L3P0_seed{s}", f"arm_A1L3P0_seed{s}_step30") for s in range(2)],
}


def summary(metrics: str, final: str) -> dict:
    rows = [json.loads(line) for line in (HERE / f"{metrics}_metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train" and r["step"] <= 30]
    vals = {r["step"]: r["val_reward"] for r in rows if r["kind"] == "val" and r["step"] <= 30}
    end = json.loads((HERE / f"{final}_110_tasks.json").read_text())
    kl = [r["kl"] for r in train[-5:] if not math.isnan(r["kl"])]     # NaN: a step without a minibatch
    out = {"validation, 55 tasks, steps 0/10/20/30": " / ".join(f"{vals[s]:.3f}" for s in (0, 10, 20, 30)),
           "110 tasks, all / write": f"{end['val_reward']:.3f} / {end['val_write_reward']:.3f}",
           "KL to the base, last 5 steps": f"{statistics.mean(kl):.4f}",
           "sampled success, last 10 steps": f"{statistics.mean(r['reward_mean'] for r in train[-10:]):.3f}"}
    anchor = [r["anchor_loss"] for r in train if not math.isnan(r.get("anchor_loss", math.nan))]
    out["anchor loss, first / last 5 steps"] = (
        f"{statistics.mean(anchor[:5]):.3f} / {statistics.mean(anchor[-5:]):.3f}" if anchor else "")
    return out


def table() -> str:
    rows = []
    for label, runs in RUNS.items():
        for seed, (metrics, final) in enumerate(runs):
            rows.append({"runs": label, "seed": seed, **summary(metrics, final)})
    return markdown_table(rows) + "\n"


if __name__ == "__main__":
    text = table()
    (HERE / "anchor_summary.md").write_text(text)
    print(text)
