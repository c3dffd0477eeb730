"""Fixtures for the rl tests: one micro policy (2 layers, hidden 32) per session."""

import pytest
import torch


@pytest.fixture(scope="session")
def micro_policy_factory():
    from sinkflex_lib.rl.policy import build_policy

    def make(seed=0, **kw):
        torch.manual_seed(seed)
        return build_policy("micro", seed=seed, **kw)

    return make


@pytest.fixture
def micro_policy(micro_policy_factory):
    return micro_policy_factory()
