"""What machine this is, how busy other processes keep it, the thread count that suits that, a
backward pass that repeats bit for bit at any given thread count, and how much memory this process
has used at most."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def peak_memory_gb(device) -> float:
    """CUDA: max allocated; CPU: this process's peak resident set (VmHWM, else getrusage)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    from .bench.procmem import read_status

    status = read_status()
    if "hwm" in status:
        return status["hwm"] / 2**30
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


# How long `busy_cores_elsewhere` watches the machine: long enough to see a steady competitor
# (the kernel counts CPU time in 10 ms ticks), short next to any run it starts.
BUSY_PROBE_S = 0.3


def usable_cores() -> set[int]:
    """The CPUs this process may run on (its affinity), else all of them."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:                       # not Linux
        return set(range(os.cpu_count() or 1))


def _jiffies(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) CPU ticks since boot summed over `cpus` (/proc/stat), None where unreadable.
    Idle time is `idle` + `iowait`; guest time is already inside `user`, so only the first 8 fields count."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None


def busy_cores_elsewhere(interval_s: float = BUSY_PROBE_S) -> float:
    """How many of this process's usable cores other processes keep busy, watched for `interval_s`
    seconds: /proc/stat's busy share of those cores less this process's own CPU time over the
    interval. Where /proc/stat is missing (not Linux): the 1-minute load average."""
    cpus = usable_cores()
    before, own_before, t0 = _jiffies(cpus), time.process_time(), time.perf_counter()
    if before is None:
        return min(float(len(cpus)), os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0
    time.sleep(interval_s)
    after, own, wall = _jiffies(cpus), time.process_time() - own_before, time.perf_counter() - t0
    busy_share = (after[0] - before[0]) / max(1, after[1] - before[1])
    return max(0.0, busy_share * len(cpus) - own / wall)


def choose_threads(requested: int | None = None, log=None) -> int:
    """Set torch's intra-op thread count and return it: `requested` when given; else the count the
    environment sets (OMP_NUM_THREADS, as torchrun does for several processes a machine); else one
    thread per usable core that no other process keeps busy (at least one).

    Why not always every core: the decode loop and the blocked attention run many small parallel
    operations, and each waits at its end for its slowest thread; a thread whose core another
    process holds stalls every one of them (measured: README, "Limits"; `python -m sinkflex_lib.bench rl --compete 1`). Floats
    of a run differ in the last bits between thread counts: pin `requested` to repeat a run bit for bit."""
    if requested is not None and requested < 1:
        raise ValueError(f"threads must be >= 1, got {requested}")
    cores = len(usable_cores())
    if requested is None and os.environ.get("OMP_NUM_THREADS"):
        requested = torch.get_num_threads()         # torch read it at start
    if requested is None:
        busy = busy_cores_elsewhere()
        requested = max(1, cores - round(busy))
        if log is not None:
            log(f"threads: {requested} ({busy:.1f} of {cores} cores busy with other processes)")
    torch.set_num_threads(requested)
    return requested


@contextlib.contextmanager
def deterministic_on_cpu(device):
    """Within: torch's deterministic algorithms where `device` is a CPU (a `torch.device` or
    its name), the earlier setting back afterwards; on CUDA nothing is switched (cuBLAS would ask
    for a workspace setting first). `deterministic_backward` says why."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def deterministic_backward(loss: torch.Tensor) -> None:
    """`loss.backward()`, the same bits every time on a CPU at a given thread count, two or more included.

    gpt-oss's experts (transformers' grouped_mm forward) gather a bias row per token,
    `bias[expert_ids]`; the gather's backward sums thousands of rows into each expert's row
    (`index_put_` with accumulate), and on a CPU with two or more threads that sum adds floats
    atomically in whatever order the threads reach them: measured on the base policy, two threads,
    4 x 1024 tokens, 30 identical backward passes gave 3 distinct gradients on a quiet machine and
    11 beside two busy processes, only expert biases differing
    (figures/grpo_stage6_base/backward_race_probe.py). Under `torch.use_deterministic_algorithms` that sum runs
    in index order, as one thread runs it (there, all 30 passes gave one gradient, the single-thread
    run's bits). Only the backward pass is switched (forward and decode keep their kernels)."""
    with deterministic_on_cpu(loss.device):
        loss.backward()


THREADS_HELP = "torch threads (default: one per core that no other process keeps busy; machine.choose_threads)"
REPICK_S = 60.0     # how often a long run looks again (`ThreadPicker`)


class ThreadPicker:
    """`choose_threads` at a long run's start and again, between its steps, once `every_s` seconds
    have passed: a process that starts or ends meanwhile is seen. A `requested` count is set once
    and kept. Call it between steps; it returns the count in force."""

    def __init__(self, requested: int | None = None, log=None, every_s: float = REPICK_S):
        self.requested, self.log, self.every_s = requested, log, every_s
        self.threads = choose_threads(requested, log)
        self.last = time.perf_counter()

    def __call__(self) -> int:
        if self.requested is None and time.perf_counter() - self.last >= self.every_s:
            before, self.threads = self.threads, choose_threads()
            self.last = time.perf_counter()
            if self.threads != before and self.log is not None:
                self.log(f"threads: {before} -> {self.threads} (other processes started or ended)")
        return self.threads


BUSY_LOOP = ("import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\nprint('busy', flush=True)\n"
             "while True:\n    a @ a\n")


@contextlib.contextmanager
def competing_processes(n: int):
    """A busy machine on purpose: n single-thread processes that multiply 512 x 512 matrices until the
    block ends (the bench's `--compete`, the tests of `busy_cores_elsewhere`). The block starts once
    every one of them has imported torch and begun."""
    if n < 0:
        raise ValueError(f"compete must be >= 0, got {n}")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(n)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "busy":
                raise RuntimeError(f"a competing process did not start (exit code {p.poll()})")
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()
