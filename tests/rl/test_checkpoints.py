"""Shipped checkpoints: they load, and their manifest matches the current tokenizer and preset."""

import json

import pytest
import torch

from sinkflex_lib.rl import checkpoints as ck
from sinkflex_lib.paths import CHECKPOINTS_DIR, TOKENIZER_DIR
from sinkflex_lib.rl.chat import train_tokenizer
from sinkflex_lib.rl.policy import build_policy


def _export(policy, tmp_path):
    src = tmp_path / "src"
    policy.model.save_pretrained(src)
    policy.tokenizer.save_pretrained(src)
    return ck.export_checkpoint(src, tmp_path / "micro-ckpt", "micro", {"command": "test"})


def test_an_exported_checkpoint_passes_and_loads(micro_policy, tmp_path):
    dest = _export(micro_policy, tmp_path)
    assert ck.check_checkpoint(dest) == []
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["preset"] == "micro" and manifest["command"] == "test"
    loaded = build_policy(str(dest))
    x = torch.tensor([[1, 2, 3]])
    assert torch.allclose(loaded.model(input_ids=x).logits, micro_policy.model(input_ids=x).logits, atol=1e-6)


def test_a_changed_tokenizer_or_shape_is_refused(micro_policy, tmp_path):
    dest = _export(micro_policy, tmp_path)
    other = tmp_path / "other_tok"
    train_tokenizer(["a small corpus of other text, 12345"], vocab_size=300).save_pretrained(other)
    assert any("tokenizer" in p for p in ck.check_checkpoint(dest, tokenizer_dir=other))
    cfg = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 3}))
    assert any("shape" in p for p in ck.check_checkpoint(dest))
    (dest / "manifest.json").unlink()
    assert any("lacks" in p for p in ck.check_checkpoint(dest))


def test_shipped_checkpoints_fit_the_current_code():
    shipped = sorted(p for p in CHECKPOINTS_DIR.iterdir() if p.is_dir())
    assert [p.name for p in shipped][:1] == ["base-tiny"]
    for folder in shipped:
        assert ck.check_checkpoint(folder, TOKENIZER_DIR) == [], folder
        manifest = json.loads((folder / "manifest.json").read_text())
        for key in ("command", "git", "seed", "tokens_seen", "wall_time_s", "device", "evaluation"):
            assert key in manifest, (folder, key)
        policy = build_policy(folder.name)
        assert policy.model.config.vocab_size == len(policy.tokenizer)


@pytest.mark.parametrize("lora", [None, 4])
def test_a_grpo_runs_checkpoint_becomes_a_policy_with_its_weights(tmp_path, lora):
    from sinkflex_lib.rl.config import TrainConfig
    from sinkflex_lib.rl.train import train

    cfg = TrainConfig.from_profile("smoke", bc_episodes=2, bc_epochs=1, steps=1, groups_per_step=1, group_size=2,
                                   minibatch_size=2, max_turns=2, max_tokens=400, max_new_tokens=8, val_tasks=1,
                                   lora=lora, lr=1e-2)
    trained = train(cfg, tmp_path / "run", seed=0, log=lambda m: None).policy
    assert ck.main([str(tmp_path / "run"), str(tmp_path / "policy")]) == 0
    loaded, fresh = build_policy(str(tmp_path / "policy")), build_policy(cfg.policy, seed=0)
    x = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = trained.model(input_ids=x).logits
        assert torch.allclose(loaded.model(input_ids=x).logits, want, atol=1e-5)
        assert not torch.allclose(fresh.model(input_ids=x).logits, want, atol=1e-3)    # training moved it
    assert json.loads((tmp_path / "policy" / "exported_from.json").read_text())["step"] == 1


def test_policy_from_run_refuses_a_folder_without_a_grpo_checkpoint(tmp_path, capsys):
    assert ck.main([str(tmp_path), str(tmp_path / "out")]) == 2
    assert "holds no GRPO checkpoint" in capsys.readouterr().err
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.json").write_text('{"step": 3}')     # a pretraining run's
    with pytest.raises(ValueError, match="not a GRPO run"):
        ck.policy_from_run(tmp_path, tmp_path / "out")


def test_copy_policy_files_copies_what_a_policy_directory_holds(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "notes.txt"):
        (src / name).write_text(name)
    ck.copy_policy_files(src, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    ck.copy_policy_files(src, tmp_path / "b", skip=("model.safetensors",))
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["config.json", "tokenizer.json"]
    assert (tmp_path / "b" / "config.json").read_text() == "config.json"


def test_weights_dirs_are_checked_and_written_with_their_tokenizer(tmp_path):
    from safetensors.torch import load_file

    src = tmp_path / "src"
    src.mkdir()
    (src / "tokenizer.json").write_text("tok")
    (src / "config.json").write_text('{"a": 1}')
    with pytest.raises(FileNotFoundError, match="not a policy directory"):
        ck.weights_dir(src)                 # no model.safetensors
    state = {"w": torch.arange(6.0).reshape(2, 3)}
    ck.write_weights_dir(tmp_path / "same", src, state)
    assert ck.weights_dir(tmp_path / "same") == tmp_path / "same"
    assert json.loads((tmp_path / "same" / "config.json").read_text()) == {"a": 1}
    assert (tmp_path / "same" / "tokenizer.json").read_text() == "tok"
    assert torch.equal(load_file(str(tmp_path / "same" / "model.safetensors"))["w"], state["w"])
    ck.write_weights_dir(tmp_path / "new", src, state, config={"a": 2})
    assert json.loads((tmp_path / "new" / "config.json").read_text()) == {"a": 2}
