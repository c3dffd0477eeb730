import pytest

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.oracle import oracle_script, slipped_call
from sinkflex_lib.rl.rollout import collate
from sinkflex_lib.rl.chat import END, SYSTEM, TOOL, USER, canonical_action, oracle_transcript
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


def test_demonstration_weights_agent_and_tool_tokens_and_can_drop_the_system_message(micro_policy):
    env = RetailEnv("eval-world:0", max_steps=60)
    r = demonstration(micro_policy, env, "cancel_000", 0, 2048, tool_weight=0.25)
    tool, user, end = (micro_policy.token_id(t) for t in (TOOL, USER, END))
    role = None
    for t, m, w in zip(r.ids, r.mask, r.old_logp):
        if t in (tool, user):
            role = t
        assert (m == 1) == (w == 1.0)
        if w == 0.25:
            assert role == tool and t not in (tool, end)
        if m:
            role = None
    assert 0 < sum(r.mask) < len(r.ids) and any(w == 0.25 for w in r.old_logp)
    short = demonstration(micro_policy, env, "cancel_000", 0, 200, 0.25, drop_system=True)
    assert micro_policy.token_id(SYSTEM) not in short.ids and r.ids[0] == micro_policy.token_id(SYSTEM)
    assert len(short.ids) <= 200 and short.mask[-1] == 1


def test_value_weight_lands_exactly_on_the_argument_values(micro_policy):
    env = RetailEnv("eval-world:0", max_steps=60)
    tok = micro_policy.tokenizer
    r = demonstration(micro_policy, env, "cancel_000", 0, 2048, value_weight=3.0)
    heavy = tok.decode([t for t, w in zip(r.ids, r.old_logp) if w == 3.0])
    _, turns = oracle_transcript(env, "cancel_000")
    values = "".join(v for a, _ in turns for v in _string_values(a))
    assert heavy == values and len(values) > 20         # every value's tokens, nothing else
    plain = demonstration(micro_policy, env, "cancel_000", 0, 2048)
    assert plain.ids == r.ids and set(plain.old_logp) <= {0.0, 1.0}


def test_decision_weight_lands_on_the_words_and_values_a_request_decides(micro_policy):
    env = RetailEnv("eval-world:0", max_steps=60)
    tok = micro_policy.tokenizer
    # the words naming the write, then every argument value as the request states it (by hand)
    for tid, words in (("cancel_000", ["cancel order ", "#W5926834", "no longer needed"]),
                       ("modify_address_000", ["change the shipping address of order ", "#W7795539",
                                               "505 Hillcrest Road", "Suite 432", "Portland", "OR", "97246", "USA"])):
        r = demonstration(micro_policy, env, tid, 0, 2048, value_weight=3.0, decision_weight=5.0)
        heavy = tok.decode([t for t, w in zip(r.ids, r.old_logp) if w == 5.0])
        assert heavy.replace(" ", "") == "".join(words).replace(" ", ""), (tid, heavy)   # a word's token may carry its space
        plain = demonstration(micro_policy, env, tid, 0, 2048, value_weight=3.0)
        assert plain.ids == r.ids        # elsewhere the weights are unchanged; there they were 1
        assert [p if w != 5.0 else 5.0 for p, w in zip(plain.old_logp, r.old_logp)] == r.old_logp
        assert {p for p, w in zip(plain.old_logp, r.old_logp) if w == 5.0} == {1.0}


def test_id_start_weight_lands_on_the_token_that_begins_each_item_and_product_id(micro_policy):
    from sinkflex_lib.envs.oracle import id_spans, with_next_action
    env = RetailEnv("eval-world:0", max_steps=60)
    tok = micro_policy.tokenizer
    kw = dict(value_weight=3.0, decision_weight=5.0)
    _, turns = oracle_transcript(env, "exchange_000")
    want = [a[s:e] for a, _, n in with_next_action(turns) for _, s, e in id_spans(a, n, env.db.products)]
    r = demonstration(micro_policy, env, "exchange_000", 0, 4096, id_start_weight=20.0, **kw)
    heavy = [i for i, w in enumerate(r.old_logp) if w == 20.0]
    assert len(heavy) == len(want) >= 5
    for i, item in zip(heavy, want):       # the id's text starts inside the weighted token
        token, text = tok.decode([r.ids[i]]), tok.decode(r.ids[i:i + 12])
        assert 0 <= text.find(item) < len(token), (token, item)
    plain = demonstration(micro_policy, env, "exchange_000", 0, 4096, **kw)
    assert plain.ids == r.ids
    assert [p for i, p in enumerate(plain.old_logp) if i not in heavy] == \
        [w for i, w in enumerate(r.old_logp) if i not in heavy]
    assert {plain.old_logp[i] for i in heavy} <= {3.0, 5.0}      # values the other weights already marked


def _string_values(action: str) -> list[str]:
    """Independent reference: the quoted string literals inside a functional call."""
    import ast
    try:
        call = ast.parse(action.strip(), mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(call, ast.Call):
        return []
    out = []
    for kw in call.keywords:
        vals = kw.value.elts if isinstance(kw.value, ast.List) else [kw.value]
        out += [v.value for v in vals if isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value]
    return out


def test_a_slip_is_refused_and_the_episode_goes_on_as_the_oracles():
    env = RetailEnv("eval-world:0", max_steps=60)
    for tid in ("cancel_000", "exchange_000", "user_address_000", "compound_000"):
        script = oracle_script(env.data.tasks[tid])
        _, clean = oracle_transcript(env, tid)
        slips = [k for k, a in enumerate(script) if slipped_call(a) is not None]
        assert len(slips) >= 2, tid
        for k in slips:
            _, turns = oracle_transcript(env, tid, slip_at=k)
            assert "Error" in turns[k][1] and turns[:k] + turns[k + 1:] == clean      # the state was not touched
        # replayed by hand: the slip, then the oracle's own actions; the episode still scores 1
        env.reset(seed=0, options={"task_id": tid})
        env.step(canonical_action(slipped_call(script[slips[-1]])))
        rewards = [env.step(canonical_action(a))[1] for a in oracle_script(env.data.tasks[tid], env.db.products)]
        assert rewards[-1] == 1.0
    with pytest.raises(ValueError, match="no id to slip"):
        oracle_transcript(env, "cancel_000", slip_at=0)          # the greeting


def test_a_slips_tokens_carry_no_loss_and_the_rest_is_the_clean_demonstration(micro_policy):
    env = RetailEnv("eval-world:0", max_steps=60)
    tok = micro_policy.tokenizer
    kw = dict(tool_weight=0.25, value_weight=3.0, decision_weight=5.0)
    clean = demonstration(micro_policy, env, "cancel_000", 0, 4096, **kw)
    slips = [k for k, a in enumerate(oracle_script(env.data.tasks["cancel_000"])) if slipped_call(a) is not None]
    for k in (slips[0], slips[-1]):     # a look-up, the write after its confirmation request
        r = demonstration(micro_policy, env, "cancel_000", 0, 4096, slip_at=k, **kw)
        learned = [(t, w) for t, m, w in zip(r.ids, r.mask, r.old_logp) if m]
        assert learned == [(t, w) for t, m, w in zip(clean.ids, clean.mask, clean.old_logp) if m]
        extra = tok.decode([t for t, m in zip(r.ids, r.mask) if not m])
        assert "Error" in extra and "Error" not in tok.decode([t for t, m in zip(clean.ids, clean.mask) if not m])
        assert len(r.ids) > len(clean.ids)
