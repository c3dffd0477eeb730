"""The TRL rollout_func against our rollout worker, and TRL's loss on its batch against grpo_loss.

One GRPOTrainer (micro policy, random weights, one thread) is built per module through
`make_trainer`, the code path of the CLI; its rollout_func, forward and `_compute_loss` are the
real ones. The reference is our worker (`rollout_batch`) and `grpo_loss` on `token_logprobs`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.grpo import group_advantages, grpo_loss
from sinkflex_lib.integrations.trl import make_trainer, play, task_seed, to_trl
from sinkflex_lib.integrations.trl.rollout import sampling_seed
from sinkflex_lib.rl.chat import PAD
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.formats import compact_prompt
from sinkflex_lib.rl.rollout import collate, rollout_batch, token_logprobs
from sinkflex_lib.rl.config import TrainConfig

SEED = 0
# two tasks with different observations, so a batched decode loop pads rows inside the episode
PROMPTS = ["cancel_000", "cancel_000", "return_001", "return_001"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = TrainConfig.from_profile("smoke", max_turns=3, max_tokens=512, max_new_tokens=12)
    policy = build_policy("micro", seed=SEED)
    trainer = make_trainer(cfg, policy, tmp_path_factory.mktemp("trl"), seed=SEED, log=lambda m: None)
    yield cfg, policy, trainer
    torch.set_num_threads(threads)


def worker(policy, cfg, prompts, decode):
    """Our worker on the episodes the rollout_func plays at GRPO step 1 on process 0."""
    specs = [(p, task_seed(SEED, 1, p)) for p in prompts]
    gen = torch.Generator().manual_seed(sampling_seed(SEED, 1, 0))
    if decode == "batch":
        return rollout_batch(policy, specs, cfg.rollout_config(), gen)
    return [rollout_batch(policy, [s], cfg.rollout_config(), gen)[0] for s in specs]


def trl_batch(out, pad_id):
    """The tensors GRPOTrainer builds from a rollout_func output (left-padded prompts,
    right-padded completions, tool mask padded with 1), as in `_generate_and_score_completions`."""
    from trl.trainer.utils import pad

    t = lambda rows, dtype=torch.long: [torch.tensor(r, dtype=dtype) for r in rows]  # noqa: E731
    prompt_ids = pad(t(out["prompt_ids"]), padding_value=pad_id, padding_side="left")
    prompt_mask = pad([torch.ones(len(r), dtype=torch.long) for r in out["prompt_ids"]], padding_value=0,
                      padding_side="left")
    completion_ids = pad(t(out["completion_ids"]), padding_value=pad_id, padding_side="right")
    completion_mask = pad([torch.ones(len(r), dtype=torch.long) for r in out["completion_ids"]],
                          padding_value=0, padding_side="right")
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "tool_mask": pad(t(out["env_mask"]), padding_value=1, padding_side="right"),
            "sampling_logps": pad(t(out["logprobs"], torch.float32), padding_value=0.0, padding_side="right")}


def trl_logps(trainer, batch, model=None):
    """TRL's per-token log-probs of the completions (its fused-head forward) under `model`
    (default: the trainer's)."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model if model is None else model, input_ids, attention_mask, batch["completion_ids"].shape[1])
    return logps


@pytest.mark.parametrize("decode", ["episode", "batch"])
def test_rollout_func_returns_our_workers_episodes(setup, decode):
    cfg, policy, trainer = setup
    trainer.rollout_func.decode = decode
    out = trainer.rollout_func(PROMPTS, trainer)
    ref = worker(policy, cfg, PROMPTS, decode)
    tok = policy.tokenizer
    if decode == "batch":
        assert any(0 in r.attn[r.mask.index(1):] for r in ref)   # pads inside episodes: dropped below
    assert out["task_seed"][0] == out["task_seed"][1] != out["task_seed"][2] == out["task_seed"][3]
    for i, r in enumerate(ref):
        real = [k for k, a in enumerate(r.attn) if a]
        n_prompt = len(out["prompt_ids"][i])
        # prompt + completion = the worker's real tokens; env_mask and log-probs are its mask and
        # sampling log-probs on them (bit for bit: same generator, same model, one thread)
        assert out["prompt_ids"][i] + out["completion_ids"][i] == [r.ids[k] for k in real]
        assert out["env_mask"][i] == [r.mask[k] for k in real][n_prompt:]
        assert out["logprobs"][i] == [r.old_logp[k] for k in real][n_prompt:]
        assert sum(out["env_mask"][i]) == r.n_sampled > 0 and out["env_mask"][i][0] == 1
        assert (out["env_reward"][i], out["reward_info"][i], out["turns"][i]) == (r.reward, r.reward_info, r.turns)
        # the prompt is exactly the episode's initial prompt (system, greeting, first user turn)
        env = RetailEnv(cfg.source, max_steps=cfg.max_turns)
        obs, info = env.reset(seed=out["task_seed"][i], options={"task_id": PROMPTS[i]})
        assert out["prompt_ids"][i] == tok(compact_prompt(env, obs, info), add_special_tokens=False)["input_ids"]
        # observations arrive between turns: masked, never sampled
        text = tok.decode(out["completion_ids"][i])
        assert "<|user|>" in text or "<|tool|>" in text or "<|error|>" in text


def test_trl_rescoring_equals_sampling_for_both_decode_modes(setup):
    """TRL rescores the pad-free sequence. Per-episode decoding has no pads; batched decoding
    has pads inside the episodes, but the sliding window (the micro policy's 16) counts real keys
    only, so both decodes' sampling log-probs equal TRL's up to float rounding."""
    cfg, policy, trainer = setup
    gaps = {}
    for decode in ("episode", "batch"):
        trainer.rollout_func.decode = decode
        out = trainer.rollout_func(PROMPTS, trainer)
        batch = trl_batch(out, policy.token_id(PAD))
        m = (batch["completion_mask"] * batch["tool_mask"]).bool()
        assert max(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"])) > \
            policy.model.config.sliding_window
        gaps[decode] = (trl_logps(trainer, batch) - batch["sampling_logps"])[m].abs().max().item()
    assert gaps["episode"] < 1e-5 and gaps["batch"] < 1e-5, gaps


@pytest.mark.parametrize("decode", ["episode", "batch"])
def test_trl_rescoring_of_a_harmony_batch_equals_sampling(setup, decode):
    """The same check on gpt-oss's own format: a micro policy with Harmony's real vocabulary
    (201,088 ids) plays two episodes with our worker; TRL's rescoring function, given that
    model and the pad-free episodes, returns the sampling log-probs, and so does our
    `token_logprobs` (the GRPO update's)."""
    pytest.importorskip("openai_harmony")
    cfg, _, trainer = setup
    from trl.trainer.utils import add_fused_lm_head

    policy = build_policy("micro", format="harmony", seed=SEED)
    policy.chat.instructions = "You are a retail agent."          # a short developer message: a cheaper test
    specs = [(p, task_seed(SEED, 1, p)) for p in ("cancel_000", "return_001")]
    rollout = dataclasses.replace(cfg.rollout_config(), max_tokens=4096)
    rows = play(policy, specs, rollout, torch.Generator().manual_seed(SEED), decode)
    batch = trl_batch(to_trl(rows), policy.pad_id)
    m = (batch["completion_mask"] * batch["tool_mask"]).bool()
    assert m.sum() > 0
    ours = collate(rows, policy.pad_id)
    ours_logp, _ = token_logprobs(policy.model, ours)
    ours_gap = (ours_logp - ours["old_logp"])[ours["mask"].bool()].abs().max().item()
    # TRL's rescoring runs through the fused LM head it adds to a trainer's model; add it as TRL does
    add_fused_lm_head(policy.model, temperature=trainer.temperature, outputs=("log_probs", "entropy"))
    trl_gap = (trl_logps(trainer, batch, policy.model) - batch["sampling_logps"])[m].abs().max().item()
    assert trl_gap < 1e-5 and ours_gap < 1e-5, (trl_gap, ours_gap)


AGG = {"bnpo": "token-mean", "dapo": "token-mean", "grpo": "seq-mean-token-mean",
       "dr_grpo": "seq-mean-token-sum-norm"}


@pytest.mark.parametrize("loss_type, beta", [("bnpo", 0.0), ("dapo", 0.0), ("grpo", 0.0), ("dr_grpo", 0.0),
                                             ("bnpo", 0.04)])
def test_trl_loss_on_the_group_equals_grpo_loss(setup, loss_type, beta):
    """One group (4 rollouts of one task) from the rollout_func; the policy is then perturbed so
    the ratio to the sampling policy leaves the clip range on both sides; rewards are injected
    (a random policy scores 0). TRL's `_compute_loss` on TRL's batch (its own forward) must equal
    grpo_loss on token_logprobs of our worker's layout, with the matching aggregation, and so
    must the gradients."""
    cfg, policy, trainer = setup
    prompts = ["cancel_000"] * 4
    trainer.rollout_func.decode = "episode"
    out = trainer.rollout_func(prompts, trainer)
    ref = worker(policy, cfg, prompts, "episode")
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.0]), 4, eps=1e-4)   # TRL's epsilon
    model = trainer.model
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.03 * torch.randn(p.shape, generator=gen))
        model.train()
        # TRL
        batch = trl_batch(out, policy.token_id(PAD))
        sampling = batch.pop("sampling_logps")
        inputs = {**batch, "advantages": adv, "old_per_token_logps": sampling,
                  "num_items_in_batch": (batch["completion_mask"] * batch["tool_mask"]).sum()}
        if beta:
            inputs["ref_per_token_logps"] = sampling
        trainer.loss_type, trainer.beta, trainer.current_gradient_accumulation_steps = loss_type, beta, 1
        model.zero_grad()
        loss_trl = trainer._compute_loss(model, inputs)
        loss_trl.backward()
        grads_trl = [p.grad.clone() for p in model.parameters()]
        # ours
        ours = collate(ref, policy.token_id(PAD))
        model.zero_grad()
        logp, ent = token_logprobs(model, ours, cfg.temperature, with_entropy=True)
        loss, metrics = grpo_loss(logp, ours["old_logp"], adv, ours["mask"], ref_logp=ours["old_logp"],
                                  clip_low=trainer.epsilon_low, clip_high=trainer.epsilon_high, beta=beta,
                                  agg=AGG[loss_type], entropy=ent, norm_length=trainer.max_completion_length)
        loss.backward()
    finally:
        model.load_state_dict(saved)
        trainer.loss_type, trainer.beta = trainer.args.loss_type, trainer.args.beta
    assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0
    torch.testing.assert_close(loss_trl.detach(), loss.detach(), rtol=1e-5, atol=1e-7)
    for g_trl, p in zip(grads_trl, model.parameters()):
        torch.testing.assert_close(g_trl, p.grad, rtol=1e-4, atol=1e-6)
    trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert trl_metrics["clip_ratio/low_mean"] == pytest.approx(metrics["clip_frac_low"], abs=1e-6)
    assert trl_metrics["clip_ratio/high_mean"] == pytest.approx(metrics["clip_frac_high"], abs=1e-6)
    assert trl_metrics["entropy"] == pytest.approx(metrics["entropy"], rel=1e-5)


def test_rollout_func_rejects_bad_prompts(setup):
    _, _, trainer = setup
    with pytest.raises(ValueError, match="prompts must be task ids"):
        trainer.rollout_func(["no_such_task"], trainer)


def test_the_trainers_backward_pass_is_deterministic_on_a_cpu(setup, backward_modes):
    """`make_trainer` routes GRPOTrainer's backward pass through `deterministic_on_cpu`, as ours
    (accelerate's own pass runs with the switch off), and leaves it off afterwards."""
    from accelerate import Accelerator

    trainer = setup[2]
    assert backward_modes(Accelerator(cpu=True).backward) == [False]
    assert backward_modes(trainer.accelerator.backward) == [True]
    assert not torch.are_deterministic_algorithms_enabled()
