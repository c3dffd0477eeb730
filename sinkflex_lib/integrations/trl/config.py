"""Our `TrainConfig` as TRL's `GRPOConfig`, name for name.

| ours (`TrainConfig`)            | TRL (`GRPOConfig`)                  | note |
|---|---|---|
| `loss_agg_mode`                 | `loss_type`                          | token-mean -> "bnpo", seq-mean-token-mean -> "grpo", seq-mean-token-sum-norm -> "dr_grpo" |
| `beta`                          | `beta`                               | k3 KL to the reference (the warm-start weights) |
| `clip_low`                      | `epsilon`                            | |
| `clip_high`                     | `epsilon_high`                       | |
| `group_size`                    | `num_generations`                    | TRL needs >= 2 |
| `norm_adv_by_std`               | `scale_rewards`                      | True -> "group", False -> "none"; TRL adds 1e-4 to the std, we add 1e-6 |
| `ppo_epochs`                    | `num_iterations`                     | |
| `minibatch_size`                | `per_device_train_batch_size` x processes | `gradient_accumulation_steps` = 1: one optimizer step per minibatch |
| `groups_per_step` x `group_size`| `generation_batch_size`              | via `steps_per_generation` = generation batch / minibatch |
| `steps` (GRPO steps)            | `max_steps` (optimizer steps)        | `steps` x `steps_per_generation` x `num_iterations` |
| `lr`                            | `learning_rate`                      | constant schedule, AdamW betas (0.9, 0.99), no weight decay, as ours |
| `grad_clip`                     | `max_grad_norm`                      | |
| `temperature`                   | `temperature`                        | sampling and rescoring |
| `max_tokens`                    | `max_completion_length`              | Dr. GRPO's constant (our `norm_length`); the episode budget stays in the rollout |
| `max_turns`, `max_new_tokens`   | (the rollout function)               | `RetailRollout`'s `RolloutConfig` |
| (no MoE term in our loss)       | `router_aux_loss_coef` = 0           | TRL would add gpt-oss's load-balancing loss (coefficient 0.9) |
| (KL not weighted by the ratio)  | `use_bias_correction_kl` = False     | TRL 1.16's default True multiplies the k3 term by pi/pi_old |
| `sample_groups` (dynamic sampling) | (none)                            | refused; `trl_profile` turns it off |
| `negative_advantage_scale` != 1, `shuffle_rewards` | (none)              | refused: TRL's advantages are the plain group-relative ones |
| `write_credit` > 0              | (none)                              | refused: the rollout function returns tau2's reward |
| `anchor_weight` > 0             | (none)                              | refused: GRPOTrainer's loss has no supervised term |
| `oracle_prefix` > 0             | (none)                              | refused: GRPOTrainer's prompts are the tasks' first prompts |
| `accumulation_steps` > 1        | (none)                              | refused: our last optimizer step of an update may average fewer minibatches |
| `kind_phase_steps` > 0          | (none)                              | refused: GRPOTrainer's sampler draws from every training task each step |
| `world_steps` > 0               | (none)                              | refused: its dataset is the tasks of one source |

Token-mean in TRL: "bnpo" divides each micro-batch's token sum by its own token count, which is
our per-minibatch token-mean exactly in one process; with P processes DDP averages the P local
means. "dapo" divides by the token count of the whole generation batch across processes,
which is the exact global token-mean when there is one optimizer step per generation batch
(`loss_type="dapo"` as an override).
"""

from __future__ import annotations

import dataclasses

from ...rl.config import TrainConfig

# TrainConfig field -> GRPOConfig field, one to one (the table above; values transformed by grpo_config)
FIELD_MAP = [("loss_agg_mode", "loss_type"), ("beta", "beta"), ("clip_low", "epsilon"),
             ("clip_high", "epsilon_high"), ("group_size", "num_generations"),
             ("norm_adv_by_std", "scale_rewards"), ("ppo_epochs", "num_iterations"),
             ("minibatch_size", "per_device_train_batch_size"), ("steps", "max_steps"),
             ("lr", "learning_rate"), ("grad_clip", "max_grad_norm"), ("temperature", "temperature"),
             ("max_tokens", "max_completion_length")]

def trl_profile(profile: str, **overrides) -> TrainConfig:
    """Run profile `profile` as TRL's GRPOTrainer can run it: dynamic sampling (`sample_groups`,
    which GRPOTrainer has no equivalent of) off unless `overrides` set it; every other value the
    profile's."""
    return TrainConfig.from_profile(profile, **{"sample_groups": None, **overrides})


LOSS_TYPES = {"token-mean": "bnpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}


def batch_geometry(cfg: TrainConfig, num_processes: int = 1) -> dict:
    """per_device_train_batch_size and steps_per_generation for `num_processes` processes.

    Raises ValueError when the minibatch does not split evenly (names the fields to change).
    """
    generation = cfg.groups_per_step * cfg.group_size
    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    if cfg.minibatch_size % num_processes:
        raise ValueError(f"minibatch_size ({cfg.minibatch_size}) must be a multiple of the number of "
                         f"processes ({num_processes})")
    if generation % cfg.minibatch_size:
        raise ValueError(f"groups_per_step x group_size ({generation}) must be a multiple of "
                         f"minibatch_size ({cfg.minibatch_size})")
    return {"per_device_train_batch_size": cfg.minibatch_size // num_processes,
            "steps_per_generation": generation // cfg.minibatch_size}


def mapped_fields(cfg: TrainConfig, geometry: dict) -> dict:
    """The GRPOConfig values of the `FIELD_MAP` fields (the one place they are mapped)."""
    convert = {"loss_agg_mode": LOSS_TYPES.__getitem__,
               "norm_adv_by_std": lambda v: "group" if v else "none",
               "minibatch_size": lambda v: geometry["per_device_train_batch_size"],
               "steps": lambda v: v * geometry["steps_per_generation"] * cfg.ppo_epochs}
    return {trl: convert.get(ours, lambda v: v)(getattr(cfg, ours)) for ours, trl in FIELD_MAP}


def grpo_config(cfg: TrainConfig, output_dir, seed: int = 0, num_processes: int = 1, **overrides):
    """A `trl.GRPOConfig` equivalent to `cfg` (module docstring): float32, no checkpoints, a log
    line every optimizer step; on CPU `use_cpu` (gloo between processes). `overrides` are
    GRPOConfig fields, e.g. loss_type="dapo" or bf16=True."""
    import torch
    from trl import GRPOConfig

    if cfg.loss_agg_mode not in LOSS_TYPES:
        raise ValueError(f"loss_agg_mode must be one of {sorted(LOSS_TYPES)}, got {cfg.loss_agg_mode!r}")
    if cfg.group_size < 2:
        raise ValueError(f"TRL's GRPOTrainer needs group_size >= 2, got {cfg.group_size}")
    if cfg.sample_groups:
        raise ValueError(f"sample_groups={cfg.sample_groups} (dynamic sampling) has no GRPOTrainer "
                         "equivalent: set sample_groups=None for TRL")
    if cfg.write_credit:
        raise ValueError("write_credit (partial credit for write calls) has no GRPOTrainer equivalent here: "
                         "the rollout function returns tau2's reward")
    if cfg.anchor_weight:
        raise ValueError("anchor_weight (a supervised loss on oracle episodes beside GRPO's) has no GRPOTrainer "
                         "equivalent here: its loss is the GRPO loss alone")
    if cfg.oracle_prefix:
        raise ValueError("oracle_prefix (episodes started after the oracle's first turns) has no GRPOTrainer "
                         "equivalent here: its rollouts start from the tasks' first prompts")
    if cfg.accumulation_steps != 1:
        raise ValueError(f"accumulation_steps={cfg.accumulation_steps} is not mapped to TRL: GRPOConfig's "
                         "gradient_accumulation_steps is fixed at 1 here (one optimizer step per minibatch)")
    if cfg.kind_phase_steps:
        raise ValueError("kind_phase_steps (one task kind at a time) has no GRPOTrainer equivalent here: its "
                         "sampler draws from every training task each step")
    if cfg.world_steps:
        raise ValueError("world_steps (a fresh training world every few steps) has no GRPOTrainer equivalent here: "
                         "its dataset is the tasks of one source")
    if cfg.negative_advantage_scale != 1 or cfg.shuffle_rewards:
        raise ValueError("negative_advantage_scale != 1 and shuffle_rewards (the control without signal) have no "
                         "GRPOTrainer equivalent: TRL computes plain group-relative advantages")
    geometry = batch_geometry(cfg, num_processes)
    kwargs = dict(
        output_dir=str(output_dir), seed=seed, data_seed=seed, **mapped_fields(cfg, geometry),
        steps_per_generation=geometry["steps_per_generation"], gradient_accumulation_steps=1,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.99, adam_epsilon=1e-8,
        router_aux_loss_coef=0.0, use_bias_correction_kl=False, importance_sampling_level="token",
        mask_truncated_completions=False,
        bf16=False, fp16=False, gradient_checkpointing=False, pad_to_multiple_of=None,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=False, remove_unused_columns=False, shuffle_dataset=True,
        ddp_find_unused_parameters=False,   # gpt-oss's experts are fused tensors: every parameter is used
    )
    if not torch.cuda.is_available():       # data parallelism on CPU (torchrun): gloo
        kwargs.update(use_cpu=True, ddp_backend="gloo" if num_processes > 1 else None)
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GRPOConfig)}
    if unknown:
        raise ValueError(f"unknown GRPOConfig field(s) {sorted(unknown)}")
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)
