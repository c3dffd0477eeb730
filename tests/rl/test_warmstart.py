from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.rl.rollout import collate
from sinkflex_lib.rl.warmstart import bc_loss, demonstration, warm_start


def test_demonstration_masks_only_agent_tokens(micro_policy):
    env = RetailEnv("mini")
    d = demonstration(micro_policy, env, "cancel_000", max_tokens=4096)
    tok = micro_policy.tokenizer
    agent = tok.decode([t for t, m in zip(d.ids, d.mask) if m])
    assert "find_user_id_by_email(" in agent and "cancel_pending_order(" in agent
    prompt = tok.decode([t for t, m in zip(d.ids, d.mask) if not m])
    assert "<|tool|>" in prompt and "<|user|>" in prompt and "find_user_id" not in prompt.split("Tools:")[1].split("<|end|>", 1)[1]


def test_warm_start_reduces_loss(micro_policy):
    ids = ["cancel_000", "info_000"]
    env = RetailEnv("mini")
    batch = collate([demonstration(micro_policy, env, t, max_tokens=384) for t in ids],
                    micro_policy.token_id("<|pad|>"))
    before = float(bc_loss(micro_policy, batch).detach())
    hist = warm_start(micro_policy, ids, epochs=6, batch_size=2, lr=1e-2, max_tokens=384)
    after = float(bc_loss(micro_policy, batch).detach())
    assert len(hist) == 6
    assert after < before - 0.5, (before, after)
