"""sinkflex_lib: the library behind the SinkFlex-RL notebooks.

Subpackages:
    attention     sink-aware attention (eager, flex, blocked) and transformers registration
    grpo          group advantages and the clipped GRPO loss
    envs          dual-control retail environment behind a Gymnasium interface
    rl            policy building, rollout worker, trainer
    bench         memory and speed sweeps
    integrations  adapters to other engines (TRL)
"""

__version__ = "0.1.0"
