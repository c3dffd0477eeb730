"""Shared checks of the scoring properties, run on the synthetic and on the real tau2 tasks."""

from sinkflex_lib.envs import OracleAgent, WRITE_TOOLS, gold_replay_script, run_episode
from sinkflex_lib.envs.oracle import ScriptAgent
from sinkflex_lib.envs.reward import gold_hash, replay


def with_actions(task, actions):
    return {**task, "evaluation_criteria": {**task["evaluation_criteria"], "actions": actions}}


def alter(action):
    """A plausible wrong version of a write action (a different reason, zip, item list or method)."""
    a = {"name": action["name"], "arguments": dict(action["arguments"])}
    args = a["arguments"]
    if "reason" in args:
        args["reason"] = "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
    elif "zip" in args:
        args["zip"] = args["zip"][:-1] + ("0" if args["zip"][-1] != "0" else "1")
    elif len(args.get("item_ids", [])) > 1:
        args["item_ids"] = args["item_ids"][:-1]
        if "new_item_ids" in args:
            args["new_item_ids"] = args["new_item_ids"][:-1]
    else:
        args["payment_method_id"] = "paypal_0000000"
    return a


def scores(env, tid):
    """(oracle reward, gold-replay reward, [(case, reward, changes db)] for dropped/altered writes)."""
    task = env.data.tasks[tid]
    oracle = run_episode(env, OracleAgent, tid).reward
    gold = run_episode(env, lambda t: ScriptAgent(gold_replay_script(t)), tid).reward
    cases = []
    actions = task["evaluation_criteria"]["actions"]
    target = gold_hash(env.data, task)
    for i, a in enumerate(actions):
        if a["name"] not in WRITE_TOOLS:
            continue
        for case, new in (("drop", actions[:i] + actions[i + 1:]),
                          ("alter", actions[:i] + [alter(a)] + actions[i + 1:])):
            changes = replay(env.data, new).hash() != target
            r = run_episode(env, lambda t, new=new: ScriptAgent(gold_replay_script(with_actions(t, new))), tid).reward
            cases.append((case, i, r, changes))
    return oracle, gold, cases
