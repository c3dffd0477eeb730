"""Calibration of notebook 05's learning check: 4 write tasks with spread in seed 0's cpu run, real vs shuffled."""
import sys, json
from pathlib import Path
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
name, shuffle, steps = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
rows = [r for r in map(json.loads, open("/work/main/figures/grpo_stage6_base/cpu_profile_metrics.jsonl")) if r["kind"] == "train"]
tasks = T.write_tasks_with_spread(rows, "train-world:1000", 4)
print(tasks, flush=True)
cfg = TrainConfig.from_profile("cpu", train_tasks=tasks, groups_per_step=4, sample_groups=None, steps=steps,
                               val_tasks=11, val_every=steps, ckpt_every=steps, threads=1, shuffle_rewards=shuffle)
T.train(cfg, Path.home() / "sinkflex_runs" / name, seed=0)
