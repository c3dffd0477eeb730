"""Scratch (session 41): is a TRL GRPOTrainer run of notebook 06's profile bit-repeatable on two threads?
python trl_repeat_probe.py NAME [STEPS]: trains the `cpu` TRL profile (seed 0, `STEPS` GRPO steps, default 3,
validation on 2 tasks at the end only, two threads) in a temporary folder; prints each update's loss and
gradient norm with every digit and the sha256 of the final weights. Run it twice side by side."""
import hashlib, json, sys, tempfile
from pathlib import Path
import torch
from sinkflex_lib.integrations.trl import train_trl
from sinkflex_lib.integrations.trl.config import trl_profile

name, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
out = Path(tempfile.mkdtemp(prefix=f"trl_repeat_{name}_"))
cfg = trl_profile("cpu", steps=steps, val_tasks=2, val_every=steps, threads=2)
result = train_trl(cfg, out, seed=0, log=lambda m: None)
for row in map(json.loads, open(out / "metrics.jsonl")):
    if row["kind"] == "train":
        print(name, "update", row["global_step"], repr(row["loss"]), repr(row.get("grad_norm")), flush=True)
digest = hashlib.sha256()
for key, tensor in sorted(result.policy.model.state_dict().items()):
    digest.update(key.encode()); digest.update(tensor.detach().contiguous().numpy().tobytes())
print(name, "weights sha256", digest.hexdigest(), "threads", torch.get_num_threads(), flush=True)
