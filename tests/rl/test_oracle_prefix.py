import math
from types import SimpleNamespace

import numpy as np
import pytest

from sinkflex_lib.envs import RetailEnv, load_source
from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.rl import train as train_mod
from sinkflex_lib.rl.chat import canonical_action
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.oracle_prefix import oracle_prefixes, oracle_turns, prefix_fraction, prefix_length
from sinkflex_lib.rl.policy import Policy
from sinkflex_lib.rl.rollout import RolloutConfig, replay_turns, rollout_batch
from sinkflex_lib.rl.runstate import read_metrics

from .forced import ForcedTokens

CFG = RolloutConfig(max_turns=16, max_tokens=3072, max_new_tokens=128, source="eval-world:3")
TASK = "modify_address_000"


def _oracle(fmt):
    data = load_source("eval-world:3")
    return [fmt.completion(canonical_action(a)) for a in oracle_script(data.tasks[TASK], data.db.tables["products"])]


def test_oracle_turns_are_the_oracle_actions_in_the_policys_format(micro_policy):
    data = load_source("eval-world:3")
    assert oracle_turns(micro_policy.chat, data.tasks[TASK], data.db.tables["products"]) == _oracle(micro_policy.chat)


@pytest.mark.parametrize("k", [0, 3, 5])
def test_an_episode_after_a_given_prefix_is_the_oracles_with_those_turns_unsampled(micro_policy, k):
    """The worker starting after the oracle's first k turns, driven by a model that emits the
    oracle's other turns, records the oracle's replayed episode (layout, actions, reward), except
    that the first k turns' tokens are not sampled (mask 0)."""
    fmt, turns = micro_policy.chat, _oracle(micro_policy.chat)
    assert max(map(len, turns)) <= CFG.max_new_tokens       # nothing is cut: the mask counts whole turns
    forced = Policy(ForcedTokens([t for turn in turns[k:] for t in turn], len(micro_policy.tokenizer)),
                    micro_policy.tokenizer, "forced")
    got = rollout_batch(forced, [(TASK, 0, turns[:k])], CFG)[0]
    want = replay_turns(fmt, TASK, turns, CFG)
    for key in ("ids", "attn", "pos", "actions", "reward", "end_reason", "writes"):
        assert getattr(got, key) == getattr(want, key), key
    given = sum(map(len, turns[:k]))
    sampled = [j for j, m in enumerate(want.mask) if m]
    assert got.mask == [0 if j in set(sampled[:given]) else m for j, m in enumerate(want.mask)]
    assert got.reward == 1.0 and got.prefix_turns == k and got.n_sampled == want.n_sampled - given


def test_a_prefix_that_ends_the_episode_is_refused(micro_policy):
    turns = _oracle(micro_policy.chat)
    with pytest.raises(ValueError, match="ends the episode"):
        rollout_batch(micro_policy, [(TASK, 0, turns)], CFG)
    with pytest.raises(ValueError, match="ends the episode"):   # out of turns inside the prefix
        rollout_batch(micro_policy, [(TASK, 0, turns[:3])], RolloutConfig(max_turns=3, source="eval-world:3"))


def test_prefix_length_is_uniform_up_to_the_fraction_of_all_but_the_last_two_turns():
    rng = np.random.default_rng(0)
    for n, fraction in ((9, 0.5), (7, 1.0), (8, 0.1), (2, 1.0), (1, 1.0)):
        top = math.floor(fraction * max(0, n - 2))
        draws = [prefix_length(n, fraction, rng) for _ in range(400)]
        assert set(draws) == set(range(top + 1)), (n, fraction)


def test_the_fraction_falls_linearly_from_its_start_to_zero_at_the_last_step():
    assert [prefix_fraction(0.8, s, 5) for s in range(1, 6)] == pytest.approx([0.8, 0.6, 0.4, 0.2, 0.0])
    assert prefix_fraction(1.0, 1, 1) == 0.0
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError):
            prefix_fraction(bad, 1, 5)
        with pytest.raises(ValueError, match="oracle_prefix"):
            TrainConfig.from_profile("smoke", oracle_prefix=bad)


def test_oracle_prefixes_are_each_tasks_first_oracle_turns(micro_policy):
    data = load_source("eval-world:3")
    ids = RetailEnv("eval-world:3").task_ids(None)[:12]
    got = oracle_prefixes(micro_policy.chat, data.tasks, data.db.tables["products"], ids, 1.0,
                          np.random.default_rng(1))
    for tid, prefix in zip(ids, got):
        turns = oracle_turns(micro_policy.chat, data.tasks[tid], data.db.tables["products"])
        assert prefix == turns[:len(prefix)] and len(prefix) <= len(turns) - 2
    assert len({len(p) for p in got}) > 1


def test_step_prefixes_are_off_by_default_and_drawn_from_seed_and_step(micro_policy):
    cfg = TrainConfig.from_profile("smoke", oracle_prefix=1.0, steps=3)
    run = SimpleNamespace(cfg=cfg, policy=micro_policy, seed=0)
    ids = RetailEnv(cfg.source).task_ids("train")[:8]
    first = train_mod.step_prefixes(run, ids, 1)
    assert first == train_mod.step_prefixes(run, ids, 1) and any(first)
    assert train_mod.step_prefixes(run, ids, 3) == [[]] * 8                   # the last step: from scratch
    assert train_mod.step_prefixes(SimpleNamespace(cfg=TrainConfig.from_profile("smoke"), policy=micro_policy,
                                                   seed=0), ids, 1) is None


def test_a_run_with_the_curriculum_logs_each_groups_prefix(tmp_path):
    cfg = TrainConfig.from_profile("smoke", bc_episodes=0, steps=2, groups_per_step=3, group_size=2,
                                   minibatch_size=6, max_turns=12, max_tokens=3072, max_new_tokens=4,
                                   val_tasks=1, val_every=2, oracle_prefix=1.0)
    train_mod.train(cfg, tmp_path, seed=0, log=lambda m: None)
    rows = [r for r in read_metrics(tmp_path) if r["kind"] == "train"]
    data = load_source(cfg.source)
    first = [len(oracle_script(data.tasks[t], data.db.tables["products"])) - 2 for t in rows[0]["tasks"]]
    assert all(0 <= k <= top for k, top in zip(rows[0]["prefix_turns"], first))
    assert rows[1]["prefix_turns"] == [0, 0, 0]
