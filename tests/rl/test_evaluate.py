"""The evaluate command: JSON keys, every task counted, baselines computed independently."""

import json

import pytest

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.reward import gold_actions
from sinkflex_lib.envs.tools import WRITE_TOOLS
from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.rl import evaluate as ev
from sinkflex_lib.rl.chat import END, canonical_action, oracle_transcript
from sinkflex_lib.rl.policy import Policy
from sinkflex_lib.rl.rollout import RolloutConfig

from .forced import ForcedTokens

WORLD = "eval-world:3"


def test_balanced_task_ids_cycle_over_kinds_and_check_n():
    ids = ev.balanced_task_ids(WORLD, 22)
    kinds = [RetailEnv(WORLD).data.tasks[t]["description"]["purpose"] for t in ids]
    assert len(set(kinds)) == 11 and all(kinds.count(k) == 2 for k in set(kinds))
    assert len(ev.balanced_task_ids(WORLD)) == 335
    with pytest.raises(ValueError, match="tasks must be between 1 and 335"):
        ev.balanced_task_ids(WORLD, 336)


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


def _forced_oracle(policy, task: dict) -> Policy:
    """A policy that emits the oracle's tokens for `task` (compact format)."""
    tok = policy.tokenizer
    script = [t for a in oracle_script(task)
              for t in tok(canonical_action(a), add_special_tokens=False)["input_ids"] + [policy.token_id(END)]]
    return Policy(ForcedTokens(script, len(tok)), tok, "forced")


def test_the_writes_made_are_counted_per_kind(micro_policy):
    tasks = RetailEnv(WORLD).data.tasks
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256)
    for tid, kind, writes in (("cancel_000", "cancel", {"cancel_pending_order": 1}), ("info_000", "info", {})):
        res = ev.evaluate_policy(_forced_oracle(micro_policy, tasks[tid]), WORLD, [tid], cfg, with_baselines=False)
        assert res["mean_at_1"] == 1.0 and res["writes"] == {kind: writes}
        row = ev.format_table(res).splitlines()[2]
        assert row.startswith(f"| {kind}") and row.endswith(f"| {', '.join(f'{w} {n}' for w, n in writes.items())} |")


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


def test_evaluate_refuses_bad_arguments_before_loading_a_policy():
    with pytest.raises(SystemExit):
        ev.main(["--policy", "micro", "--world-seed", "3", "--source", "mini"])
    with pytest.raises(ValueError, match="tasks must be between"):
        ev.main(["--policy", "/no/such/dir", "--tasks", "0"])
