"""Where the library's files are: one place for every path.

`DATA_DIR` holds what the library reads at run time: the project tokenizer (tokenizer/), the
synthetic retail set (retail_mini/) and the checkpoints this project trained
(checkpoints/<name>/). In a source checkout it is the repository's data/ folder; an installed
package (``pip install .``) carries the same files as ``sinkflex_lib/data/`` (pyproject.toml
maps data/ there). ``$SINKFLEX_DATA_DIR`` overrides both.

`REPO_ROOT` is the source checkout (notebooks, figures, papermill runs): only the
reproduction tools need it, and they need a checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def _data_dir() -> Path:
    if os.environ.get("SINKFLEX_DATA_DIR"):
        return Path(os.environ["SINKFLEX_DATA_DIR"])
    installed = PACKAGE_DIR / "data"
    return installed if installed.is_dir() else REPO_ROOT / "data"


DATA_DIR = _data_dir()
TOKENIZER_DIR = DATA_DIR / "tokenizer"
MINI_DIR = DATA_DIR / "retail_mini"
CHECKPOINTS_DIR = DATA_DIR / "checkpoints"
IN_CHECKOUT = (REPO_ROOT / "notebooks").is_dir()
# figures of an installed package go to the working folder, never into site-packages
FIGURES_DIR = (REPO_ROOT if IN_CHECKOUT else Path.cwd()) / "figures"
