"""Command line: GRPO training on TRL's GRPOTrainer, in one process or under torchrun.

    python -m sinkflex_lib.integrations.trl train --profile smoke|cpu|gpu --out DIR [--seed S]
        [--steps N] [--threads T] [--set FIELD=VALUE ...] [--trl FIELD=VALUE ...]
        [--lora-r R] [--decode batch|episode] [--warm-start DIR]
    torchrun --nproc_per_node N -m sinkflex_lib.integrations.trl train --profile smoke --out DIR

Prints one line per process per GRPO step (its rollouts and a checksum of its weights) and one
summary line per step on the main process; ends with a JSON summary and destroys the process
group (gloo on CPU, nccl on GPU) cleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...machine import THREADS_HELP
from ...rl.config import PROFILES, SEED, field_value, int_arg, train_config_overrides
from .rollout import DECODE_MODES


def _print(message: str) -> None:
    """One write per line: lines of several processes sharing a pipe do not interleave."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.integrations.trl", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="warm start, then GRPO on TRL's GRPOTrainer")
    t.add_argument("--profile", default="cpu", choices=sorted(PROFILES))
    t.add_argument("--out", required=True, help="output folder (metrics.jsonl, warm_start/, trl/, final/)")
    t.add_argument("--seed", type=SEED, default=0)
    t.add_argument("--steps", type=int_arg(1), default=None, help="override the profile's GRPO steps")
    t.add_argument("--warm-start", default=None, help="a folder written by a previous warm start to reuse")
    t.add_argument("--decode", default="batch", choices=DECODE_MODES,
                   help="one decode loop per process (default) or per episode (exact with any attention)")
    t.add_argument("--lora-r", type=int_arg(1), default=None, help="train a LoRA adapter of this rank (peft)")
    t.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a TrainConfig field, e.g. --set beta=0.04 (mapped onto GRPOConfig)")
    t.add_argument("--trl", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a GRPOConfig field, e.g. --trl loss_type=dapo --trl entropy_coef=0.01 "
                        "(VALUE is read as JSON, else kept as a string)")
    t.add_argument("--threads", type=int_arg(1), default=None, help="per process: " + THREADS_HELP)
    args = ap.parse_args(argv)

    from .config import grpo_config, trl_profile
    from .trainer import distributed_state, train_trl

    flags = [f"{k}={v}" for k, v in (("steps", args.steps), ("threads", args.threads)) if v is not None]
    try:  # every value is checked before any work
        cfg = trl_profile(args.profile, **train_config_overrides(args.set + flags))
    except ValueError as e:
        ap.error(str(e))
    try:
        grpo_over = dict(field_value(item) for item in args.trl)
    except ValueError as e:
        ap.error(f"--trl: {e}")
    state = distributed_state()
    try:
        try:  # the GRPOConfig of the run: unknown --trl fields and bad geometry fail here
            grpo_config(cfg, Path(args.out) / "trl", args.seed, state.num_processes, **grpo_over)
        except (ValueError, TypeError) as e:
            ap.error(str(e))
        res = train_trl(cfg, args.out, seed=args.seed, warm_start_dir=args.warm_start, decode=args.decode,
                        lora_r=args.lora_r, log=_print, **grpo_over)
        if state.is_main_process:     # with LoRA: the adapter only
            res.policy.model.save_pretrained(f"{args.out}/final")
            res.policy.tokenizer.save_pretrained(f"{args.out}/final")
            _print(json.dumps(res.summary()))
        state.wait_for_everyone()     # not on an error: the failing rank must exit for torchrun to stop the rest
    finally:
        if state.use_distributed:
            state.destroy_process_group()
            _print(f"[rank {state.process_index}/{state.num_processes}] process group destroyed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
