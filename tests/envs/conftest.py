"""Fixtures for the environment tests: a tiny hand-made database and the tau2 data location."""

import copy
from pathlib import Path

import pytest

from sinkflex_lib.envs.db import BaseDB

REPO_ROOT = Path(__file__).resolve().parents[2]
TAU2_DATA = REPO_ROOT.parent / "shared" / "tau2" / "data"
needs_tau2_data = pytest.mark.skipif(
    not (TAU2_DATA / "tau2" / "domains" / "retail" / "tasks.json").is_file(),
    reason="../shared/tau2/data is absent")


def _addr(zip_):
    return {"address1": "1 Main St", "address2": "", "city": "Austin", "country": "USA",
            "state": "TX", "zip": zip_}


def _item(name, pid, iid, price, options):
    return {"name": name, "product_id": pid, "item_id": iid, "price": price, "options": options}


TINY = {
    "products": {
        "p_shirt": {"name": "Shirt", "product_id": "p_shirt", "variants": {
            "s_red": {"item_id": "s_red", "options": {"color": "red"}, "available": True, "price": 10.0},
            "s_blue": {"item_id": "s_blue", "options": {"color": "blue"}, "available": True, "price": 12.5},
            "s_black": {"item_id": "s_black", "options": {"color": "black"}, "available": True, "price": 20.0},
            "s_gold": {"item_id": "s_gold", "options": {"color": "gold"}, "available": False, "price": 99.0},
        }},
        "p_mug": {"name": "Mug", "product_id": "p_mug", "variants": {
            "m_big": {"item_id": "m_big", "options": {"size": "big"}, "available": True, "price": 8},
            "m_small": {"item_id": "m_small", "options": {"size": "small"}, "available": True, "price": 6.0},
        }},
    },
    "users": {
        "ann_lee_1": {"user_id": "ann_lee_1", "name": {"first_name": "Ann", "last_name": "Lee"},
                      "address": _addr("78701"), "email": "Ann.Lee@example.com",
                      "payment_methods": {
                          "gift_card_1": {"source": "gift_card", "id": "gift_card_1", "balance": 5.0},
                          "credit_card_1": {"source": "credit_card", "id": "credit_card_1",
                                            "brand": "visa", "last_four": "1111"},
                          "paypal_1": {"source": "paypal", "id": "paypal_1"}},
                      "orders": ["#W1", "#W2", "#W3", "#W4"]},
        "bob_ray_2": {"user_id": "bob_ray_2", "name": {"first_name": "Bob", "last_name": "Ray"},
                      "address": _addr("78702"), "email": "bob@example.com",
                      "payment_methods": {"paypal_2": {"source": "paypal", "id": "paypal_2"}},
                      "orders": ["#W9"]},
    },
    "orders": {
        # pending, paid by credit card, two shirts (duplicate id) and a mug
        "#W1": {"order_id": "#W1", "user_id": "ann_lee_1", "address": _addr("78701"),
                "items": [_item("Shirt", "p_shirt", "s_red", 10.0, {"color": "red"}),
                          _item("Shirt", "p_shirt", "s_red", 10.0, {"color": "red"}),
                          _item("Mug", "p_mug", "m_small", 6.0, {"size": "small"})],
                "status": "pending", "fulfillments": [],
                "payment_history": [{"transaction_type": "payment", "amount": 26.0,
                                     "payment_method_id": "credit_card_1"}]},
        # pending, paid by gift card
        "#W2": {"order_id": "#W2", "user_id": "ann_lee_1", "address": _addr("78701"),
                "items": [_item("Mug", "p_mug", "m_big", 8.0, {"size": "big"})],
                "status": "pending", "fulfillments": [],
                "payment_history": [{"transaction_type": "payment", "amount": 8.0,
                                     "payment_method_id": "gift_card_1"}]},
        # delivered, paid by paypal
        "#W3": {"order_id": "#W3", "user_id": "ann_lee_1", "address": _addr("78701"),
                "items": [_item("Shirt", "p_shirt", "s_red", 10.0, {"color": "red"}),
                          _item("Mug", "p_mug", "m_small", 6.0, {"size": "small"})],
                "status": "delivered",
                "fulfillments": [{"tracking_id": ["123456789012"], "item_ids": ["s_red", "m_small"]}],
                "payment_history": [{"transaction_type": "payment", "amount": 16.0,
                                     "payment_method_id": "paypal_1"}]},
        "#W4": {"order_id": "#W4", "user_id": "ann_lee_1", "address": _addr("78701"),
                "items": [_item("Mug", "p_mug", "m_small", 6.0, {"size": "small"})],
                "status": "processed", "fulfillments": [],
                "payment_history": [{"transaction_type": "payment", "amount": 6.0,
                                     "payment_method_id": "paypal_1"}]},
        "#W9": {"order_id": "#W9", "user_id": "bob_ray_2", "address": _addr("78702"),
                "items": [_item("Mug", "p_mug", "m_small", 6.0, {"size": "small"})],
                "status": "pending", "fulfillments": [],
                "payment_history": [{"transaction_type": "payment", "amount": 6.0,
                                     "payment_method_id": "paypal_2"}]},
    },
}


@pytest.fixture
def tiny_raw():
    return copy.deepcopy(TINY)


@pytest.fixture
def tiny_base():
    return BaseDB(copy.deepcopy(TINY))


@pytest.fixture
def tiny_db(tiny_base):
    return tiny_base.episode()


@pytest.fixture
def tau2_env(monkeypatch):
    if not (TAU2_DATA / "tau2" / "domains" / "retail" / "tasks.json").is_file():
        pytest.skip("../shared/tau2/data is absent")
    monkeypatch.setenv("TAU2_DATA_DIR", str(TAU2_DATA))
    from sinkflex_lib.envs import RetailEnv
    return RetailEnv(source="tau2")
