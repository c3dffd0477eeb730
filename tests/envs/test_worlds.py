"""Generated worlds: an eval world shares no id or e-mail with any training world."""

import re

import pytest

from sinkflex_lib.envs import RetailEnv, load_source
from sinkflex_lib.envs.data import WORLD_PARTITIONS, world_source
from sinkflex_lib.envs.synthetic import generate_world, id_partition
from sinkflex_lib.rl.pretrain import train_world


def identifiers(source: str) -> set[str]:
    """Every user id, e-mail, order, product, item and payment-method id of a world's database."""
    prefix, seed = source.split(":")
    raw = generate_world(int(seed), WORLD_PARTITIONS[prefix])[0]
    out = set()
    for uid, u in raw["users"].items():
        out |= {uid, u["email"], *u["payment_methods"]}
    out |= set(raw["orders"])
    for pid, p in raw["products"].items():
        out |= {pid, *p["variants"]}
    return out


def test_eval_world_ids_never_occur_in_training_worlds():
    held_out = identifiers(world_source("eval", 0))
    assert len(held_out) > 300
    for k in range(0, 100, 5):     # the worlds a pretraining run of seed 0 draws from first
        assert not held_out & identifiers(train_world(0, k))
    assert not held_out & identifiers(world_source("train", 1000))   # GRPO's training world


def test_every_number_of_an_eval_world_is_in_the_eval_partition():
    for ident in identifiers(world_source("eval", 1)):
        for digits in re.findall(r"\d+", ident):
            assert id_partition(digits) == "eval", ident


def test_worlds_are_deterministic_complete_and_solvable():
    a, b = generate_world(5, "train"), generate_world(5, "train")
    assert a == b and len(a[1]) == 335
    env = RetailEnv(world_source("train", 5))
    assert env.reset(seed=0, options={"task_id": "cancel_000"})[0].startswith("user: ")


def test_world_sources_reject_bad_names():
    with pytest.raises(ValueError, match="world seed"):
        world_source("eval", -1)
    with pytest.raises(ValueError, match="partition"):
        world_source("test", 0)
    with pytest.raises(ValueError, match="integer seed"):
        load_source("eval-world:x")
