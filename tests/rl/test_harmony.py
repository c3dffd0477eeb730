"""Harmony (gpt-oss's chat format): rendering against openai-harmony, parsing, rollouts with the
real vocabulary, and a forced oracle that solves every real tau2 retail task through the worker."""

import json
from pathlib import Path

import pytest
import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.actions import Message, ParseError, ToolCall
from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.envs.reward import gold_actions
from sinkflex_lib.envs.tools import WRITE_TOOLS
from sinkflex_lib.envs.schemas import tool_schemas
from sinkflex_lib.rl.chat import canonical_action
from sinkflex_lib.rl.rollout import RolloutConfig, collate, replay_turns, rollout_batch, token_logprobs

oh = pytest.importorskip("openai_harmony")
from sinkflex_lib.rl import harmony  # noqa: E402

from .forced import ForcedTokens  # noqa: E402

TAU2_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "tau2" / "data"
HAVE_TAU2 = (TAU2_DATA / "tau2" / "domains" / "retail" / "tasks.json").is_file()


@pytest.fixture(scope="module")
def fmt():
    return harmony.HarmonyFormat(reasoning_effort="low")


def reference_messages(env: RetailEnv, info: dict) -> list:
    """The conversation the env holds up to the agent's last turn, as openai-harmony messages
    built with its own API."""
    R = oh.Role
    tools = [oh.ToolDescription.new(s["function"]["name"], s["function"]["description"],
                                    parameters=s["function"]["parameters"]) for s in tool_schemas()]
    out = [oh.Message.from_role_and_content(R.SYSTEM, oh.SystemContent.new().with_reasoning_effort(oh.ReasoningEffort.LOW)),
           oh.Message.from_role_and_content(R.DEVELOPER, oh.DeveloperContent.new().with_instructions(info["policy"])
                                            .with_function_tools(tools))]
    last_call = None
    upto = max(i for i, m in enumerate(env.messages) if m["role"] == "assistant")   # the last agent turn
    for m in env.messages[:upto + 1]:
        if m["role"] == "assistant" and "tool_call" in m:
            call = m["tool_call"]
            last_call = call["name"]
            out.append(oh.Message.from_role_and_content(R.ASSISTANT, json.dumps(call["arguments"]))
                       .with_channel("commentary").with_recipient(f"functions.{last_call}")
                       .with_content_type("<|constrain|>json"))
        elif m["role"] == "assistant":
            out.append(oh.Message.from_role_and_content(R.ASSISTANT, m["content"]).with_channel("final"))
        elif m["role"] == "tool":
            out.append(oh.Message.from_author_and_content(oh.Author.new(R.TOOL, f"functions.{last_call}"), m["content"])
                       .with_channel("commentary").with_recipient("assistant"))
        elif m["role"] == "user":
            out.append(oh.Message.from_role_and_content(R.USER, m["content"]))
    return out


def oracle_episode(fmt, env: RetailEnv, task_id: str) -> tuple[list[int], float, dict]:
    """The oracle's episode built incrementally through the format (prompt, completion,
    parse, step, observation), as the rollout worker builds it."""
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    seq = fmt.prompt(env, obs, info)
    for action in oracle_script(info["task"]):
        turn = fmt.completion(canonical_action(action))
        _, parsed = fmt.parse(turn)
        seq += turn
        obs, reward, term, trunc, _ = env.step(parsed)
        if term or trunc:
            return seq, reward, info
        seq += fmt.observation(obs, parsed)
    raise AssertionError("the oracle script ended before the episode")


@pytest.mark.parametrize("task_id", ["cancel_000", "exchange_000", "refuse_000", "transfer_000"])
def test_incremental_sequence_equals_openai_harmony_rendering(fmt, task_id):
    env = RetailEnv("eval-world:0", max_steps=60)
    seq, reward, info = oracle_episode(fmt, env, task_id)
    assert reward == 1.0
    conv = oh.Conversation.from_messages(reference_messages(env, info))
    ref = fmt.enc.render_conversation(conv, oh.RenderConversationConfig(auto_drop_analysis=False))
    # the sampled <|return|> stays in the sequence; Harmony's history rendering writes <|end|>
    assert [fmt.end_id if t == fmt.return_id else t for t in seq] == ref
    assert seq.count(fmt.return_id) == sum(1 for m in env.messages[1:] if m["role"] == "assistant"
                                           and "tool_call" not in m)


def test_parse_reads_calls_messages_and_reasoning_and_never_raises(fmt):
    enc = lambda s: fmt.enc.encode(s, allowed_special="all")  # noqa: E731
    call = enc('<|channel|>analysis<|message|>look it up<|end|><|start|>assistant<|channel|>commentary '
               'to=functions.get_order_details <|constrain|>json<|message|>{"order_id": "#W1"}<|call|>')
    assert fmt.parse(call)[1] == ToolCall("get_order_details", {"order_id": "#W1"})
    assert fmt.parse(enc("<|channel|>final<|message|>Hello there<|return|>"))[1] == Message("Hello there")
    for bad in ["garbage", "<|channel|>analysis<|message|>only thinking<|end|>",
                "<|channel|>commentary to=functions.get_order_details<|message|>{not json<|call|>",
                "<|message|><|message|><|call|>", ""]:
        text, action = fmt.parse(enc(bad))
        assert isinstance(action, ParseError) and isinstance(text, str), bad
    assert isinstance(fmt.parse([200_000, 7, 200_012, 3])[1], ParseError)


def test_encoding_is_checked_against_its_sha256(tmp_path):
    (tmp_path / harmony.O200K_FILE).write_bytes(b"not the vocabulary")
    with pytest.raises(ValueError, match="sha256"):
        harmony._o200k_bytes(tmp_path)
    assert len(harmony._o200k_bytes(None)) > 1_000_000


def test_rollout_with_the_real_vocabulary_masks_and_logprobs(fmt):
    from sinkflex_lib.rl.policy import build_policy

    policy = build_policy("micro", format="harmony", seed=0)
    assert policy.model.get_input_embeddings().weight.shape[0] == harmony.HARMONY_VOCAB_SIZE
    policy.chat.instructions = "You are a retail agent."     # a short developer message: a cheaper test
    cfg = RolloutConfig(max_turns=2, max_tokens=4096, max_new_tokens=12, source="eval-world:0")
    rows = rollout_batch(policy, [("cancel_000", 0), ("info_000", 1)], cfg, generator=torch.Generator().manual_seed(0))
    for r in rows:
        assert r.turns >= 1 and r.end_reason
        assert r.parse_errors == r.turns          # random weights: garbage, answered with errors
        sampled = sum(r.mask)
        assert 0 < sampled <= r.turns * cfg.max_new_tokens
        assert all(lp == 0.0 for lp, m in zip(r.old_logp, r.mask) if not m)
    batch = collate(rows, policy.pad_id)
    logp, _ = token_logprobs(policy.model, batch)
    m = batch["mask"].bool()
    assert torch.allclose(logp[m], batch["old_logp"][m], atol=1e-4)


@pytest.mark.skipif(not HAVE_TAU2, reason="../shared/tau2/data is absent")
def test_forced_oracle_tokens_solve_every_real_tau2_task(fmt, monkeypatch):
    from sinkflex_lib.envs.data import load_source
    from sinkflex_lib.rl.policy import Policy

    monkeypatch.setenv("TAU2_DATA_DIR", str(TAU2_DATA))
    tasks = load_source("tau2").tasks
    assert len(tasks) == 114
    cfg = RolloutConfig(max_turns=60, max_tokens=60_000, max_new_tokens=4096, source="tau2", temperature=0.0)
    for task_id, task in tasks.items():
        script = [t for a in oracle_script(task) for t in fmt.completion(canonical_action(a))]
        policy = Policy(ForcedTokens(script, harmony.HARMONY_VOCAB_SIZE), None, "forced", chat=fmt)
        (r,) = rollout_batch(policy, [(task_id, 0)], cfg)
        assert r.reward == 1.0, (task_id, r.end_reason, r.reward_info)
        gold_writes = [a["name"] for a in gold_actions(task) if a["name"] in WRITE_TOOLS]
        # the writes made: the gold ones, in order, but those that fail in tau2's data too (4 tasks)
        rest = iter(gold_writes)
        assert all(w in rest for w in r.writes) and len(r.writes) >= len(gold_writes) - r.tool_errors
        assert [t for t, m in zip(r.ids, r.mask) if m] == script
        turns = [fmt.completion(canonical_action(a)) for a in oracle_script(task)]
        replayed = replay_turns(fmt, task_id, turns, cfg)   # the worker's budgets, without a model
        assert (replayed.ids, replayed.mask, replayed.reward) == (r.ids, r.mask, r.reward), task_id


def test_the_hf_tokenizer_encodes_as_openai_harmony(fmt):
    tok = harmony.harmony_tokenizer()
    text = ("Order #W2378156: luis.okafor3544@example.com, 3 items.\n\n  Hello   world's café "
            "<|start|>assistant<|channel|>final<|message|>Done.<|return|>")
    assert tok(text, add_special_tokens=False)["input_ids"] == fmt.enc.encode(text, allowed_special="all")
    for special in ("<|start|>", "<|end|>", "<|call|>", "<|return|>", "<|endoftext|>"):
        assert tok.convert_tokens_to_ids(special) == fmt.enc.encode(special, allowed_special="all")[0]
    assert tok.pad_token_id == fmt.pad_id


@pytest.fixture(scope="module")
def gpt_oss_dir(tmp_path_factory):
    """A local directory shaped like a gpt-oss checkpoint: random micro weights with the real
    Harmony vocabulary, and o200k_harmony's tokenizer.json."""
    from sinkflex_lib.rl.policy import write_gpt_oss_dir

    return write_gpt_oss_dir(tmp_path_factory.mktemp("gpt-oss-micro"), "micro")


def test_a_local_gpt_oss_directory_speaks_harmony_and_the_evaluate_command_runs_it(gpt_oss_dir, capsys):
    from sinkflex_lib.rl.evaluate import main
    from sinkflex_lib.rl.policy import build_policy

    policy = build_policy(str(gpt_oss_dir))
    assert isinstance(policy.chat, harmony.HarmonyFormat)
    assert len(policy.tokenizer) == len(harmony.harmony_tokenizer())     # no role tokens added
    assert main(["--policy", str(gpt_oss_dir), "--world-seed", "0", "--tasks", "2", "--max-turns", "2",
                 "--max-new-tokens", "8", "--max-tokens", "4096", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["n_tasks"] == 2 and res["mean_at_1"] == 0.0     # random weights: garbage turns


@pytest.mark.skipif(not HAVE_TAU2, reason="../shared/tau2/data is absent")
def test_the_trainer_runs_the_papers_setup_from_a_local_gpt_oss_directory(gpt_oss_dir, tmp_path, monkeypatch):
    """The gpu profile given a gpt-oss directory (the paper's setup: Harmony, LoRA, bf16, tau2's
    tasks, no warm start), cut to one GRPO step of one group of two short episodes."""
    from sinkflex_lib.rl.config import TrainConfig
    from sinkflex_lib.rl.runstate import read_metrics
    from sinkflex_lib.rl.train import train

    monkeypatch.setenv("TAU2_DATA_DIR", str(TAU2_DATA))
    cfg = TrainConfig.from_profile("gpu", policy_dir=str(gpt_oss_dir), steps=1, groups_per_step=1, group_size=2,
                                   minibatch_size=2, max_turns=2, max_new_tokens=8, val_split=None, val_tasks=2)
    assert (cfg.chat_format, cfg.lora, cfg.dtype, cfg.source, cfg.bc_episodes) == ("harmony", 32, "bfloat16", "tau2", 0)
    res = train(cfg, tmp_path, log=lambda m: None)
    model = res.policy.model
    assert isinstance(res.policy.chat, harmony.HarmonyFormat)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)                      # peft's adapters only
    dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" not in n}
    assert dtypes == {torch.bfloat16} and all(p.dtype == torch.float32 for n, p in model.named_parameters()
                                              if "lora_" in n)   # peft keeps the adapters in float32
    assert model.get_input_embeddings().weight.shape[0] == harmony.HARMONY_VOCAB_SIZE   # never resized
    rows = read_metrics(tmp_path)
    assert [r["kind"] for r in rows] == ["config", "val", "train", "val"]
    train_row = rows[2]
    assert all(t in RetailEnv("tau2").task_ids("train") for t in train_row["tasks"])
    assert (tmp_path / "checkpoint").is_dir()
