"""Memory and speed sweeps of a gpt-oss training step, one fresh subprocess per point.

    python -m sinkflex_lib.bench memory --backends eager,blocked --seq 1024,2048,4096 \
        --config tiny --budget-gb 6 --out figures

    from sinkflex_lib.bench import run_memory_sweep, attention_memory

Stands on sinkflex_lib.attention and sinkflex_lib.models only.
"""

from .analytic import AttentionMemory, attention_memory
from .memory import BACKENDS, PointResult, SweepResult, run_memory_sweep, run_point_subprocess

__all__ = ["AttentionMemory", "BACKENDS", "PointResult", "SweepResult", "attention_memory",
           "run_memory_sweep", "run_point_subprocess"]
