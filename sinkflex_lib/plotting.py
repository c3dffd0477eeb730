"""The one figure helper: fixed style, PNG without timestamps, saved under figures/.

Where outputs go depends on the run profile (SINKFLEX_PROFILE, default "cpu"): the `cpu`
profile regenerates the committed figures/ and tables; `smoke` (what tests and nbval run)
and `gpu` write to figures/<profile>/, so a test run never overwrites the committed results.
SINKFLEX_FIGURES_DIR overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

from .paths import FIGURES_DIR


STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "sinkflex",
}


def figures_dir() -> Path:
    """The folder for this run's figures and tables (created on demand)."""
    override = os.environ.get("SINKFLEX_FIGURES_DIR")
    if override:
        out = Path(override)
    else:
        profile = os.environ.get("SINKFLEX_PROFILE", "cpu")
        out = FIGURES_DIR if profile == "cpu" else FIGURES_DIR / profile
    out.mkdir(parents=True, exist_ok=True)
    return out


def set_style() -> None:
    """Apply the project's plotting style (deterministic, no seaborn theme state)."""
    plt.rcParams.update(STYLE)


def save_figure(fig, name: str, directory: str | Path | None = None) -> Path:
    """Save `fig` as `<directory or figures_dir()>/<name>.png` with no timestamp metadata.

    Returns the path written. `name` has no extension.
    """
    if not name or "/" in name or name.endswith(".png"):
        raise ValueError(f"name must be a bare file stem such as 'memory_sweep', got {name!r}")
    out_dir = Path(directory) if directory is not None else figures_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    return path


def smooth(values, weight: float) -> list[float]:
    """Exponential moving average, s_t = weight * s_{t-1} + (1 - weight) * v_t, started at v_0
    (weight 0: the values themselves). For noisy per-step curves beside their raw points."""
    if not 0 <= weight < 1:
        raise ValueError(f"weight must lie in [0, 1), got {weight}")
    out: list[float] = []
    for v in values:
        out.append(float(v) if not out else weight * out[-1] + (1 - weight) * float(v))
    return out
