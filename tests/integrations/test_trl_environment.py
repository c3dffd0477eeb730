"""The environment_factory path: chat template, response template, RetailToolEnv, GRPOTrainer wiring.

Reference: the oracle agent, which scores 1.0 on every synthetic task in `RetailEnv`. Its
actions are written as the policy writes them (tool calls in functional form, messages as
`send_message_to_user(message=...)` calls), parsed back with TRL's `parse_response` and run as
TRL runs tools: the episode must score 1.0 again.
"""

from __future__ import annotations

import pytest
import torch

from sinkflex_lib.envs import RetailEnv, ToolCall, oracle_script, parse_action
from sinkflex_lib.envs.actions import format_call
from sinkflex_lib.integrations.trl.chat import TOOL_CHAT_TEMPLATE, USER_TOOL, prepare_tokenizer, response_template
from sinkflex_lib.integrations.trl.environment import RetailToolEnv, make_env_trainer, tool_env_dataset
from sinkflex_lib.rl.chat import CHAT_TEMPLATE, build_tokenizer, canonical_action
from sinkflex_lib.rl.config import TrainConfig


@pytest.fixture(scope="module")
def tok():
    return prepare_tokenizer(build_tokenizer())


def test_template_passes_trls_checks_and_keeps_plain_rendering(tok):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    plain = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "Hi!"},
             {"role": "user", "content": "u"}, {"role": "tool", "content": "{a:1}"}]
    for gen in (False, True):
        assert (tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=gen)
                == tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=gen, chat_template=CHAT_TEMPLATE))
    call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "return_delivered_order_items",
        "arguments": {"order_id": "#W1", "item_ids": ["1", "2"], "payment_method_id": "gift_card_0"}}}]}
    reply = {"role": "tool", "name": USER_TOOL, "content": "yes"}
    text = tok.apply_chat_template([call, reply], tokenize=False)
    assert text == ("<|assistant|>return_delivered_order_items(order_id='#W1', item_ids=['1', '2'], "
                    "payment_method_id='gift_card_0')<|end|><|user|>yes<|end|>")
    two_calls = {**call, "tool_calls": call["tool_calls"] * 2}
    with pytest.raises(Exception, match="one action per assistant turn"):
        tok.apply_chat_template([two_calls], tokenize=False)
    assert tok.chat_template == TOOL_CHAT_TEMPLATE
    with pytest.raises(ValueError, match="tool_names"):
        response_template(["not a name"])


@pytest.mark.parametrize("text, want", [
    ("get_order_details(order_id='#W2316820')", ("get_order_details", {"order_id": "#W2316820"})),
    ("send_message_to_user(message=\"I'm sorry, it's Bob's (yes)\")",
     (USER_TOOL, {"message": "I'm sorry, it's Bob's (yes)"})),
    ("send_message_to_user(message='say \"hi\", then find_user_id_by_email(email=1)')",
     (USER_TOOL, {"message": 'say "hi", then find_user_id_by_email(email=1)'})),
    ("list_all_product_types()", ("list_all_product_types", {})),
    ("Please confirm (yes/no): get_order_details(order_id='#W1')", None),   # a call only at the start
    ("unknown_tool(a='b')", None),
])
def test_response_template_parses_our_turns(tok, text, want):
    from trl.chat_template_utils import parse_response

    prefix = tok("<|user|>hi<|end|><|assistant|>", add_special_tokens=False)["input_ids"]
    parsed = parse_response(tok, tok(text + "<|end|>", add_special_tokens=False)["input_ids"], prefix=prefix)
    if want is None:
        assert parsed == {"role": "assistant", "content": text}
    else:
        (call,) = parsed["tool_calls"]
        assert (call["function"]["name"], call["function"]["arguments"]) == want and parsed["content"] == ""


@pytest.mark.parametrize("task_id", ["cancel_000", "exchange_001", "return_001", "modify_items_001", "transfer_000",
                                     "refuse_000"])
def test_oracle_through_trls_parser_and_tool_env_scores_one(tok, task_id):
    from trl.chat_template_utils import parse_response

    env = RetailToolEnv("mini", max_turns=60)
    first = env.reset(task_id=task_id, task_seed=3)
    reference = RetailEnv("mini")
    obs, _ = reference.reset(seed=3, options={"task_id": task_id})
    assert obs == f"user: {first}"
    prefix = tok("<|assistant|>", add_special_tokens=False)["input_ids"]
    for action in oracle_script(reference.task):
        parsed = parse_action(canonical_action(action))
        text = format_call(parsed if isinstance(parsed, ToolCall) else ToolCall(USER_TOOL, {"message": parsed.content}))
        message = parse_response(tok, tok(text + "<|end|>", add_special_tokens=False)["input_ids"], prefix=prefix)
        (call,) = message["tool_calls"]
        getattr(env, call["function"]["name"])(**call["function"]["arguments"])   # as TRL runs a tool
    assert env.get_reward() == 1.0


def test_tool_env_surface_and_open_episode():
    env = RetailToolEnv("mini", max_turns=5)
    public = sorted(n for n in dir(RetailToolEnv) if not n.startswith("_"))
    assert len(public) == 16 + 3 and {"reset", "get_reward", USER_TOOL} <= set(public)
    env.reset(task_id="cancel_000", task_seed=0)
    assert env.get_order_details(order_id="#W0000000").startswith("Error:")
    assert env.get_reward() == 0.0          # closed as the agent's stop: nothing done, reward 0
    assert env.send_message_to_user(message="hello") == "Error: the conversation is over."
    ds = tool_env_dataset("mini", "train")
    assert ds[0]["prompt"][-1] == {"role": "user", "content": ""} and len(set(ds["task_id"])) == len(ds)


def test_grpo_trainer_runs_retail_tool_env(tmp_path, backward_modes):
    """GRPOTrainer accepts the environment and the tokenizer (its template checks run at
    construction), exposes the 17 tools, renders a user reply as a user turn, runs its backward
    pass under deterministic algorithms (as `make_trainer`'s), trains a step."""
    from sinkflex_lib.rl.policy import build_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = TrainConfig.from_profile("smoke", max_turns=2, max_tokens=256, max_new_tokens=8)
        policy = build_policy("micro", seed=0)
        trainer = make_env_trainer(cfg, policy, tmp_path, seed=0, max_steps=1)
        assert sorted(t.__name__ for t in trainer.tools) == sorted(
            [n for n in dir(RetailToolEnv) if not n.startswith("_") and n not in ("reset", "get_reward")])
        tok = policy.tokenizer
        for name, marker in ((USER_TOOL, "<|user|>"), ("get_order_details", "<|tool|>")):
            suffix = trainer._get_tool_suffix_ids([{"role": "tool", "name": name, "content": "ok"}])
            assert tok.decode(suffix) == f"{marker}ok<|end|><|assistant|>"
        assert backward_modes(trainer.accelerator.backward) == [True]
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    logs = trainer.state.log_history[0]
    assert "rewards/RetailToolEnv/mean" in logs and trainer.state.global_step == 1
