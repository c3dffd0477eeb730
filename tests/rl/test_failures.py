"""Why an episode failed: each cause produced by playing a script through the environment itself."""

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.actions import STOP_TOKEN, ToolCall, format_call
from sinkflex_lib.envs.oracle import gold_replay_script
from sinkflex_lib.envs.reward import gold_actions
from sinkflex_lib.envs.tools import WRITE_TOOLS
from sinkflex_lib.rl.failures import CAUSES, Failure, differing_arguments, failure_cause, tally

WORLD = "eval-world:3"


def play(task_id: str, script: list[str], max_steps: int = 30) -> Failure:
    """Play `script` through the environment and classify the episode from what the environment
    reports (its reward breakdown and the actions it parsed), not from a rollout."""
    env = RetailEnv(WORLD, max_steps=max_steps)
    env.reset(options={"task_id": task_id})
    calls, reward, info, end = [], 0.0, {}, ""
    for action in script:
        _, reward, term, trunc, step_info = env.step(action)
        if isinstance(step_info["action"], ToolCall) and step_info["action"].name in WRITE_TOOLS:
            calls.append(step_info["action"])
        if term or trunc:
            info = step_info["reward_info"]
            end = info["termination"]
            break
    return failure_cause(reward, end, info, calls, env.data.tasks[task_id])


def gold(task_id: str) -> list[dict]:
    return gold_actions(RetailEnv(WORLD).data.tasks[task_id])


def call(name: str, **arguments) -> str:
    return format_call(ToolCall(name, arguments))


def with_write_changed(task_id: str, **changes) -> list[str]:
    """The gold replay with the (last) write's arguments updated by `changes`."""
    actions = gold(task_id)
    write = actions[-1]
    assert write["name"] in WRITE_TOOLS
    script = [call(a["name"], **a["arguments"]) for a in actions[:-1]]
    return script + [call(write["name"], **{**write["arguments"], **changes}), STOP_TOKEN]


def test_the_gold_replay_is_solved_on_every_kind():
    for tid, writes in (("cancel_000", "right writes"), ("modify_address_000", "right writes"),
                        ("exchange_000", "right writes"), ("info_000", "no write needed"),
                        ("refuse_000", "no write needed"), ("transfer_000", "no write needed")):
        assert play(tid, gold_replay_script(RetailEnv(WORLD).data.tasks[tid])) == Failure("solved", writes=writes), tid


def test_a_changed_argument_is_named():
    got = play("modify_address_000", with_write_changed("modify_address_000", zip="53787"))
    zip_code = gold("modify_address_000")[-1]["arguments"]["zip"]
    assert got == Failure("wrong arguments", (("zip", zip_code, "53787"),), "wrong arguments")
    assert got.arguments == ("zip",)
    # an order id the tool refuses is a wrong argument too, not a missing write
    got = play("cancel_000", with_write_changed("cancel_000", order_id="#W0000000", reason="ordered by mistake"))
    assert got.cause == "wrong arguments" and got.arguments == ("order_id", "reason")


def test_no_write_wrong_write_and_extra_write():
    reads = [call(a["name"], **a["arguments"]) for a in gold("cancel_000")[:-1]]
    assert play("cancel_000", reads + [STOP_TOKEN]) == Failure("no write", writes="no write")
    order = gold("cancel_000")[-1]["arguments"]["order_id"]
    payment = call("modify_pending_order_payment", order_id=order, payment_method_id="gift_card_0000000")
    assert play("cancel_000", reads + [payment, STOP_TOKEN]) == Failure("wrong write", writes="wrong write")
    address = gold("modify_address_000")[-1]["arguments"]
    user_id = gold("cancel_000")[1]["arguments"]["user_id"]
    extra = call("modify_user_address", user_id=user_id, **{k: v for k, v in address.items() if k != "order_id"})
    got = play("cancel_000", with_write_changed("cancel_000")[:-1] + [extra, STOP_TOKEN])
    assert got == Failure("extra write", writes="right writes")


def test_a_write_on_a_refuse_task_a_missed_fact_and_episodes_cut_short():
    order = gold("refuse_000")[-1]["arguments"]["order_id"]
    wrote = [call("cancel_pending_order", order_id=order, reason="no longer needed"), STOP_TOKEN]
    assert play("refuse_000", wrote).cause == "wrote on a no-write task"
    silent = [call(a["name"], **a["arguments"]) for a in gold("info_000")] + [STOP_TOKEN]
    assert play("info_000", silent) == Failure("communicate missed", writes="no write needed")
    cut = play("cancel_000", with_write_changed("cancel_000")[:-1] + ["hello"] * 3, max_steps=4)
    assert cut == Failure("out of turns", writes="right writes")    # the gold write, then out of turns
    # cut short after a garbled write: the write check still names the argument
    garbled = with_write_changed("cancel_000", reason="ordered by mistake")[:-1] + ["hello"] * 3
    cut = play("cancel_000", garbled, max_steps=5)
    assert (cut.cause, cut.writes, cut.arguments) == ("out of turns", "wrong arguments", ("reason",))
    errors = play("cancel_000", [call("get_order_details", order_id="#W0000000")] * 40, max_steps=60)
    assert errors == Failure("too many tool errors", writes="no write")
    # the rollout's own cut (its token budget) leaves no reward breakdown
    task = RetailEnv(WORLD).data.tasks["cancel_000"]
    assert failure_cause(0.0, "max_tokens", {}, [], task) == Failure("out of tokens", writes="no write")
    assert failure_cause(0.0, "something else", {}, [], task).cause == "cut short"


def test_differing_arguments_counts_missing_and_extra_names():
    g = {"name": "t", "arguments": {"a": "1", "b": ["x", "y"], "c": ""}}
    assert differing_arguments(g, ToolCall("t", {"a": "1", "b": ["x", "y"], "c": ""})) == ()
    assert differing_arguments(g, ToolCall("t", {"a": "1", "b": ["y", "x"], "d": None})) == \
        (("b", ["x", "y"], ["y", "x"]), ("c", "", None), ("d", None, None))


def test_tally_counts_causes_in_order_and_argument_names():
    wrong = "wrong arguments"
    fs = [Failure("no write"), Failure("solved"), Failure(wrong, (("zip", "1", "2"),), wrong),
          Failure(wrong, (("city", "a", "b"), ("zip", "1", None)), wrong), Failure("solved"),
          Failure("out of turns", (("state", "a", "b"),), wrong), Failure("out of tokens", writes="no write"),
          Failure("out of turns", writes="no write")]
    got = tally(iter(fs))
    assert got == {"causes": {"solved": 2, "out of turns": 2, "out of tokens": 1, "no write": 1, wrong: 2},
                   "arguments": {"city": 1, "zip": 2}, "cut_short_writes": {"no write": 2, wrong: 1}}
    assert list(got["causes"]) == [c for c in CAUSES if c in got["causes"]]
    assert tally([]) == {"causes": {}, "arguments": {}, "cut_short_writes": {}}
