"""Several GRPO seeds: the per-run results and the mean and spread across runs."""

import json

import pytest

from sinkflex_lib.rl import seeds as seeds_mod
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.runstate import append_metrics, read_metrics
from sinkflex_lib.rl.seeds import run_result, summarize_seeds, train_seeds


def _val(step, overall, write, refuse, elapsed, do_nothing=0.2):
    return {"kind": "val", "step": step, "elapsed_s": elapsed, "val_reward": overall,
            "val_write_reward": write, "val_per_kind": {"cancel": write, "refuse": refuse},
            "val_do_nothing_reward": do_nothing, "val_oracle_reward": 1.0}


def _fake_run(path, seed, first, last, elapsed, do_nothing=0.2):
    path.mkdir(parents=True)
    append_metrics(path / "metrics.jsonl", {"kind": "config", "step": 0, "seed": seed})
    append_metrics(path / "metrics.jsonl", _val(0, *first, 0.0, do_nothing))
    append_metrics(path / "metrics.jsonl", {"kind": "train", "step": 1})
    append_metrics(path / "metrics.jsonl", _val(2, *last, elapsed, do_nothing))


def test_mean_and_sample_spread_across_seeds(tmp_path):
    # last overall 0.2, 0.3, 0.4 -> mean 0.3, sample std 0.1; lifts 0.1, 0.2, 0.3 -> mean 0.2, std 0.1
    for seed, (o, w) in enumerate([(0.2, 0.0), (0.3, 0.1), (0.4, 0.2)]):
        _fake_run(tmp_path / f"seed_{seed}", seed, (0.1, 0.0, 0.5), (o, w, 0.5), 60.0 * (seed + 1))
    s = summarize_seeds(sorted(tmp_path.iterdir()))
    assert s["n_seeds"] == 3 and s["seeds"] == [0, 1, 2]
    a = s["across_seeds"]
    assert a["last"]["mean_at_1"] == pytest.approx({"mean": 0.3, "std": 0.1})
    assert a["lift"]["mean_at_1"] == pytest.approx({"mean": 0.2, "std": 0.1})
    assert a["lift"]["write_mean_at_1"] == pytest.approx({"mean": 0.1, "std": 0.1})
    assert a["lift"]["kind:refuse"] == pytest.approx({"mean": 0.0, "std": 0.0})
    assert a["wall_s"] == pytest.approx({"mean": 120.0, "std": 60.0})
    assert s["do_nothing_mean_at_1"] == 0.2 and s["oracle_mean_at_1"] == 1.0
    assert s["runs"][1]["last_step"] == 2 and s["runs"][1]["first"]["kind:cancel"] == 0.0


def test_one_seed_has_zero_spread_and_runs_must_share_their_tasks(tmp_path):
    _fake_run(tmp_path / "a", 0, (0.1, 0.0, 0.5), (0.3, 0.1, 0.5), 10.0)
    assert summarize_seeds([tmp_path / "a"])["across_seeds"]["last"]["mean_at_1"] == {"mean": 0.3, "std": 0.0}
    _fake_run(tmp_path / "b", 1, (0.1, 0.0, 0.5), (0.3, 0.1, 0.5), 10.0, do_nothing=0.25)
    with pytest.raises(ValueError, match="different tasks"):
        summarize_seeds([tmp_path / "a", tmp_path / "b"])
    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match="no step-0 validation"):
        run_result(tmp_path / "c")


def test_train_seeds_trains_each_seed_in_its_folder_and_resumes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("sinkflex_lib.rl.train.train",
                        lambda cfg, d, seed, resume, log: calls.append((d.name, seed, resume)) or d.mkdir(exist_ok=True))
    cfg = TrainConfig.from_profile("smoke")
    assert train_seeds(cfg, [3, 5], tmp_path, log=lambda m: None) == [tmp_path / "seed_3", tmp_path / "seed_5"]
    (tmp_path / "seed_5" / "checkpoint").mkdir()
    train_seeds(cfg, [3, 5], tmp_path, resume=True, log=lambda m: None)
    assert calls == [("seed_3", 3, False), ("seed_5", 5, False), ("seed_3", 3, False), ("seed_5", 5, True)]
    with pytest.raises(ValueError, match="distinct"):
        train_seeds(cfg, [1, 1], tmp_path)


def test_cli_trains_two_smoke_seeds_and_writes_the_summary(tmp_path, capsys):
    assert seeds_mod.main(["--profile", "smoke", "--seeds", "0", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "seeds.json").read_text())
    assert summary["seeds"] == [0, 1]
    for s in (0, 1):   # each run is the trainer's own run folder, validated at step 0 and at its last step
        vals = [r for r in read_metrics(tmp_path / f"seed_{s}") if r["kind"] == "val"]
        assert summary["runs"][s]["last"]["mean_at_1"] == vals[-1]["val_reward"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary["across_seeds"]
