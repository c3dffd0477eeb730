"""Adapters that run this project's training on other engines.

`sinkflex_lib.integrations.trl`: the GRPO training of notebook 05 on Hugging Face TRL's
`GRPOTrainer` (accelerate / torchrun data parallelism), with the same environment, policy,
attention and masks. Imports go one way: integrations stand on `rl/`, never the reverse.
"""
