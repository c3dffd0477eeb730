"""Checkpoints this project trains and ships: ``data/checkpoints/<name>/`` with a manifest.

A shipped checkpoint is a loadable policy directory (``config.json``, ``model.safetensors``, the
tokenizer files; ``build_policy("<name>")`` loads it) plus ``manifest.json``: the command, git
commit, seed, data, tokens seen, wall time and device of the run that made it, its evaluation,
and two fingerprints, of the tokenizer and of the model shape it was trained with.
:func:`check_checkpoint` compares those with the current code, so a changed tokenizer or
preset cannot silently pair with stale weights.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..paths import TOKENIZER_DIR
from .policy import POLICY_PRESETS, policy_shape

SHIPPED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
MAX_FILE_BYTES = 25 * 2**20


def tokenizer_fingerprint(folder: str | Path) -> str:
    """sha256 of the tokenizer in `folder`, re-serialised (independent of JSON formatting)."""
    from tokenizers import Tokenizer

    text = Tokenizer.from_file(str(Path(folder) / "tokenizer.json")).to_str()
    return hashlib.sha256(text.encode()).hexdigest()


def shape_of(config: dict, preset: str) -> dict:
    """The fields of `config` that the policy preset `preset` sets, and the vocabulary size."""
    return {k: config.get(k) for k in (*policy_shape(preset), "vocab_size")}


def export_checkpoint(src: str | Path, dest: str | Path, preset: str, manifest: dict) -> Path:
    """Copy the policy directory `src` to `dest` with `manifest` and its fingerprints added."""
    src, dest = Path(src), Path(dest)
    config = json.loads((src / "config.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_FILES + ("chat_template.jinja",):
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)
    too_big = [p.name for p in dest.iterdir() if p.stat().st_size > MAX_FILE_BYTES]
    if too_big:
        raise ValueError(f"files over {MAX_FILE_BYTES >> 20} MiB cannot be shipped: {too_big}")
    full = {**manifest, "preset": preset, "shape": shape_of(config, preset),
            "tokenizer_sha256": tokenizer_fingerprint(src)}
    (dest / "manifest.json").write_text(json.dumps(full, indent=1) + "\n")
    return dest


def check_checkpoint(folder: str | Path, tokenizer_dir: str | Path = TOKENIZER_DIR) -> list[str]:
    """Problems that make the checkpoint in `folder` unfit for the current code (empty: fit)."""
    folder = Path(folder)
    missing = [n for n in SHIPPED_FILES + ("manifest.json",) if not (folder / n).is_file()]
    if missing:
        return [f"{folder} lacks {', '.join(missing)}"]
    manifest = json.loads((folder / "manifest.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    problems = []
    current = tokenizer_fingerprint(tokenizer_dir)
    if manifest.get("tokenizer_sha256") != current or tokenizer_fingerprint(folder) != current:
        problems.append(f"the tokenizer of {folder} is not the project tokenizer in {tokenizer_dir} "
                        f"(retrain with `make pretrain`)")
    preset = manifest.get("preset")
    if preset not in POLICY_PRESETS:
        problems.append(f"manifest preset {preset!r} is not one of {sorted(POLICY_PRESETS)}")
    elif {k: config.get(k) for k in policy_shape(preset)} != policy_shape(preset):
        problems.append(f"the model shape of {folder} differs from the {preset!r} preset")
    return problems
