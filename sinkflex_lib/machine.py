"""What machine this is, and how much memory this process has used at most."""

from __future__ import annotations

import platform
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
