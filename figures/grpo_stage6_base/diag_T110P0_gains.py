"""Greedy episodes of three tasks that P0 trained on the 110 tasks themselves gained and that none
of the base's 32 samples solved (README.md here, "Where nothing has to carry over"): the shipped
base beside that policy, on eval-world:0 with the validation's budgets (12 turns). Writes
diag_T110P0_gains.txt beside itself.

python figures/grpo_stage6_base/diag_T110P0_gains.py POLICY_DIR   (one thread, about 20 seconds)

POLICY_DIR: the run's step-90 weights with the base's config and tokenizer (not shipped; how it was
made: the README).
"""
import sys
from pathlib import Path

import torch

from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

torch.set_num_threads(1)
cfg = RolloutConfig(max_turns=12, temperature=0.0, source="eval-world:0")
tasks = [("modify_address_003", 0), ("user_address_009", 0), ("return_006", 0)]
lines = []
for name, policy in (("the shipped base", "base-tiny"), ("P0 trained on the 110 tasks, step 90", sys.argv[1])):
    for r in rollout_batch(build_policy(policy), tasks, cfg):
        lines.append(f"== {name}, {r.task_id}: reward {r.reward}")
        lines += [f"    {a[:300]}" for a in r.actions]
(Path(__file__).parent / "diag_T110P0_gains.txt").write_text("\n".join(lines) + "\n")
