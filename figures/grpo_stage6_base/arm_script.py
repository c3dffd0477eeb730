"""Scratch GRPO arm from the shipped base: python arm.py NAME STEPS key=value ... ; then 110-task validation of the final policy. seed_=N picks the seed (added 2026-12-04; default 0, as every earlier arm ran)."""
import sys, json, time, ast
from pathlib import Path
import torch
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
name, steps = sys.argv[1], int(sys.argv[2])
over = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
torch.set_num_threads(over.pop("threads_", 1))
neg = over.pop("neg_", None)
seed = over.pop("seed_", 0)
if neg is not None:   # scratch: negative advantages scaled by `neg` (0: reinforce successes only)
    _ga = T.group_advantages
    T.group_advantages = lambda r, g, norm_by_std=True: (lambda a: torch.where(a < 0, a * neg, a))(_ga(r, g, norm_by_std=norm_by_std))
cfg = TrainConfig.from_profile("cpu", steps=steps, **over)
out = Path.home() / "sinkflex_runs" / name
res = T.train(cfg, out, seed=seed, resume=(out / "checkpoint").exists())
import dataclasses
c110 = dataclasses.replace(cfg, val_tasks=110)
v = T.validate(res.policy, c110, T.validation_tasks(c110), 0)
json.dump({k: v[k] for k in ("val_reward", "val_write_reward", "val_per_kind")}, open(out / "final110.json", "w"), indent=1)
print("final110", v["val_reward"], v["val_write_reward"], v["val_per_kind"])
