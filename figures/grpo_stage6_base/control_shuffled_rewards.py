"""Scratch control: GRPO with no signal. Rewards are permuted within each group before the
advantages (same spread, same groups trained, same update sizes; which episode is called good is
random). python shuffle.py NAME STEPS TASKS|- key=value ...  (TASKS: fixed tasks as overfit.py; -: the
cpu profile's own task draw). Then 110-task validation of the final policy -> final110.json."""
import sys, ast, json, dataclasses
from pathlib import Path
import torch
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
name, steps, tasks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
over = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[4:])}
torch.set_num_threads(over.pop("threads_", 1))
perm_gen = torch.Generator().manual_seed(12345)
_ga = T.group_advantages
def shuffled(rewards, group_size, norm_by_std=True):
    r = torch.as_tensor(rewards, dtype=torch.float32).view(-1, group_size)
    idx = torch.stack([torch.randperm(group_size, generator=perm_gen) for _ in range(r.shape[0])])
    return _ga(torch.gather(r, 1, idx).view(-1), group_size, norm_by_std=norm_by_std)
T.group_advantages = shuffled
extra = {}
if tasks != "-":
    fixed = tasks.split(",")
    T.training_tasks = lambda cfg: list(fixed)
    extra = dict(groups_per_step=len(fixed), sample_groups=None)
cfg = TrainConfig.from_profile("cpu", steps=steps, **extra, **over)
out = Path.home() / "sinkflex_runs" / name
res = T.train(cfg, out, seed=0, resume=(out / "checkpoint").exists())
c110 = dataclasses.replace(cfg, val_tasks=110)
v = T.validate(res.policy, c110, T.validation_tasks(c110), 0)
json.dump({k: v[k] for k in ("val_reward", "val_write_reward", "val_per_kind")}, open(out / "final110.json", "w"), indent=1)
print("final110", v["val_reward"], v["val_write_reward"], v["val_per_kind"], flush=True)
