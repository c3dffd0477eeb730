"""The shipped base's greedy episodes on the first three information requests of eval-world:0 (the
validation's budgets, 12 turns): the actions it takes and what the reward checks. Writes
info_greedy_base.txt beside itself.

python figures/grpo_stage6_base/info_greedy_base.py   (one thread, about 10 seconds)
"""
from pathlib import Path

import torch

from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

torch.set_num_threads(1)
cfg = RolloutConfig(max_turns=12, temperature=0.0, source="eval-world:0")
lines = []
for r in rollout_batch(build_policy("base-tiny"), [(f"info_00{i}", 0) for i in range(3)], cfg):
    lines.append(f"== {r.task_id}: reward {r.reward}, communicate {r.reward_info['communicate']['checks']}")
    lines += [f"    {a}" for a in r.actions]
(Path(__file__).parent / "info_greedy_base.txt").write_text("\n".join(lines) + "\n")
