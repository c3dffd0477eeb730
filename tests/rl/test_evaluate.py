"""The evaluate command: JSON keys, every task counted, baselines computed independently."""

import dataclasses
import json

import pytest

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.reward import gold_actions
from sinkflex_lib.envs.tools import WRITE_TOOLS
from sinkflex_lib.rl import evaluate as ev
from sinkflex_lib.rl.chat import oracle_transcript
from sinkflex_lib.rl.rollout import RolloutConfig, rollout_batch

from .forced import forced_oracle as _forced_oracle

WORLD = "eval-world:3"


def test_balanced_task_ids_cycle_over_kinds_and_check_n():
    ids = ev.balanced_task_ids(WORLD, 22)
    kinds = [RetailEnv(WORLD).data.tasks[t]["description"]["purpose"] for t in ids]
    assert len(set(kinds)) == 11 and all(kinds.count(k) == 2 for k in set(kinds))
    assert len(ev.balanced_task_ids(WORLD)) == 335
    with pytest.raises(ValueError, match="tasks must be between 1 and 335"):
        ev.balanced_task_ids(WORLD, 336)


def test_tasks_by_kind_partitions_in_order_of_first_appearance():
    tasks = RetailEnv(WORLD).data.tasks
    ids = ev.balanced_task_ids(WORLD, 30)[::-1]
    got = ev.tasks_by_kind(ids, tasks)
    purposes = [tasks[t]["description"]["purpose"] for t in ids]   # independent: the raw field
    assert list(got) == list(dict.fromkeys(purposes))
    for kind, members in got.items():
        assert members == [t for t, p in zip(ids, purposes) if p == kind]
    assert ev.tasks_by_kind([], tasks) == {}


def test_do_nothing_scores_exactly_the_tasks_without_write_or_information():
    ids = ev.balanced_task_ids(WORLD, 44)
    tasks = RetailEnv(WORLD).data.tasks
    got = ev.baseline_rewards(WORLD, ids, "do_nothing", max_turns=16)
    for t in ids:  # independent rule: no gold write and nothing to communicate
        task = tasks[t]
        silent = (not any(a["name"] in WRITE_TOOLS for a in gold_actions(task))
                  and not task["evaluation_criteria"]["communicate_info"])
        assert got[t] == float(silent), t
    assert set(ev.baseline_rewards(WORLD, ids, "oracle", max_turns=16).values()) == {1.0}


def test_evaluate_command_prints_the_json_of_a_micro_policy(capsys):
    assert ev.main(["--policy", "micro", "--world-seed", "3", "--tasks", "11", "--max-turns", "2",
                    "--max-new-tokens", "4", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    for key in ("mean_at_1", "write_mean_at_1", "per_kind", "n_tasks", "do_nothing_mean_at_1",
                "oracle_mean_at_1"):
        assert key in res
    assert res["n_tasks"] == 11 and len(res["per_kind"]) == 11 and len(res["per_task"]) == 11
    assert res["oracle_mean_at_1"] == 1.0
    assert res["oracle_in_budget_mean_at_1"] == 0.0     # every oracle episode needs more than 2 turns
    assert res["do_nothing_mean_at_1"] == pytest.approx(2 / 11)     # one refuse, one transfer task
    assert res["n_write_tasks"] == sum(v["write"] for v in res["per_kind"].values())
    assert res["mean_at_1"] == pytest.approx(sum(res["per_task"].values()) / 11)


def test_the_writes_made_are_counted_per_kind(micro_policy):
    tasks = RetailEnv(WORLD).data.tasks
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256)
    for tid, kind, writes in (("cancel_000", "cancel", {"cancel_pending_order": 1}), ("info_000", "info", {})):
        res = ev.evaluate_policy(_forced_oracle(micro_policy, tasks[tid]), WORLD, [tid], cfg, with_baselines=False)
        assert res["mean_at_1"] == 1.0 and res["writes"] == {kind: writes}
        row = ev.format_table(res).splitlines()[2]
        assert row.startswith(f"| {kind}") and row.endswith(f"| {', '.join(f'{w} {n}' for w, n in writes.items())} |")


def test_failures_are_read_from_the_rollouts_write_calls(micro_policy):
    tasks = RetailEnv(WORLD).data.tasks
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256)
    gold = [a for a in gold_actions(tasks["cancel_000"]) if a["name"] in WRITE_TOOLS]
    res = ev.evaluate_policy(_forced_oracle(micro_policy, tasks["cancel_000"]), WORLD, ["cancel_000"], cfg,
                             with_baselines=False)
    assert res["failures"] == {"per_kind": {"cancel": {"causes": {"solved": 1}, "arguments": {}, "cut_short_writes": {}}},
                               "per_task": {"cancel_000": "solved"}, "per_task_writes": {"cancel_000": "right writes"},
                               "differences": {}}
    rollout = rollout_batch(_forced_oracle(micro_policy, tasks["cancel_000"]), [("cancel_000", 0)],
                            dataclasses.replace(cfg, temperature=0.0, source=WORLD))[0]
    assert [(c.name, c.arguments) for c in rollout.write_calls] == [(a["name"], a["arguments"]) for a in gold]
    # the micro policy's own greedy episodes: every task has a cause, "solved" exactly where it scored 1
    res = ev.evaluate_policy(micro_policy, WORLD, ev.balanced_task_ids(WORLD, 11),
                             RolloutConfig(max_turns=3, max_new_tokens=8), with_baselines=False)
    assert {t: c == "solved" for t, c in res["failures"]["per_task"].items()} == \
        {t: r == 1.0 for t, r in res["per_task"].items()}
    assert set(res["failures"]["differences"]) == \
        {t for t, w in res["failures"]["per_task_writes"].items() if w == "wrong arguments"}
    table = ev.format_failures_table(res["failures"]).splitlines()
    assert len(table) == 2 + 11 and sum(sum(r["causes"].values()) for r in res["failures"]["per_kind"].values()) == 11


def test_causes_are_counted_over_the_write_tasks_and_the_others(micro_policy):
    res = ev.evaluate_policy(micro_policy, WORLD, ev.balanced_task_ids(WORLD, 11),
                             RolloutConfig(max_turns=3, max_new_tokens=8), with_baselines=False)
    groups = ev.causes_by_group(res, WORLD)
    assert list(groups["write tasks"]) == list(groups["other tasks"]) == list(ev.CAUSES)
    # against summarize's own counts and means: each task once, "solved" where it scored 1
    assert sum(groups["write tasks"].values()) == res["n_write_tasks"] > 0
    assert sum(groups["other tasks"].values()) == res["n_tasks"] - res["n_write_tasks"] > 0
    assert groups["write tasks"]["solved"] == round(res["write_mean_at_1"] * res["n_write_tasks"])
    assert groups["write tasks"]["solved"] + groups["other tasks"]["solved"] == round(res["mean_at_1"] * res["n_tasks"])


def test_failed_calls_are_the_rollouts_tool_and_parse_errors(micro_policy):
    tasks = RetailEnv(WORLD).data.tasks
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256)
    solved = ev.evaluate_policy(_forced_oracle(micro_policy, tasks["cancel_000"]), WORLD, ["cancel_000"], cfg,
                                with_baselines=False)
    assert solved["per_task_failed_calls"] == {"cancel_000": 0}
    assert ev.solved_by_failed_calls(solved) == {"no failed call": {"tasks": 1, "solved": 1},
                                                 "a failed call": {"tasks": 0, "solved": 0}}
    # a look-up of an order that does not exist, before the oracle's own: answered with an error,
    # the episode goes on as the oracle's and is solved
    wrong = '{"name": "get_order_details", "arguments": {"order_id": "#W0000000"}}'
    recovered = ev.evaluate_policy(_forced_oracle(micro_policy, tasks["cancel_000"], {2: wrong}), WORLD,
                                   ["cancel_000"], cfg, with_baselines=False)
    assert recovered["per_task_failed_calls"] == {"cancel_000": 1} and recovered["tool_errors"] == 1
    assert ev.solved_by_failed_calls(recovered) == {"no failed call": {"tasks": 0, "solved": 0},
                                                    "a failed call": {"tasks": 1, "solved": 1}}
    ids, short = ev.balanced_task_ids(WORLD, 11), RolloutConfig(max_turns=3, max_new_tokens=8)
    res = ev.evaluate_policy(micro_policy, WORLD, ids, short, with_baselines=False)
    rollouts = rollout_batch(micro_policy, [(t, 0) for t in ids], dataclasses.replace(short, temperature=0.0, source=WORLD))
    assert res["per_task_failed_calls"] == {r.task_id: r.tool_errors + r.parse_errors for r in rollouts}
    split = ev.solved_by_failed_calls(res)
    assert split["no failed call"]["tasks"] + split["a failed call"]["tasks"] == 11
    assert split["a failed call"]["tasks"] == sum(1 for r in rollouts if r.tool_errors + r.parse_errors)
    assert split["no failed call"]["solved"] + split["a failed call"]["solved"] == round(res["mean_at_1"] * 11)


def test_solved_changes_name_the_tasks_gained_and_lost_with_the_other_policys_cause():
    before = {"failures": {"per_task": {"a": "solved", "b": "no write", "c": "solved", "d": "out of turns"}}}
    after = {"failures": {"per_task": {"a": "wrong arguments", "b": "solved", "c": "solved", "d": "no write"}}}
    assert ev.solved_changes(before, after) == {"gained": {"b": "no write"}, "lost": {"a": "wrong arguments"}}
    assert ev.solved_changes(after, before) == {"gained": {"a": "wrong arguments"}, "lost": {"b": "no write"}}
    with pytest.raises(ValueError, match="different tasks"):
        ev.solved_changes(before, {"failures": {"per_task": {"a": "solved"}}})


def test_the_oracle_within_the_budgets_is_capped_exactly_where_the_episode_does_not_fit(micro_policy):
    """Independent rule on the oracle's token counts: every turn fits max_new_tokens and every
    observation leaves room for a full turn -> 1; the episode runs out of tokens or turns -> 0
    (a turn cut at max_new_tokens may still pass: the scripted user can accept a cut request)."""
    ids = ev.balanced_task_ids(WORLD, 33)
    fmt = micro_policy.chat
    for cfg, capped in ((RolloutConfig(max_turns=16, max_tokens=2048, max_new_tokens=64), True),
                        (RolloutConfig(max_turns=16, max_tokens=3072, max_new_tokens=128), False)):
        got = ev.oracle_in_budget_rewards(fmt, WORLD, ids, cfg)
        zeros = 0
        for t in ids:
            prompt, turns = oracle_transcript(RetailEnv(WORLD), t)
            acts = [fmt.completion(a) for a, _ in turns]
            n, out_of_tokens = len(fmt.encode(prompt)), False
            for act, (_, obs) in zip(acts[:-1], turns):
                n += len(act) + len(fmt.encode(obs))
                out_of_tokens |= n + cfg.max_new_tokens + 1 > cfg.max_tokens
            if out_of_tokens or len(turns) > cfg.max_turns:
                assert got[t] == 0.0, t
                zeros += 1
            elif max(map(len, acts)) <= cfg.max_new_tokens:
                assert got[t] == 1.0, t
        assert (zeros > 0) == capped


@pytest.mark.parametrize("argv, says", [
    (["--policy", "micro", "--world-seed", "3", "--source", "mini"], "not allowed with"),
    (["--policy", "/no/such/dir", "--tasks", "0"], "tasks must be between"),   # before the policy loads
    (["--policy", "micro", "--world-seed", "-1"], "world seed must be"),
    (["--policy", "/no/such/dir", "--tasks", "3"], "existing local model directory"),
])
def test_evaluate_refuses_bad_arguments_with_a_message(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        ev.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_success():
    """Independent reference: enumerate every k-subset of n episodes, c of them successes."""
    from itertools import combinations

    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(outcomes, k))
                assert ev.pass_at_k(n, c, k) == pytest.approx(sum(map(any, subsets)) / len(subsets))
    for bad in ((4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)):
        with pytest.raises(ValueError, match="need 0 <= c <= n"):
            ev.pass_at_k(*bad)


def test_sampled_successes_plays_every_task_samples_times_in_batches(monkeypatch):
    from sinkflex_lib.rl.rollout import Rollout

    ids = ev.balanced_task_ids(WORLD, 5)
    wins_of = {t: i % 4 for i, t in enumerate(ids)}        # task i succeeds in its first i % 4 samples
    seen, batches = {t: 0 for t in ids}, []

    def fake_rollout_batch(policy, specs, cfg, gen):
        assert cfg.temperature == 1.0 and cfg.source == WORLD and all(s == 0 for _, s in specs)
        batches.append(len(specs))
        out = []
        for t, s in specs:
            out.append(Rollout(t, s, reward=float(seen[t] < wins_of[t])))
            seen[t] += 1
        return out

    monkeypatch.setattr(ev, "rollout_batch", fake_rollout_batch)
    lines = []
    got = ev.sampled_successes(None, WORLD, ids, 3, RolloutConfig(temperature=1.0), batch=4, log=lines.append)
    assert got == {t: min(w, 3) for t, w in wins_of.items()}
    assert batches == [4, 4, 4, 3] and len(lines) == 4 and lines[-1].startswith("sampled 15/15 episodes")
    for bad in (dict(samples=0), dict(samples=2, batch=0), dict(samples=2, cfg=RolloutConfig(temperature=0.0))):
        with pytest.raises(ValueError, match="need samples >= 1"):
            ev.sampled_successes(None, WORLD, ids, **{"cfg": None, **bad})


def test_the_forced_oracle_succeeds_in_every_sample(micro_policy):
    tid = "cancel_000"
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256, temperature=1.0)
    policy = _forced_oracle(micro_policy, RetailEnv(WORLD).data.tasks[tid])
    assert ev.sampled_successes(policy, WORLD, [tid], 1, cfg) == {tid: 1}


def test_summarize_samples_per_kind_and_greedy_or_any_sample():
    ids = ev.balanced_task_ids(WORLD, 22)
    tasks = RetailEnv(WORLD).data.tasks
    wins = {t: i % 6 for i, t in enumerate(ids)}            # 0 to 5 successes of 5 samples
    greedy = {t: float(i % 3 == 0) for i, t in enumerate(ids)}
    res = ev.summarize_samples(wins, 5, WORLD, greedy)
    assert list(res["all"]["pass_at_k"]) == [1, 2, 4, 5]
    assert res["all"]["pass_at_k"][1] == pytest.approx(sum(wins.values()) / (5 * 22))
    assert res["all"]["pass_at_k"][5] == pytest.approx(sum(c > 0 for c in wins.values()) / 22)
    assert res["all"]["greedy_or_any_sample"] == pytest.approx(
        sum(greedy[t] == 1.0 or wins[t] > 0 for t in ids) / 22)
    writes = [t for t in ids if any(a["name"] in WRITE_TOOLS for a in gold_actions(tasks[t]))]
    assert res["write"]["n"] == len(writes) == 16
    assert res["write"]["pass_at_k"][1] == pytest.approx(sum(wins[t] for t in writes) / (5 * 16))
    assert sorted(res["per_kind"]) == sorted({tasks[t]["description"]["purpose"] for t in ids})
    assert all(row["n"] == 2 for row in res["per_kind"].values())
    table = ev.format_samples_table(res).splitlines()
    assert table[0].startswith("| kind | tasks | pass@1 | pass@2 | pass@4 | pass@5 |") and len(table) == 2 + 11 + 2


def test_evaluate_command_adds_the_sampled_results(capsys):
    assert ev.main(["--policy", "micro", "--world-seed", "3", "--tasks", "11", "--max-turns", "2",
                    "--max-new-tokens", "4", "--samples", "2", "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert res["sampled"]["samples"] == 2 and res["sampled"]["temperature"] == 1.0
    assert set(res["sampled"]["all"]["pass_at_k"]) == {"1", "2"} and res["sampled"]["all"]["n"] == 11
    assert "sampled 22/22 episodes" in captured.err
