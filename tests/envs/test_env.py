"""The Gymnasium interface: registration, reset/step contract, observations, errors, truncation."""

import gymnasium as gym
import pytest

import sinkflex_lib.envs  # noqa: F401  (registers the env)
from sinkflex_lib.envs import RetailEnv, ScriptedUser, tool_schemas


def test_registered_and_reset_info():
    env = gym.make("sinkflex/Retail-v0", max_steps=5)
    obs, info = env.reset(seed=0, options={"task_id": "cancel_000"})
    assert obs.startswith("user: Hi! ") and "\n" not in obs
    assert info["task_id"] == "cancel_000" and info["task"]["id"] == "cancel_000"
    assert info["tools"] == tool_schemas() and info["policy"].startswith("# Store support policy")


def test_seeded_task_choice_is_deterministic():
    a, b = RetailEnv(split="train"), RetailEnv(split="train")
    ids_a = [a.reset(seed=s)[1]["task_id"] for s in range(5)]
    ids_b = [b.reset(seed=s)[1]["task_id"] for s in range(5)]
    assert ids_a == ids_b and set(ids_a) <= set(a.task_ids("train")) and len(set(ids_a)) > 1
    with pytest.raises(ValueError, match="task_id"):
        a.reset(options={"task_id": "no_such_task"})


def test_step_forms_and_observations():
    env = RetailEnv()
    env.reset(seed=0, options={"task_id": "cancel_000"})
    oid = env.task["evaluation_criteria"]["actions"][-1]["arguments"]["order_id"]
    obs1, r, term, trunc, _ = env.step(f'{{"name": "get_order_details", "arguments": {{"order_id": "{oid}"}}}}')
    obs2, *_ = env.step(f"get_order_details(order_id='{oid}')")
    assert obs1 == obs2 and obs1.startswith(f'tool: {{"order_id": "{oid}"') and (r, term, trunc) == (0.0, False, False)
    obs, *_ = env.step("get_order_details(order_id='#W0')")
    assert obs == "tool: Error: Order not found"
    obs, *_ = env.step("Could you tell me your email, please?")
    assert obs.startswith("user: ")
    obs, r, term, trunc, info = env.step("get_order_details(order_id=")  # malformed: no exception
    assert obs.startswith("error: Invalid action") and not term
    assert [m["role"] for m in env.messages][:4] == ["assistant", "user", "assistant", "tool"]


def test_agent_stop_terminates_with_breakdown():
    env = RetailEnv()
    env.reset(seed=0, options={"task_id": "info_000"})
    obs, r, term, trunc, info = env.step("###STOP###")
    assert term and not trunc and r == 0.0
    ri = info["reward_info"]
    assert ri["termination"] == "agent_stop" and ri["db"]["reward"] == 1.0 and ri["communicate"]["reward"] == 0.0
    assert env.step("hello")[2] is True  # after the end: no exception, still terminated


def test_max_steps_truncates_with_zero_reward():
    env = RetailEnv(max_steps=3)
    env.reset(seed=0, options={"task_id": "info_000"})
    outs = [env.step("list_all_product_types()") for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True] and outs[-1][1] == 0.0
    assert outs[-1][4]["reward_info"]["termination"] == "max_steps"


def test_too_many_tool_errors_terminate():
    env = RetailEnv(max_errors=2)
    env.reset(seed=0, options={"task_id": "info_000"})
    assert env.step("nope()")[2] is False
    _, r, term, _, info = env.step("nope()")
    assert term and r == 0.0 and info["reward_info"]["termination"] == "too_many_errors"


def test_user_instance_and_bad_arguments():
    user = ScriptedUser()
    assert RetailEnv(user=user).user is user
    with pytest.raises(ValueError, match="max_steps"):
        RetailEnv(max_steps=0)
    with pytest.raises(RuntimeError, match="reset"):
        RetailEnv().step("hi")


def test_changes_nothing_is_a_refused_call_an_unparsed_action_or_a_look_up():
    from sinkflex_lib.envs.env import changes_nothing
    from sinkflex_lib.envs.oracle import oracle_script
    env = RetailEnv("eval-world:3", max_steps=60)
    _, info = env.reset(seed=0, options={"task_id": "cancel_000"})
    write = next(a for a in oracle_script(info["task"]) if "cancel_pending_order" in a)
    order = write.split('"order_id": "')[1].split('"')[0]
    cases = [("get_order_details(order_id='#W0000000')", True),      # refused
             ("get_order_details(order_id='#W1", True),                # unparsed
             (f"get_order_details(order_id='{order}')", True),        # a look-up that goes through
             ("calculate(expression='1+1')", False),                   # neither a look-up nor refused
             ("Hello?", False),                                        # the user answers
             (write, False),                                           # a write that goes through
             ("transfer_to_human_agents(summary='x')", False)]
    for action, quiet in cases:
        env.reset(seed=0, options={"task_id": "cancel_000"})
        _, _, term, trunc, info = env.step(action)
        assert changes_nothing(info, term or trunc) is quiet, action
    env.reset(seed=0, options={"task_id": "cancel_000"})
    _, _, term, trunc, info = env.step("###STOP###")                  # ends the episode
    assert term and not changes_nothing(info, True)
