"""Checkpoints this project trains and ships: ``data/checkpoints/<name>/`` with a manifest.

A shipped checkpoint is a loadable policy directory (``config.json``, ``model.safetensors``, the
tokenizer files; ``build_policy("<name>")`` loads it) plus ``manifest.json``: the command, git
commit, seed, data, tokens seen, wall time and device of the run that made it, its evaluation,
and two fingerprints, of the tokenizer and of the model shape it was trained with.
:func:`check_checkpoint` compares those with the current code, so a changed tokenizer or
preset cannot silently pair with stale weights.

A GRPO run's folder keeps its weights in ``checkpoint/`` (:mod:`.runstate`); :func:`policy_from_run`
turns them into a policy directory that ``evaluate --policy`` and ``build_policy`` load:

    python -m sinkflex_lib.rl.checkpoints RUN DEST
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

from ..paths import TOKENIZER_DIR
from .policy import POLICY_PRESETS, policy_dir, policy_shape

SHIPPED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
POLICY_FILES = SHIPPED_FILES + ("chat_template.jinja",)     # what a policy directory holds, where present
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
    copy_policy_files(src, dest)
    too_big = [p.name for p in dest.iterdir() if p.stat().st_size > MAX_FILE_BYTES]
    if too_big:
        raise ValueError(f"files over {MAX_FILE_BYTES >> 20} MiB cannot be shipped: {too_big}")
    full = {**manifest, "preset": preset, "shape": shape_of(config, preset),
            "tokenizer_sha256": tokenizer_fingerprint(src)}
    (dest / "manifest.json").write_text(json.dumps(full, indent=1) + "\n")
    return dest


def copy_policy_files(src: str | Path, dest: str | Path, skip: tuple[str, ...] = ()) -> None:
    """Copy the `POLICY_FILES` that `src` holds, but `skip`, into `dest` (created if missing)."""
    src, dest = Path(src), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in POLICY_FILES:
        if name not in skip and (src / name).is_file():
            shutil.copyfile(src / name, dest / name)


def weights_dir(name_or_path: str | Path) -> Path:
    """The directory of policy `name_or_path` (a shipped checkpoint's name or a path), checked to
    hold the weights and config that tools reading safetensors need (FileNotFoundError if not)."""
    path = policy_dir(name_or_path)
    if not (path / "model.safetensors").is_file() or not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a policy directory (config.json and model.safetensors)")
    return path


def write_weights_dir(dest: str | Path, like: str | Path, state: dict, config: dict | None = None) -> Path:
    """The policy directory `dest`: the weights `state`, `config` (None: `like`'s config.json) and
    the tokenizer files of the policy directory `like`."""
    from safetensors.torch import save_file

    dest = Path(dest)
    copy_policy_files(like, dest, skip=("model.safetensors",) + (() if config is None else ("config.json",)))
    if config is not None:
        (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
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


def policy_from_run(run_dir: str | Path, dest: str | Path) -> Path:
    """The weights of GRPO run `run_dir`'s checkpoint as a policy directory `dest`: the policy its
    TrainConfig trains (`train.policy_of`), the checkpoint's weights loaded into it (LoRA merged),
    saved with its tokenizer and ``exported_from.json`` (run, step)."""
    from safetensors.torch import load_file

    from .config import TrainConfig
    from .runstate import ResumeError, read_checkpoint_state
    from .train import policy_of

    ckpt = Path(run_dir) / "checkpoint"
    try:
        state = read_checkpoint_state(ckpt)
    except ResumeError:
        raise FileNotFoundError(f"{run_dir} holds no GRPO checkpoint (checkpoint/state.json)") from None
    c = state.get("config")
    if not isinstance(c, dict) or "policy" not in c:
        raise ValueError(f"{run_dir} is not a GRPO run: its checkpoint records no TrainConfig "
                         "(a pretraining run keeps its policies as step_<N>/)")
    cfg = TrainConfig(**{k: v for k, v in c.items() if k in TrainConfig.__dataclass_fields__})
    policy = policy_of(cfg)
    if policy.tokenizer is None:
        raise ValueError(f"{run_dir} trained a Harmony preset, which has no tokenizer to save with its weights")
    policy.model.load_state_dict(load_file(str(ckpt / "model.safetensors")))
    model = policy.model.merge_and_unload() if cfg.lora else policy.model
    dest = Path(dest)
    model.save_pretrained(dest)
    policy.tokenizer.save_pretrained(dest)
    (dest / "exported_from.json").write_text(json.dumps({"run": str(run_dir), "step": state["step"],
                                                        "policy": cfg.policy}, indent=1) + "\n")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.checkpoints",
                                 description="a GRPO run's checkpoint as a policy directory")
    ap.add_argument("run", help="a GRPO run folder (python -m sinkflex_lib.rl.train --out RUN)")
    ap.add_argument("dest", help="the policy directory to write")
    args = ap.parse_args(argv)
    try:
        dest = policy_from_run(args.run, args.dest)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {dest} (step {json.loads((dest / 'exported_from.json').read_text())['step']} of {args.run})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
