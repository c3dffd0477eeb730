"""Scratch (session 39): is a GRPO run of the cpu profile bit-repeatable? python repeat_probe.py NAME key=value ...
(TrainConfig fields over the cpu profile; seed_=N, default 0). Trains in a temporary folder and prints
each training step's gradient norm, loss and mean reward with every digit, then each validation."""
import ast, json, sys, tempfile
from pathlib import Path
from sinkflex_lib.rl import train as T
from sinkflex_lib.rl.config import TrainConfig

name = sys.argv[1]
over = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[2:])}
seed = over.pop("seed_", 0)
out = Path(tempfile.mkdtemp(prefix=f"repeat_{name}_"))
T.train(TrainConfig.from_profile("cpu", **over), out, seed=seed, log=lambda m: None)
for row in map(json.loads, open(out / "metrics.jsonl")):
    if row["kind"] == "train":
        print(name, "step", row["step"], repr(row["grad_norm"]), repr(row["loss"]), row["reward_mean"],
              "threads", row.get("torch_threads"), flush=True)
    elif row["kind"] == "val":
        print(name, "val", row["step"], row["val_reward"], flush=True)
