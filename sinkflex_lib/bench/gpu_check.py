"""A short CUDA memory check: eager against flex, gpt-oss-20b's attention shape, bf16.

    python -m sinkflex_lib.bench.gpu_check [--seq 1024,4096] [--layers 2] [--out DIR]

Two training-step points per length, each in a fresh subprocess (`run_memory_sweep`), and a short
table. Sized for a couple of minutes on an H200 (most of it FlexAttention's compilation, once
per point). Exit code 0 when flex completes every length and its peak is below eager's at the
longest length both complete; 1 otherwise; 2 without CUDA.
"""

from __future__ import annotations

import argparse
import sys

from .memory import run_memory_sweep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.bench.gpu_check")
    ap.add_argument("--seq", default="1024,4096")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write table2_memory.{csv,md} here")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench gpu_check: no CUDA device here")
        return 2
    seqs = [int(s) for s in args.seq.split(",")]
    sweep = run_memory_sweep(["eager", "flex"], seqs, config="gpt-oss-20b", layers=args.layers, batch=1,
                             dtype="bfloat16", device="cuda", warmup=1, steps=2, timeout_s=600, out=args.out)
    print()
    print(sweep.to_markdown())
    flex_ok = all(p.status == "ok" for p in sweep.points if p.backend == "flex")
    both = [n for n in seqs if all(sweep.point(b, n).status == "ok" for b in ("eager", "flex"))]
    if both:
        n = both[-1]
        e, f = sweep.point("eager", n), sweep.point("flex", n)
        print(f"at {n}: flex/eager peak {f.peak_gb / e.peak_gb:.3f}, step time {f.step_s / e.step_s:.3f}")
    passed = flex_ok and (not both or sweep.point("flex", both[-1]).peak_gb < sweep.point("eager", both[-1]).peak_gb)
    print("bench gpu_check:", "pass" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
