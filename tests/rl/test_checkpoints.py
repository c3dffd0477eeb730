"""Shipped checkpoints: they load, and their manifest matches the current tokenizer and preset."""

import json

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
