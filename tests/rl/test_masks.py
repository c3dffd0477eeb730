import torch

from sinkflex_lib.grpo import grpo_loss
from sinkflex_lib.rl.rollout import RolloutConfig, collate, rollout_batch, token_logprobs


def test_no_gradient_reaches_masked_tokens(micro_policy):
    cfg = RolloutConfig(max_turns=3, max_tokens=600, max_new_tokens=8)
    rs = rollout_batch(micro_policy, [("cancel_000", 0), ("return_000", 0)], cfg,
                       torch.Generator().manual_seed(0))
    batch = collate(rs, micro_policy.token_id("<|pad|>"))
    micro_policy.model.train()
    logp, _ = token_logprobs(micro_policy.model, batch)
    logp.retain_grad()
    m = batch["mask"]
    # garbage old log-probs where mask is 0 must not matter
    old = torch.where(m > 0, batch["old_logp"], torch.full_like(m, float("nan")))
    loss, _ = grpo_loss(logp, old, torch.tensor([1.0, -1.0]), m)
    loss.backward()
    assert torch.isfinite(loss)
    assert bool((logp.grad[m == 0] == 0).all())
    assert bool((logp.grad[m == 1] != 0).any())
    # embeddings of tokens that only appear after the last sampled token get no gradient
    emb = micro_policy.model.get_input_embeddings().weight.grad
    assert emb is not None and torch.isfinite(emb).all()


def test_masked_positions_do_not_change_the_loss(micro_policy):
    cfg = RolloutConfig(max_turns=2, max_tokens=600, max_new_tokens=8)
    rs = rollout_batch(micro_policy, [("info_000", 0)] * 2, cfg, torch.Generator().manual_seed(3))
    batch = collate(rs, micro_policy.token_id("<|pad|>"))
    with torch.no_grad():
        logp, _ = token_logprobs(micro_policy.model.eval(), batch)
    m = batch["mask"]
    adv = torch.tensor([0.5, -0.5])
    base, _ = grpo_loss(logp, batch["old_logp"], adv, m)
    noisy = torch.where(m > 0, logp, logp + 100.0)
    other, _ = grpo_loss(noisy, batch["old_logp"], adv, m)
    assert torch.equal(base, other)
