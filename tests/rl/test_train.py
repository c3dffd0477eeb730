import dataclasses

import numpy as np
import pytest
import torch

from sinkflex_lib.rl import train as train_mod
from sinkflex_lib.rl.runstate import read_metrics
from sinkflex_lib.rl.config import PROFILES, TrainConfig
from sinkflex_lib.rl.train import train

TINY = dict(bc_episodes=2, bc_epochs=1, steps=2, groups_per_step=2, group_size=2, minibatch_size=2,
            ppo_epochs=2, max_turns=2, max_tokens=400, max_new_tokens=8, val_tasks=1, val_every=1,
            ckpt_every=1, traj_window=8)

TIMING = {"rollout_s", "update_s", "step_s", "tokens_per_s", "peak_mem_gb", "elapsed_s", "val_s", "seconds",
          "rollout_forward_s", "rollout_sample_s", "rollout_env_s"}


@pytest.fixture
def fake_rewards(monkeypatch):
    """Random-weight policies never succeed; give rewards from the sampled text so that
    groups have spread and the update path runs (deterministic in the rollout)."""
    real = train_mod.rollout_batch

    def patched(*a, **k):
        rs = real(*a, **k)
        for r in rs:
            r.reward = float(sum(t for t, m in zip(r.ids, r.mask) if m) % 2)
        return rs

    monkeypatch.setattr(train_mod, "rollout_batch", patched)


def _rows(path):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(path)
            if r["kind"] in ("train", "val")]


def test_smoke_pipeline_logs_the_metrics(tmp_path, fake_rewards):
    cfg = TrainConfig.from_profile("smoke", **TINY)
    res = train(cfg, tmp_path, seed=0, log=lambda m: None)
    rows = read_metrics(tmp_path)
    kinds = [r["kind"] for r in rows]
    assert kinds[0] == "config" and "warm_start" in kinds and kinds.count("train") == 2
    assert rows[0]["threads"] is None and rows[0]["torch_threads"] == torch.get_num_threads() >= 1  # picked
    tr = [r for r in rows if r["kind"] == "train"]
    for key in ("reward_mean", "reward_std", "zero_spread_frac", "kl", "entropy", "clip_frac_low",
                "clip_frac_high", "response_length", "turns", "tool_call_rate", "tool_error_rate",
                "tokens_per_s", "step_s", "peak_mem_gb", "training_score", "trajectory_reward"):
        assert key in tr[-1], key
    assert sum(r["minibatches"] for r in tr) > 0 and all(r["torch_threads"] >= 1 for r in tr)
    assert [r["step"] for r in rows if r["kind"] == "val"] == [0, 1, 2]
    val0 = next(r for r in rows if r["kind"] == "val")
    assert val0["val_oracle_reward"] == 1.0 and val0["val_oracle_in_budget_reward"] == 0.0   # 3 turns: too few
    assert (tmp_path / "checkpoint" / "model.safetensors").exists()
    assert np.isfinite(res.val_end)


TIMING_KEYS = ("tokens_per_s", "rollout_s", "update_s", "step_s", "elapsed_s", "peak_mem_gb", "wall_s")


@pytest.mark.parametrize("beta, anchor_weight", [(0.0, 0.0), (0.05, 0.0), (0.0, 1.0)])
def test_resume_continues_identically(tmp_path, fake_rewards, beta, anchor_weight):
    """Bit-identical, on one thread (two threads' repeatability is tested where its one race was
    found: the backward pass, tests/test_machine.py). With beta > 0 the KL reference (the weights
    after the warm start) must come back too; with the anchor term, its episodes."""
    threads = torch.get_num_threads()
    try:
        cfg = TrainConfig.from_profile("smoke", **TINY, threads=1, beta=beta, anchor_weight=anchor_weight)
        straight = train(cfg, tmp_path / "a", seed=3, log=lambda m: None)
        train(cfg, tmp_path / "b", seed=3, log=lambda m: None, stop_after=1)
        resumed = train(cfg, tmp_path / "b", seed=3, log=lambda m: None, resume=True)
    finally:
        torch.set_num_threads(threads)
    ra, rb = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert len(ra) == len(rb) == 5  # val 0, train 1, val 1, train 2, val 2
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for k in x:
            if k not in TIMING_KEYS:
                assert x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]), (x["step"], k)  # NaN == NaN
    sa, sb = straight.policy.model.state_dict(), resumed.policy.model.state_dict()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    anchored = [r["anchor_loss"] for r in ra if r["kind"] == "train" and r["minibatches"]]
    assert anchored and all((a > 0) == (anchor_weight > 0) for a in anchored), anchored   # NaN > 0 is False


def test_cli_rejects_unknown_profile():
    with pytest.raises(ValueError, match="profile must be one of"):
        TrainConfig.from_profile("huge")


def test_profile_steps_none_keeps_the_profiles_and_a_count_below_one_is_refused():
    assert TrainConfig.from_profile("cpu", steps=None).steps == PROFILES["cpu"]["steps"]
    assert TrainConfig.from_profile("cpu", steps=3).steps == 3
    for bad in (0, -2):
        with pytest.raises(ValueError, match="steps must be at least 1"):
            TrainConfig.from_profile("cpu", steps=bad)


def test_gpu_profile_runs_the_papers_setup_only_given_a_local_model(tmp_path, monkeypatch):
    monkeypatch.delenv("SINKFLEX_POLICY", raising=False)
    tiny = TrainConfig.from_profile("gpu")
    assert tiny.policy == "base-tiny" and tiny.chat_format == "auto" and tiny.lora is None
    monkeypatch.setenv("SINKFLEX_POLICY", str(tmp_path))
    paper = TrainConfig.from_profile("gpu")
    assert (paper.policy, paper.chat_format, paper.lora, paper.dtype) == (str(tmp_path), "harmony", 32, "bfloat16")
    assert (paper.source, paper.train_split, paper.val_source, paper.val_split, paper.bc_episodes) == (
        "tau2", "train", "tau2", "test", 0)
    assert TrainConfig.from_profile("cpu").policy == "base-tiny"      # other profiles ignore it
    monkeypatch.setenv("SINKFLEX_POLICY", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="SINKFLEX_POLICY"):
        TrainConfig.from_profile("gpu")


def test_groups_of_splits_rollouts_into_their_groups_in_order():
    assert train_mod.groups_of(list(range(6)), 2) == [[0, 1], [2, 3], [4, 5]]
    assert train_mod.groups_of([], 8) == []


def test_train_kinds_restricts_the_training_tasks_and_refuses_unknown_kinds():
    from sinkflex_lib.envs.data import load_source

    tasks = load_source("mini").tasks
    every = train_mod.training_tasks(TrainConfig.from_profile("smoke"))
    some = train_mod.training_tasks(TrainConfig.from_profile("smoke", train_kinds=["cancel", "refuse"]))
    assert some and set(some) < set(every)
    assert some == [t for t in every if tasks[t]["description"]["purpose"] in ("cancel", "refuse")]
    with pytest.raises(ValueError, match="train_kinds"):
        train_mod.training_tasks(TrainConfig.from_profile("smoke", train_kinds=["teleport"]))


def test_kind_phases_draw_each_step_from_one_kind_in_turn(tmp_path, fake_rewards):
    from sinkflex_lib.envs.data import load_source

    kind = lambda t: load_source("mini").tasks[t]["description"]["purpose"]
    cfg = TrainConfig.from_profile("smoke", **{**TINY, "steps": 5}, kind_phase_steps=2, train_kinds=["refuse", "cancel"])
    assert [{kind(t) for t in pool} for pool in train_mod.task_pools(cfg, train_mod.training_tasks(cfg))] == [
        {"refuse"}, {"cancel"}]
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    drawn = [{kind(t) for t in r["tasks"]} for r in read_metrics(tmp_path) if r["kind"] == "train"]
    assert drawn == [{"refuse"}, {"refuse"}, {"cancel"}, {"cancel"}, {"refuse"}]
    every = TrainConfig.from_profile("smoke", kind_phase_steps=1)   # no train_kinds: every kind, sorted by name
    pools = train_mod.task_pools(every, train_mod.training_tasks(every))
    assert [kind(p[0]) for p in pools] == sorted({kind(t) for t in train_mod.training_tasks(every)})
    assert train_mod.task_pools(dataclasses.replace(every, kind_phase_steps=0), ["cancel_000", "refuse_000"]) == [
        ["cancel_000", "refuse_000"]]
    with pytest.raises(ValueError, match="a kind's phase has"):   # a kind with fewer tasks than a step draws
        train_mod.training_tasks(TrainConfig.from_profile("smoke", kind_phase_steps=1, train_tasks=[
            "cancel_000", "refuse_000", "refuse_001"]))
    with pytest.raises(ValueError, match="kind_phase_steps"):
        TrainConfig.from_profile("smoke", kind_phase_steps=-1)


def test_world_steps_draw_each_step_from_a_fresh_training_world_in_turn(tmp_path, fake_rewards):
    from sinkflex_lib.envs.data import load_source

    cfg = TrainConfig.from_profile("smoke", **{**TINY, "steps": 5}, source="train-world:40", world_steps=2,
                                   kind_phase_steps=1, train_kinds=["refuse", "cancel"])
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    rows = [r for r in read_metrics(tmp_path) if r["kind"] == "train"]
    assert [r["source"] for r in rows] == ["train-world:40"] * 2 + ["train-world:41"] * 2 + ["train-world:42"]
    for row, kind in zip(rows, ["refuse", "cancel", "refuse", "cancel", "refuse"]):   # kind phases within worlds
        world = load_source(row["source"])
        assert set(row["tasks"]) <= set(world.splits["train"])
        assert {world.tasks[t]["description"]["purpose"] for t in row["tasks"]} == {kind}
    with pytest.raises(ValueError, match="is from 'train-world:41'"):   # ids of other worlds name other tasks
        train_mod.write_tasks_with_spread(rows, "train-world:40", 5)
    for bad, match in [(dict(world_steps=-1), "world_steps must be"), (dict(world_steps=1), "train-world:<seed>"),
                       (dict(world_steps=1, source="eval-world:3"), "train-world:<seed>"),
                       (dict(world_steps=1, source="train-world:3", train_tasks=["cancel_000"]), "train_tasks")]:
        with pytest.raises(ValueError, match=match):
            TrainConfig.from_profile("smoke", **bad)


def test_train_tasks_fixes_the_training_tasks_and_refuses_unknown_ids_or_too_few():
    cfg = TrainConfig.from_profile("smoke", train_tasks=["refuse_000", "cancel_001", "cancel_000"])
    assert train_mod.training_tasks(cfg) == ["refuse_000", "cancel_001", "cancel_000"]
    both = TrainConfig.from_profile("smoke", train_tasks=["refuse_000", "cancel_001", "cancel_000"],
                                    train_kinds=["cancel"])
    assert train_mod.training_tasks(both) == ["cancel_001", "cancel_000"]
    with pytest.raises(ValueError, match="train_tasks"):
        train_mod.training_tasks(TrainConfig.from_profile("smoke", train_tasks=["cancel_000", "teleport_9"]))
    for bad in ([], ["cancel_000", "cancel_000", "refuse_000"]):
        with pytest.raises(ValueError, match="train_tasks"):
            train_mod.training_tasks(TrainConfig.from_profile("smoke", train_tasks=bad))
    same_world = TrainConfig.from_profile("smoke", val_source="mini", val_tasks=11)
    held_out = train_mod.validation_tasks(same_world)[:2]
    with pytest.raises(ValueError, match="validation tasks"):
        train_mod.training_tasks(dataclasses.replace(same_world, train_tasks=held_out))
    with pytest.raises(ValueError, match="draws 8 distinct tasks"):   # through train_kinds too
        train_mod.training_tasks(TrainConfig.from_profile("smoke", sample_groups=8, train_tasks=[
            "cancel_000", "cancel_001", "refuse_000"] + [f"refuse_00{i}" for i in range(1, 6)], train_kinds=["refuse"]))
    with pytest.raises(ValueError, match="draws 2 distinct tasks"):   # the smoke profile rolls out 2 groups a step
        train_mod.training_tasks(TrainConfig.from_profile("smoke", train_tasks=["cancel_000"]))


def test_a_run_on_fixed_tasks_trains_on_all_of_them_every_step(tmp_path, fake_rewards):
    fixed = ["cancel_000", "refuse_000", "cancel_001"]
    cfg = TrainConfig.from_profile("smoke", **TINY, sample_groups=2).on_fixed_tasks(fixed, 2, shuffle_rewards=True)
    assert (cfg.groups_per_step, cfg.sample_groups, cfg.shuffle_rewards, cfg.val_every) == (3, None, True, 2)
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    rows = read_metrics(tmp_path)
    assert [sorted(r["tasks"]) for r in rows if r["kind"] == "train"] == [sorted(fixed)] * 2
    assert [r["step"] for r in rows if r["kind"] == "val"] == [0, 2] and rows[0]["shuffle_rewards"] is True
    assert cfg.on_fixed_tasks(fixed[:2], 5).shuffle_rewards is False


def test_write_tasks_with_spread_takes_the_first_write_tasks_whose_group_had_spread():
    rows = [{"tasks": ["refuse_000", "cancel_000", "cancel_001"], "group_rewards": [[0, 1], [1, 1], [0, 1]]},
            {"tasks": ["cancel_000", "cancel_001", "modify_address_000"], "group_rewards": [[1, 0], [1, 0], [0, 1]]}]
    assert train_mod.write_tasks_with_spread(rows, "mini", 5) == ["cancel_001", "cancel_000", "modify_address_000"]
    assert train_mod.write_tasks_with_spread(rows, "mini", 1) == ["cancel_001"]
    assert train_mod.write_tasks_with_spread([{"kind": "val", "step": 0}] + rows, "mini", 1) == ["cancel_001"]


def test_learning_check_tasks_fill_up_with_the_runs_other_tasks_only_where_spread_ran_out():
    rows = [{"kind": "val", "step": 0, "tasks": ["info_000"]},
            {"tasks": ["refuse_000", "cancel_000", "cancel_001"], "group_rewards": [[0, 1], [1, 1], [0, 1]]},
            {"tasks": ["cancel_001", "refuse_001"], "group_rewards": [[0, 0], [1, 1]]}]
    assert train_mod.learning_check_tasks(rows, "mini", 1) == (["cancel_001"], 1)
    assert train_mod.learning_check_tasks(rows, "mini", 3) == (["cancel_001", "refuse_000", "cancel_000"], 1)
    assert train_mod.learning_check_tasks(rows, "mini", 9) == (
        ["cancel_001", "refuse_000", "cancel_000", "refuse_001"], 1)   # every task of the run, once


def test_shuffled_rewards_reach_the_advantages_permuted_within_their_groups(micro_policy, monkeypatch):
    """The control without signal: the advantages are computed from each group's own rewards in
    another order (the same multiset per group), and the real order is left alone otherwise."""
    from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

    seen, real = [], train_mod.group_advantages
    monkeypatch.setattr(train_mod, "group_advantages", lambda r, *a, **k: seen.append(r.clone()) or real(r, *a, **k))
    rs = rollout_batch(micro_policy, [("cancel_000", 0)] * 8, RolloutConfig(max_turns=1, max_tokens=400, max_new_tokens=4),
                       torch.Generator().manual_seed(1))
    rewards = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    for r, x in zip(rs, rewards):
        r.reward = x
    for shuffle in (False, True):
        cfg = TrainConfig.from_profile("smoke", group_size=4, minibatch_size=8, shuffle_rewards=shuffle, lr=0.0)
        opt = torch.optim.SGD(micro_policy.model.parameters(), lr=0.0)
        train_mod.grpo_update(micro_policy, opt, rs, cfg, np.random.default_rng(3))
    plain, shuffled = seen
    assert plain.tolist() == rewards and [r.reward for r in rs] == rewards
    assert shuffled.tolist() != rewards
    assert [sorted(shuffled[k:k + 4].tolist()) for k in (0, 4)] == [sorted(rewards[k:k + 4]) for k in (0, 4)]


def test_negative_advantages_reach_the_update_scaled(micro_policy):
    """negative_advantage_scale=0 drops the pushes down: with group-normalised advantages the
    positive and negative halves weigh the same, so the mean |advantage| halves."""
    from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

    rs = rollout_batch(micro_policy, [("cancel_000", 0)] * 8, RolloutConfig(max_turns=1, max_tokens=400, max_new_tokens=4),
                       torch.Generator().manual_seed(1))
    for r, x in zip(rs, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]):
        r.reward = x
    seen = {}
    for scale in (1.0, 0.0):
        cfg = TrainConfig.from_profile("smoke", group_size=4, minibatch_size=8, negative_advantage_scale=scale, lr=0.0)
        opt = torch.optim.SGD(micro_policy.model.parameters(), lr=0.0)
        seen[scale] = train_mod.grpo_update(micro_policy, opt, rs, cfg, np.random.default_rng(3))["adv_abs_mean"]
    assert seen[0.0] == pytest.approx(seen[1.0] / 2, rel=1e-6) and seen[0.0] > 0


def test_validation_on_a_split_takes_every_task_of_it():
    cfg = TrainConfig.from_profile("smoke", val_source="mini", val_split="test")
    from sinkflex_lib.envs import RetailEnv

    assert train_mod.validation_tasks(cfg) == RetailEnv("mini").task_ids("test")


def test_warm_start_refuses_a_harmony_policy(tmp_path):
    from sinkflex_lib.rl.policy import build_policy

    pytest.importorskip("openai_harmony")
    policy = build_policy("micro", format="harmony")
    with pytest.raises(ValueError, match="bc_episodes=0"):
        train(TrainConfig.from_profile("smoke"), tmp_path, policy=policy)



def test_informative_groups_keeps_the_first_groups_with_reward_spread():
    from sinkflex_lib.rl.rollout import Rollout

    def group(rewards, name):
        out = []
        for r in rewards:
            x = Rollout(name, 0)
            x.reward = r
            out.append(x)
        return out

    rs = group([0, 0], "a") + group([1, 0], "b") + group([1, 1], "c") + group([0, 1], "d") + group([1, 0], "e")
    kept = train_mod.informative_groups(rs, group_size=2, limit=2)
    assert [x.task_id for x in kept] == ["b", "b", "d", "d"]
    assert train_mod.informative_groups(group([1, 1, 1], "z"), 3, 4) == []


def test_dynamic_sampling_trains_only_on_groups_with_spread(tmp_path, fake_rewards):
    cfg = TrainConfig.from_profile("smoke", **{**TINY, "sample_groups": 4, "groups_per_step": 1,
                                               "minibatch_size": 8, "ppo_epochs": 1})
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    rows = [r for r in read_metrics(tmp_path) if r["kind"] == "train"]
    assert any(r["update_groups"] for r in rows)
    for r in rows:
        assert len(r["tasks"]) == 4                    # four groups rolled out
        groups_with_spread = round(4 * (1 - r["zero_spread_frac"]))
        assert [len(g) for g in r["group_rewards"]] == [cfg.group_size] * 4      # each task's group, in order
        assert sum(len(set(g)) > 1 for g in r["group_rewards"]) == groups_with_spread
        assert r["update_groups"] == min(1, groups_with_spread)
        assert r["minibatches"] == r["update_groups"]  # one minibatch holds the kept group


def test_one_update_raises_the_rewarded_episode_and_lowers_the_other(micro_policy):
    """The sign of the GRPO update: after one step on a group of two episodes with rewards 1
    and 0, the log-likelihood of the first episode's sampled tokens rises and the second's falls."""
    from sinkflex_lib.rl.rollout import RolloutConfig, collate, rollout_batch, token_logprobs

    cfg = TrainConfig.from_profile("smoke", group_size=2, minibatch_size=2, ppo_epochs=1, lr=1e-3)
    rs = rollout_batch(micro_policy, [("cancel_000", 0), ("cancel_000", 0)],
                       RolloutConfig(max_turns=2, max_tokens=500, max_new_tokens=8), torch.Generator().manual_seed(1))
    rs[0].reward, rs[1].reward = 1.0, 0.0

    def loglik():
        batch = collate(rs, micro_policy.pad_id)
        with torch.no_grad():
            logp, _ = token_logprobs(micro_policy.model.eval(), batch)
        return (logp * batch["mask"]).sum(1)

    before = loglik()
    opt = torch.optim.AdamW(micro_policy.model.parameters(), lr=cfg.lr)
    train_mod.grpo_update(micro_policy, opt, rs, cfg, np.random.default_rng(0))
    after = loglik()
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_policy_flag_on_the_gpu_profile(tmp_path, monkeypatch):
    """--policy DIR on the gpu profile is the paper's setup; --policy NAME ignores $SINKFLEX_POLICY."""
    seen = {}

    def stop_before_training(cfg, *args, **kwargs):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(train_mod, "train", stop_before_training)
    monkeypatch.setenv("SINKFLEX_POLICY", str(tmp_path / "missing"))
    for policy, fmt, lora in ((str(tmp_path), "harmony", 32), ("base-tiny", "auto", None)):
        seen.clear()
        with pytest.raises(SystemExit):
            train_mod.main(["--profile", "gpu", "--out", str(tmp_path / "o"), "--policy", policy])
        cfg = seen["cfg"]
        assert (cfg.policy, cfg.chat_format, cfg.lora) == (policy, fmt, lora)


def test_set_flag_overrides_config_fields_and_refuses_bad_ones(tmp_path, monkeypatch, capsys):
    seen = {}

    def stop_before_training(cfg, *args, **kwargs):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(train_mod, "train", stop_before_training)
    with pytest.raises(SystemExit):
        train_mod.main(["--profile", "smoke", "--out", str(tmp_path), "--set", "beta=0.5", "--set", "shuffle_rewards=true"])
    assert (seen["cfg"].beta, seen["cfg"].shuffle_rewards) == (0.5, True)
    with pytest.raises(SystemExit) as err:
        train_mod.main(["--profile", "smoke", "--out", str(tmp_path), "--set", "shuffle_rewards=maybe"])
    assert err.value.code == 2 and "shuffle_rewards: expected bool" in capsys.readouterr().err


def test_summary_of_a_harmony_result_leaves_the_policy_out():
    pytest.importorskip("openai_harmony")
    from sinkflex_lib.rl.policy import build_policy

    res = train_mod.TrainResult("out", "cpu", 1.0, 0.0, 0.5, build_policy("micro", format="harmony"))
    assert res.summary() == {"out_dir": "out", "device": "cpu", "seconds": 1.0, "val_start": 0.0, "val_end": 0.5,
                             "processes": 1}


def test_the_learning_rate_warms_up_linearly_over_the_first_grpo_steps(tmp_path, fake_rewards, monkeypatch):
    seen, real = [], train_mod.grpo_update

    def spy(policy, opt, *args, **kwargs):
        seen.append(opt.param_groups[0]["lr"])
        return real(policy, opt, *args, **kwargs)

    monkeypatch.setattr(train_mod, "grpo_update", spy)
    cfg = TrainConfig.from_profile("smoke", **{**TINY, "steps": 3}, lr=1e-3, warmup_steps=2)
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    assert seen == pytest.approx([5e-4, 1e-3, 1e-3])
    assert train_mod.lr_at(TrainConfig(lr=2e-4, warmup_steps=0), 1) == 2e-4


def test_write_credit_reaches_the_advantages_and_the_logged_score_stays_tau2s(tmp_path, monkeypatch):
    """With write_credit the groups are ranked by the credited reward (here: every unsolved episode
    made its task's gold write exactly, so it trains on 0.5), while reward_mean stays tau2's 0/1."""
    from sinkflex_lib.envs.actions import ToolCall
    from sinkflex_lib.envs.data import load_source
    from sinkflex_lib.envs.reward import gold_writes

    cfg = TrainConfig.from_profile("smoke", **{**TINY, "bc_episodes": 0, "steps": 1}, write_credit=0.5)
    tasks, real = load_source(cfg.source).tasks, train_mod.rollout_batch

    def patched(*a, **k):
        rs = real(*a, **k)
        for i, r in enumerate(rs):
            r.reward = float(i % 2)
            r.write_calls = [ToolCall(g["name"], g["arguments"]) for g in gold_writes(tasks[r.task_id])]
        return rs

    seen, adv = [], train_mod.group_advantages
    monkeypatch.setattr(train_mod, "rollout_batch", patched)
    monkeypatch.setattr(train_mod, "group_advantages", lambda r, *a, **k: seen.append(r.clone()) or adv(r, *a, **k))
    train(cfg, tmp_path, seed=0, log=lambda m: None)
    (row,) = [r for r in read_metrics(tmp_path) if r["kind"] == "train"]
    want = [[1.0 if x else (0.5 if gold_writes(tasks[t]) else 0.0) for x in g]
            for t, g in zip(row["tasks"], row["group_rewards"])]
    assert row["reward_mean"] == 0.5 and row["group_rewards"] == [[0.0, 1.0]] * 2
    assert row["trained_reward_mean"] == pytest.approx(np.mean(want))
    assert any(0.5 in g for g in want)   # a write task was drawn, so the credit shows
    assert seen and sorted(seen[0].tolist()) == sorted(x for g in want for x in g)


def _anchor_reference(policy, rows) -> torch.Tensor:
    """Weighted mean NLL of demonstration rows, each scored alone by a plain forward: token t's
    log-prob from the logits at t - 1, weighted by its `old_logp` field (the loss weight)."""
    total, weight = 0.0, 0.0
    for r in rows:
        ids = torch.tensor([r.ids])
        logp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), -1)
        tok = logp.gather(1, ids[0, 1:, None])[:, 0]
        w = torch.tensor(r.old_logp[1:], dtype=tok.dtype)
        total, weight = total - (w * tok).sum(), weight + w.sum()
    return total / weight


def test_the_anchor_loss_is_the_weighted_nll_of_its_steps_own_oracle_episodes(micro_policy):
    cfg = TrainConfig.from_profile("smoke", anchor_weight=1.0, max_tokens=700)
    stream = train_mod.anchor_stream(micro_policy, cfg, seed=2)
    n, step, mb = 2, 3, 1
    first = (step * train_mod.ANCHOR_STRIDE + mb) * n
    rows = [stream.example(first + i, short=False) for i in range(n)]
    assert all(len(r.ids) <= 700 and sum(r.mask) > 0 for r in rows)
    with torch.no_grad():
        got = train_mod.anchor_loss(micro_policy, stream, step, mb, n)
        assert float(got) == pytest.approx(float(_anchor_reference(micro_policy, rows)), rel=1e-5)
        again = train_mod.anchor_loss(micro_policy, train_mod.anchor_stream(micro_policy, cfg, seed=2), step, mb, n)
        other = train_mod.anchor_loss(micro_policy, stream, step, mb + 1, n)
    assert float(again) == float(got) and float(other) != float(got)   # a pure function of its indices
    with pytest.raises(ValueError, match="minibatch"):
        train_mod.anchor_loss(micro_policy, stream, step, train_mod.ANCHOR_STRIDE, n)


def test_the_anchor_adds_its_weighted_gradient_to_the_update(micro_policy):
    """With one minibatch and no clipping, the gradient of the update with anchor weight w is the
    update's without it plus w times the anchor loss's own gradient."""
    from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

    rs = rollout_batch(micro_policy, [("cancel_000", 0)] * 4, RolloutConfig(max_turns=1, max_tokens=400, max_new_tokens=4),
                       torch.Generator().manual_seed(1))
    for r, x in zip(rs, [1.0, 0.0, 0.0, 1.0]):
        r.reward = x
    stream = train_mod.anchor_stream(micro_policy, TrainConfig.from_profile("smoke"), seed=0)
    anchor = lambda m: train_mod.anchor_loss(micro_policy, stream, 1, m, 2)  # noqa: E731
    params = list(micro_policy.model.parameters())
    grads, logged = {}, {}
    for w in (0.0, 0.5):
        cfg = TrainConfig.from_profile("smoke", group_size=4, minibatch_size=4, ppo_epochs=1, lr=0.0,
                                       grad_clip=1e9, anchor_weight=w)
        opt = torch.optim.SGD(params, lr=0.0)
        logged[w] = train_mod.grpo_update(micro_policy, opt, rs, cfg, np.random.default_rng(0),
                                          anchor if w else None)["anchor_loss"]
        grads[w] = [p.grad.clone() for p in params]
    micro_policy.model.train()
    micro_policy.model.zero_grad()
    loss = anchor(0)
    loss.backward()
    assert logged[0.5] == pytest.approx(float(loss.detach()), rel=1e-6) and logged[0.0] != logged[0.0]  # NaN: off
    for g0, g1, p in zip(grads[0.0], grads[0.5], params):
        torch.testing.assert_close(g1, g0 + 0.5 * p.grad, rtol=1e-4, atol=1e-6)
    assert any(p.grad.abs().sum() > 0 for p in params)


def test_anchor_settings_are_checked():
    with pytest.raises(ValueError, match="anchor_weight"):
        TrainConfig(anchor_weight=-0.1)
    with pytest.raises(ValueError, match="anchor_batch"):
        TrainConfig(anchor_weight=1.0, anchor_batch=0)
    TrainConfig(anchor_weight=0.0, anchor_batch=0)   # off: the batch is not read


def test_the_anchor_refuses_a_harmony_policy(tmp_path):
    from sinkflex_lib.rl.policy import build_policy

    pytest.importorskip("openai_harmony")
    policy = build_policy("micro", format="harmony")
    with pytest.raises(ValueError, match="anchor_weight=0"):
        train(TrainConfig.from_profile("smoke", bc_episodes=0, anchor_weight=1.0), tmp_path, policy=policy)


def test_update_minibatches_cuts_each_epochs_permutation_and_groups_them_by_optimizer_step():
    cfg = TrainConfig.from_profile("smoke", minibatch_size=2, ppo_epochs=2, accumulation_steps=3)
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.5, -0.5, 0.0, 0.0])
    steps = train_mod.update_minibatches(8, adv, cfg, np.random.default_rng(4))
    rng = np.random.default_rng(4)
    orders = [rng.permutation(8), rng.permutation(8)]
    expect = [o[k:k + 2].tolist() for o in orders for k in range(0, 8, 2)]
    expect = [mb for mb in expect if adv[mb].abs().sum() > 0]      # beta 0: all-zero minibatches carry nothing
    flat = [idx.tolist() for step in steps for idx in step]
    assert flat == expect and [len(s) for s in steps] == [len(expect[k:k + 3]) for k in range(0, len(expect), 3)]
    with_kl = train_mod.update_minibatches(8, adv, dataclasses.replace(cfg, beta=0.1), np.random.default_rng(4))
    assert sum(len(s) for s in with_kl) == 8                          # beta > 0: the KL term has a gradient everywhere


def test_accumulation_steps_take_one_optimizer_step_on_the_mean_of_the_minibatches_gradients(micro_policy):
    """accumulation_steps covering the update: one optimizer step whose gradient is the mean of
    each minibatch's own GRPO-loss gradient (computed here from `grpo_loss` directly)."""
    from sinkflex_lib.grpo import group_advantages, grpo_loss
    from sinkflex_lib.rl.rollout import RolloutConfig, collate, rollout_batch, token_logprobs

    rs = rollout_batch(micro_policy, [("cancel_000", 0)] * 4 + [("refuse_000", 0)] * 4,
                       RolloutConfig(max_turns=1, max_tokens=400, max_new_tokens=6), torch.Generator().manual_seed(1))
    for r, x in zip(rs, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]):
        r.reward = x
    cfg = TrainConfig.from_profile("smoke", group_size=4, minibatch_size=2, ppo_epochs=1, lr=0.0, grad_clip=1e9,
                                   accumulation_steps=8)
    params = list(micro_policy.model.parameters())
    met = train_mod.grpo_update(micro_policy, torch.optim.SGD(params, lr=0.0), rs, cfg, np.random.default_rng(0))
    got = [p.grad.clone() for p in params]

    batch = collate(rs, micro_policy.pad_id)
    adv = group_advantages(batch["reward"], 4)
    order = np.random.default_rng(0).permutation(8)
    minibatches = [idx for idx in (torch.as_tensor(order[k:k + 2]) for k in range(0, 8, 2)) if adv[idx].abs().sum() > 0]
    mean = [torch.zeros_like(p) for p in params]
    for idx in minibatches:
        micro_policy.model.zero_grad()
        sub = {k: v[idx] for k, v in batch.items() if k != "reward"}
        loss, _ = grpo_loss(token_logprobs(micro_policy.model, sub)[0], sub["old_logp"], adv[idx], sub["mask"],
                            clip_low=cfg.clip_low, clip_high=cfg.clip_high, norm_length=float(cfg.max_tokens))
        loss.backward()
        for m, p in zip(mean, params):
            m += (p.grad if p.grad is not None else 0) / len(minibatches)
    assert met["optimizer_steps"] == 1 and met["minibatches"] == len(minibatches) >= 2
    for g, m in zip(got, mean):
        torch.testing.assert_close(g, m, rtol=1e-4, atol=1e-7)
    assert any(m.abs().sum() > 0 for m in mean)
    one_each = train_mod.grpo_update(micro_policy, torch.optim.SGD(params, lr=0.0), rs,
                                     dataclasses.replace(cfg, accumulation_steps=1), np.random.default_rng(0))
    assert one_each["optimizer_steps"] == one_each["minibatches"] == len(minibatches)


def test_accumulation_steps_are_checked():
    with pytest.raises(ValueError, match="accumulation_steps"):
        TrainConfig(accumulation_steps=0)
