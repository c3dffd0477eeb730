"""Greedy episodes of chosen tasks of eval-world:0 under the GRPO validation's budgets (12 turns),
one policy after another: the actions taken and what the reward's communicate check found. Writes
NAME.txt beside itself.

python figures/grpo_stage6_base/greedy_episodes.py NAME TASK[,TASK...] LABEL=POLICY [LABEL=POLICY ...]
(one thread, about 10 seconds a policy). The committed outputs:
  info_greedy_base.txt     info_000,info_001,info_002 "the shipped base=base-tiny"
  diag_T110P0_gains.txt    modify_address_003,user_address_009,return_006 "the shipped base=base-tiny"
                           "P0 trained on the 110 tasks, step 90=DIR" (DIR: that run's step-90 weights
                           with the base's config and tokenizer, not shipped; README.md here)
  out_of_turns_base.txt    the 29 tasks of failures_base.json whose cause is "out of turns"
                           "the shipped base=base-tiny" (README.md here, "No policy here recovers")
  out_of_turns_slips7.txt  the 36 tasks of failures_slips7.json whose cause is "out of turns"
                           "slips, seed 7, step 300=DIR" (DIR: that run's step_300/, not shipped)
"""
import sys
from pathlib import Path

import torch

from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

if len(sys.argv) < 4 or not all("=" in a for a in sys.argv[3:]):
    sys.exit(__doc__)
torch.set_num_threads(1)
name, tasks = sys.argv[1], [(t, 0) for t in sys.argv[2].split(",")]
cfg = RolloutConfig(max_turns=12, temperature=0.0, source="eval-world:0")
lines = []
for label, policy in (a.split("=", 1) for a in sys.argv[3:]):
    for r in rollout_batch(build_policy(policy), tasks, cfg):
        lines.append(f"== {label}, {r.task_id}: reward {r.reward}, communicate {r.reward_info['communicate']['checks']}")
        lines += [f"    {a}" for a in r.actions]
(Path(__file__).parent / f"{name}.txt").write_text("\n".join(lines) + "\n")
