"""Scratch: is one GRPO step of the cpu profile bit-reproducible at 2 threads? Prints step 1's grad norm and loss."""
import sys, json, tempfile, torch
from pathlib import Path
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl import train as T
cfg = TrainConfig.from_profile("cpu", steps=2, val_tasks=11, val_every=2, threads=2)
out = Path(tempfile.mkdtemp(prefix="det_"))
T.train(cfg, out, seed=0, log=lambda m: None)
rows = [json.loads(l) for l in open(out / "metrics.jsonl")]
for r in rows:
    if r["kind"] == "train":
        print(sys.argv[1], r["step"], repr(r["grad_norm"]), repr(r["loss"]), r["reward_mean"], r.get("torch_threads"))
