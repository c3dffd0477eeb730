"""Soups of GRPO runs from one start (`sinkflex_lib.rl.soup`): does the mean of independent seeds keep
what their rewards share and cancel what each run drifts on its own?

python figures/grpo_stage6_base/soup_eval.py START LABEL=RUN,RUN,... [LABEL=...]
python figures/grpo_stage6_base/soup_eval.py --table      (soup_table.md from every soup_*.json here)

For each LABEL, every RUN (a GRPO run folder under ~/sinkflex_runs) is exported as a policy
(`checkpoints.policy_from_run`) and their weights averaged; then start + a * (soup - start) for
a in ALPHAS (a = 1 is the soup, a > 1 goes further along the runs' mean move). Every policy is
evaluated greedily with `python -m sinkflex_lib.rl.evaluate ... --max-turns 12 --json` on 110
tasks of SELECT (eval-world:1, where a is chosen) and of eval-world:0 (the arms' held-out world,
where the chosen a is reported); neither world is trained on. Writes soup_<LABEL>.json here.
"""
import json
import subprocess
import sys
from pathlib import Path

from sinkflex_lib.rl.checkpoints import policy_from_run
from sinkflex_lib.rl.policy import policy_dir
from sinkflex_lib.rl.soup import soup
from sinkflex_lib.tables import markdown_table

HERE = Path(__file__).parent
RUNS = Path.home() / "sinkflex_runs"
ALPHAS = (1.0, 2.0, 3.0)
SELECT, HELD_OUT = 1, 0


def evaluate(policy: Path, world: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "sinkflex_lib.rl.evaluate", "--policy", str(policy),
                          "--world-seed", str(world), "--tasks", "110", "--max-turns", "12", "--threads", "1",
                          "--json"], check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"mean_at_1": r["mean_at_1"], "write_mean_at_1": r["write_mean_at_1"],
            "per_task": r["per_task"]}


def scored(policy: Path) -> dict:
    return {f"eval-world:{w}": evaluate(policy, w) for w in (SELECT, HELD_OUT)}


def one_soup(start: str, label: str, runs: list[str]) -> dict:
    work = RUNS / "soups" / label
    dirs = [policy_from_run(RUNS / r, work / r) for r in runs]
    rows = {"start": scored(policy_dir(start))}
    for r, d in zip(runs, dirs):
        rows[r] = scored(d)
        print(label, r, {w: v["mean_at_1"] for w, v in rows[r].items()}, flush=True)
    for a in ALPHAS:
        n = len(dirs)
        dest = soup([start, *dirs], work / f"alpha{a:g}", weights=[1 - a] + [a / n] * n)
        rows[f"alpha {a:g}"] = scored(dest)
        print(label, f"alpha {a:g}", {w: v["mean_at_1"] for w, v in rows[f"alpha {a:g}"].items()}, flush=True)
    chosen = max(ALPHAS, key=lambda a: rows[f"alpha {a:g}"][f"eval-world:{SELECT}"]["mean_at_1"])
    return {"start": start, "runs": runs, "alphas": ALPHAS, "chosen_alpha_on": f"eval-world:{SELECT}",
            "chosen_alpha": chosen, "scores": rows}


def table() -> str:
    """One row per policy of every soup_*.json: all / write tasks on each world."""
    rows = []
    for path in sorted(HERE.glob("soup_*.json")):
        d = json.loads(path.read_text())
        for name, by_world in d["scores"].items():
            chosen = " (chosen)" if name == f"alpha {d['chosen_alpha']:g}" else ""
            rows.append({"soup": path.stem[5:], "policy": name + chosen,
                         **{w: f"{v['mean_at_1']:.3f} / {v['write_mean_at_1']:.3f}" for w, v in by_world.items()}})
    return markdown_table(rows)


def main() -> None:
    if sys.argv[1:] == ["--table"]:
        (HERE / "soup_table.md").write_text(table() + "\n")
        return print(table())
    start, specs = sys.argv[1], sys.argv[2:]
    for spec in specs:
        label, runs = spec.split("=", 1)
        res = one_soup(start, label, runs.split(","))
        (HERE / f"soup_{label}.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
