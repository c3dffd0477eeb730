"""The scripted user's protocol, the first-person rewrite, and the LLM user with a fake endpoint."""

import pytest

from sinkflex_lib.envs.users import LLMUser, ScriptedUser, first_person, make_user

TASK = {"id": "x", "user_scenario": {"instructions": {
    "reason_for_call": "You want to cancel order #W1234567 because you no longer need it.",
    "known_info": "Your name is Ann Lee and your zip code is 78701.",
    "unknown_info": "You do not remember your email.", "task_instructions": "."}}}


def test_first_person():
    assert first_person("You are Ann Lee, and you live in Austin.") == "I am Ann Lee, and I live in Austin."
    assert first_person("You name is Ann and your zip code is 1.") == "My name is Ann and my zip code is 1."
    assert first_person("If the agent asks you to confirm, you say yes.") == \
        "If the agent asks me to confirm, I say yes."


def test_scripted_user_protocol():
    u = ScriptedUser(patience=2)
    assert u.start(TASK) == "Hi! I want to cancel order #W1234567 because I no longer need it."
    assert u.respond("Please give me your email or name and zip code.") == \
        "My name is Ann Lee and my zip code is 78701."
    assert u.respond("Which order id is it?") == "The order id is #W1234567."
    assert u.respond("I will cancel #W1234567. Do you confirm? (yes/no)") == "yes"
    assert u.respond("Done. Is there anything else I can help you with?").endswith("###STOP###")
    assert u.respond("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.") == "###STOP###"
    assert "###STOP###" not in u.respond("Hmm.")
    assert u.respond("Hmm.").endswith("###STOP###")  # out of patience
    assert u.start(TASK) and "###STOP###" not in u.respond("Hmm.")  # start resets


def test_llm_user_with_fake_endpoint():
    calls = []

    def post(url, headers, body):
        calls.append((url, headers, body))
        return {"choices": [{"message": {"content": f"reply {len(calls)}"}}]}

    u = LLMUser(base_url="http://x/v1/", model="m", api_key="k", post=post)
    assert u.start(TASK, seed=3) == "reply 1"
    assert u.respond("hello") == "reply 2"
    url, headers, body = calls[-1]
    assert url == "http://x/v1/chat/completions" and headers["Authorization"] == "Bearer k"
    assert body["seed"] == 3 and body["messages"][0]["role"] == "system"
    assert "#W1234567" in body["messages"][0]["content"]
    assert [m["role"] for m in body["messages"][1:]] == ["user", "assistant", "user"]


def test_make_user(monkeypatch):
    assert isinstance(make_user("scripted"), ScriptedUser)
    u = ScriptedUser()
    assert make_user(u) is u
    monkeypatch.delenv("SINKFLEX_USER_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        make_user("llm")
    with pytest.raises(ValueError, match="scripted"):
        make_user("robot")
