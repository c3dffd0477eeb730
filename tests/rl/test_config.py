import pytest

from sinkflex_lib.rl.config import field_value, train_config_overrides


def test_good_values_are_taken_with_their_field_types():
    over = train_config_overrides(["lr=1", "sample_groups=null", "source=mini", "threads=2",
                                   "policy_overrides={\"hidden_size\": 64}", "shuffle_rewards=true",
                                   "train_tasks=[\"cancel_000\"]"])
    assert over == {"lr": 1.0, "sample_groups": None, "source": "mini", "threads": 2,
                    "policy_overrides": {"hidden_size": 64}, "shuffle_rewards": True, "train_tasks": ["cancel_000"]}
    assert isinstance(over["lr"], float)


@pytest.mark.parametrize("item, match", [("beta", "FIELD=VALUE"), ("=1", "FIELD=VALUE"), ("no_such=1", "not a TrainConfig field"),
                                         ("shuffle_rewards=1", "expected bool"), ("steps=0", "an integer >= 1"),
                                         ("lr=nan", "expected float")])
def test_bad_items_are_refused_naming_the_field(item, match):
    with pytest.raises(ValueError, match=match):
        train_config_overrides([item])


def test_a_value_that_is_not_json_stays_a_string():
    assert field_value("source=train-world:1000") == ("source", "train-world:1000")
    assert field_value("x=[1, 2]") == ("x", [1, 2])
