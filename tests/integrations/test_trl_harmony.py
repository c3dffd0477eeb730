"""TRL's GRPOTrainer trains a policy in gpt-oss's own Harmony format: our rollout_func plays the
episodes in Harmony, TRL is given openai-harmony's tokenizer, and the update changes the weights."""

from __future__ import annotations

import json

import pytest
import torch

from sinkflex_lib.integrations.trl import train_trl
from sinkflex_lib.integrations.trl.trainer import load_warm_start, processing_class
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.policy import build_policy


def test_grpo_trainer_trains_a_harmony_policy(tmp_path, monkeypatch):
    pytest.importorskip("openai_harmony")
    from sinkflex_lib.rl.harmony import HarmonyFormat

    # a short developer message (the tools stay): TRL scores every position over 201,088 ids
    init = HarmonyFormat.__init__
    monkeypatch.setattr(HarmonyFormat, "__init__",
                        lambda self, *a, **k: init(self, *a, **{**k, "instructions": "You are a retail agent."}))
    threads = torch.get_num_threads()
    try:
        # a micro policy with Harmony's real vocabulary; no warm start (it clones compact demonstrations)
        cfg = TrainConfig.from_profile("smoke", chat_format="harmony", bc_episodes=0, steps=1, threads=1,
                                       groups_per_step=1, minibatch_size=2, max_turns=2, max_tokens=2048,
                                       val_tasks=1)
        res = train_trl(cfg, tmp_path, seed=0, log=lambda m: None, entropy_coef=0.01)
    finally:
        torch.set_num_threads(threads)
    assert res.policy.chat.name == "harmony" and res.policy.tokenizer is None
    tok = processing_class(res.policy)                       # what GRPOTrainer was given
    assert tok.convert_tokens_to_ids("<|call|>") == res.policy.chat.enc.encode("<|call|>", allowed_special="all")[0]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert train_rows and train_rows[0]["trl"]["completions/mean_length"] > 0
    assert [r["step"] for r in rows if r["kind"] == "val"] == [0, 1]
    start = build_policy(cfg.policy, format="harmony", seed=0)
    load_warm_start(start, tmp_path / "warm_start")
    changed = [n for n, p in res.policy.model.named_parameters()
               if not torch.equal(p.detach(), start.model.state_dict()[n])]
    assert changed                                            # the update reached the weights
