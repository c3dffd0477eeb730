"""The shipped base on the 110 tasks of eval-world:0 under the cpu profile's validation (12 turns), as the arms' final110.json.
Ran 2026-12-04 at 184f4a6 from ~/sinkflex_runs (one thread), writing there; this copy writes beside itself."""
import json, dataclasses, torch
from pathlib import Path
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
from sinkflex_lib.rl.policy import build_policy
torch.set_num_threads(1)
cfg = dataclasses.replace(TrainConfig.from_profile("cpu"), val_tasks=110)
pol = build_policy("base-tiny")
v = T.validate(pol, cfg, T.validation_tasks(cfg), 0)
print(v["val_reward"], v["val_write_reward"], v["val_per_kind"])
json.dump({k: v[k] for k in ("val_reward", "val_write_reward", "val_per_kind")}, open(Path(__file__).parent / "base_step0_110_tasks.json", "w"), indent=1)
