"""Shared test settings: the `cuda` marker skips cleanly without a CUDA device."""

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_TAU2_DATA = REPO_ROOT.parent / "shared" / "tau2" / "data"

os.environ.setdefault("SINKFLEX_PROFILE", "smoke")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `make gpu-check` on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
