"""Recovery points: where a policy's episode first leaves the oracle's script with an action that
changes nothing; checked on episodes built by hand from the oracle's script."""

import json

import pytest

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.oracle import oracle_script, slipped_call
from sinkflex_lib.rl import recovery as rc
from sinkflex_lib.rl.chat import canonical_action, oracle_transcript
from sinkflex_lib.rl.rollout import RolloutConfig
from sinkflex_lib.rl.warmstart import demonstration

from .forced import forced_oracle

WORLD = "eval-world:3"
WRONG_LOOKUP = "get_order_details(order_id='#W0000000')"      # no such order: refused


def _script(env, tid):
    env.reset(seed=0, options={"task_id": tid})
    return [canonical_action(a) for a in oracle_script(env.data.tasks[tid], env.db.products)]


def _other_order(env, tid, script):
    """A look-up of an order of the world that the task's script never reads (goes through)."""
    used = " ".join(script)
    return next(f"get_order_details(order_id='{o}')" for o in env.data.db.tables["orders"] if o not in used)


def test_the_first_action_off_the_script_that_changes_nothing_is_the_point():
    env = RetailEnv(WORLD, max_steps=60)
    tid = "cancel_000"
    script = _script(env, tid)
    write = next(k for k, a in enumerate(script) if a.startswith("cancel_pending_order("))
    assert rc.recovery_point(env, tid, script) is None                       # the oracle's own episode
    assert rc.recovery_point(env, tid, script[:3]) is None                   # cut short, never off it
    other = _other_order(env, tid, script)
    for k, slip in ((2, WRONG_LOOKUP), (2, other), (write, canonical_action(slipped_call(script[write]))),
                    (1, "get_order_details(order_id='#W1")):                 # refused, a look-up, refused write, unparsed
        episode = script[:k] + [slip] + script[k:]
        assert rc.recovery_point(env, tid, episode) == (k, slip)
        assert rc.recovery_point(env, tid, episode + ["whatever follows"]) == (k, slip)
    # off the script with a message (the user answers it) or a write that goes through: no point
    assert rc.recovery_point(env, tid, script[:1] + ["Hello?"] + script[1:]) is None
    assert rc.recovery_point(env, tid, script[:write - 1] + [script[write]] + script[write - 1:]) is None
    assert rc.recovery_point(env, tid, script[:1] + ["transfer_to_human_agents(summary='x')"]) is None


def test_collected_from_the_policys_own_episode(micro_policy):
    env = RetailEnv(WORLD, max_steps=60)
    tid = "cancel_000"
    policy = forced_oracle(micro_policy, env.data.tasks[tid], {2: WRONG_LOOKUP}, env.data.db.tables["products"])
    cfg = RolloutConfig(max_turns=30, max_tokens=8192, max_new_tokens=256)
    got = rc.collect_recoveries(policy, WORLD, [tid], cfg)
    assert got == [{"source": WORLD, "task_id": tid, "seed": 0, "slip_at": 2, "slip": WRONG_LOOKUP}]
    clean = forced_oracle(micro_policy, env.data.tasks[tid], None, env.data.db.tables["products"])
    assert rc.collect_recoveries(clean, WORLD, [tid], cfg) == []


def test_a_policys_slip_is_context_and_the_learned_turns_are_the_oracles(micro_policy):
    env = RetailEnv(WORLD, max_steps=60)
    tid = "cancel_000"
    other = _other_order(env, tid, _script(env, tid))
    clean = demonstration(micro_policy, env, tid, 0, 4096, value_weight=3.0)
    r = demonstration(micro_policy, env, tid, 0, 4096, value_weight=3.0, slip_at=2, slip=other)
    assert [(t, w) for t, m, w in zip(r.ids, r.mask, r.old_logp) if m] == \
        [(t, w) for t, m, w in zip(clean.ids, clean.mask, clean.old_logp) if m]
    _, turns = oracle_transcript(env, tid, slip_at=2, slip=other)
    assert turns[2][0] == other and "Error" not in turns[2][1]              # the other order's record, shown
    assert other.split("'")[1] in micro_policy.tokenizer.decode([t for t, m in zip(r.ids, r.mask) if not m])
    with pytest.raises(ValueError, match="changed the episode"):
        oracle_transcript(env, tid, slip_at=1, slip="Hello?")


def test_the_command_writes_one_record_per_recovery_point(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert rc.main(["--policy", "micro", "--seed", "3", "--tasks", "3", "--max-turns", "2",
                    "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert f"{len(lines)} recovery records" in capsys.readouterr().out
    env = RetailEnv("train-world:3000000", max_steps=60)
    for rec in map(json.loads, lines):      # each is a point of the episode it names
        assert rec["source"] == "train-world:3000000" and rec["slip_at"] >= 0
        _, turns = oracle_transcript(env, rec["task_id"], slip_at=rec["slip_at"], slip=rec["slip"])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no recovery records"):
        rc.read_recoveries(tmp_path / "empty.jsonl")
    with pytest.raises(SystemExit) as e:
        rc.main(["--policy", "/no/such/policy", "--seed", "3", "--out", str(tmp_path / "x.jsonl")])
    assert e.value.code == 2 and "existing local model directory" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
