"""Pretraining: the episode stream, loss weights, copy accuracy, exact resume, base selection."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from sinkflex_lib.rl import pretrain as pt
from sinkflex_lib.rl.runstate import ResumeError

SMOKE = pt.PretrainConfig(**pt.PROFILES["smoke"])


def test_stream_is_a_function_of_seed_and_step_and_changes_world(micro_policy):
    cfg = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "episodes_per_world": 2})
    a, b = pt.EpisodeStream(micro_policy, cfg, 0), pt.EpisodeStream(micro_policy, cfg, 0)
    assert [x.ids for x in a.batch(3)[0]] == [x.ids for x in b.batch(3)[0]]
    first = cfg.induction_steps + cfg.lookup_steps
    assert [a.batch(s)[1] for s in (0, cfg.induction_steps, first, first + cfg.copy_steps)] == [
        "induction", "lookup", "copy", "episodes"]
    for rep in a.batch(0)[0]:   # string, gap, string again; loss on the repeat after its first token
        trained = sum(rep.mask)
        n = trained + 1
        assert cfg.induction_len // 4 <= n <= cfg.induction_len
        assert 0 <= len(rep.ids) - 2 * n <= cfg.induction_gap
        assert rep.ids[:n] == rep.ids[-n:] and rep.mask == [0] * (len(rep.ids) - trained) + [1] * trained
        assert rep.old_logp == [float(m) for m in rep.mask]
        assert min(rep.ids) >= len(micro_policy.tokenizer.all_special_ids)
    assert pt.episodes_before(cfg, first + cfg.copy_steps + 2) == cfg.copy_steps * cfg.copy_batch + 2 * cfg.batch
    assert pt.train_world(0, 0) != pt.train_world(0, 1) != pt.train_world(1, 0)


def test_argument_spans_find_every_copyable_value():
    a = ("modify_pending_order_items(order_id='#W1', item_ids=['111', '222'], new_item_ids=['333'], "
         "payment_method_id='paypal_1')")
    assert [(k, a[s:e]) for k, s, e in pt._argument_spans(a)] == [
        ("order_id", "#W1"), ("item_id", "111"), ("item_id", "222"), ("item_id", "333"),
        ("payment_method", "paypal_1")]
    assert pt._argument_spans("Hello there") == []


class _Peek(torch.nn.Module):
    """A 'model' whose argmax at position i is the true token i+1 (or always token 0)."""

    def __init__(self, vocab, right=True, wrong_on=()):
        super().__init__()
        self.vocab, self.right, self.w = vocab, right, torch.nn.Parameter(torch.zeros(1))
        self.wrong_on = torch.tensor(list(wrong_on), dtype=torch.long)   # true next tokens it gets wrong

    def forward(self, input_ids, **kw):
        nxt = torch.roll(input_ids, -1, dims=1) if self.right else torch.zeros_like(input_ids)
        nxt = torch.where(torch.isin(nxt, self.wrong_on), torch.zeros_like(nxt), nxt)
        return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, self.vocab).float()})()


def test_copy_accuracy_is_one_for_perfect_predictions_and_zero_for_none(micro_policy):
    ids = ["cancel_000", "modify_items_000", "return_000", "modify_address_000"]
    model = micro_policy.model
    try:
        micro_policy.model = _Peek(len(micro_policy.tokenizer))
        good = pt.copy_accuracy(micro_policy, "eval-world:0", ids)
        micro_policy.model = _Peek(len(micro_policy.tokenizer), right=False)
        bad = pt.copy_accuracy(micro_policy, "eval-world:0", ids)
    finally:
        micro_policy.model = model
    assert {"email", "order_id", "item_id", "payment_method", "user_id", "all"} <= set(good)
    assert {"write_choice", "cancel_reason", "confirmed", "confirmed_address", "confirmed_order_id",
            "confirmed_item_id", "confirmed_payment_method"} <= set(good)
    assert set(good.values()) == {1.0} and set(bad.values()) == {0.0}


def test_teacher_forced_predictions_give_each_span_its_tokens_and_the_prediction_before_each(micro_policy):
    from sinkflex_lib.envs import RetailEnv

    env, tok, model = RetailEnv("eval-world:0", max_steps=60), micro_policy.tokenizer, micro_policy.model
    spans = lambda action, _: [s for s in pt._argument_spans(action) if s[0] == "order_id"]
    try:
        micro_policy.model = peek = _Peek(len(tok)).train()
        got = list(pt.teacher_forced_predictions(micro_policy, env, ["cancel_000", "return_000"], spans))
    finally:
        micro_policy.model = model
    assert len(got) >= 2 and {kind for kind, *_ in got} == {"order_id"}
    for _, ids, pred, positions in got:
        assert tok.decode([ids[p] for p in positions]).startswith("#W")          # the span's own tokens
        assert [pred[p - 1] for p in positions] == [ids[p] for p in positions]   # pred[p - 1] predicts ids[p]
    assert peek.training                                                         # its mode given back


def test_the_words_a_request_decides_are_scored_apart_from_the_copies(micro_policy):
    ids = ["cancel_000", "modify_items_000", "return_000", "modify_address_000"]   # four writes, one cancel
    tok, model = micro_policy.tokenizer, micro_policy.model
    try:    # right everywhere except at the word "cancel"
        micro_policy.model = _Peek(len(tok), wrong_on=tok(" cancel", add_special_tokens=False)["input_ids"])
        acc = pt.copy_accuracy(micro_policy, "eval-world:0", ids)
    finally:
        micro_policy.model = model
    assert acc["write_choice"] == 0.75 and acc["cancel_reason"] == 1.0 and acc["all"] == 1.0


def test_the_values_a_request_states_are_scored_apart_from_the_calls_copies(micro_policy):
    ids = ["modify_address_000"]   # "... to 505 Hillcrest Road, Suite 432, Portland, OR, 97246, USA"
    tok, model = micro_policy.tokenizer, micro_policy.model
    try:    # wrong at "Portland", in the request and in the call
        micro_policy.model = _Peek(len(tok), wrong_on=tok("Portland", add_special_tokens=False)["input_ids"])
        acc = pt.copy_accuracy(micro_policy, "eval-world:0", ids)
    finally:
        micro_policy.model = model
    assert acc["confirmed_address"] == pytest.approx(3 / 4)   # address1, address2, city (wrong), state
    assert acc["confirmed_zip"] == acc["confirmed_country"] == acc["confirmed_order_id"] == 1.0
    assert acc["confirmed"] == pytest.approx(6 / 7)
    assert acc["address"] == 0.75 and acc["all"] < 1.0        # the call repeats the address


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = pt.PretrainConfig(steps=100, warmup=10, lr=1.0, min_lr_frac=0.1)
    assert pt.lr_at(cfg, 0) == pytest.approx(0.1) and pt.lr_at(cfg, 9) == pytest.approx(1.0)
    assert pt.lr_at(cfg, 99) == pytest.approx(0.1, abs=1e-3)


def test_smoke_run_resumes_bit_identically_on_one_thread(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pt.pretrain(SMOKE, tmp_path / "a", log=lambda m: None)
        pt.pretrain(SMOKE, tmp_path / "b", log=lambda m: None, stop_after=2)
        with pytest.raises(FileExistsError):
            pt.pretrain(SMOKE, tmp_path / "b", log=lambda m: None)
        pt.pretrain(SMOKE, tmp_path / "b", resume=True, log=lambda m: None)
    finally:
        torch.set_num_threads(threads)
    wa, wb = (load_file(str(tmp_path / x / "checkpoint" / "model.safetensors")) for x in "ab")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    drop = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows  # noqa: E731
                         if r["kind"] != "session"]
    ra, rb = ([json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in "ab")
    assert drop(ra) == drop(rb) and [r["kind"] for r in ra].count("eval") == 3
    # each (re)start records the code it ran, and the totals list them
    assert [r["step"] for r in rb if r["kind"] == "session"] == [0, 2]
    code = pt.run_totals(tmp_path / "b", 4)["stages"][-1]["code"]
    assert [c["from_step"] for c in code] == [0, 2] and all("commit" in c and "dirty" in c for c in code)
    assert [r["phase"] for r in ra if r["kind"] == "train"] == ["induction", "lookup"] + ["copy"] * 2 + ["episodes"] * 2
    assert (tmp_path / "a" / "step_4" / "config.json").is_file()


def test_resume_refuses_a_missing_checkpoint_or_another_config(tmp_path, capsys):
    with pytest.raises(ResumeError, match="nothing to resume"):
        pt.pretrain(SMOKE, tmp_path, resume=True, log=lambda m: None)
    pt.pretrain(SMOKE, tmp_path, log=lambda m: None, stop_after=2)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(ResumeError, match="seed 0 in the run, 7 now"):
        pt.pretrain(SMOKE, tmp_path, seed=7, resume=True, log=lambda m: None)
    assert pt.main(["--profile", "smoke", "--out", str(tmp_path), "--resume", "--seed", "7"]) == 2
    assert "seed 0 in the run" in capsys.readouterr().err
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_resume_takes_fields_added_since_the_run_started_at_their_value_now(tmp_path):
    pt.pretrain(SMOKE, tmp_path, log=lambda m: None, stop_after=2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    del rows[0]["rollout"]["drop_pad_slots"]              # a run started before the field existed
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = []
    pt.pretrain(SMOKE, tmp_path, resume=True, log=lines.append)
    assert any("rollout.drop_pad_slots is new since the run started" in m for m in lines)
    rows[0]["rollout"]["max_turns"] += 1                  # a field the run knows still has to match
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ResumeError, match="rollout .* in the run"):
        pt.pretrain(SMOKE, tmp_path, resume=True, log=lambda m: None)


@pytest.mark.parametrize("profile", ["episodes", "confirm", "names", "items", "slips", "idstart"])
def test_the_later_stage_profiles_train_whole_episodes_from_their_first_step(profile):
    cfg = pt.PretrainConfig(**pt.PROFILES[profile])
    assert {pt.phase_of(cfg, s) for s in range(cfg.steps)} == {"episodes"}
    assert pt.episodes_before(cfg, 10) == 10 * cfg.batch
    assert pt.lr_at(cfg, cfg.warmup) == pytest.approx(cfg.lr)


def test_select_step_takes_the_latest_base_in_the_band():
    rows = [{"kind": "config"}] + [{"kind": "eval", "step": s, "mean_at_1": m, "write_mean_at_1": w}
                                   for s, m, w in [(1, 0.1, 0.0), (2, 0.2, 0.15), (3, 0.3, 0.2), (4, 0.5, 0.4)]]
    assert pt.select_step(rows)["step"] == 3 and pt.select_step(rows)["in_band"]
    rows = [rows[0], rows[1], {**rows[4], "mean_at_1": 0.05, "write_mean_at_1": 0.0}]
    assert pt.select_step(rows)["step"] == 4 and not pt.select_step(rows)["in_band"]


def test_a_second_stage_starts_from_the_first_and_its_totals_add_up(tmp_path):
    with torch.random.fork_rng():
        pt.pretrain(SMOKE, tmp_path / "a", log=lambda m: None)
        init = pt.last_step_dir(str(tmp_path / "a"))
        assert init == str(tmp_path / "a" / f"step_{SMOKE.steps}")
        frozen = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "init": init, "lr": 0.0, "steps": 2, "eval_every": 2})
        pt.pretrain(frozen, tmp_path / "b", seed=1, log=lambda m: None)
    start = load_file(f"{init}/model.safetensors")
    after = load_file(str(tmp_path / "b" / "step_2" / "model.safetensors"))   # lr 0: the init's weights
    assert start.keys() == after.keys() and all(torch.equal(start[k], after[k]) for k in start)
    totals = pt.run_totals(tmp_path / "b", 2)
    a_rows = [r for r in map(json.loads, (tmp_path / "a" / "metrics.jsonl").read_text().splitlines())
              if r["kind"] == "train"]
    assert [s["run"] for s in totals["stages"]] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert totals["stages"][0]["tokens_seen"] == sum(r["tokens"] for r in a_rows)
    assert totals["tokens_seen"] == sum(s["tokens_seen"] for s in totals["stages"])
    assert totals["stages"][1]["worlds"][0] == pt.train_world(1, 0)
    # one curve: the first stage's rows up to the init step, then the second's, steps added up
    history = pt.history_rows(tmp_path / "b", 2)
    a_rows_all, b_rows = ([json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
                          for d in "ab")
    assert [r["stage"] for r in history] == [0] * len(a_rows_all) + [1] * len(b_rows)
    assert [r["total_step"] for r in history if r["kind"] == "train"] == list(range(1, SMOKE.steps + 3))   # a train row counts the steps done
    assert [{k: v for k, v in r.items() if k not in ("stage", "total_step")} for r in history] == a_rows_all + b_rows
    with pytest.raises(FileNotFoundError):
        pt.last_step_dir(_empty_run(tmp_path))


def test_a_stage_from_a_shipped_base_continues_its_history_even_when_it_ships_over_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pt, "EVAL_TASKS", 11)      # the shipped evaluation: one task per kind
    base = tmp_path / "base"
    with torch.random.fork_rng():
        pt.pretrain(SMOKE, tmp_path / "a", log=lambda m: None)
        pt.ship(tmp_path / "a", base, 0, "stage a")
        first = json.loads((base / "manifest.json").read_text())
        a_history = (base / "pretrain_metrics.jsonl").read_text()
        cfg = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "init": str(base), "steps": 2, "eval_every": 2})
        pt.pretrain(cfg, tmp_path / "b", seed=1, log=lambda m: None)
        pt.ship(tmp_path / "b", base, 1, "stage b")    # replaces the base it started from
    second = json.loads((base / "manifest.json").read_text())
    assert second["stages"][:-1] == first["stages"] and second["stages"][-1]["run"] == str(tmp_path / "b")
    assert second["tokens_seen"] == first["tokens_seen"] + second["stages"][-1]["tokens_seen"]
    history = [json.loads(x) for x in (base / "pretrain_metrics.jsonl").read_text().splitlines()]
    a_rows = [json.loads(x) for x in a_history.splitlines()]
    assert history[:len(a_rows)] == a_rows and {r["stage"] for r in history[len(a_rows):]} == {1}
    assert [r["total_step"] for r in history if r["kind"] == "train"] == list(range(1, SMOKE.steps + 3))
    # rerunning either finished stage with --ship ships nothing: the base already holds both
    assert pt.shipped_from(base, tmp_path / "a") and pt.shipped_from(base, tmp_path / "b")
    assert not pt.shipped_from(tmp_path / "nothing", tmp_path / "a")
    before = (base / "manifest.json").read_text()
    assert pt.main(["--out", str(tmp_path / "a"), "--profile", "smoke", "--resume", "--ship", str(base)]) == 0
    assert (base / "manifest.json").read_text() == before


def test_a_base_shipped_before_stages_were_recorded_counts_as_stage_0(tmp_path):
    (tmp_path / "init_manifest.json").write_text(json.dumps(
        {"command": "old", "step": 5, "seed": 0, "git": {"commit": "x", "dirty": False},
         "data": {"worlds": ["train-world:0"]}, "tokens_seen": 100, "wall_time_s": 2.0}))
    (tmp_path / "init_history.jsonl").write_text(json.dumps({"kind": "train", "step": 5}) + "\n")
    rows, stages = pt.shipped_history(tmp_path)
    assert rows == [{"kind": "train", "step": 5, "stage": 0, "total_step": 5}]
    assert [(s["step"], s["tokens_seen"], s["code"]) for s in stages] == [(5, 100, [{"commit": "x", "dirty": False}])]
    assert pt.shipped_history(tmp_path / "nothing") == ([], [])


def _empty_run(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    return str(tmp_path / "empty")


def test_mixed_induction_comes_after_the_induction_phase_and_apart_from_it(micro_policy):
    cfg = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "induction_mix": 3})
    stream = pt.EpisodeStream(micro_policy, cfg, 0)
    assert stream.mixed_induction(0) == []                                   # step 0 is the induction phase
    mixed = stream.mixed_induction(cfg.induction_steps)
    s = cfg.induction_steps
    assert [r.ids for r in mixed] == [stream.induction(s, cfg.induction_batch + i).ids for i in range(3)]
    again = pt.EpisodeStream(micro_policy, cfg, 0).mixed_induction(s)
    assert [r.ids for r in mixed] == [r.ids for r in again]
    off = pt.EpisodeStream(micro_policy, pt.PretrainConfig(**{**pt.PROFILES["smoke"], "induction_mix": 0}), 0)
    assert off.mixed_induction(cfg.induction_steps) == []


def test_the_lookup_stage_forms_the_circuit_first_then_mixes_world_lookups(micro_policy):
    cfg = pt.PretrainConfig(**pt.PROFILES["lookups"])
    phases = [pt.phase_of(cfg, s) for s in range(cfg.steps)]
    assert phases == ["lookup"] * cfg.lookup_steps + ["episodes"] * (cfg.steps - cfg.lookup_steps)
    assert pt.episodes_before(cfg, cfg.lookup_steps + 3) == 3 * cfg.batch    # look-ups use no episodes
    small = pt.PretrainConfig(**pt.PROFILES["smoke"])
    stream = pt.EpisodeStream(micro_policy, small, 0)
    s = small.induction_steps                                                  # the look-up phase
    batch, phase = stream.batch(s)
    assert phase == "lookup" and len(batch) == small.lookup_batch and all(r.task_id == "lookup" for r in batch)
    assert stream.mixed_lookups(s) == []                                      # no world look-ups during it
    later = stream.mixed_lookups(s + 1)
    assert [r.task_id for r in later] == ["world-lookup"] * small.lookup_mix
    again = pt.EpisodeStream(micro_policy, small, 0).mixed_lookups(s + 1)    # a function of (seed, step)
    assert [r.ids for r in later] == [r.ids for r in again]
    assert pt.EpisodeStream(micro_policy, small, 1).mixed_lookups(s + 1)[0].ids != later[0].ids
    items = dataclasses.replace(small, item_lookup_mix=2)
    both = pt.EpisodeStream(micro_policy, items, 0).mixed_lookups(s + 1)
    assert [r.task_id for r in both] == ["world-lookup"] * small.lookup_mix + ["item-lookup"] * 2
    assert [r.ids for r in both[:small.lookup_mix]] == [r.ids for r in later]   # the world look-ups unchanged
    new = dataclasses.replace(items, new_item_lookup_mix=1)
    three = pt.EpisodeStream(micro_policy, new, 0).mixed_lookups(s + 1)
    assert [r.task_id for r in three] == [r.task_id for r in both] + ["new-item-lookup"]
    assert [r.ids for r in three[:-1]] == [r.ids for r in both]                  # the others unchanged
    calls = dataclasses.replace(new, call_lookup_mix=1)
    four = pt.EpisodeStream(micro_policy, calls, 0).mixed_lookups(s + 1)
    assert [r.task_id for r in four] == [r.task_id for r in three] + ["call-lookup"]
    assert [r.ids for r in four[:-1]] == [r.ids for r in three]
    lists = dataclasses.replace(calls, list_lookup_mix=2)
    five = pt.EpisodeStream(micro_policy, lists, 0).mixed_lookups(s + 1)
    assert [r.task_id for r in five] == [r.task_id for r in four] + ["list-lookup"] * 2
    assert [r.ids for r in five[:-2]] == [r.ids for r in four]
    requests = dataclasses.replace(lists, request_lookup_mix=1)
    six = pt.EpisodeStream(micro_policy, requests, 0).mixed_lookups(s + 1)
    assert [r.task_id for r in six] == [r.task_id for r in five] + ["request-lookup"]
    assert [r.ids for r in six[:-1]] == [r.ids for r in five]


def _assert_lookup_batches(stream, make, task: str, steps_and_worlds) -> None:
    """Each (step, world): `stream`'s batch is the look-up phase's, `make`'s look-ups (ids, masks and
    weights) in that training world of the run, one a seed of `stream._seed(step, i)`."""
    from sinkflex_lib.envs import load_source

    c, tok = stream.cfg, stream.policy.tokenizer
    for step, world in steps_and_worlds:
        batch, phase = stream.batch(step)
        data = load_source(pt.train_world(stream.seed, world))
        expected = [make(tok, data, stream._seed(step, i), c.value_weight) for i in range(c.lookup_batch)]
        assert phase == "lookup" and [r.ids for r in batch] == [r.ids for r in expected]
        assert [r.mask for r in batch] == [r.mask for r in expected]
        assert [r.old_logp for r in batch] == [r.old_logp for r in expected] and batch[0].task_id == task


def test_the_list_lookup_stage_trains_list_lookups_alone_in_a_new_world_every_episodes_per_world(micro_policy):
    from sinkflex_lib.rl.lookups import list_lookup

    cfg = pt.PretrainConfig(**pt.PROFILES["list-lookups"])
    assert [pt.phase_of(cfg, s) for s in range(cfg.steps)] == ["lookup"] * cfg.steps
    assert pt.lr_at(cfg, 0) == pt.lr_at(cfg, cfg.steps - 1) == cfg.lr              # constant, as the probe's
    small = dataclasses.replace(SMOKE, induction_steps=0, lookup_steps=3, lookup_kind="list", lookup_batch=2,
                                episodes_per_world=4)
    stream = pt.EpisodeStream(micro_policy, small, 3)
    assert stream.mixed_induction(0) != [] and pt.EpisodeStream(
        micro_policy, dataclasses.replace(small, induction_mix=0), 3).mixed_induction(0) == []
    # 2 examples a step, 4 a world
    _assert_lookup_batches(stream, list_lookup, "list-lookup", ((0, 0), (1, 0), (2, 1)))
    with pytest.raises(ValueError, match="lookup_kind"):
        pt.PretrainConfig(lookup_kind="lists")


def test_the_new_item_lookup_stage_trains_new_item_lookups_alone(micro_policy):
    from sinkflex_lib.rl.lookups import new_item_lookup

    cfg = pt.PretrainConfig(**pt.PROFILES["new-item-lookups"])
    assert [pt.phase_of(cfg, s) for s in range(cfg.steps)] == ["lookup"] * cfg.steps and cfg.induction_mix == 0
    small = dataclasses.replace(SMOKE, induction_steps=0, lookup_steps=2, lookup_kind="new_item", lookup_batch=2,
                                episodes_per_world=2)
    stream = pt.EpisodeStream(micro_policy, small, 4)
    # 2 examples a step, 2 a world: a world a step
    _assert_lookup_batches(stream, new_item_lookup, "new-item-lookup", ((0, 0), (1, 1)))


def test_grouped_loss_is_the_one_batch_loss_without_padding_short_rows_to_long_ones(micro_policy):
    from sinkflex_lib.rl.lookups import flat_lookup, list_lookup, request_lookup
    from sinkflex_lib.rl.rollout import collate

    tok, data = micro_policy.tokenizer, pt.load_source(pt.train_world(0, 0))
    rows = [request_lookup(tok, data, 0, 3.0), flat_lookup(tok, 1, 1.0), list_lookup(tok, data, 2, 3.0),
            flat_lookup(tok, 3, 1.0), request_lookup(tok, data, 4, 3.0)]
    assert len({r.task_id for r in rows}) == 3 and max(len(r.ids) for r in rows) > 4 * min(len(r.ids) for r in rows)
    torch.manual_seed(0)
    one, _ = pt.weighted_loss(micro_policy, collate(rows, micro_policy.pad_id))
    grouped = pt.grouped_loss(micro_policy, rows)
    assert grouped.item() == pytest.approx(one.item(), rel=1e-5)
    g1 = torch.autograd.grad(one, list(micro_policy.model.parameters()))
    g2 = torch.autograd.grad(grouped, list(micro_policy.model.parameters()))
    assert max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-12)) for a, b in zip(g1, g2)) < 1e-4


def test_slips_come_at_their_rate_before_a_call_with_an_id_and_only_in_whole_episodes(micro_policy):
    from sinkflex_lib.envs.oracle import oracle_script, slipped_call
    cfg = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "slip_rate": 0.5, "episodes_per_world": 50})
    stream, again = pt.EpisodeStream(micro_policy, cfg, 0), pt.EpisodeStream(micro_policy, cfg, 0)
    env, ids = stream._world(0)
    slips = [stream.slip_of(env, ids[e], e) for e in range(40)]
    assert slips == [again.slip_of(env, ids[e], e) for e in range(40)]          # a function of (seed, e)
    assert 10 <= sum(k is not None for k in slips) <= 30                          # 20 expected
    for e, k in enumerate(slips):
        if k is not None:
            assert slipped_call(oracle_script(env.data.tasks[ids[e]])[k]) is not None
    never = pt.EpisodeStream(micro_policy, dataclasses.replace(cfg, slip_rate=0.0), 0)
    always = pt.EpisodeStream(micro_policy, dataclasses.replace(cfg, slip_rate=1.0), 0)
    assert all(never.slip_of(env, ids[e], e) is None for e in range(40))
    assert all(always.slip_of(env, ids[e], e) is not None for e in range(40))
    error = micro_policy.tokenizer("Error", add_special_tokens=False)["input_ids"]
    has_error = lambda r: any(r.ids[i:i + len(error)] == error for i in range(len(r.ids)))  # noqa: E731
    assert has_error(always.example(0, short=False)) and not has_error(never.example(0, short=False))
    assert always.example(0, short=True).ids == never.example(0, short=True).ids   # the copy curriculum: none
    with pytest.raises(ValueError, match="slip_rate"):
        pt.PretrainConfig(slip_rate=1.5)


def _recovery_file(path, n: int = 6) -> list[dict]:
    """n recovery records by hand: the oracle's own slip before the first call of n tasks."""
    from sinkflex_lib.envs import RetailEnv
    from sinkflex_lib.envs.oracle import oracle_script, slip_points, slipped_call
    src = "train-world:5000000"
    env = RetailEnv(src)
    rows = []
    for tid in list(env.data.tasks)[:n]:
        k = slip_points(env.data.tasks[tid])[0]
        rows.append({"source": src, "task_id": tid, "seed": 0, "slip_at": k,
                     "slip": slipped_call(oracle_script(env.data.tasks[tid])[k])})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_recoveries_join_each_episode_step_once_a_pass_in_a_fixed_shuffle(micro_policy, tmp_path):
    from sinkflex_lib.envs import RetailEnv
    from sinkflex_lib.rl.warmstart import demonstration
    rows = _recovery_file(tmp_path / "r.jsonl")
    cfg = pt.PretrainConfig(**{**pt.PROFILES["smoke"], "recoveries": str(tmp_path / "r.jsonl"), "recovery_mix": 2})
    stream, again = pt.EpisodeStream(micro_policy, cfg, 0), pt.EpisodeStream(micro_policy, cfg, 0)
    first = pt.episodes_start(cfg)
    assert len(stream.batch(first - 1)[0]) == cfg.copy_batch                    # none in the copy curriculum
    env = RetailEnv(rows[0]["source"], max_steps=60)
    expected = {r["task_id"]: demonstration(micro_policy, env, r["task_id"], 0, cfg.max_tokens,
                                            tool_weight=cfg.tool_loss_weight, value_weight=cfg.value_weight,
                                            decision_weight=cfg.decision_weight, slip_at=r["slip_at"],
                                            slip=r["slip"]).ids for r in rows}
    seen = []
    for step in range(first, first + 3):                   # 3 steps x 2 = one pass over the 6 records
        examples, phase = stream.batch(step)
        assert phase == "episodes" and len(examples) == cfg.batch + 2
        assert [x.ids for x in examples] == [x.ids for x in again.batch(step)[0]]
        for x in examples[cfg.batch:]:
            assert x.ids == expected[x.task_id]
            seen.append(x.task_id)
    assert sorted(seen) == sorted(r["task_id"] for r in rows) and seen != [r["task_id"] for r in rows]
    with pytest.raises(ValueError, match="recovery_mix needs"):
        pt.PretrainConfig(recovery_mix=2)


def test_a_run_with_recoveries_resumes_only_on_the_same_records(tmp_path):
    _recovery_file(tmp_path / "r.jsonl", 2)
    cfg = dataclasses.replace(SMOKE, recoveries=str(tmp_path / "r.jsonl"), recovery_mix=1)
    pt.pretrain(cfg, tmp_path / "run", log=lambda m: None, stop_after=5)
    train = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(train[0]["recoveries_sha256"]) == 64
    (tmp_path / "r.jsonl").write_text((tmp_path / "r.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(ResumeError, match="recoveries_sha256"):
        pt.pretrain(cfg, tmp_path / "run", resume=True, log=lambda m: None)


def test_the_recover_profile_asks_for_its_records(tmp_path, capsys):
    with pytest.raises(SystemExit):
        pt.main(["--profile", "recover", "--out", str(tmp_path / "run")])
    assert "recovery_mix needs a file of recoveries" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("init, says", [("/no/such/policy", "existing local model directory"),
                                        ("RUN", "has saved no step_<N>/ yet")])
def test_a_bad_init_is_refused_before_anything_is_written(tmp_path, capsys, init, says):
    if init == "RUN":       # a run folder that has not saved a step
        init = tmp_path / "early"
        init.mkdir()
        (init / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit) as e:
        pt.main(["--profile", "smoke", "--init", str(init), "--out", str(tmp_path / "run")])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_cli_sets_the_look_up_phase_apart_from_the_steps(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(pt, "pretrain", lambda cfg, out, **kw: seen.append(cfg))
    assert pt.main(["--profile", "new-item-lookups", "--steps", "600", "--out", str(tmp_path / "a")]) == 0
    assert pt.main(["--profile", "new-item-lookups", "--steps", "600", "--lookup-steps", "600",
                    "--out", str(tmp_path / "b")]) == 0
    (longer, alone) = seen
    assert [pt.phase_of(longer, s) for s in (199, 200)] == ["lookup", "episodes"]
    assert {pt.phase_of(alone, s) for s in range(600)} == {"lookup"} and alone.steps == 600
