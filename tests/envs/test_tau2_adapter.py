"""The optional adapter to tau2's own AgentGymEnv: a clear error without tau2, a smoke run with it."""

import pytest

from sinkflex_lib.envs.tau2_adapter import Tau2AgentEnv, tau2_available


@pytest.mark.skipif(tau2_available(), reason="tau2 is installed")
def test_clear_error_without_tau2():
    with pytest.raises(ImportError, match="tau2"):
        Tau2AgentEnv()


@pytest.mark.skipif(not tau2_available(), reason="tau2 is not installed")
def test_reset_needs_task_id():
    env = Tau2AgentEnv()
    with pytest.raises(ValueError, match="task_id"):
        env.reset()
