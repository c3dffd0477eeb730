"""Tables next to the figures: a list of row dicts saved as <figures>/<name>.csv and <name>.md,
in the same folder as `save_figure` (figures/ for the cpu profile, figures/<profile>/ otherwise).

No timestamps and a fixed float format, so a rerun that computes the same numbers writes the
same bytes. Markdown is written by hand (pandas' to_markdown needs the optional `tabulate`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from .plotting import figures_dir


def _fmt(value, floatfmt: str) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else format(value, floatfmt)
    return str(value)


def three_places(mean: float, n: int) -> str:
    """A mean over `n` tasks (each scoring 0 or 1) to three decimal places, rounded half up in
    integer arithmetic, so that 23/80 prints '0.288' wherever float rounding would put it:
    three_places(23 / 80, 80) == '0.288'."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    thousandths = (2000 * round(mean * n) + n) // (2 * n)
    return f"{thousandths // 1000}.{thousandths % 1000:03d}"


def markdown_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str = ".2e",
                   align: str | None = None) -> str:
    """A GitHub-flavoured Markdown table of `rows` (list of dicts) over `columns` (default: the
    first row's keys). Floats use `floatfmt`; NaN prints as n/a. align: one letter per column,
    "l" or "r" (default: none given)."""
    if not rows:
        raise ValueError("rows must hold at least one row")
    columns = list(dict.fromkeys(k for r in rows for k in r)) if columns is None else list(columns)
    if align is not None and (len(align) != len(columns) or set(align) - {"l", "r"}):
        raise ValueError(f"align must be one of 'l'/'r' per column ({len(columns)}), got {align!r}")
    rule = ["---" if align is None else {"l": ":---", "r": "---:"}[a] for a in (align or columns)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c), floatfmt) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def save_table(rows: list[dict], name: str, columns: list[str] | None = None, floatfmt: str = ".2e",
               directory: str | Path | None = None) -> tuple[Path, Path]:
    """Write `rows` as <directory or plotting.figures_dir()>/<name>.csv (full precision) and <name>.md
    (floats formatted with floatfmt); the columns default to every key of any row, in order of first
    appearance. Returns the two paths."""
    if not name or "/" in name or "." in name:
        raise ValueError(f"name must be a bare file stem such as 'backend_errors', got {name!r}")
    if not rows:
        raise ValueError("rows must hold at least one row")
    columns = list(dict.fromkeys(k for r in rows for k in r)) if columns is None else list(columns)
    out_dir = Path(directory) if directory is not None else figures_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    write_csv(csv_path, rows, columns)
    md_path.write_text(markdown_table(rows, columns, floatfmt))
    return csv_path, md_path


def write_csv(path, rows: list[dict], columns: list[str], cell=None) -> Path:
    """`rows` over `columns` as CSV at `path` (None as an empty cell; `cell` formats each value)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cell = cell or (lambda v: "" if v is None else v)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: cell(row.get(c)) for c in columns})
    return path
