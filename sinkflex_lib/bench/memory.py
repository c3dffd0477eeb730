"""The memory and speed sweep: one fresh subprocess per (backend, sequence length) point.

    from sinkflex_lib.bench import run_memory_sweep
    sweep = run_memory_sweep(["eager", "blocked"], [1024, 2048, 4096], config="tiny",
                             budget_gb=6, out="figures", stem="table2_memory")

Each point runs `worker.run_point` in `python -m sinkflex_lib.bench.worker`, so a point starts
from an empty heap (CPU) or an empty caching allocator (CUDA) and no memory leaks into the
next. Out of memory is a result:
- CPU: the parent reads the child's VmRSS and VmHWM from /proc/<pid>/status every few
  milliseconds and kills it (SIGKILL) once either passes `budget_gb`. VmHWM is the kernel's own
  high-water mark, so a spike between two reads is still seen at the next one; the child also
  checks its VmHWM after every step. The budget bounds the whole process (weights, optimizer,
  libraries and the step), as a device's memory would. RLIMIT_AS is not used: torch and its
  thread pools reserve far more virtual address space than they touch.
- CUDA: the child catches torch.OutOfMemoryError; with `budget_gb` it also caps its caching
  allocator with torch.cuda.set_per_process_memory_fraction.
By default a backend that ran out of memory at one length is not run at longer ones
(status "skipped"). flex has no backward on the CPU: such points are "unsupported".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..models import PRESETS
from ..tables import markdown_table, write_csv
from . import procmem
from .analytic import attention_memory

BACKENDS = ("eager", "blocked", "flex")
CONFIGS = tuple(PRESETS)
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
DEVICES = ("cpu", "cuda")
# glibc: allocations of 1 MiB and more get their own mapping and go back to the kernel when freed
# (a fixed threshold also turns off glibc's dynamic one, which otherwise climbs to 32 MiB and keeps
# freed tensors resident in the heap). Resident memory then follows the live tensors, the CPU
# analogue of max_memory_allocated: with glibc's default, eager's peak at N=2048 (tiny) read
# ~5% higher and blocked's ~50% higher, from memory freed but kept by malloc. A 64 KiB
# threshold tracks tensors even closer but slowed the tiled backend's many small allocations.
MALLOC_MMAP_THRESHOLD = 1 << 20
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


@dataclass
class PointResult:
    seq: int
    backend: str
    status: str
    peak_gb: float | None = None          # CPU: peak RSS above the pre-step baseline; CUDA: max allocated
    step_s: float | None = None           # median over the measured steps
    analytic_attention_gb: float | None = None
    baseline_gb: float | None = None      # CPU: RSS before the step; CUDA: allocated before the step
    process_peak_gb: float | None = None  # CPU: the whole process's peak RSS (the budget's quantity)
    reserved_gb: float | None = None      # CUDA: max reserved by the caching allocator
    wall_s: float | None = None           # the whole subprocess, start to exit
    pid: int | None = None
    note: str = ""


@dataclass
class SweepResult:
    points: list[PointResult]
    meta: dict = field(default_factory=dict)

    def point(self, backend: str, seq: int) -> PointResult | None:
        for p in self.points:
            if p.backend == backend and p.seq == seq:
                return p
        return None

    def reduction_vs_eager(self, p: PointResult) -> str:
        if p.backend == "eager":
            return ""
        eager = self.point("eager", p.seq)
        if eager is None or p.status != "ok":
            return ""
        if eager.status == "ok" and eager.peak_gb:
            return f"{100 * (p.peak_gb / eager.peak_gb - 1):+.1f}%"
        return f"eager {eager.status.upper()}" if eager.status == "oom" else f"eager {eager.status}"

    def rows(self) -> list[dict]:
        rows = []
        for p in self.points:
            row = asdict(p)
            row["reduction_vs_eager"] = self.reduction_vs_eager(p)
            row.update({k: self.meta.get(k) for k in META_COLUMNS})
            rows.append(row)
        return rows

    def write_csv(self, path) -> Path:
        return write_csv(path, self.rows(), list(CSV_COLUMNS), cell=_fmt_csv)

    def to_markdown(self) -> str:
        m = self.meta
        peak_what = ("peak = torch.cuda.max_memory_allocated" if m.get("device") == "cuda"
                     else "peak = process peak RSS above its baseline just before the step")
        lines = [
            f"Device: {m.get('device_name')}; torch {m.get('torch')}, transformers {m.get('transformers')}",
            f"Config: {m.get('config')} ({m.get('config_summary')}), layers {m.get('layers')}, "
            f"batch {m.get('batch')}, {m.get('dtype')}, budget {_fmt_gb(m.get('budget_gb'))} GB; "
            f"{peak_what}; step = median of {m.get('steps')} timed steps after "
            + ("the memory-measuring first step and " if m.get("device") == "cpu" else "")
            + f"{m.get('warmup')} warm-up.",
            "",
        ]
        cells = [{"seq": p.seq, "backend": p.backend, "peak GB": _fmt_gb(p.peak_gb), "step s": _fmt_s(p.step_s),
                  "status": p.status.upper() if p.status == "oom" else p.status,
                  "vs eager": self.reduction_vs_eager(p), "analytic attn GB": _fmt_gb(p.analytic_attention_gb)}
                 for p in self.points]
        return "\n".join(lines) + "\n" + (markdown_table(cells, align="rlrrlrr") if cells else "")

    def write(self, out_dir, stem: str = "table2_memory") -> tuple[Path, Path]:
        """Write <out_dir>/<stem>.csv and <out_dir>/<stem>.md; returns both paths."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        csv_path = self.write_csv(out_dir / f"{stem}.csv")
        md_path = out_dir / f"{stem}.md"
        md_path.write_text(self.to_markdown())
        return csv_path, md_path

    def ratios(self, backend: str = "blocked", at: int = 4096, longer: int = 8192) -> dict:
        """The issue's target ratios, from this one sweep (None where a point did not complete):
        peak_ratio = backend/eager peak at `at`; growth = backend's peak at `longer` / at `at`;
        time_ratio = backend/eager step time at `longer`, or at the longest length where eager
        completed (time_seq says which)."""
        def ok(b, n):
            p = self.point(b, n)
            return p if p is not None and p.status == "ok" else None

        mine, eager, mine_long = ok(backend, at), ok("eager", at), ok(backend, longer)
        eager_ok = sorted(p.seq for p in self.points if p.backend == "eager" and p.status == "ok"
                          and ok(backend, p.seq) and p.seq <= longer)
        time_seq = eager_ok[-1] if eager_ok else None
        return {
            "peak_ratio": mine.peak_gb / eager.peak_gb if mine and eager else None,
            "growth": mine_long.peak_gb / mine.peak_gb if mine and mine_long else None,
            "time_seq": time_seq,
            "time_ratio": (ok(backend, time_seq).step_s / ok("eager", time_seq).step_s) if time_seq else None,
        }


META_COLUMNS = ("device_name", "torch", "config", "layers", "batch", "dtype", "budget_gb")
CSV_COLUMNS = ("seq", "backend", "status", "peak_gb", "step_s", "reduction_vs_eager",
               "analytic_attention_gb", "baseline_gb", "process_peak_gb", "reserved_gb", "wall_s",
               "note") + META_COLUMNS


def _fmt_csv(x):
    if isinstance(x, float):
        return f"{x:.4f}"
    return "" if x is None else x


def _fmt_gb(x):
    return "" if x is None else f"{x:.2f}" if x >= 0.995 else f"{x:.3f}"


def _fmt_s(x):
    return "" if x is None else f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"


def _check_out(out, stem) -> None:
    """`out` must be (or can be made) a writable folder and `stem` a plain file name: checked
    before the sweep, whose results would otherwise be lost at the end."""
    if not isinstance(stem, str) or not stem or Path(stem).name != stem or stem in (".", ".."):
        raise ValueError(f"stem must be a file name without a folder, got {stem!r}")
    if out is None:
        return
    existing = Path(out)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == Path(out) else f"lies under {str(existing)!r}, which is"
        raise ValueError(f"out must be a folder; {str(out)!r} {what} a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"out: cannot write into {str(existing)!r}")


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_args(backends, seqs, config, layers, batch, dtype, device, budget_gb, warmup, steps,
                timeout_s=None, out=None, stem="table2_memory"):
    for b in backends:
        if b not in BACKENDS:
            raise ValueError(f"backends must be drawn from {BACKENDS}, got {b!r}")
    if not backends:
        raise ValueError(f"backends must name at least one of {BACKENDS}")
    if not seqs or any(not isinstance(n, int) or n < 2 for n in seqs):
        raise ValueError(f"seqs must be integers >= 2, got {seqs!r}")
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")
    if layers is not None and (not isinstance(layers, int) or layers < 1):
        raise ValueError(f"layers must be a positive integer or None, got {layers!r}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if budget_gb is not None and not _positive_finite(budget_gb):
        raise ValueError(f"budget_gb must be a positive finite number or None, got {budget_gb!r}")
    if timeout_s is not None and not _positive_finite(timeout_s):
        raise ValueError(f"timeout_s must be a positive finite number or None, got {timeout_s!r}")
    if warmup < 0 or steps < 1:  # CPU: the memory step comes first and is a warm-up of its own
        raise ValueError(f"warmup must be >= 0 and steps >= 1, got warmup={warmup}, steps={steps}")
    _check_out(out, stem)


def _watch(proc, budget_bytes, timeout_s, poll_s):
    """Wait for `proc`, killing it past the budget (CPU) or the timeout.
    Returns (killed_for, max_rss_seen_bytes)."""
    seen, start = 0, time.monotonic()
    while proc.poll() is None:
        st = procmem.read_status(proc.pid)
        if st:
            seen = max(seen, st.get("rss", 0), st.get("hwm", 0))
        if budget_bytes is not None and seen > budget_bytes:
            proc.kill()
            proc.wait()
            return "oom", seen
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            proc.kill()
            proc.wait()
            return "timeout", seen
        time.sleep(poll_s)
    return None, seen


def run_point_subprocess(spec: dict, timeout_s=None, poll_s: float = 0.005,
                         malloc_mmap_threshold: int | None = MALLOC_MMAP_THRESHOLD) -> dict:
    """Run one point in a fresh `python -m sinkflex_lib.bench.worker`; returns its result dict
    (status 'oom' when the parent killed it at the budget)."""
    budget = spec.get("budget_bytes") if spec["device"] == "cpu" else None
    with tempfile.TemporaryDirectory(prefix="sinkflex-bench-") as tmp:
        spec_path, result_path, log_path = (os.path.join(tmp, n) for n in ("spec.json", "result.json", "log.txt"))
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_PARENT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if malloc_mmap_threshold is not None:  # see `run_memory_sweep`
            env["MALLOC_MMAP_THRESHOLD_"] = str(int(malloc_mmap_threshold))
        t0 = time.monotonic()
        with open(log_path, "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "sinkflex_lib.bench.worker", spec_path, result_path],
                                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(_PACKAGE_PARENT))
            killed_for, seen = _watch(proc, budget, timeout_s, poll_s)
        wall = time.monotonic() - t0
        if killed_for is not None:
            limit = f"budget {budget / 1e9:.2f} GB" if killed_for == "oom" else f"timeout {timeout_s:.0f} s"
            return {"status": killed_for, "pid": proc.pid, "process_peak": seen, "wall_s": wall,
                    "note": f"killed by the sweep at {seen / 1e9:.2f} GB resident ({limit})"}
        if proc.returncode != 0 or not os.path.exists(result_path):
            with open(log_path) as f:
                tail = f.read()[-600:].strip().replace("\n", " | ")
            return {"status": "error", "pid": proc.pid, "wall_s": wall,
                    "note": f"exit code {proc.returncode}: {tail}"}
        with open(result_path) as f:
            result = json.load(f)
        result["wall_s"] = wall
        result["max_rss_seen"] = seen
        return result


def _sweep_meta(cfg, **meta) -> dict:
    """The sweep's settings, a one-line summary of the model config and (CPU) the machine."""
    meta["config_summary"] = (f"hidden {cfg.hidden_size}, {cfg.num_attention_heads} q heads, "
                              f"{cfg.num_key_value_heads} kv heads, head dim {cfg.head_dim}, "
                              f"window {cfg.sliding_window}, {cfg.num_local_experts} experts, "
                              f"vocab {cfg.vocab_size}")
    if meta["device"] == "cpu":
        from .worker import cpu_name
        meta["device_name"] = cpu_name()
    return meta


def _record_point(p: PointResult, r: dict, meta: dict) -> None:
    """Copy a worker's result `r` into `p` (GB; peak and step time only when it ran) and the
    versions and device name it reports into `meta` (a device name already there is kept: a CPU
    sweep's own, or on CUDA the first worker's)."""
    p.status, p.note, p.pid, p.wall_s = r["status"], r.get("note", ""), r.get("pid"), r.get("wall_s")
    gb = lambda key: None if r.get(key) is None else r[key] / 1e9  # noqa: E731
    p.peak_gb = gb("peak") if p.status == "ok" else None
    p.step_s = r.get("step_s") if p.status == "ok" else None
    p.baseline_gb, p.process_peak_gb, p.reserved_gb = gb("baseline"), gb("process_peak"), gb("reserved")
    for key in ("device_name", "torch", "transformers"):
        if r.get(key) and (key != "device_name" or "device_name" not in meta):
            meta[key] = r[key]


def run_memory_sweep(backends=("eager", "blocked"), seqs=(1024, 2048, 4096, 8192), config: str = "micro",
                     layers: int | None = None, batch: int = 1, dtype: str = "float32", device: str = "cpu",
                     budget_gb: float | None = None, warmup: int = 1, steps: int = 3, out=None,
                     stem: str = "table2_memory", timeout_s: float | None = None, skip_after_oom: bool = True,
                     seed: int = 0, malloc_mmap_threshold: int | None = MALLOC_MMAP_THRESHOLD,
                     progress=print) -> SweepResult:
    """Sweep (backend, seq) points, each a full training step in a fresh subprocess.

    Points run in order of seq, then backend. Returns a SweepResult; with `out` also writes
    <out>/<stem>.csv and <out>/<stem>.md. `progress` gets one line per point (None: silent).
    malloc_mmap_threshold: glibc's M_MMAP_THRESHOLD for the CPU workers (None: glibc's default).
    """
    backends, seqs = list(backends), [int(n) for n in seqs]
    _check_args(backends, seqs, config, layers, batch, dtype, device, budget_gb, warmup, steps,
                timeout_s, out, stem)
    if device == "cpu" and not procmem.supported():
        raise RuntimeError("the CPU memory sweep needs Linux /proc/self/status and /proc/self/clear_refs")
    from ..models import gpt_oss_config

    cfg = gpt_oss_config(config, **({"num_hidden_layers": layers} if layers else {}))
    meta = _sweep_meta(cfg, device=device, config=config, layers=cfg.num_hidden_layers, batch=batch,
                       dtype=dtype, budget_gb=budget_gb, warmup=warmup, steps=steps)
    points, failed = [], set()
    total = len(seqs) * len(backends)
    for seq in seqs:
        for backend in backends:
            analytic = attention_memory(cfg, backend, seq, batch, DTYPES[dtype]).total_gb
            p = PointResult(seq=seq, backend=backend, status="ok", analytic_attention_gb=analytic)
            if backend == "flex" and device == "cpu":
                p.status, p.note = "unsupported", "FlexAttention has no backward on the CPU (CUDA only)"
            elif skip_after_oom and backend in failed:
                p.status, p.note = "skipped", "ran out of memory at a shorter length"
            else:
                spec = dict(backend=backend, seq=seq, config=config, layers=layers, batch=batch, dtype=dtype,
                            device=device, warmup=warmup, steps=steps, seed=seed,
                            budget_bytes=int(budget_gb * 1e9) if budget_gb else None,
                            timing_mmap_threshold=(procmem.GLIBC_MAX_DYNAMIC_MMAP_THRESHOLD
                                                   if malloc_mmap_threshold is not None else None))
                _record_point(p, run_point_subprocess(spec, timeout_s=timeout_s,
                                                      malloc_mmap_threshold=malloc_mmap_threshold), meta)
                if p.status == "oom":
                    failed.add(backend)
            points.append(p)
            if progress is not None:
                progress(_progress_line(len(points), total, p))
    if "torch" not in meta:
        import torch
        meta["torch"] = torch.__version__
    sweep = SweepResult(points, meta)
    if out is not None:
        sweep.write(out, stem)
    return sweep


def _progress_line(i, total, p: PointResult) -> str:
    measured = (f"peak {p.peak_gb:7.3f} GB  step {p.step_s:7.3f} s" if p.status == "ok"
                else f"{p.status.upper():>8s}  {p.note}"[:80])
    wall = f"  ({p.wall_s:.1f} s)" if p.wall_s is not None else ""
    return (f"[{i:>2}/{total}] {p.backend:<7s} seq {p.seq:>6d}  {measured}  "
            f"| analytic attention {p.analytic_attention_gb:8.3f} GB{wall}")
