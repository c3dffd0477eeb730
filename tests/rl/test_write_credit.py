"""Partial credit for write calls: match shares counted by hand on real tasks of a generated world."""

import pytest

from sinkflex_lib.envs.actions import ToolCall
from sinkflex_lib.envs.data import load_source
from sinkflex_lib.envs.reward import gold_writes
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.rollout import Rollout
from sinkflex_lib.rl.write_credit import argument_match, credited, write_match

TASKS = load_source("eval-world:0").tasks
PAYMENT = TASKS["modify_payment_000"]   # one gold write: order_id, payment_method_id


def gold_call(task: dict, k: int = 0, **changes) -> ToolCall:
    a = gold_writes(task)[k]
    return ToolCall(a["name"], {**a["arguments"], **changes})


def test_write_match_counts_the_arguments_a_call_gives_exactly():
    (a,) = gold_writes(PAYMENT)
    assert sorted(a["arguments"]) == ["order_id", "payment_method_id"]
    assert write_match([gold_call(PAYMENT)], PAYMENT) == 1.0
    assert write_match([gold_call(PAYMENT, payment_method_id="credit_card_1")], PAYMENT) == 0.5
    assert write_match([gold_call(PAYMENT, order_id="#W0", payment_method_id="x")], PAYMENT) == 0.0
    assert write_match([gold_call(PAYMENT, reason="extra")], PAYMENT) == pytest.approx(2 / 3)   # 3 names, 1 differs
    missing = ToolCall(a["name"], {"order_id": a["arguments"]["order_id"]})
    assert write_match([missing], PAYMENT) == 0.5
    # the best call of the gold's tool counts; calls of other tools do not
    other = ToolCall("cancel_pending_order", dict(a["arguments"]))
    assert write_match([other], PAYMENT) == 0.0
    assert write_match([gold_call(PAYMENT, order_id="#W0"), other, gold_call(PAYMENT)], PAYMENT) == 1.0
    assert write_match([], PAYMENT) == 0.0


def test_write_match_averages_over_the_gold_writes_and_credits_no_write_task():
    # a second gold write added by hand (no task of this world has two)
    extra = {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}}
    task = {**PAYMENT, "evaluation_criteria": {**PAYMENT["evaluation_criteria"],
                                               "actions": PAYMENT["evaluation_criteria"]["actions"] + [extra]}}
    assert len(gold_writes(task)) == 2
    assert write_match([gold_call(task)], task) == 0.5
    assert write_match([gold_call(task), ToolCall("cancel_pending_order", {"order_id": "#W1"})], task) == 0.75
    refuse = TASKS["refuse_000"]
    assert gold_writes(refuse) == [] and write_match([gold_call(PAYMENT)], refuse) == 0.0


def test_credited_keeps_solved_episodes_and_scales_the_match_of_the_others():
    half = [gold_call(PAYMENT, payment_method_id="x")]
    rs = [Rollout("modify_payment_000", 0, reward=1.0, write_calls=half),
          Rollout("modify_payment_000", 1, reward=0.0, write_calls=half),
          Rollout("modify_payment_000", 2, reward=0.0, write_calls=[gold_call(PAYMENT)]),
          Rollout("refuse_000", 3, reward=0.0, write_calls=[gold_call(PAYMENT)])]
    out = credited(rs, TASKS, 0.4)
    assert [r.reward for r in out] == pytest.approx([1.0, 0.2, 0.4, 0.0])
    assert [r.reward for r in rs] == [1.0, 0.0, 0.0, 0.0] and out[0] is rs[0]   # copies, originals untouched
    assert credited(rs, TASKS, 0.0) is rs
    with pytest.raises(ValueError, match="write_credit"):
        credited(rs, TASKS, 1.0)
    with pytest.raises(ValueError, match="write_credit"):
        TrainConfig(write_credit=1.0)
    assert argument_match({"name": "t", "arguments": {}}, ToolCall("t", {})) == 1.0
