"""On every synthetic task: oracle + scripted user and gold replay score 1; any wrong write scores 0."""

from sinkflex_lib.envs import RetailEnv, parse_action, run_episode
from sinkflex_lib.envs.oracle import ScriptAgent, oracle_script

from .scoring import scores


def test_every_mini_task():
    env = RetailEnv()
    n_cases = 0
    for tid in env.task_ids():
        oracle, gold, cases = scores(env, tid)
        assert oracle == 1.0 and gold == 1.0, tid
        for case, i, r, changes in cases:
            assert changes, (tid, case, i)  # every gold write of the synthetic set matters
            assert r == 0.0, (tid, case, i)
            n_cases += 1
    assert n_cases > 400


def test_refused_request_done_anyway_scores_zero():
    env = RetailEnv()
    unsafe = [t for t in env.data.tasks.values() if "Tempting action: " in (t["description"]["notes"] or "")]
    assert len(unsafe) >= 5
    for task in unsafe:
        tempting = task["description"]["notes"].split("Tempting action: ")[1]
        assert parse_action(tempting).__class__.__name__ == "ToolCall"
        script = oracle_script(task)
        script.insert(-1, tempting)  # act although the policy says to refuse
        ep = run_episode(env, lambda t: ScriptAgent(script), task["id"])
        assert ep.reward == 0.0 and ep.reward_info["db"]["reward"] == 0.0


def test_communicate_needed():
    env = RetailEnv()
    task = next(t for t in env.data.tasks.values() if t["evaluation_criteria"]["communicate_info"])
    script = [s for s in oracle_script(task) if "information you asked about" not in s]
    ep = run_episode(env, lambda t: ScriptAgent(script), task["id"])
    assert ep.reward_info["db"]["reward"] == 1.0 and ep.reward == 0.0
