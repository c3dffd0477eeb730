"""Both trainers on one task from one warm start (notebook 06).

    runs = train_both(cfg, root, seed)     # root/warm_start, root/ours, root/trl
    fig = plot_validation(runs)

The warm start runs once (our `train` with steps=0: behaviour cloning, then the step-0
validation). Our trainer continues from it through its own `--resume` path (the warm-start
folder is copied to root/ours and resumed at step 1); TRL's GRPOTrainer loads the same weights.
Both validate with our `validate` (same held-out tasks, same seeds), so the curves differ only
through training.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import torch

from ...rl.rollout import RolloutConfig, collate, token_logprobs, without_pads
from ...rl.runstate import curve, read_metrics
from ...rl.config import TrainConfig
from ...rl.train import train
from .config import FIELD_MAP, grpo_config
from .rollout import DECODE_MODES, play
from .trainer import train_trl, warm_start_run


def train_both(cfg: TrainConfig, root, seed: int = 0, decode: str = "batch", log=print, **grpo_overrides) -> dict:
    """Warm start once, then GRPO with our trainer and with TRL's. Returns {"ours": rows,
    "trl": rows} (metrics.jsonl rows of each run) plus "seconds" per trainer."""
    root = Path(root)
    warm = warm_start_run(cfg, root / "warm_start", seed, log=log)
    ours_dir = root / "ours"
    if ours_dir.exists():
        shutil.rmtree(ours_dir)
    shutil.copytree(warm, ours_dir)
    t0 = time.perf_counter()
    train(cfg, ours_dir, seed=seed, resume=True, log=log)
    t1 = time.perf_counter()
    train_trl(cfg, root / "trl", seed=seed, warm_start_dir=warm, decode=decode, log=log, **grpo_overrides)
    t2 = time.perf_counter()
    return {"ours": read_metrics(ours_dir), "trl": read_metrics(root / "trl"),
            "seconds": {"ours": t1 - t0, "trl": t2 - t1}}


def plot_validation(runs: dict, title: str = "Validation mean@1, one warm start, two trainers"):
    """Validation reward (left) and training score (right) of both trainers on shared axes."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, style in (("ours", "o"), ("trl", "s")):
        label = {"ours": "ours (sinkflex_lib.rl.train)", "trl": "TRL GRPOTrainer"}[name]
        axes[0].plot(*curve(runs[name], "val", "val_reward"), style, ls=":", lw=1, label=label)
        axes[1].plot(*curve(runs[name], "train", "reward_mean"), style, ls=":", lw=1, label=label)
    axes[0].set(xlabel="GRPO step", ylabel="reward", title=title)
    axes[1].set(xlabel="GRPO step", title="Training score (batch mean reward)")
    for ax in axes:                      # the whole reward range: a truncated axis overstates small changes
        ax.set_ylim(-0.02, 1.02)
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def config_rows(cfg: TrainConfig, num_processes: int = 1, **overrides) -> list[dict]:
    """The name-for-name mapping of :mod:`.config` with this config's values on both sides."""
    args = grpo_config(cfg, "unused", 0, num_processes, **overrides)
    c = dataclasses.asdict(cfg)
    rows = [{"ours": o, "ours value": c[o], "TRL": t, "TRL value": getattr(args, t)} for o, t in FIELD_MAP]
    rows.append({"ours": "groups_per_step x group_size", "ours value": cfg.groups_per_step * cfg.group_size,
                 "TRL": "generation_batch_size", "TRL value": args.generation_batch_size})
    return rows


@torch.no_grad()
def rescoring_gap(policy, specs: list[tuple[str, int]], cfg: RolloutConfig, seed: int = 0) -> dict:
    """How far TRL's rescoring is from the sampling log-probs, per decode mode.

    Plays `specs` with each mode and scores each episode without its pads, the prompt +
    completion the rollout_func returns, as TRL does (positions 0..n-1; `token_logprobs` on that
    sequence equals TRL's forward, see tests/integrations). Returns {mode: {"max", "mean",
    "pads"}}: |delta log-prob| over the sampled tokens, and the decode pads dropped.
    """
    pad_id = policy.pad_id
    out = {}
    for decode in DECODE_MODES:
        rollouts = play(policy, specs, cfg, torch.Generator().manual_seed(seed), decode)
        batch = collate([without_pads(r) for r in rollouts], pad_id)  # what to_trl hands TRL
        logp, _ = token_logprobs(policy.model, batch, cfg.temperature)
        gap = (logp - batch["old_logp"])[batch["mask"] > 0].abs()
        out[decode] = {"max": float(gap.max()), "mean": float(gap.mean()),
                       "pads": sum(len(r.ids) - r.n_tokens for r in rollouts)}
    return out
