"""Weight averaging: each tensor of the soup against numpy's float64 mean of the sources' tensors."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from sinkflex_lib.rl import soup as S
from sinkflex_lib.rl.policy import build_policy


def _save(policy, folder):
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def two_dirs(micro_policy_factory, tmp_path):
    return [_save(micro_policy_factory(seed=s), tmp_path / f"p{s}") for s in (0, 1)]


def test_mean_state_dict_is_the_weighted_mean_of_every_tensor():
    g = torch.Generator().manual_seed(0)
    sds = [{"w": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g, dtype=torch.float64),
            "n": torch.tensor([1, 2])} for _ in range(3)]
    w = [0.5, 0.3, 0.2]
    out = S.mean_state_dict(sds, w)
    for k in ("w", "b"):
        ref = sum(wi * sd[k].numpy().astype(np.float64) for wi, sd in zip(w, sds))
        np.testing.assert_allclose(out[k].numpy(), ref, rtol=1e-6 if k == "w" else 1e-15)
        assert out[k].dtype == sds[0][k].dtype
    assert torch.equal(out["n"], torch.tensor([1, 2]))
    assert torch.equal(S.mean_state_dict(sds, [0.0, 1.0, 0.0])["w"], sds[1]["w"])


@pytest.mark.parametrize("bad", [
    lambda a, b: ([a, {**b, "x": torch.zeros(1)}], None),           # other keys
    lambda a, b: ([a, {**b, "w": torch.zeros(2, 2)}], None),        # other shape
    lambda a, b: ([a, {**b, "n": torch.tensor([9, 9])}], None),     # integer tensors that differ
    lambda a, b: ([a, b], [0.5, 0.6]),                              # weights not summing to 1
    lambda a, b: ([a, b], [1.0]),                                   # one weight for two
    lambda a, b: ([], None),
])
def test_mean_state_dict_refuses_what_it_cannot_average(bad):
    a = {"w": torch.ones(3, 4), "n": torch.tensor([1, 2])}
    b = {"w": torch.zeros(3, 4), "n": torch.tensor([1, 2])}
    with pytest.raises(ValueError):
        S.mean_state_dict(*bad(a, b))


def test_a_soup_is_a_policy_with_the_mean_weights(two_dirs, tmp_path):
    dest = S.soup(two_dirs, tmp_path / "soup")
    got = load_file(str(dest / "model.safetensors"))
    a, b = (load_file(str(d / "model.safetensors")) for d in two_dirs)
    for k in got:
        ref = (a[k].double().numpy() + b[k].double().numpy()) / 2
        np.testing.assert_allclose(got[k].numpy(), ref, rtol=1e-6, atol=1e-7)
    assert json.loads((dest / "soup.json").read_text())["weights"] == [0.5, 0.5]
    policy = build_policy(str(dest))
    x = torch.tensor([[1, 2, 3]])
    logits = policy.model(input_ids=x).logits
    assert not torch.allclose(logits, build_policy(str(two_dirs[0])).model(input_ids=x).logits)


def test_a_soup_of_one_policy_with_itself_is_that_policy(two_dirs, tmp_path):
    dest = S.soup([two_dirs[0], two_dirs[0]], tmp_path / "same")
    a, got = (load_file(str(d / "model.safetensors")) for d in (two_dirs[0], dest))
    assert all(torch.equal(got[k], a[k]) for k in a)


def test_a_soup_refuses_other_configs_and_missing_weights(two_dirs, tmp_path):
    cfg = json.loads((two_dirs[1] / "config.json").read_text())
    (two_dirs[1] / "config.json").write_text(json.dumps({**cfg, "sliding_window": 7}))
    with pytest.raises(ValueError, match="sliding_window"):
        S.soup(two_dirs, tmp_path / "x")
    with pytest.raises(FileNotFoundError):
        S.soup([two_dirs[0], tmp_path / "nowhere"], tmp_path / "y")
    with pytest.raises(ValueError, match="at least one source"):
        S.soup([], tmp_path / "z")


def test_the_command_writes_a_soup_and_says_what_is_wrong(two_dirs, tmp_path, capsys):
    assert S.main([str(d) for d in two_dirs] + ["--out", str(tmp_path / "c"), "--weights", "0.25", "0.75"]) == 0
    assert json.loads((tmp_path / "c" / "soup.json").read_text())["weights"] == [0.25, 0.75]
    with pytest.raises(SystemExit) as e:
        S.main([str(d) for d in two_dirs] + ["--out", str(tmp_path / "d"), "--weights", "0.5"])
    assert e.value.code == 2 and "one weight per state dict" in capsys.readouterr().err


def test_weights_with_the_start_extrapolate_along_the_mean_move(micro_policy_factory, tmp_path):
    start, *runs = [_save(micro_policy_factory(seed=s), tmp_path / f"q{s}") for s in (0, 1, 2)]
    a = 2.0
    dest = S.soup([start, *runs], tmp_path / "far", weights=[1 - a, a / 2, a / 2])
    w0, w1, w2, got = (load_file(str(d / "model.safetensors")) for d in (start, *runs, dest))
    for k in got:
        s0 = w0[k].double().numpy()
        ref = s0 + a * ((w1[k].double().numpy() + w2[k].double().numpy()) / 2 - s0)
        np.testing.assert_allclose(got[k].numpy(), ref, rtol=1e-5, atol=1e-6)
