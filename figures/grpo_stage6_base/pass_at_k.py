"""How far sampling reaches from the shipped base, and from policies trained from it: pass@k on the
110 tasks of eval-world:0, beside greedy mean@1 and issue 11's targets. Writes pass_at_k.md and
pass_at_k.png from the pass_at_k_*.json files in this folder.

python figures/grpo_stage6_base/pass_at_k.py   (reads and writes this folder only; no rollouts)

Each JSON is the output of
    python -m sinkflex_lib.rl.evaluate --policy DIR --world-seed 0 --tasks 110 --max-turns 12 \\
        --samples 32 --threads 2 --json
(the GRPO validation's budgets: 12 turns, 128 tokens a turn, 3,072 an episode; 32 episodes a task
at temperature 1, user seed 0 as in the greedy episode). How each policy was made: README.md here;
the two "not held out" rows (dotted) are diagnostics trained on these very tasks.
"""
import json
from pathlib import Path

import matplotlib.pyplot as plt

from sinkflex_lib.envs import load_source
from sinkflex_lib.plotting import save_figure, set_style
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.tables import markdown_table, three_places

HERE = Path(__file__).parent
# (file stem, label)
POLICIES = [("base", "the shipped base"), ("grpo_tiny_12e62f0", "GRPO, the cpu profile (grpo-tiny of the run at 12e62f0)"),
            ("grpo_tiny_d73b107", "GRPO, the cpu profile (grpo-tiny of the run at d73b107)"),
            ("grpo_tiny_773ebb0", "GRPO, the cpu profile (grpo-tiny of the run at 773ebb0)"),
            ("grpo_tiny_d35ae5a", "GRPO, the cpu profile (grpo-tiny of the run at d35ae5a, shipped now)"),
            ("P0_seed2", "GRPO, only successes reinforced (P0 seed 2)"),
            ("supervised_seed7", "300 more supervised steps (seed 7)"),
            ("lists9_step400", "list look-ups, then the lists stage (seed 9, not shipped)"),
            ("requests10_step400", "then the requests stage (seed 10, not shipped)"),
            ("lists10_step400", "instead the lists stage continued (seed 10, the requests stage's control, not shipped)"),
            ("lists13_step400", "the same recipe, other seeds: make pretrain-lists (seeds 11, 12, 13; L13, not shipped)"),
            ("T110P0_trained_on_these", "not held out: P0 trained on these 110 tasks, 90 steps"),
            ("T110_trained_on_these", "not held out: the cpu profile trained on these 110 tasks, 90 steps")]


def load(stem: str) -> dict | None:
    path = HERE / f"pass_at_k_{stem}.json"
    return json.loads(path.read_text()) if path.exists() else None


def summary_rows(results: dict[str, dict]) -> list[dict]:
    """One row per policy: greedy mean@1, pass@k and greedy-or-any-sample, all and write tasks."""
    rows = []
    for stem, label in POLICIES:
        r = results.get(stem)
        if r is None:
            continue
        s = r["sampled"]
        greedy = f"{three_places(r['mean_at_1'], r['n_tasks'])} / {three_places(r['write_mean_at_1'], r['n_write_tasks'])}"
        rows.append({"policy": label, "greedy (all / write)": greedy,
                     **{f"pass@{k}": f"{s['all']['pass_at_k'][k]:.3f} / {s['write']['pass_at_k'][k]:.3f}"
                        for k in ("1", "4", "32")},
                     "greedy or any of 32 samples": f"{s['all']['greedy_or_any_sample']:.3f} / "
                                                    f"{s['write']['greedy_or_any_sample']:.3f}"})
    return rows


def kind_rows(r: dict) -> list[dict]:
    """Per kind of one policy: greedy, sampled success (pass@1), pass@32, tasks no sample solves."""
    wins, rows, tasks = r["sampled"]["per_task_successes"], [], load_source(r["source"]).tasks
    for kind, row in r["sampled"]["per_kind"].items():
        ids = [t for t in wins if task_kind(tasks[t]) == kind]
        rows.append({"kind": kind, "tasks": row["n"], "greedy": r["per_kind"][kind]["mean_at_1"],
                     "pass@1": row["pass_at_k"]["1"], "pass@32": row["pass_at_k"]["32"],
                     "solved by no greedy or sampled episode": sum(wins[t] == 0 and r["per_task"][t] < 1 for t in ids)})
    return rows


def targets(base: dict) -> tuple[float, float]:
    """Issue 11's targets from the base's greedy mean@1: all tasks +0.15 and at least 0.44, write +0.10."""
    return max(0.44, base["mean_at_1"] + 0.15), base["write_mean_at_1"] + 0.10


def plot(results: dict[str, dict]):
    set_style()
    target_all, target_write = targets(results["base"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, group, target, title in ((axes[0], "all", target_all, "all 110 tasks"),
                                     (axes[1], "write", target_write, "the 80 write tasks")):
        for i, (stem, label) in enumerate(POLICIES):
            r = results.get(stem)
            if r is None:
                continue
            curve = r["sampled"][group]["pass_at_k"]
            ks = [int(k) for k in curve]
            dotted = "trained_on_these" in stem     # diagnostics whose tasks were trained on
            line, = ax.plot(ks, list(curve.values()), marker="o", ms=3, ls=":" if dotted else "-", label=label)
            greedy = r["mean_at_1"] if group == "all" else r["write_mean_at_1"]
            ax.plot([0.8 - 0.04 * i], [greedy], marker="s", color=line.get_color(), ms=6)
        ax.axhline(target, color="k", ls="--", lw=1, label="issue 11's target")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k, episodes sampled a task (squares: greedy mean@1)")
        ax.set_title(title)
    axes[0].set_ylabel("pass@k, 110 tasks of eval-world:0")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, ncol=2, loc="upper center",
               bbox_to_anchor=(0.5, 0.0))   # below the panels, clear of the curves
    return fig


def main() -> None:
    results = {stem: r for stem, _ in POLICIES if (r := load(stem)) is not None}
    text = ["pass@k (all / write tasks) on the 110 tasks of eval-world:0, 32 samples a task at temperature 1",
            "", markdown_table(summary_rows(results)), "Per kind, the shipped base:", "",
            markdown_table(kind_rows(results["base"]), floatfmt=".3f")]
    (HERE / "pass_at_k.md").write_text("\n".join(text))
    save_figure(plot(results), "pass_at_k", HERE)


if __name__ == "__main__":
    main()
