"""GRPO over several seeds: one run per seed in its own folder, then the mean and spread across seeds.

    python -m sinkflex_lib.rl.seeds --profile cpu --seeds 0 1 2 --out DIR [--resume]

Seed S trains as `python -m sinkflex_lib.rl.train --profile P --seed S --out DIR/seed_S` would
(same config, same files, exact resume: with --resume a run that has a checkpoint continues, the
others start). The summary, printed as JSON and written to DIR/seeds.json, holds per run the
validation mean@1, write-task mean@1 and per-kind mean@1 at step 0 and at the last validated step,
their lift (last - first) and the run's wall time; across runs, for each of those numbers, the
mean and the sample standard deviation (ddof 1; 0 for a single run), next to do-nothing and the
oracle on the same validation tasks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .config import PROFILES, TrainConfig
from .runstate import ResumeError, read_metrics

SUMMARY_FILE = "seeds.json"


def seed_dir(out, seed: int) -> Path:
    return Path(out) / f"seed_{seed}"


def train_seeds(cfg: TrainConfig, seeds: list[int], out, resume: bool = False, log=print) -> list[Path]:
    """Train one GRPO run per seed under `out` (in order); returns the run folders."""
    from .train import train

    if len(set(seeds)) != len(seeds) or not seeds:
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    dirs = []
    for s in seeds:
        d = seed_dir(out, s)
        again = resume and (d / "checkpoint").is_dir()
        log(f"seed {s}: {'resuming' if again else 'training'} in {d}")
        train(cfg, d, seed=s, resume=again, log=log)
        dirs.append(d)
    return dirs


def _scores(row: dict) -> dict:
    return {"mean_at_1": row["val_reward"], "write_mean_at_1": row["val_write_reward"],
            **{f"kind:{k}": v for k, v in row["val_per_kind"].items()}}


def run_result(run_dir) -> dict:
    """A run's first (step 0) and last validation scores, their lift, its wall time and baselines."""
    rows = read_metrics(run_dir, log=lambda m: None)
    vals = [r for r in rows if r["kind"] == "val"]
    if not vals or vals[0]["step"] != 0:
        raise ValueError(f"{run_dir}: no step-0 validation in its metrics.jsonl")
    first, last = _scores(vals[0]), _scores(vals[-1])
    return {"seed": rows[0]["seed"], "run": str(run_dir), "last_step": vals[-1]["step"],
            "wall_s": vals[-1]["elapsed_s"], "first": first, "last": last,
            "lift": {k: last[k] - first[k] for k in first},
            "do_nothing_mean_at_1": vals[0]["val_do_nothing_reward"],
            "oracle_mean_at_1": vals[0]["val_oracle_reward"]}


def _mean_std(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def summarize_seeds(run_dirs) -> dict:
    """Per-run results and, across runs, mean and std of every first/last/lift score and wall time.
    The runs must share their validation tasks (the same do-nothing score)."""
    runs = [run_result(d) for d in run_dirs]
    if len({round(r["do_nothing_mean_at_1"], 12) for r in runs}) != 1:
        raise ValueError("the runs were validated on different tasks (their do-nothing scores differ)")
    across = {part: {k: _mean_std([r[part][k] for r in runs]) for k in runs[0][part]}
              for part in ("first", "last", "lift")}
    across["wall_s"] = _mean_std([r["wall_s"] for r in runs])
    return {"n_seeds": len(runs), "seeds": [r["seed"] for r in runs], "runs": runs, "across_seeds": across,
            "do_nothing_mean_at_1": runs[0]["do_nothing_mean_at_1"],
            "oracle_mean_at_1": runs[0]["oracle_mean_at_1"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.seeds", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu", choices=sorted(PROFILES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action="store_true", help="continue runs that have a checkpoint")
    args = ap.parse_args(argv)
    cfg = TrainConfig.from_profile(args.profile)
    try:
        dirs = train_seeds(cfg, args.seeds, args.out, resume=args.resume, log=lambda m: print(m, flush=True))
    except (ResumeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = summarize_seeds(dirs)
    (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["across_seeds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
