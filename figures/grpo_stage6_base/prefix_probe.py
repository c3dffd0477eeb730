"""Session 47: how often the shipped base, sampling at temperature 1 under the cpu profile's budgets,
solves a training task when its episode starts after the oracle's first k turns (given, not sampled:
`sinkflex_lib.rl.oracle_prefix`), for k = n - 2 (only the write's call and the report left) down to
n - 5, per kind; n: the task's oracle turns. Six training tasks of train-world:1000 a kind (the first
by id), a group of eight episodes each with one task seed. Writes prefix_probe.md.
Run: PYTHONPATH=. python figures/grpo_stage6_base/prefix_probe.py [THREADS]   (default 2)"""
import sys
from pathlib import Path
import numpy as np
import torch
from sinkflex_lib.envs import RetailEnv, load_source
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.evaluate import task_kind
from sinkflex_lib.rl.oracle_prefix import oracle_turns
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import rollout_batch
from sinkflex_lib.tables import markdown_table

KINDS, LEFT, TASKS, G = ("exchange", "modify_items", "return", "compound", "cancel"), (2, 3, 4, 5), 6, 8
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
cfg = TrainConfig.from_profile("cpu", policy="base-tiny", bc_episodes=0, source="train-world:1000")
policy = build_policy("base-tiny")
data = load_source(cfg.source)
ids = sorted(RetailEnv(cfg.source).task_ids("train"))
rows = []
for kind in KINDS:
    tids = [t for t in ids if task_kind(data.tasks[t]) == kind][:TASKS]
    turns = {t: oracle_turns(policy.chat, data.tasks[t], data.db.tables["products"]) for t in tids}
    row = {"kind": kind, "oracle turns": "/".join(str(len(turns[t])) for t in tids)}
    for left in LEFT:
        specs = [(t, 1000, turns[t][:len(turns[t]) - left]) for t in tids for _ in range(G)]   # a group: one task seed
        got = rollout_batch(policy, specs, cfg.rollout_config(), torch.Generator().manual_seed(left))
        r = np.array([x.reward for x in got]).reshape(len(tids), G)
        row[f"n - {left}: success"] = f"{r.mean():.3f}"
        row[f"n - {left}: groups with spread"] = f"{int(((r.max(1) > r.min(1))).sum())}/{len(tids)}"
        print(kind, left, r.mean(), flush=True)
    rows.append(row)
text = markdown_table(rows) + "\n"
(Path(__file__).parent / "prefix_probe.md").write_text(text)
print(text)
