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
import math
import sys
import types
import typing
from pathlib import Path

from ...machine import THREADS_HELP
from ...rl.config import PROFILES, SEED, TrainConfig, int_arg
from .rollout import DECODE_MODES


def _field(item: str) -> tuple[str, object]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise SystemExit(f"--set and --trl expect FIELD=VALUE, got {item!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def _fits(value, kind) -> bool:
    """`value` is a valid TrainConfig value of type `kind`: integers >= 1 (every int field is a
    count), finite numbers for floats, and the type itself otherwise."""
    if kind in (bool, type(None)) or isinstance(value, bool):
        return type(value) is kind
    if kind is int:
        return isinstance(value, int) and value >= 1
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, kind)


def train_config_overrides(items: list[str]) -> dict:
    """--set FIELD=VALUE items as TrainConfig overrides, each checked against its field's type;
    ValueError naming the field otherwise."""
    hints = typing.get_type_hints(TrainConfig)
    over = {}
    for name, value in map(_field, items):
        if name not in hints:
            raise ValueError(f"--set {name}: not a TrainConfig field; fields: {', '.join(hints)}")
        kinds = typing.get_args(hints[name]) if isinstance(hints[name], types.UnionType) else (hints[name],)
        if not any(_fits(value, kind) for kind in kinds):
            want = " or ".join("null" if k is type(None) else "an integer >= 1" if k is int else k.__name__
                               for k in kinds)
            raise ValueError(f"--set {name}: expected {want}, got {value!r}")
        over[name] = float(value) if kinds == (float,) else value
    return over


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
    grpo_over = dict(_field(item) for item in args.trl)
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
