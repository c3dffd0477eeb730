"""Command line: `python -m sinkflex_lib.bench memory|rl ...` (see `--help`)."""

from __future__ import annotations

import argparse
import sys

from ..machine import THREADS_HELP
from ..rl.config import int_arg
from .analytic import attention_memory
from .memory import BACKENDS, CONFIGS, DEVICES, DTYPES, run_memory_sweep


def _csv_list(kind):
    def parse(text):
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}")
    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.bench",
                                 description="Memory and speed sweeps of a gpt-oss training step.")
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("memory", help="peak memory and step time against sequence length, one subprocess per point")
    m.add_argument("--backends", type=_csv_list(str), default=["eager", "blocked"],
                   help=f"comma-separated, from {','.join(BACKENDS)} (default eager,blocked)")
    m.add_argument("--seq", type=_csv_list(int), default=[1024, 2048, 4096, 8192],
                   help="comma-separated sequence lengths (default 1024,2048,4096,8192)")
    m.add_argument("--config", choices=CONFIGS, default="micro")
    m.add_argument("--layers", type=int, default=None, help="override the config's layer count")
    m.add_argument("--batch", type=int, default=1)
    m.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    m.add_argument("--device", choices=DEVICES, default="cpu")
    m.add_argument("--budget-gb", type=float, default=None,
                   help="memory budget; a point above it is recorded as OOM (CPU: whole-process RSS)")
    m.add_argument("--warmup", type=int, default=1,
                   help="unmeasured steps before the timed ones (default 1; on the CPU they follow the "
                        "memory-measuring first step)")
    m.add_argument("--steps", type=int, default=3, help="measured steps; the step time is their median (default 3)")
    m.add_argument("--timeout-s", type=float, default=None, help="kill a point after this many seconds")
    m.add_argument("--no-skip-after-oom", action="store_true",
                   help="also run a backend at lengths longer than one where it ran out of memory")
    m.add_argument("--out", default=None, help="directory for <stem>.csv and <stem>.md (default stem table2_memory)")
    m.add_argument("--stem", default="table2_memory", help="file stem of the CSV and Markdown tables")
    r = sub.add_parser("rl", help="speed of the RL loop: rollout, generate(), GRPO update (sinkflex vs eager)")
    r.add_argument("--policy", default="tiny", help="a preset (tiny, micro), shipped checkpoint or local directory")
    r.add_argument("--batch", type=int, default=None, help="episodes rolled out together (default: the cpu profile's 32)")
    r.add_argument("--device", choices=DEVICES, default="cpu")
    for flag in ("max-turns", "max-tokens", "max-new-tokens", "minibatch", "repeats"):   # defaults: bench.rl's
        r.add_argument(f"--{flag}", type=int, default=None)
    r.add_argument("--out", default=None, help="directory for bench_rl.csv and bench_rl.md")
    r.add_argument("--compete", type=int, default=0,
                   help="also time the rollout and updates beside this many single-thread busy processes (default 0)")
    r.add_argument("--threads", type=int_arg(1), default=None, help=THREADS_HELP)
    return ap


def rl_main(args) -> int:
    from .rl import report, run_rl_bench

    try:
        given = {k: v for k, v in dict(batch=args.batch, max_turns=args.max_turns, max_tokens=args.max_tokens,
                                       max_new_tokens=args.max_new_tokens, minibatch=args.minibatch,
                                       repeats=args.repeats, threads=args.threads).items()
                 if v is not None}
        rows = run_rl_bench(args.policy, device=args.device, out=args.out, compete=args.compete, **given)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(report(rows, args.device, args.compete))
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "rl":
        return rl_main(args)
    try:
        sweep = run_memory_sweep(args.backends, args.seq, config=args.config, layers=args.layers,
                                 batch=args.batch, dtype=args.dtype, device=args.device,
                                 budget_gb=args.budget_gb, warmup=args.warmup, steps=args.steps,
                                 out=args.out, stem=args.stem, timeout_s=args.timeout_s,
                                 skip_after_oom=not args.no_skip_after_oom)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(sweep.to_markdown())
    print(analytic_summary(sweep))
    if args.out:
        print(f"wrote {args.out}/{args.stem}.csv and {args.out}/{args.stem}.md")
    return 0


def analytic_summary(sweep) -> str:
    """The analytic model's attention memory for each backend and length, beside the measured peak."""
    from ..models import gpt_oss_config

    m = sweep.meta
    cfg = gpt_oss_config(m["config"], num_hidden_layers=m["layers"])
    seqs = sorted({p.seq for p in sweep.points})
    backends = list(dict.fromkeys(p.backend for p in sweep.points))
    lines = ["Analytic attention memory (GB) [measured peak GB]:",
             "   seq  " + "  ".join(f"{b:>22s}" for b in backends)]
    for n in seqs:
        cells = []
        for b in backends:
            a = attention_memory(cfg, b, n, m["batch"], DTYPES[m["dtype"]]).total_gb
            p = sweep.point(b, n)
            meas = f"{p.peak_gb:.3f}" if p is not None and p.peak_gb is not None else (p.status if p else "")
            cells.append(f"{a:10.3f} [{meas:>9s}]")
        lines.append(f"{n:>6d}  " + "  ".join(f"{c:>22s}" for c in cells))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
