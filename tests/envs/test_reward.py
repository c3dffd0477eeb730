"""tau2's reward rules: DB hash equality times COMMUNICATE substring checks; premature ends score 0."""

from sinkflex_lib.envs import load_source
from sinkflex_lib.envs.reward import communicate_checks, evaluate, gold_writes, replay


def test_communicate_rule():
    msgs = ["Your total is $1,093.34.", "Tracking: ABC-12"]
    checks = communicate_checks(["1093.34", "abc-12", "999"], msgs)
    assert [c["met"] for c in checks] == [True, True, False]
    # commas are removed from the message, not from the info string (as tau2 does)
    assert communicate_checks(["1,093.34"], msgs)[0]["met"] is False
    assert communicate_checks([], msgs) == []


def _task(actions, info=()):
    return {"id": "t", "evaluation_criteria": {"actions": actions, "communicate_info": list(info)}}


def test_db_and_communicate_product():
    data = load_source("mini")
    oid = next(o for o, r in data.db.tables["orders"].items() if r["status"] == "pending")
    cancel = {"name": "cancel_pending_order", "arguments": {"order_id": oid, "reason": "no longer needed"}}
    task = _task([cancel], ["cancelled"])
    data._gold_hash.pop("t", None)
    good = replay(data, [cancel])
    r = evaluate(data, task, good, ["Your order is cancelled."])
    assert r["reward"] == 1.0 and r["db"]["reward"] == 1.0 and r["communicate"]["reward"] == 1.0
    assert evaluate(data, task, good, ["Done."])["reward"] == 0.0
    assert evaluate(data, task, data.db.episode(), ["It is cancelled."])["db"]["reward"] == 0.0
    assert evaluate(data, task, good, ["cancelled"], termination="max_steps")["reward"] == 0.0
    # read-only and failing calls do not count: only the database state matters
    noisy = replay(data, [{"name": "get_order_details", "arguments": {"order_id": oid}},
                          {"name": "cancel_pending_order", "arguments": {"order_id": oid, "reason": "bad"}},
                          cancel])
    assert evaluate(data, task, noisy, ["cancelled"])["reward"] == 1.0
    data._gold_hash.pop("t", None)


def test_gold_writes_are_the_gold_calls_that_change_the_database():
    data = load_source("eval-world:3")
    for tid, names in (("cancel_000", ["cancel_pending_order"]), ("info_000", []), ("refuse_000", []),
                       ("exchange_000", ["exchange_delivered_order_items"])):
        task = data.tasks[tid]
        assert [a["name"] for a in gold_writes(task)] == names, tid
        # independent: replaying only these on a fresh database gives the gold's database
        assert replay(data, gold_writes(task)).hash() == replay(data, task["evaluation_criteria"]["actions"]).hash()
