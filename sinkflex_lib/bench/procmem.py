"""Process memory on Linux, read from /proc: resident set (VmRSS), its high-water mark (VmHWM),
and a reset of that mark, so a CPU process can measure the peak of one training step.

- `reset_peak()` writes "5" to /proc/self/clear_refs, which sets VmHWM back to the current
  VmRSS (Linux >= 4.0). After it, VmHWM is the exact peak resident memory since the reset,
  kept by the kernel: no sampling, so no short-lived spike is missed.
- `release_free_memory()` calls glibc's malloc_trim(0), which hands freed heap pages back to
  the kernel. Without it, memory freed by an earlier step stays resident in malloc's arenas,
  the baseline includes it, and the next step reuses it without raising VmRSS: the step's
  peak would read too low.
"""

from __future__ import annotations

import ctypes
import os

_KB = 1024


def read_status(pid: int | str = "self") -> dict:
    """{'rss': bytes, 'hwm': bytes} of process `pid` from /proc/<pid>/status; {} if it is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss"] = int(line.split()[1]) * _KB
                elif line.startswith("VmHWM:"):
                    out["hwm"] = int(line.split()[1]) * _KB
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    return out


def rss_bytes() -> int:
    return read_status()["rss"]


def peak_rss_bytes() -> int:
    return read_status()["hwm"]


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current VmRSS. Returns False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> None:
    """Return free heap memory to the kernel (glibc malloc_trim); a no-op elsewhere."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def supported() -> bool:
    return os.path.exists("/proc/self/status") and os.path.exists("/proc/self/clear_refs")


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
GLIBC_MAX_DYNAMIC_MMAP_THRESHOLD = 32 << 20  # where glibc's dynamic threshold settles (64-bit)


def set_mmap_threshold(nbytes: int) -> bool:
    """glibc mallopt(M_MMAP_THRESHOLD) (and M_TRIM_THRESHOLD = 2x, as glibc's dynamic rule does):
    allocations of at least `nbytes` get their own mapping, returned to the kernel on free.
    Returns False where glibc is not available."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)) == 1
        return ok and libc.mallopt(_M_TRIM_THRESHOLD, 2 * int(nbytes)) == 1
    except (OSError, AttributeError):
        return False
