"""Optional adapter: tau2-bench's own ``AgentGymEnv`` behind the same reset/step interface.

Only usable where the ``tau2`` package is installed (it is not a dependency of this project).
What is the same: ``reset(seed, options={"task_id": ...})`` and ``step(action: str)`` with
the three action forms, string observations and tau2's reward at the end. What differs:
tau2 simulates the user with an LLM (``user_llm``, needs credentials for that endpoint), its
``info["task"]`` and ``info["tools"]`` are tau2 objects rather than dicts, it never truncates
(``truncated`` is always False), and it builds a new tau2 env per reset.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym

from .env import TextSpace


def tau2_available() -> bool:
    return importlib.util.find_spec("tau2") is not None


class Tau2AgentEnv(gym.Env):
    """Runs ``tau2.gym.gym_agent.AgentGymEnv(domain, task_id, **kwargs)`` one task per reset."""

    def __init__(self, domain: str = "retail", **tau2_kwargs):
        if not tau2_available():
            raise ImportError("Tau2AgentEnv needs the 'tau2' package (tau2-bench); it is not installed")
        from tau2.gym.gym_agent import AgentGymEnv  # noqa: PLC0415

        self._cls, self.domain, self.kwargs = AgentGymEnv, domain, tau2_kwargs
        self.observation_space, self.action_space = TextSpace(), TextSpace()
        self._env = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if not options or options.get("task_id") is None:
            raise ValueError("Tau2AgentEnv.reset needs options={'task_id': ...}")
        self._env = self._cls(domain=self.domain, task_id=str(options["task_id"]), **self.kwargs)
        return self._env.reset(seed=seed)

    def step(self, action: str):
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        return self._env.step(action)
