"""Scratch (session 48): the base, its 300-step continuation and the grown base's, side by side on
the 110 tasks of eval-world:0 (greedy mean@1 per kind; teacher-forced copies per argument kind).
Reads the shipped base's manifest evaluation, this folder's *_110.json (`eval_base.py`) and the
runs' metrics (*_metrics.jsonl: each step's loss is on episodes not trained on before, the same for
both runs at a step); writes compare.md.
    python compare.py"""
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
COLUMNS = {"the shipped base (4 layers)": None,
           "300 steps, 4 layers (D4)": "D4_seed7_step300_110.json",
           "300 steps, grown to 6 layers (D6)": "D6_seed7_step300_110.json"}
COPY_KINDS = ("item_id", "confirmed_item_id", "product_id", "order_id", "confirmed_order_id", "payment_method",
              "confirmed_payment_method", "confirmed_address", "confirmed_zip", "user_id", "email", "all", "confirmed")


def load(name):
    if name is None:
        return json.loads((ROOT / "data/checkpoints/base-tiny/manifest.json").read_text())["evaluation"]
    return json.loads((HERE / name).read_text())


def row(label, values, fmt="{:.3f}"):
    return f"| {label} | " + " | ".join(fmt.format(v) for v in values) + " |"


def train_losses(name):
    """{step: (loss, agent_loss)} of a run's train rows."""
    rows = [json.loads(x) for x in (HERE / name).read_text().splitlines()]
    return {r["step"]: (r["loss"], r["agent_loss"]) for r in rows if r.get("kind") == "train"}


def loss_lines():
    d4, d6 = train_losses("D4_seed7_metrics.jsonl"), train_losses("D6_seed7_metrics.jsonl")
    out = ["", "Training loss of each step, on data no earlier step saw (`loss`: the episodes' weighted mean NLL plus",
           "the look-ups'; `agent`: the episodes' agent tokens' mean NLL), D6 - D4 paired by step",
           "(mean ± 1.96 standard errors over the block's steps):", "",
           "| steps | D4 loss | D6 loss | D6 - D4 | D4 agent | D6 agent | D6 - D4 agent |", "|---|---:|---:|---:|---:|---:|---:|"]
    for lo, hi in ((1, 100), (101, 200), (201, 300)):
        steps = [s for s in range(lo, hi + 1) if s in d4 and s in d6]
        cells = []
        for i in (0, 1):
            a, b = np.array([d4[s][i] for s in steps]), np.array([d6[s][i] for s in steps])
            diff = b - a
            cells += [f"{a.mean():.4f}", f"{b.mean():.4f}",
                      f"{diff.mean():+.4f} ± {1.96 * diff.std(ddof=1) / np.sqrt(len(diff)):.4f}"]
        out.append(f"| {lo}-{hi} | " + " | ".join(cells) + " |")
    return out


def main():
    evals = {k: load(v) for k, v in COLUMNS.items()}
    head = "| | " + " | ".join(evals) + " |\n|---|" + "---:|" * len(evals)
    lines = ["Greedy on the 110 tasks of eval-world:0 (pretraining's budgets), mean@1:", "", head,
             row("all", [e["mean_at_1"] for e in evals.values()]),
             row("write tasks", [e["write_mean_at_1"] for e in evals.values()])]
    kinds = next(iter(evals.values()))["per_kind"]
    lines += [row(k, [e["per_kind"][k]["mean_at_1"] for e in evals.values()]) for k in kinds]
    lines += [row("failed actions / tool calls", [f"{e['tool_errors']} / {e['tool_calls']}" for e in evals.values()],
                  "{}"),
              "", "Teacher-forced exact copies in the oracle's episodes of the same 110 tasks (share of values right):",
              "", head]
    lines += [row(k, [e["copy"][k] for e in evals.values()]) for k in COPY_KINDS]
    lines += loss_lines()
    (HERE / "compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
