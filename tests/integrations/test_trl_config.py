"""TrainConfig -> GRPOConfig, field for field (the table in sinkflex_lib.integrations.trl.config)."""

from __future__ import annotations

import pytest

from sinkflex_lib.integrations.trl import batch_geometry, grpo_config, trl_profile
from sinkflex_lib.rl.config import TrainConfig


def test_cpu_profile_maps_to_grpo_config(tmp_path):
    cfg = trl_profile("cpu")          # 4 groups x 8, minibatch 16
    assert (cfg.groups_per_step, cfg.group_size, cfg.minibatch_size, cfg.ppo_epochs) == (4, 8, 16, 1)
    args = grpo_config(cfg, tmp_path, seed=3)
    want = dict(loss_type="bnpo", beta=cfg.beta, epsilon=0.2, epsilon_high=0.28, num_generations=8,
                scale_rewards="group", num_iterations=1, per_device_train_batch_size=16,
                gradient_accumulation_steps=1, steps_per_generation=2, generation_batch_size=32,
                max_steps=2 * cfg.steps, learning_rate=cfg.lr, max_grad_norm=1.0, temperature=1.0,
                max_completion_length=cfg.max_tokens, router_aux_loss_coef=0.0, use_bias_correction_kl=False,
                lr_scheduler_type="constant", weight_decay=0.0, adam_beta2=0.99, seed=3, bf16=False,
                gradient_checkpointing=False)
    got = {k: getattr(args, k) for k in want}
    got["lr_scheduler_type"] = str(got["lr_scheduler_type"].value)
    assert got == want


@pytest.mark.parametrize("change, field, value", [
    (dict(loss_agg_mode="seq-mean-token-mean"), "loss_type", "grpo"),
    (dict(loss_agg_mode="seq-mean-token-sum-norm"), "loss_type", "dr_grpo"),
    (dict(norm_adv_by_std=False), "scale_rewards", "none"),
    (dict(ppo_epochs=2, steps=3), "max_steps", 12),      # 3 steps x 2 updates per batch x 2 epochs
    (dict(beta=0.04, clip_low=0.1, clip_high=0.3), "epsilon_high", 0.3),
])
def test_each_mapped_field(tmp_path, change, field, value):
    assert getattr(grpo_config(trl_profile("cpu", **change), tmp_path), field) == value


def test_trl_profile_is_the_profile_without_dynamic_sampling():
    ours, trl = TrainConfig.from_profile("cpu"), trl_profile("cpu")
    assert ours.sample_groups == 8 and trl.sample_groups is None
    assert {**vars(ours), "sample_groups": None} == vars(trl)
    assert trl_profile("cpu", sample_groups=16).sample_groups == 16    # refused later by grpo_config


def test_overrides_and_geometry(tmp_path):
    cfg = trl_profile("cpu")
    assert grpo_config(cfg, tmp_path, loss_type="dapo").loss_type == "dapo"
    assert batch_geometry(cfg, 2) == {"per_device_train_batch_size": 8, "steps_per_generation": 2}
    assert batch_geometry(TrainConfig.from_profile("smoke"), 2) == {"per_device_train_batch_size": 2,
                                                                   "steps_per_generation": 1}


@pytest.mark.parametrize("cfg_change, processes, overrides, match", [
    ({}, 3, {}, "minibatch_size"),
    (dict(minibatch_size=12), 1, {}, "multiple of minibatch_size"),
    (dict(group_size=1, minibatch_size=4), 1, {}, "group_size >= 2"),
    (dict(loss_agg_mode="sum"), 1, {}, "loss_agg_mode must be one of"),
    (dict(sample_groups=16), 1, {}, "dynamic sampling"),
    (dict(negative_advantage_scale=0.0), 1, {}, "negative_advantage_scale"),
    (dict(shuffle_rewards=True), 1, {}, "shuffle_rewards"),
    (dict(write_credit=0.5), 1, {}, "write_credit"),
    (dict(anchor_weight=1.0), 1, {}, "anchor_weight"),
    (dict(oracle_prefix=0.5), 1, {}, "oracle_prefix"),
    (dict(accumulation_steps=2), 1, {}, "accumulation_steps"),
    (dict(kind_phase_steps=5), 1, {}, "kind_phase_steps"),
    (dict(world_steps=5), 1, {}, "world_steps"),
    ({}, 1, dict(no_such_field=1), "unknown GRPOConfig field"),
])
def test_bad_input_names_the_field(tmp_path, cfg_change, processes, overrides, match):
    cfg = trl_profile("cpu", **cfg_change)
    with pytest.raises(ValueError, match=match):
        grpo_config(cfg, tmp_path, 0, processes, **overrides)
