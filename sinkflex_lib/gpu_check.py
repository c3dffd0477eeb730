"""`make gpu-check`: every CUDA check behind one command, a short table printed last.

1. the tests marked `cuda` (flex forward and backward against the blocked float64 reference);
2. flex (compiled) against eager attention at gpt-oss-20b's head shape in bf16: error against
   float64 and forward+backward time, measured side by side;
3. a short training-step memory sweep, eager against flex (`sinkflex_lib.bench`).

Sized to finish in a few minutes on one GPU. Exits 2 without CUDA, 1 if any check fails.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .paths import REPO_ROOT


def run_cuda_tests() -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", flush=True)
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    return ("pass" if proc.returncode == 0 else "FAIL"), last


def _time(fn, repeats: int = 5) -> float:
    fn()  # warm-up (and compilation)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare_flex_eager(n: int = 4096, window: int | None = 128) -> dict:
    """gpt-oss-20b attention shape (64 query heads, 8 KV heads, head dim 64), batch 1, bf16."""
    from .attention import sink_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 64, n, 64, device="cuda", generator=g)
    k = torch.randn(1, 8, n, 64, device="cuda", generator=g)
    v = torch.randn(1, 8, n, 64, device="cuda", generator=g)
    sinks = torch.randn(64, device="cuda", generator=g)
    grad = torch.randn(1, 64, n, 64, device="cuda", generator=g)
    ref = sink_attention(q.double(), k.double(), v.double(), sinks.double(), window=window, backend="eager")

    def step(backend):
        ins = [t.bfloat16().requires_grad_() for t in (q, k, v, sinks)]
        out = sink_attention(*ins[:3], ins[3], window=window, backend=backend)
        out.backward(grad.bfloat16())
        return out

    out = {}
    for backend in ("eager", "flex"):
        torch.cuda.reset_peak_memory_stats()
        result = step(backend)
        out[f"{backend}_rel_err"] = ((result.double() - ref).abs().max() / ref.abs().max()).item()
        out[f"{backend}_s"] = _time(lambda: step(backend))
        out[f"{backend}_peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def memory_sweep_check(out_dir: Path, seqs=(1024, 2048, 4096, 8192)) -> tuple[str, str]:
    """eager against flex, gpt-oss-20b's attention shape x 2 layers, bf16, one subprocess per
    point. Passes when flex completes every length and peaks below eager at the longest length
    both complete."""
    from .bench import run_memory_sweep

    sweep = run_memory_sweep(["eager", "flex"], list(seqs), config="gpt-oss-20b", layers=2, batch=1,
                             dtype="bfloat16", device="cuda", warmup=1, steps=2, timeout_s=600, out=out_dir)
    print(sweep.to_markdown(), flush=True)
    flex_ok = all(p.status == "ok" for p in sweep.points if p.backend == "flex")
    both = [n for n in seqs if all(sweep.point(b, n).status == "ok" for b in ("eager", "flex"))]
    if not both:
        return ("pass" if flex_ok else "FAIL"), "eager completed no length"
    n = both[-1]
    e, f = sweep.point("eager", n), sweep.point("flex", n)
    ok = flex_ok and f.peak_gb < e.peak_gb
    return ("pass" if ok else "FAIL"), (f"at {n}: flex {f.peak_gb:.2f} GB vs eager {e.peak_gb:.2f} GB, "
                                        f"step x{e.step_s / f.step_s:.2f}; eager statuses "
                                        + ",".join(sweep.point("eager", m).status for m in seqs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Every CUDA check of sinkflex-rl")
    parser.add_argument("--out", default=str(REPO_ROOT / "runs" / "gpu_check"))
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a GPU machine (make gpu-check).")
        return 2
    print(f"gpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    rows = [("cuda tests", *run_cuda_tests())]
    r = compare_flex_eager()
    ok = r["flex_rel_err"] < 2e-2
    rows.append(("flex vs eager, N=4096 bf16", "pass" if ok else "FAIL",
                 f"rel err flex {r['flex_rel_err']:.1e} eager {r['eager_rel_err']:.1e}; "
                 f"fwd+bwd {r['flex_s'] * 1e3:.1f} ms vs {r['eager_s'] * 1e3:.1f} ms "
                 f"(x{r['eager_s'] / r['flex_s']:.2f}); peak {r['flex_peak_gb']:.2f} vs {r['eager_peak_gb']:.2f} GB"))
    if not args.skip_sweep:
        rows.append(("memory sweep eager/flex", *memory_sweep_check(Path(args.out))))
    width = max(len(name) for name, *_ in rows)
    print("\n" + "check".ljust(width) + " | status | detail")
    print("-" * width + "-+--------+-------")
    for name, status, detail in rows:
        print(f"{name.ljust(width)} | {status.ljust(6)} | {detail}")
    return 0 if all(status == "pass" for _, status, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
