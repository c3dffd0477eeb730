"""Session 49: what the kind-phase arm (KP, `kind_phase_steps=5`) and its shuffled-reward control
trained on, phase by phase, from their metrics in this folder.

    python figures/grpo_stage6_base/kind_phases.py    # writes kind_phases.md, prints it

A phase is `kind_phase_steps` GRPO steps that draw their 8 groups from one kind's training tasks
only; the kinds take turns in `train_kinds`' order. Per kind and pass through the kinds: the
groups drawn, those with reward spread, those trained on (the first 4 with spread of a step, as
the trainer keeps them; their total is the metrics' `update_groups`), and the sampled success of
the drawn groups (temperature 1, the training tasks' own score, not held out). Then the
validation rows (greedy, 55 tasks of eval-world:0) every 10 steps."""
from pathlib import Path

import numpy as np

from big_batch import read_rows, training_kinds     # this folder's script
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
RUNS = {"KP seed 0": "arm_KP_seed0", "KP's control seed 0": "control_KP_seed0_shuffled"}


PHASE_COLUMNS = ["pass", "steps", "kind", "groups drawn", "with spread", "trained on", "sampled success"]


def phase_rows(stem: str) -> list[dict]:
    """One row per phase of the run: pass, steps, kind, drawn, with spread, trained on, sampled success."""
    rows = read_rows(f"{stem}_metrics.jsonl")
    config, train = rows[0], [r for r in rows if r["kind"] == "train"]
    size, kinds = config["kind_phase_steps"], config["train_kinds"]
    out = []
    for first in range(1, train[-1]["step"] + 1, size):
        steps = [r for r in train if first <= r["step"] < first + size]
        rewards = [g for r in steps for g in r["group_rewards"]]
        spread = sum(len(set(g)) > 1 for g in rewards)
        (kind,) = {k for r in steps for k in training_kinds(r)}
        phase = (first - 1) // size
        assert kind == kinds[phase % len(kinds)], (stem, first, kind)
        out.append(dict(zip(PHASE_COLUMNS, [phase // len(kinds) + 1, f"{first}-{first + size - 1}", kind, len(rewards),
                                            spread, sum(r["update_groups"] for r in steps), f"{np.mean(rewards):.3f}"])))
    return out


def val_rows(stem: str) -> list[dict]:
    return [{"step": r["step"], "validation mean@1": f"{r['val_reward']:.3f}", "write tasks": f"{r['val_write_reward']:.3f}"}
            for r in read_rows(f"{stem}_metrics.jsonl") if r["kind"] == "val"]


def report(title: str, module_doc: str, parts: list[str]) -> str:
    """A table script's Markdown file: its title, its docstring after the usage line, then `parts` (lines)."""
    return "\n".join([f"# {title}", "", module_doc.split("\n\n", 2)[2], ""] + parts)


def text() -> str:
    parts = []
    for name, stem in RUNS.items():
        parts += [f"### {name} (`{stem}_metrics.jsonl`)", "", markdown_table(phase_rows(stem)).rstrip(), "",
                  markdown_table(val_rows(stem)).rstrip(), ""]
    return report("KP: GRPO one task kind at a time (`kind_phase_steps=5`), phase by phase", __doc__, parts)


if __name__ == "__main__":
    out = text()
    (HERE / "kind_phases.md").write_text(out)
    print(out)
