"""Scratch: where a full GRPO update's time goes (the bench's GRPO step: 32 episodes of the cpu
profile from the shipped base, rewards 1,0,1,0,..., minibatches of 16). Times the update with
beta 0.05 (the profile) and beta 0 (no reference forward), then profiles one beta-0.05 update."""
import dataclasses, time, json, sys
import numpy as np, torch
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.train import grpo_update
from sinkflex_lib.rl.rollout import rollout_batch
from sinkflex_lib.bench.rl import _specs
torch.manual_seed(0)
cfg = TrainConfig.from_profile("cpu")
policy = build_policy("base-tiny", attn_implementation="sinkflex", seed=0)
t0 = time.perf_counter()
eps = rollout_batch(policy, _specs(32), cfg.rollout_config(), torch.Generator().manual_seed(0))
print(f"rollout {time.perf_counter() - t0:.1f}s; lengths median {np.median([len(r.ids) for r in eps]):.0f} max {max(len(r.ids) for r in eps)}", flush=True)
eps = [dataclasses.replace(r, reward=float(i % 2 == 0)) for i, r in enumerate(eps)]
state = {k: v.clone() for k, v in policy.model.state_dict().items()}
def one(beta, prof=None):
    policy.model.load_state_dict(state)
    c = dataclasses.replace(cfg, beta=beta)
    if beta > 0:
        policy.freeze_reference()
    opt = torch.optim.AdamW(policy.model.parameters(), lr=c.lr)
    t = time.perf_counter()
    upd = grpo_update(policy, opt, eps, c, np.random.default_rng(0))
    return time.perf_counter() - t, upd
for rep in range(2):
    for beta in (0.05, 0.0):
        s, upd = one(beta)
        print(f"beta {beta}: update {s:.1f}s, {upd['minibatches']} minibatches, {upd['update_tokens']} tokens, {upd['update_tokens']/s:.0f} tok/s", flush=True)
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    s, _ = one(0.05)
print(f"profiled update {s:.1f}s")
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
