"""Depth growth: the grown policy against its source's logits, layer by layer against its weights."""

import json

import pytest
import torch
from safetensors.torch import load_file

from sinkflex_lib.rl import grow as G
from sinkflex_lib.rl.policy import build_policy


@pytest.fixture
def source(micro_policy_factory, tmp_path):
    policy = micro_policy_factory(seed=3)
    policy.model.save_pretrained(tmp_path / "src")
    policy.tokenizer.save_pretrained(tmp_path / "src")
    return tmp_path / "src"


def _logits(policy, ids):
    policy.model.eval()
    with torch.no_grad():
        return policy.model(ids).logits


def test_grown_policy_computes_its_sources_logits(source, tmp_path):
    dest = G.grow(source, tmp_path / "grown", [0, 1])
    src, grown = build_policy(str(source)), build_policy(str(dest))
    ids = torch.randint(10, 200, (2, 40), generator=torch.Generator().manual_seed(0))
    assert grown.model.config.num_hidden_layers == 4
    assert grown.model.config.layer_types == [src.model.config.layer_types[i] for i in (0, 0, 1, 1)]
    assert torch.equal(_logits(grown, ids), _logits(src, ids))
    # the check can fail: a copy whose attention output is not zero changes the logits
    with torch.no_grad():
        grown.model.model.layers[1].self_attn.o_proj.bias.fill_(0.1)
    assert not torch.allclose(_logits(grown, ids), _logits(src, ids))


def test_copies_keep_the_layers_weights_but_their_output_projections(source, tmp_path):
    dest = G.grow(source, tmp_path / "grown", [1])
    before, after = load_file(str(source / "model.safetensors")), load_file(str(dest / "model.safetensors"))
    layer = {k.split("layers.1.")[1]: v for k, v in before.items() if "layers.1." in k}
    for j in (1, 2):                        # layer 1 and its copy
        for name, value in layer.items():
            got = after[f"model.layers.{j}.{name}"]
            zero = j == 2 and name in G.OUTPUT_PROJECTIONS
            assert torch.equal(got, torch.zeros_like(value) if zero else value), (j, name)
    assert set(after) == set(before) | {f"model.layers.2.{name}" for name in layer}
    assert json.loads((dest / "grow.json").read_text())["layers"] == [2, 3]


def test_a_trained_copy_moves_off_the_identity(source, tmp_path):
    grown = build_policy(str(G.grow(source, tmp_path / "grown", [1])))
    ids = torch.randint(10, 200, (2, 40), generator=torch.Generator().manual_seed(1))
    start = _logits(grown, ids)
    grown.model.train()
    opt = torch.optim.SGD(grown.model.parameters(), lr=0.1)
    grown.model(ids, labels=ids).loss.backward()
    assert grown.model.model.layers[2].self_attn.o_proj.weight.grad.abs().sum() > 0
    opt.step()
    assert grown.model.model.layers[2].self_attn.o_proj.weight.abs().sum() > 0
    assert not torch.allclose(_logits(grown, ids), start)


@pytest.mark.parametrize("after", [[], [2], [-1], [0, 0]])
def test_bad_layers_are_refused(after):
    with pytest.raises(ValueError, match="distinct layers in 0..1"):
        G.grown_order(2, after)


def test_grown_config_inserts_each_copy_after_its_layer():
    config = {"num_hidden_layers": 4, "layer_types": ["s", "f", "s", "f"], "hidden_size": 8}
    assert G.grown_config(config, [1, 3]) == {"num_hidden_layers": 6, "hidden_size": 8,
                                                "layer_types": ["s", "f", "f", "s", "f", "f"]}


def test_cli_writes_a_loadable_policy_and_refuses_a_missing_source(source, tmp_path, capsys):
    assert G.main([str(source), "--after", "1", "--out", str(tmp_path / "g")]) == 0
    assert "2 -> 3 layers" in capsys.readouterr().out
    assert build_policy(str(tmp_path / "g")).model.config.num_hidden_layers == 3
    with pytest.raises(SystemExit):
        G.main([str(tmp_path / "nowhere"), "--after", "0", "--out", str(tmp_path / "h")])
