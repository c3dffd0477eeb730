"""Scratch GRPO arm from the shipped base: python arm.py NAME STEPS key=value ... ; then 110-task validation of the final policy. seed_=N picks the seed (added 2026-12-04; default 0, as every earlier arm ran). value_weight_=W [other_weight_=V] (added 2026-12-04): the loss weight of the tokens of the string argument values of sampled tool calls (value_mask.py) and of the agent's other tokens (default 1). train_on_val_=True (added 2026-12-04, session 29): a diagnostic, not a held-out result: GRPO trains on the 110 validation tasks of eval-world:0 themselves (what GRPO reaches where nothing has to generalise); train_on_rest_=True: on the other 225 tasks of eval-world:0 (the same users, orders and products, other tasks)."""
import sys, json, time, ast
from pathlib import Path
import torch
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
name, steps = sys.argv[1], int(sys.argv[2])
over = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
threads = over.pop("threads_", 1)
torch.set_num_threads(threads)
over.setdefault("threads", threads)   # since 2026-12-05, session 34: the trainer keeps it (earlier runs left
                                      # threads=None, whose pick could switch a step or two to 2 threads)
neg = over.pop("neg_", None)
seed = over.pop("seed_", 0)
if neg is not None:   # negative advantages scaled by `neg` (0: reinforce successes only); the runs at eec836e
    over["negative_advantage_scale"] = neg   # patched group_advantages the same way, before the library had the field
value_w = over.pop("value_weight_", None)      # scratch (2026-12-04): loss weights of the agent's tokens by kind:
other_w = over.pop("other_weight_", 1.0)       # value_w on the argument values of sampled tool calls, other_w on the rest
if value_w is not None:
    sys.path.insert(0, str(Path(__file__).parent))
    from value_mask import value_positions
    from sinkflex_lib.rl.policy import build_policy
    from sinkflex_lib.rl.chat import END
    _tok = build_policy("base-tiny").tokenizer
    _end = _tok.convert_tokens_to_ids(END)
    _collate = T.collate
    def _weighted(rollouts, pad_id):
        b = _collate(rollouts, pad_id)
        agent = float(b["mask"].sum())
        w = b["mask"] * other_w
        n_val = 0
        for i, r in enumerate(rollouts):
            pos = value_positions(_tok, r.ids, r.mask, _end)
            n_val += len(pos)
            for t in pos:
                w[i, t] = b["mask"][i, t] * value_w
        b["mask"] = w
        print(f"weighted: {n_val} value tokens of {agent:.0f} agent tokens; loss weight {float(w.sum()):.0f}", flush=True)
        return b
    T.collate = _weighted
on_val, on_rest = over.pop("train_on_val_", False), over.pop("train_on_rest_", False)
if on_val or on_rest:
    from sinkflex_lib.rl.evaluate import balanced_task_ids
    from sinkflex_lib.envs import RetailEnv
    over["source"] = over["val_source"] = "eval-world:0"
    val_ids = balanced_task_ids("eval-world:0", 110)
    rest = [t for t in RetailEnv("eval-world:0").task_ids(None) if t not in set(val_ids)]
    T.training_tasks = lambda cfg: val_ids if on_val else rest
cfg = TrainConfig.from_profile("cpu", steps=steps, **over)
out = Path.home() / "sinkflex_runs" / name
res = T.train(cfg, out, seed=seed, resume=(out / "checkpoint").exists())
import dataclasses
c110 = dataclasses.replace(cfg, val_tasks=110)
v = T.validate(res.policy, c110, T.validation_tasks(c110), 0)
json.dump({k: v[k] for k in ("val_reward", "val_write_reward", "val_per_kind")}, open(out / "final110.json", "w"), indent=1)
print("final110", v["val_reward"], v["val_write_reward"], v["val_per_kind"])
