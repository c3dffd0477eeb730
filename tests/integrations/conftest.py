"""Shared by the TRL tests: whether a trainer's backward pass runs under torch's deterministic
algorithms (the reference: a gradient hook reads the switch while the pass runs)."""

import pytest
import torch


def modes_during(backward) -> list[bool]:
    """`torch.are_deterministic_algorithms_enabled()` as read inside each gradient computation of
    `backward((2 * x).sum())` for a leaf `x` of three ones; the gradient must arrive, so an empty
    list means the pass never ran."""
    x = torch.ones(3, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(torch.are_deterministic_algorithms_enabled()))
    backward((2 * x).sum())
    assert x.grad is not None and torch.all(x.grad > 0)
    return seen


@pytest.fixture
def backward_modes():
    return modes_during
