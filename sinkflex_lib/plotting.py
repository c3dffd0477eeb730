"""The one figure helper: fixed style, PNG without timestamps, saved under figures/."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
FIGURES_DIR = REPO_ROOT / "figures"

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


def set_style() -> None:
    """Apply the project's plotting style (deterministic, no seaborn theme state)."""
    plt.rcParams.update(STYLE)


def save_figure(fig, name: str, directory: str | Path | None = None) -> Path:
    """Save `fig` as `<directory or figures/>/<name>.png` with no timestamp metadata.

    Returns the path written. `name` has no extension.
    """
    if not name or "/" in name or name.endswith(".png"):
        raise ValueError(f"name must be a bare file stem such as 'memory_sweep', got {name!r}")
    out_dir = Path(directory) if directory is not None else FIGURES_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    return path
