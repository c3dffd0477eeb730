"""Arbitrary input: `calculate` matches tau2 within bounds, `step` never raises or hangs, and the
episode and its database stay consistent (issue 14)."""

import json
import random
import subprocess
import sys
import time
import warnings

import pytest

from sinkflex_lib.envs import RetailEnv, ToolCall, WRITE_TOOLS, call_tool, parse_action
from sinkflex_lib.envs.actions import MAX_NESTING, format_call
from sinkflex_lib.envs.tools import MAX_EXPRESSION_LENGTH

LIMIT_ERRORS = ("Error: Result too large", "Error: Expression too long", "Error: Expression took longer")
STEP_SECONDS = 2.0  # a hang guard, not a speed claim: a step takes well under a millisecond


def tau2_calculate(expression: str) -> str:
    """The reference: tau2's `calculate` as ../shared/tau2/TOOLS.md describes it (check the
    characters, then Python's eval, rounded to 2 places), errors shown as tau2 shows them."""
    if not all(c in "0123456789+-*/(). " for c in expression):
        return "Error: Invalid characters in expression"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as e:
        return f"Error: {e}"


def ours(expression: str) -> str:
    return call_tool(None, "calculate", {"expression": expression})[0]


def random_expression(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice([str(rng.randint(0, 999)), f"{rng.randint(0, 99)}.{rng.randint(0, 99)}",
                           f".{rng.randint(0, 9)}", f"{rng.randint(0, 9)}.", "0", "()", "...", " 7"])
    if r < 0.45:
        return rng.choice(["-", "+", "- "]) + random_expression(rng, depth + 1)
    if r < 0.6:
        return "(" + random_expression(rng, depth + 1) + ")"
    if r < 0.63:
        return f"({random_expression(rng, depth + 1)})({random_expression(rng, depth + 1)})"
    op = rng.choice(["+", "-", "*", "/", "//", "**", " ** ", " // ", " / ", "+-"])
    return random_expression(rng, depth + 1) + op + random_expression(rng, depth + 1)


@pytest.mark.parametrize("expression", [
    "7 // 2", "-7.5 // 2", "2 ** -1", "2 ** 10 ** 2", "10 ** 400 / 10 ** 399", "(-8) ** 0.5", "()",
    "...", "(1)(2)", "1 / 0", "0 ** -1", "10.0 ** 308 * 10", "10.0 ** 309", " 1 + 1", "", "01", "1..2",
    "1" * 400, "-" * 900 + "1", "(" * 250 + "1" + ")" * 250, "+".join(["1.5"] * 200), "1 + 2j",
])
def test_calculate_gives_tau2s_result_and_message(expression):
    assert ours(expression) == tau2_calculate(expression)


def test_calculate_matches_tau2_on_random_expressions():
    rng = random.Random(14)
    compared = 0
    for _ in range(600):
        e = random_expression(rng)
        got = ours(e)
        if not got.startswith(LIMIT_ERRORS):  # then every intermediate value is small for eval too
            assert got == tau2_calculate(e), e
            compared += 1
    assert compared > 550


def test_calculate_refuses_what_is_too_large_or_too_long():
    assert ours("((((9**64)**64)**64)**64)**64").startswith("Error: Result too large")
    assert ours("9 ** 9 ** 9").startswith("Error: Result too large")
    assert ours("1+" * MAX_EXPRESSION_LENGTH + "1").startswith("Error: Expression too long")
    assert ours("2 ** 9000 // 2 ** 8990") == "1024.0"  # big intermediate integers are fine


def test_nested_powers_return_promptly():
    """The 29-character expression that ran for minutes before: run in a subprocess so that a
    hang fails the test (a C-level big-integer power cannot be interrupted in-process)."""
    code = ("from sinkflex_lib.envs import call_tool\n"
            "print(call_tool(None, 'calculate', {'expression': '((((9**64)**64)**64)**64)**64'}))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("calculate did not return within 60 s")
    assert "Error: Result too large" in proc.stdout, proc.stderr[-2000:]


ACTIONS_THAT_CRASHED = {
    "complex result": "calculate(expression='(-8) ** 0.5')",
    "long sum": "calculate(expression='" + "1+" * 3000 + "1')",
    "deep JSON": '{"name": "calculate", "arguments": {"expression": ' + "[" * 5000 + "]" * 5000 + "}}",
    "deep JSON action": "{" + '"a": {' * 5000 + "}" * 5001,
    "huge JSON int": '{"name": "calculate", "arguments": {"expression": ' + "9" * 5000 + "}}",
    "unary chain": "get_order_details(order_id=" + "-" * 10000 + "1)",
}


@pytest.mark.parametrize("action", ACTIONS_THAT_CRASHED.values(), ids=ACTIONS_THAT_CRASHED)
def test_step_turns_crashing_actions_into_error_observations(action):
    env = RetailEnv()
    env.reset(seed=0, options={"task_id": "info_000"})
    obs, reward, term, trunc, _ = env.step(action)
    assert obs.startswith(("tool: Error", "error: Invalid action")), obs[:200]
    assert (reward, term, trunc) == (0.0, False, False) and env.steps == 1


@pytest.mark.parametrize("form", ['{{"name": "calculate", "arguments": {{"expression": {}}}}}',
                                  "calculate(expression={})"])
def test_arguments_nesting_limit(form):
    def nested(n):
        return form.format("[" * n + "]" * n)
    assert isinstance(parse_action(nested(MAX_NESTING)), ToolCall)
    assert "nest" in parse_action(nested(MAX_NESTING + 1)).error
    assert "nest" in parse_action(nested(150)).error


class FailingUser:
    """A user simulator whose backend fails (an LLM user's server going away)."""

    def start(self, task, seed=None):
        return "Hi!"

    def respond(self, agent_message):
        raise ConnectionError("user simulator unreachable")


def test_a_step_that_fails_changes_nothing():
    env = RetailEnv(user=FailingUser())
    env.reset(seed=0, options={"task_id": "info_000"})
    before = list(env.messages)
    with pytest.raises(ConnectionError):
        env.step("Could you give me your email?")
    assert env.messages == before and env.steps == 0
    obs, *_ = env.step("get_order_details(order_id='#W0')")  # a failed call: one error, two messages
    assert obs == "tool: Error: Order not found" and env.errors == 1 and env.steps == 1
    assert [m["role"] for m in env.messages[len(before):]] == ["assistant", "tool"]


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_max_errors_is_validated(bad):
    with pytest.raises(ValueError, match="max_errors"):
        RetailEnv(max_errors=bad)


# -- the property test -------------------------------------------------------------------

ALPHABET = "{}[]()\"',:=\\#-+*/. 0123456789abcxyz_\n\t\x00é\u2028"
FRAGMENTS = ["**", "**9", "9" * 400, "[" * 300, '{"a": ', "(" * 250, "-" * 3000, "###STOP###", "null",
             "1e999", "NaN", "\\ud800", "'", '"""', "**kw", "*a", "lambda: 0", "__import__('os')", "//",
             "True", "{1: 2}", "set()", "1j", '"arguments": "{"', "0" * 5000]


def real_calls(env: RetailEnv) -> list[str]:
    """Every gold call of the data set (reads and writes), in the JSON and functional forms."""
    calls = [ToolCall(a["name"], a.get("arguments") or {}) for t in env.data.tasks.values()
             for a in (t.get("evaluation_criteria") or {}).get("actions") or []]
    calls += [ToolCall("calculate", {"expression": "12.5 * 3 + 4"}), ToolCall("list_all_product_types", {})]
    return [form for c in calls for form in (format_call(c), json.dumps({"name": c.name, "arguments": c.arguments}))]


def mutate(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 4)):
        i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        kind = rng.randrange(5)
        if kind == 0:
            text = text[:i] + text[j:]
        elif kind == 1:
            text = text[:i] + rng.choice(ALPHABET) + text[i:]
        elif kind == 2:
            text = text[:i] + text[i:j] * rng.randint(2, 40) + text[j:]
        elif kind == 3:
            text = text[:i] + rng.choice(FRAGMENTS) + text[j:]
        else:
            text = text[:j]
    return text


def adversarial(rng: random.Random) -> str:
    n = rng.choice([1, 2, 10, 31, 32, 33, 100, 199, 200, 201, 999, 5000, 20000])
    soup = "".join(rng.choice("0123456789+-*/(). ") for _ in range(rng.randint(1, 1200)))
    expression = rng.choice([soup, "9" * n, "-" * n + "1", "1+" * n + "1", "(" * n + "1" + ")" * n,
                             "**".join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 6))),
                             "((((9**64)**64)**64)**64)**64", random_expression(rng)])
    return rng.choice([
        f"calculate(expression={expression!r})",
        json.dumps({"name": "calculate", "arguments": {"expression": expression}}),
        '{"name": "calculate", "arguments": {"expression": ' + "[" * n + "]" * n + "}}",
        '{"name": "get_user_details", "arguments": {"user_id": ' + "9" * n + "}}",
        "get_order_details(order_id=" + rng.choice(["-" * n + "1", "[" * n + "]" * n, "9" * n]) + ")",
        rng.choice(["{", "[", "(", "f("]) * n,
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 300))),
    ])


def test_any_action_returns_promptly_never_raises_and_writes_only_when_valid():
    rng = random.Random(2026)
    env = RetailEnv(max_steps=10**9, max_errors=10**9)
    calls = real_calls(env)
    env.reset(seed=0)
    writes = 0
    for k in range(3000):
        call = rng.choice(calls)
        action = adversarial(rng) if k % 2 else call if rng.random() < 0.1 else mutate(rng, call)
        if env._done:
            env.reset(seed=k)
        before = env.db.hash()
        t0 = time.perf_counter()
        obs, reward, term, trunc, info = env.step(action)
        assert time.perf_counter() - t0 < STEP_SECONDS, action[:200]
        assert isinstance(obs, str) and isinstance(reward, float)
        if env.db.hash() != before:
            parsed = parse_action(action)
            assert isinstance(parsed, ToolCall) and parsed.name in WRITE_TOOLS, action[:200]
            assert obs.startswith("tool: ") and not obs.startswith("tool: Error"), action[:200]
            writes += 1
    assert writes > 10  # valid writes happen (and change the database)
