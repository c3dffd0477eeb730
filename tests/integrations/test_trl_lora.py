"""LoRA through peft: train_trl trains the adapter; with the adapter off the model is the warm start."""

from __future__ import annotations

import torch

from sinkflex_lib.integrations.trl import train_trl
from sinkflex_lib.integrations.trl.trainer import load_warm_start
from sinkflex_lib.rl.chat import PAD
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.rollout import collate, rollout_batch
from sinkflex_lib.rl.config import TrainConfig


def test_lora_trains_only_the_adapter(tmp_path):
    threads = torch.get_num_threads()
    try:
        cfg = TrainConfig.from_profile("smoke", steps=1, threads=1)
        # smoke rewards are all 0: TRL's entropy bonus makes the update non-empty
        res = train_trl(cfg, tmp_path, seed=0, lora_r=4, log=lambda m: None, entropy_coef=0.01)
        model = res.policy.model
        warm = build_policy(cfg.policy, seed=0, **cfg.policy_overrides)
        load_warm_start(warm, tmp_path / "warm_start")
        episode = rollout_batch(warm, [("cancel_000", 0)], cfg.rollout_config(), torch.Generator().manual_seed(0))
        batch = collate(episode, warm.token_id(PAD))
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
        with torch.no_grad():
            want = warm.model(**inputs).logits
            with model.disable_adapter():
                off = model(**inputs).logits
            on = model(**inputs).logits
    finally:
        torch.set_num_threads(threads)
    assert res.policy.lora
    torch.testing.assert_close(off, want, rtol=1e-5, atol=1e-5)     # base weights untouched
    assert (on - want).abs().max() > 1e-4                           # the adapter learned something
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
