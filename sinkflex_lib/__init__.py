"""sinkflex_lib: the library behind the SinkFlex-RL notebooks.

Subpackages:
    attention     sink-aware attention (eager, flex, blocked) and transformers registration
    grpo          group advantages and the clipped GRPO loss
    envs          dual-control retail environment behind a Gymnasium interface
    rl            policy building, rollout worker, trainer
    bench         memory and speed sweeps
    integrations  adapters to other engines (TRL)

Import side effects (the only two; everything else registers on first use):
    import sinkflex_lib.envs               registers the Gymnasium id "sinkflex/Retail-v0"
    import sinkflex_lib.integrations.trl   registers the attention "sinkflex" in transformers
                                           (every torchrun process imports it)
Building a model or policy with attn_implementation="sinkflex[-<backend>]" registers that name
(`models.ensure_registered`).
"""

__version__ = "0.1.0"
