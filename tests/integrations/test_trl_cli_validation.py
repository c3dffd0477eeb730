"""`python -m sinkflex_lib.integrations.trl train` refuses bad --set and --trl values before the
warm start or anything else runs (issue 14)."""

import pytest

from sinkflex_lib.integrations.trl import trainer
from sinkflex_lib.integrations.trl.__main__ import main


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("training started although the arguments were bad")
    monkeypatch.setattr(trainer, "train_trl", refuse)


def run(tmp_path, *extra):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--profile", "smoke", "--out", str(tmp_path / "run"), *extra])
    assert exit_.value.code == 2
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("item,match", [
    ('steps="abc"', "--set steps: expected an integer >= 1, got 'abc'"),
    ("steps=0", "--set steps: expected an integer >= 1"),
    ("val_every=true", "--set val_every: expected an integer >= 1"),
    ("lr=fast", "--set lr: expected float"),
    ("lr=NaN", "--set lr: expected float"),
    ("norm_adv_by_std=1", "--set norm_adv_by_std: expected bool"),
    ("sample_groups=2.5", "--set sample_groups: expected an integer >= 1 or null"),
    ("no_such_field=1", "--set no_such_field: not a TrainConfig field"),
])
def test_bad_set_values_are_refused_before_any_work(item, match, no_training, tmp_path, capsys):
    run(tmp_path, "--set", item)
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--steps", "--threads", "--lora-r", "--seed"])
def test_bad_integer_flags_are_refused(flag, no_training, tmp_path, capsys):
    run(tmp_path, flag, "-1")
    assert f"argument {flag}: expected an integer in [" in capsys.readouterr().err


def test_unknown_trl_field_is_refused_before_the_warm_start(no_training, tmp_path, capsys):
    run(tmp_path, "--trl", "no_such_field=1")
    assert "unknown GRPOConfig field(s) ['no_such_field']" in capsys.readouterr().err


def test_trl_path_refuses_bf16_and_two_lora_ranks(tmp_path):
    from sinkflex_lib.integrations.trl.trainer import train_trl
    from sinkflex_lib.rl.config import TrainConfig

    with pytest.raises(ValueError, match="trains in float32"):
        train_trl(TrainConfig.from_profile("smoke", dtype="bfloat16"), tmp_path)
    with pytest.raises(ValueError, match="two LoRA ranks"):
        train_trl(TrainConfig.from_profile("smoke", lora=8), tmp_path, lora_r=4)
    assert not any(tmp_path.iterdir())


def test_the_lora_rank_comes_from_the_flag_or_the_config():
    from sinkflex_lib.integrations.trl.trainer import lora_rank
    from sinkflex_lib.rl.config import TrainConfig

    smoke = TrainConfig.from_profile("smoke")
    assert lora_rank(smoke, None) is None and lora_rank(smoke, 4) == 4
    assert lora_rank(TrainConfig.from_profile("smoke", lora=8), None) == 8
    assert lora_rank(TrainConfig.from_profile("smoke", lora=8), 8) == 8
