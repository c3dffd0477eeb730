import pytest
import torch

from sinkflex_lib.rl.chat import END
from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.rl.chat import canonical_action
from sinkflex_lib.rl.policy import Policy
from sinkflex_lib.rl.rollout import (RolloutConfig, collate, group_specs, previous_real_index, replay_turns,
                                     rollout_batch, scores_without_pads, token_logprobs, turns_to_step,
                                     without_pads)

from .forced import ForcedTokens

CFG = RolloutConfig(max_turns=4, max_tokens=700, max_new_tokens=12)


@pytest.fixture(scope="module")
def rollouts(micro_policy_factory):
    policy = micro_policy_factory()
    g = torch.Generator().manual_seed(0)
    rs = rollout_batch(policy, group_specs(["cancel_000", "info_000"], 3, [5, 6]), CFG, g)
    return policy, rs


def test_sampled_tokens_match_mask_and_actions(rollouts):
    policy, rs = rollouts
    end_id = policy.token_id(END)
    assert len(rs) == 6 and [r.seed for r in rs] == [5, 5, 5, 6, 6, 6]
    for r in rs:
        assert len(r.ids) == len(r.attn) == len(r.pos) == len(r.mask) == len(r.old_logp)
        # mask 1 only on real tokens; log-probs only there; pads never masked in
        assert all(a == 1 for a, m in zip(r.attn, r.mask) if m)
        assert all(lp == 0.0 for lp, m in zip(r.old_logp, r.mask) if not m)
        assert all(lp <= 0.0 for lp, m in zip(r.old_logp, r.mask) if m)
        # the mask-1 tokens, split at each turn's close, decode to exactly the actions sent
        sampled = [t for t, m in zip(r.ids, r.mask) if m]
        turns, cur = [], []
        for t in sampled:
            if t == end_id:
                turns.append(cur)
                cur = []
            else:
                cur.append(t)
                if len(cur) == CFG.max_new_tokens:  # forced close (mask 0 <|end|>)
                    turns.append(cur)
                    cur = []
        assert cur == []
        assert [policy.tokenizer.decode(t) for t in turns] == r.actions
        # positions count real tokens only
        real_pos = [p for p, a in zip(r.pos, r.attn) if a]
        assert real_pos == list(range(len(real_pos)))
        # budgets
        assert r.n_tokens <= CFG.max_tokens
        assert r.turns <= CFG.max_turns
        assert r.terminated or r.truncated


def test_recomputed_logprobs_equal_sampling_logprobs(rollouts):
    policy, rs = rollouts
    batch = collate(rs, policy.token_id("<|pad|>"))
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model.eval(), batch)
    m = batch["mask"] > 0
    assert int(m.sum()) > 20
    torch.testing.assert_close(logp[m], batch["old_logp"][m], atol=1e-4, rtol=0)


def test_padded_layouts_score_as_their_pad_free_episodes(rollouts, micro_policy_factory):
    """A batched decode loop leaves pads inside each row (rows wait for the longest pending
    observation). Scored without its pads (what the warm start and TRL see, and what the trainer
    scores on sinkflex), each episode's sampled tokens get the sampling log-probs: the sliding
    window (64 here) counts real tokens, not cache slots."""
    policy, rs = rollouts
    assert policy.model.config.sliding_window < max(r.n_tokens for r in rs)
    assert any(0 in r.attn[r.mask.index(1):] for r in rs)  # pads inside episodes
    compact = [without_pads(r) for r in rs]
    for r, c in zip(rs, compact):
        real = [k for k, a in enumerate(r.attn) if a]
        assert c.ids == [r.ids[k] for k in real] and c.pos == list(range(len(real)))
        assert c.mask == [r.mask[k] for k in real] and c.old_logp == [r.old_logp[k] for k in real]
        assert (c.reward, c.actions, c.n_sampled) == (r.reward, r.actions, r.n_sampled)
        assert (c.writes, c.write_calls, c.end_reason) == (r.writes, r.write_calls, r.end_reason)
    batch = collate(compact, policy.token_id("<|pad|>"))
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model.eval(), batch)
    m = batch["mask"] > 0
    torch.testing.assert_close(logp[m], batch["old_logp"][m], atol=1e-4, rtol=0)
    assert scores_without_pads(policy.model)
    assert not scores_without_pads(micro_policy_factory(attn_implementation="eager").model)


def test_group_rollouts_share_the_task_seed_and_prompt(rollouts):
    _, rs = rollouts
    first = [r.ids[:40] for r in rs[:3]]
    assert first[0] == first[1] == first[2]


def test_token_budget_truncates_cleanly(micro_policy):
    cfg = RolloutConfig(max_turns=50, max_tokens=420, max_new_tokens=16)
    rs = rollout_batch(micro_policy, [("cancel_000", 0)] * 2, cfg, torch.Generator().manual_seed(1))
    for r in rs:
        assert r.n_tokens <= 420
        assert r.terminated or r.truncated
        if r.end_reason == "max_tokens":
            assert r.truncated and r.reward == 0.0


def test_previous_real_index():
    am = torch.tensor([[1, 0, 0, 1, 1, 0, 1]])
    assert previous_real_index(am).tolist() == [[-1, 0, 0, 0, 3, 4, 4]]


def test_temperature_zero_is_greedy(micro_policy_factory):
    """Greedy decoding ignores the generator, and every sampled token is the argmax of a
    recomputed forward pass over the layout."""
    policy = micro_policy_factory()
    cfg = RolloutConfig(max_turns=2, max_tokens=600, max_new_tokens=8, temperature=0.0)
    specs = group_specs(["cancel_000"], 2, [5])
    a = rollout_batch(policy, specs, cfg, torch.Generator().manual_seed(0))
    b = rollout_batch(policy, specs, cfg, torch.Generator().manual_seed(1))
    assert [r.ids for r in a] == [r.ids for r in b] and a[0].ids == a[1].ids
    batch = collate(a, policy.token_id("<|pad|>"))
    with torch.no_grad():
        out = policy.model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  position_ids=batch["position_ids"], use_cache=False)
    src = previous_real_index(batch["attention_mask"])
    m = batch["mask"] > 0
    rows, cols = m.nonzero(as_tuple=True)
    best = out.logits[rows, src[rows, cols]].argmax(-1)
    assert int(m.sum()) > 4
    assert torch.equal(best, batch["input_ids"][rows, cols])


def test_token_logprobs_equal_a_plain_log_softmax_in_value_and_gradient(micro_policy):
    """Chunked normalisers and gathered target logits against the full log-softmax, written out."""
    from sinkflex_lib.rl.rollout import previous_real_index

    cfg = RolloutConfig(max_turns=2, max_tokens=600, max_new_tokens=8)
    batch = collate(rollout_batch(micro_policy, [("cancel_000", 0), ("info_000", 1)], cfg,
                                  torch.Generator().manual_seed(0)), micro_policy.pad_id)
    model = micro_policy.model.train()
    for temperature in (1.0, 0.7):
        logp, ent = token_logprobs(model, batch, temperature, with_entropy=True, chunk=7)
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"], use_cache=False).logits / temperature
        src = previous_real_index(batch["attention_mask"])
        ref_lp, ref_ent = torch.zeros_like(logp), torch.zeros_like(logp)
        for b in range(src.shape[0]):
            for t in range(src.shape[1]):
                if src[b, t] >= 0:
                    dist = torch.log_softmax(out[b, src[b, t]], -1)
                    ref_lp[b, t] = dist[batch["input_ids"][b, t]]
                    ref_ent[b, t] = -(dist.exp() * dist).sum()
        assert torch.allclose(logp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
        m = batch["mask"]
        g = torch.autograd.grad((logp * m).sum(), model.lm_head.weight)[0]
        g_ref = torch.autograd.grad((ref_lp * m).sum(), model.lm_head.weight)[0]
        assert torch.allclose(g, g_ref, atol=1e-5)


def test_each_speed_option_off_gives_the_same_greedy_episodes():
    """The rollout's speed options change no greedy token: the KV cache's in-place appends and
    dropped pad slots, the lean forward and the sampler give the same layout, and the shared prompt
    prefix (pads then sit after it, not before it) the same pad-free episode; the sampling
    log-probs agree to float rounding. The shipped base ends its turns at different lengths, so
    rows wait with pads that the cache drops."""
    from sinkflex_lib.rl.policy import build_policy

    policy = build_policy("base-tiny")
    specs = group_specs(["cancel_000", "info_000", "return_000"], 2, [5, 6, 7])
    base = dict(max_turns=4, max_tokens=700, max_new_tokens=24, temperature=0.0)
    offs = ({}, {"cache_in_place": False}, {"drop_pad_slots": False}, {"cache_in_place": False, "drop_pad_slots": False},
            {"lean_forward": False}, {"fast_sampling": False}, {"overlap_turns": False}, {"share_prompt_prefix": False})
    stats = [{} for _ in offs]
    runs = [rollout_batch(policy, specs, RolloutConfig(**base, **flags), torch.Generator().manual_seed(0), st)
            for flags, st in zip(offs, stats)]
    assert any(0 in r.attn[r.mask.index(1):] for r in runs[0])   # pads were there to drop
    slots = [st["cache_slots"] for st in stats]
    assert slots[0] == slots[1] == slots[4] == slots[5] < slots[2] == slots[3]
    assert any(a.ids != b.ids for a, b in zip(runs[0], runs[-1]))   # the prefix moves the prompt's pads
    for flags, other in zip(offs[1:], runs[1:]):
        for a, b in zip(runs[0], other):
            if {"share_prompt_prefix", "overlap_turns"} & set(flags):   # the pads sit elsewhere, the episodes do not
                a, b = without_pads(a), without_pads(b)
            assert (a.ids, a.attn, a.pos, a.mask, a.actions) == (b.ids, b.attn, b.pos, b.mask, b.actions)
            # float rounding only (sums over other cache lengths): this file's log-prob tolerance
            torch.testing.assert_close(torch.tensor(a.old_logp), torch.tensor(b.old_logp), atol=1e-4, rtol=0)


def test_rows_step_their_environments_once_half_wait_or_once_all_do_without_overlap():
    assert turns_to_step(4, {0, 1, 2}, overlap=True) == []          # one of four waits: decode on
    assert turns_to_step(4, {0, 2}, overlap=True) == [1, 3]         # half wait: step them
    assert turns_to_step(4, {0, 2}, overlap=False) == []            # turn-synchronous: wait for all
    assert turns_to_step(4, set(), overlap=False) == [0, 1, 2, 3]
    assert turns_to_step(3, {1}, overlap=True) == [0, 2] and turns_to_step(1, set(), overlap=True) == [0]


def test_shared_prefix_is_the_prompts_common_start_less_one_token():
    from sinkflex_lib.rl.rollout import _Row, shared_prefix_length

    def rows(*prompts):
        return [_Row(None, None, pending=[(t, 0, 0.0) for t in p]) for p in prompts]

    assert shared_prefix_length(rows([1, 2, 3, 4], [1, 2, 3, 5, 6])) == 3
    assert shared_prefix_length(rows([1, 2, 3], [1, 2, 3, 4])) == 2    # a row keeps a token to feed
    assert shared_prefix_length(rows([7, 2], [1, 2])) == 0
    assert shared_prefix_length(rows([1, 2, 3], [1, 2, 3], [1, 9])) == 1


def test_inverse_cdf_sampling_draws_the_distribution():
    """Frequencies of 40,000 draws from a fixed generator against the probabilities (standard error
    of each under 0.0025, so 0.01 is four of them); zero-probability tokens are never drawn."""
    from sinkflex_lib.rl.rollout import sample_tokens

    probs = torch.tensor([[0.0, 0.5, 0.2, 0.0, 0.3], [0.1, 0.1, 0.1, 0.6, 0.1]]).repeat(20_000, 1)
    draws = sample_tokens(probs, torch.Generator().manual_seed(0)).view(20_000, 2)
    for row in range(2):
        freq = torch.bincount(draws[:, row], minlength=5).float() / 20_000
        assert (freq - probs[row]).abs().max() < 0.01
    assert not ((draws[:, 0] == 0) | (draws[:, 0] == 3)).any()
    again = sample_tokens(probs, torch.Generator().manual_seed(0)).view(20_000, 2)
    assert torch.equal(draws, again)
    # an unnormalised row (float32 rounding) is sampled as its normalised self, never past the end
    assert sample_tokens(torch.tensor([[0.0, 0.0, 0.7]]), torch.Generator().manual_seed(1)).item() == 2


def test_common_prefix_length_needs_the_same_real_tokens_at_their_positions():
    from sinkflex_lib.rl.rollout import common_prefix_length

    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 1, 2], [5, 6, 7, 8, 3]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(5).expand(3, 5).clone()}
    assert common_prefix_length(batch) == 3
    assert common_prefix_length({k: v[:1] for k, v in batch.items()}) == 0      # one row: nothing to share
    same = {k: v[[0, 0]] for k, v in batch.items()}
    assert common_prefix_length(same) == 4                                      # one column is left
    batch["attention_mask"][1, 2] = 0                                           # a pad ends the prefix
    assert common_prefix_length(batch) == 2
    batch["attention_mask"][1, 2] = 1
    batch["position_ids"][2, 1:] -= 1                                           # as do shifted positions
    assert common_prefix_length(batch) == 1


def test_length_groups_sort_rows_and_cut_each_group_to_its_longest_row():
    from sinkflex_lib.rl.rollout import length_groups

    am = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    groups = length_groups(am, 2)   # lengths up to the last real token: 3, 5, 4, 2, 4
    assert [(idx.tolist(), n) for idx, n in groups] == [([3, 0, 2], 4), ([4, 1], 5)]
    assert [(idx.tolist(), n) for idx, n in length_groups(am[:3], 2)] == [([0, 2, 1], 5)]   # groups of >= 2 rows
    assert len(length_groups(am, 1)) == 1


def test_grouped_and_shared_prefix_scoring_equal_the_plain_forward_in_value_and_gradient(micro_policy):
    """token_logprobs with rows in length groups and each group's common prompt prefix run once:
    log-probs, entropies and every parameter's gradient equal those of one plain forward over every
    row (float rounding) on every real token (right pads are no tokens: mask them)."""
    from sinkflex_lib.rl.rollout import common_prefix_length, length_groups

    cfg = RolloutConfig(max_turns=3, max_tokens=600, max_new_tokens=8)
    rows = rollout_batch(micro_policy, group_specs(["cancel_000", "info_000", "return_000"], 2, [0, 1, 2]), cfg,
                         torch.Generator().manual_seed(0))
    batch = collate([without_pads(r) for r in rows], micro_policy.pad_id)
    assert common_prefix_length(batch) > 100          # the system text and the greeting
    assert len({n for _, n in length_groups(batch["attention_mask"])}) == 2   # two groups, two lengths
    real = batch["attention_mask"] > 0
    model, got = micro_policy.model.train(), []
    for share, groups in ((True, 2), (False, 2), (True, 1), (False, 1)):
        model.zero_grad()
        logp, ent = token_logprobs(model, batch, with_entropy=True, share_prefix=share, groups=groups)
        ((logp * batch["mask"]).sum() + 0.1 * (ent * real).sum()).backward()
        got.append((logp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    lp0, ent0, grads0 = got[-1]
    for lp, ent, grads in got[:-1]:
        torch.testing.assert_close(lp[real], lp0[real], atol=1e-5, rtol=0)
        torch.testing.assert_close(ent[real], ent0[real], atol=1e-5, rtol=0)
        for g, g0 in zip(grads, grads0):
            torch.testing.assert_close(g, g0, atol=1e-5 * float(g0.abs().max()) + 1e-9, rtol=0)


@pytest.mark.parametrize("cfg, reward, end", [
    (RolloutConfig(max_turns=16, max_tokens=3072, max_new_tokens=128, source="eval-world:3"), 1.0, "user_stop"),
    (RolloutConfig(max_turns=16, max_tokens=3072, max_new_tokens=20, source="eval-world:3"), 0.0, None),
    (RolloutConfig(max_turns=16, max_tokens=600, max_new_tokens=128, source="eval-world:3"), 0.0, "max_tokens"),
    (RolloutConfig(max_turns=3, max_tokens=3072, max_new_tokens=128, source="eval-world:3"), 0.0, "max_steps"),
])
def test_replayed_turns_equal_the_worker_sampling_them(micro_policy, cfg, reward, end):
    """replay_turns against the worker itself, driven by a model that emits the turns' tokens
    (cut where the worker cuts them): same layout, mask, actions, reward and end."""
    fmt = micro_policy.chat
    task = RetailEnv("eval-world:3").data.tasks["modify_address_000"]
    turns = [fmt.completion(canonical_action(a)) for a in oracle_script(task)]
    assert max(map(len, turns)) > 20     # the confirmation request is cut at 20 tokens
    forced = Policy(ForcedTokens([t for turn in turns for t in turn[:cfg.max_new_tokens]], len(micro_policy.tokenizer)),
                    micro_policy.tokenizer, "forced")
    want = rollout_batch(forced, [("modify_address_000", 0)], cfg)[0]
    got = replay_turns(fmt, "modify_address_000", turns, cfg)
    for key in ("ids", "attn", "pos", "mask", "actions", "reward", "end_reason", "writes"):
        assert getattr(got, key) == getattr(want, key), key
    assert got.reward == reward and (end is None or got.end_reason == end)
