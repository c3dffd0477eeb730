"""Scratch: what `pretrain.ship` evaluates (110 tasks of eval-world:0, greedy; teacher-forced copies), for a run's step.
python eval_base.py RUN_DIR STEP OUT.json"""
import sys, json, torch
from pathlib import Path
from sinkflex_lib.rl import pretrain as pt
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.evaluate import evaluate_policy, balanced_task_ids, EVAL_TASKS
from sinkflex_lib.envs.data import world_source
torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
run, step, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cfg = pt.config_of_run(pt.read_metrics(run)[0])
src = world_source("eval", cfg.eval_world_seed)
pol = build_policy(str(run / f"step_{step}"))
ids = balanced_task_ids(src, EVAL_TASKS)
ev = {k: v for k, v in evaluate_policy(pol, src, ids, cfg.rollout).items() if k != "per_task"}
ev["copy"] = pt.copy_accuracy(pol, src, ids, cfg.max_tokens)
json.dump(ev, open(out, "w"), indent=1)
print(json.dumps({k: ev[k] for k in ("mean_at_1", "write_mean_at_1", "per_kind", "tool_calls", "tool_errors")}))
print({k: round(v, 3) for k, v in ev["copy"].items()})
