"""GRPO trainer: warm start, then rollouts -> rewards -> group advantages -> clipped updates.

    python -m sinkflex_lib.rl.train --profile smoke|cpu|gpu --seed S --out DIR [--resume]

or `train(TrainConfig.from_profile("cpu"), out_dir, seed)`. Per GRPO step: sample
`groups_per_step` training tasks (each with its own task seed), roll out `group_size`
episodes of each in one batched decode loop, score them (the environment's reward), compute
group advantages (paper eq. 3), and take `ppo_epochs` passes of minibatch updates of the
clipped loss (eqs. 4-7) with gradient clipping. With `sample_groups` set (DAPO's dynamic
sampling), `sample_groups` groups are rolled out and the update takes the first
`groups_per_step` of them whose rewards differ. Every `val_every` steps (and before the first
step, right after the warm start) validation mean@1: one episode per held-out task, decoded
at `val_temperature` (0, the default: greedy; else sampled with a fixed validation seed).

Logged to DIR/metrics.jsonl, one JSON object per line with "kind": "warm_start" (per BC
step), "train" (per GRPO step) or "val". Train rows: reward_mean/std (training score =
reward_mean), trajectory_reward (running mean of the last `traj_window` episode rewards),
zero_spread_frac (groups whose rewards are all equal), kl (k3 against the reference when
beta > 0, else against the sampling policy), entropy, clip_frac_low/high, ratio_mean,
policy_loss, response_length (sampled tokens per episode), episode_tokens, turns,
tool_call_rate (tool calls per turn), tool_error_rate (errors per tool call), tokens_per_s,
rollout_s, update_s, step_s, peak_mem_gb (CPU: process peak RSS; CUDA: max allocated),
update_groups (groups the update trained on).

Checkpoints in DIR/checkpoint/: model.safetensors, optimizer.pt, state.pt (step, RNG states,
the running-reward window, config). All randomness of a step derives from (seed, step), so
`--resume` continues exactly as an uninterrupted run would.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..envs import RetailEnv
from ..grpo import group_advantages, grpo_loss
from .chat import PAD
from .policy import build_policy, num_parameters
from .rollout import (RolloutConfig, collate, group_specs, rollout_batch, scores_without_pads,
                      token_logprobs, without_pads)
from .warmstart import warm_start


@dataclass
class TrainConfig:
    profile: str = "cpu"
    policy: str = "tiny"
    policy_overrides: dict = field(default_factory=dict)
    attn_implementation: str = "sinkflex"
    source: str = "mini"
    train_split: str = "train"
    val_split: str = "test"
    # warm start (behaviour cloning on oracle episodes)
    bc_episodes: int = 232
    bc_epochs: int = 4
    bc_batch_size: int = 8
    bc_lr: float = 3e-3
    bc_max_tokens: int = 1024      # demonstrations are cut at the last agent turn that fits
    # GRPO
    steps: int = 20
    groups_per_step: int = 4
    group_size: int = 8
    sample_groups: int | None = None   # dynamic sampling: roll out this many groups, train on the
                                       # first groups_per_step with reward spread (None: off)
    ppo_epochs: int = 1
    minibatch_size: int = 16
    lr: float = 5e-4
    grad_clip: float = 1.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    beta: float = 0.0
    loss_agg_mode: str = "token-mean"
    norm_adv_by_std: bool = True
    # rollouts
    max_turns: int = 12
    max_tokens: int = 2048
    max_new_tokens: int = 48
    temperature: float = 1.0
    # validation, logging, checkpoints
    val_temperature: float = 0.0   # 0: greedy decoding
    val_tasks: int = 32
    val_every: int = 5
    traj_window: int = 64
    ckpt_every: int = 5
    threads: int | None = None

    @classmethod
    def from_profile(cls, profile: str, **overrides) -> "TrainConfig":
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {sorted(unknown)}")
        return cls(**{**PROFILES[profile], "profile": profile, **overrides})

    def rollout_config(self, temperature: float | None = None) -> RolloutConfig:
        return RolloutConfig(max_turns=self.max_turns, max_tokens=self.max_tokens,
                             max_new_tokens=self.max_new_tokens,
                             temperature=self.temperature if temperature is None else temperature,
                             source=self.source)


# The profile picks sizes, never what is computed.
PROFILES = {
    # pipeline check in well under two minutes
    "smoke": dict(policy="micro", bc_episodes=4, bc_epochs=1, bc_batch_size=4, bc_max_tokens=512, steps=2,
                  groups_per_step=2, group_size=2, minibatch_size=4, max_turns=3, max_tokens=512,
                  max_new_tokens=12, val_tasks=2, val_every=1, ckpt_every=1, traj_window=16),
    # the 2-core CPU reproduction (under 30 minutes): the full tiny shape (~1.5M parameters),
    # a long warm start (10 epochs), then GRPO with a small lr; validation is greedy
    "cpu": dict(policy="tiny", bc_episodes=232, bc_epochs=10, bc_lr=3e-3, bc_max_tokens=1024, steps=40,
                groups_per_step=4, group_size=8, minibatch_size=16, lr=3e-4, max_turns=10,
                max_tokens=1536, max_new_tokens=40, val_tasks=32, val_every=5, ckpt_every=10),
    # a CUDA box: the flex backend, the full tiny shape, more groups and steps
    "gpu": dict(policy="tiny", bc_episodes=232, bc_epochs=8, bc_max_tokens=4096, steps=200, groups_per_step=16,
                group_size=8, minibatch_size=32, max_turns=16, max_tokens=4096, max_new_tokens=96,
                val_tasks=103, val_every=10, ckpt_every=20, traj_window=256),
}


def _step_seed(seed: int, step: int, salt: int = 0) -> int:
    return (int(seed) * 1_000_003 + int(step) * 7919 + salt) % (2**31 - 1)


def peak_memory_gb(device) -> float:
    """CUDA: max allocated; CPU: this process's peak resident set (VmHWM)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _rollout_metrics(rollouts, group_size: int) -> dict:
    r = np.array([x.reward for x in rollouts], dtype=float)
    groups = r.reshape(-1, group_size)
    turns = sum(x.turns for x in rollouts)
    calls = sum(x.tool_calls for x in rollouts)
    return {
        "reward_mean": float(r.mean()), "reward_std": float(r.std()),
        "zero_spread_frac": float(np.mean(groups.max(1) == groups.min(1))),
        "response_length": float(np.mean([x.n_sampled for x in rollouts])),
        "episode_tokens": float(np.mean([x.n_tokens for x in rollouts])),
        "turns": float(turns / len(rollouts)),
        "tool_call_rate": float(calls / max(1, turns)),
        # failed calls (tool "Error: ..." results and unparsable calls) per attempted call
        "tool_error_rate": float(sum(x.tool_errors + x.parse_errors for x in rollouts)
                                 / max(1, calls + sum(x.parse_errors for x in rollouts))),
        "truncated_frac": float(np.mean([x.truncated for x in rollouts])),
    }


def validation_tasks(env: RetailEnv, cfg: TrainConfig) -> list[str]:
    """`val_tasks` held-out tasks: a fixed shuffle of the validation split (the same for every
    run seed), so a subset mixes every task kind."""
    ids = env.task_ids(cfg.val_split)
    return [str(i) for i in np.random.default_rng(12345).permutation(ids)[:cfg.val_tasks]]


def validate(policy, cfg: TrainConfig, task_ids: list[str], seed: int) -> dict:
    """Validation mean@1: one episode per task, decoded at cfg.val_temperature (0: greedy)."""
    g = torch.Generator().manual_seed(_step_seed(seed, 0, salt=17))
    t0 = time.perf_counter()
    rollouts = rollout_batch(policy, [(t, 0) for t in task_ids], cfg.rollout_config(cfg.val_temperature), g)
    out = _rollout_metrics(rollouts, 1)
    del out["zero_spread_frac"], out["reward_std"]
    out = {"val_" + k: v for k, v in out.items()}
    out["val_reward"] = out.pop("val_reward_mean")
    out["val_s"] = time.perf_counter() - t0
    out["val_per_task"] = {x.task_id: x.reward for x in rollouts}
    return out


# -- checkpoints ---------------------------------------------------------------------------


def save_checkpoint(ckpt: Path, policy, opt, state: dict) -> None:
    from safetensors.torch import save_file

    ckpt.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().contiguous().cpu() for k, v in policy.model.state_dict().items()}
    save_file(sd, str(ckpt / "model.safetensors.tmp"))
    os.replace(ckpt / "model.safetensors.tmp", ckpt / "model.safetensors")
    torch.save(opt.state_dict(), ckpt / "optimizer.pt.tmp")
    os.replace(ckpt / "optimizer.pt.tmp", ckpt / "optimizer.pt")
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({**state, "rng": rng}, ckpt / "state.pt.tmp")
    os.replace(ckpt / "state.pt.tmp", ckpt / "state.pt")


def load_checkpoint(ckpt: Path, policy, opt) -> dict:
    from safetensors.torch import load_file

    policy.model.load_state_dict(load_file(str(ckpt / "model.safetensors"), device=str(policy.device)))
    opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    state = torch.load(ckpt / "state.pt", weights_only=False)
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state


# -- the loop ------------------------------------------------------------------------------


def append_metrics(path: Path, row: dict) -> None:
    """Append one JSON row to a metrics.jsonl file (both trainers write through this)."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def read_metrics(out_dir) -> list[dict]:
    path = Path(out_dir) / "metrics.jsonl"
    return [json.loads(line) for line in open(path)] if path.exists() else []


def informative_groups(rollouts, group_size: int, limit: int) -> list:
    """DAPO's dynamic sampling: the rollouts of the first `limit` groups whose rewards are not
    all equal (a zero-spread group has zero advantage everywhere: no policy gradient)."""
    groups = [rollouts[k:k + group_size] for k in range(0, len(rollouts), group_size)]
    keep = [g for g in groups if len({r.reward for r in g}) > 1][:limit]
    return [r for g in keep for r in g]


def grpo_update(policy, opt, rollouts, cfg: TrainConfig, rng: np.random.Generator) -> dict:
    """`ppo_epochs` passes of minibatch updates on one batch of rollouts; averaged metrics."""
    if not rollouts:  # dynamic sampling found no group with reward spread
        return _update_metrics({}, 0, 0, cfg, 0.0)
    pad_id = policy.token_id(PAD)
    if scores_without_pads(policy.model):  # same log-probs, fewer positions to score
        rollouts = [without_pads(r) for r in rollouts]
    batch = collate(rollouts, pad_id)
    adv = group_advantages(batch["reward"], cfg.group_size, norm_by_std=cfg.norm_adv_by_std)
    model = policy.model
    model.train()
    sums, n_mb, n_tok = {}, 0, 0
    for _ in range(cfg.ppo_epochs):
        order = rng.permutation(len(rollouts))
        for k in range(0, len(order), cfg.minibatch_size):
            idx = torch.as_tensor(order[k:k + cfg.minibatch_size])
            if cfg.beta == 0 and bool((adv[idx] == 0).all()):
                continue  # no gradient: every rollout here is in a zero-spread group
            T = int(max(len(rollouts[i].ids) for i in idx.tolist()))
            sub = {key: v[idx][:, :T] for key, v in batch.items() if key != "reward"}
            logp, ent = token_logprobs(model, sub, cfg.temperature, with_entropy=True)
            dev = logp.device
            if cfg.beta > 0:
                with torch.no_grad(), policy.reference_model() as ref:
                    ref_logp, _ = token_logprobs(ref, sub, cfg.temperature)
            else:
                ref_logp = sub["old_logp"].to(dev)  # KL(new || sampling policy), logged only
            loss, met = grpo_loss(logp, sub["old_logp"].to(dev), adv[idx].to(dev), sub["mask"].to(dev),
                                  ref_logp=ref_logp, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                  beta=cfg.beta, agg=cfg.loss_agg_mode, entropy=ent,
                                  norm_length=float(cfg.max_tokens))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            met = {k: float(v) for k, v in met.items()}
            met["grad_norm"] = float(gn)
            met["loss"] = float(loss.detach())
            for key, v in met.items():
                sums[key] = sums.get(key, 0.0) + v
            n_mb += 1
            n_tok += int(sub["attention_mask"].sum())
    return _update_metrics(sums, n_mb, n_tok, cfg, float(adv.abs().mean()))


def _update_metrics(sums: dict, n_mb: int, n_tok: int, cfg: TrainConfig, adv_abs_mean: float) -> dict:
    keys = ("policy_loss", "clip_frac_low", "clip_frac_high", "ratio_mean", "kl", "kl_loss", "entropy",
            "grad_norm", "loss")
    out = {k: (sums[k] / n_mb if n_mb and k in sums else math.nan) for k in keys}
    out["kl_reference"] = "ref" if cfg.beta > 0 else "sampling"
    out["minibatches"] = n_mb
    out["update_tokens"] = n_tok
    out["adv_abs_mean"] = adv_abs_mean
    return out


def train(cfg: TrainConfig, out_dir, seed: int = 0, resume: bool = False, log=print,
          device: str | None = None, policy=None, stop_after: int | None = None) -> dict:
    """Warm start then GRPO (see module docstring). Returns a summary dict.

    stop_after: end after this GRPO step (a checkpoint is written there), to test resume.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics_path, ckpt = out_dir / "metrics.jsonl", out_dir / "checkpoint"
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if policy is None:
        policy = build_policy(cfg.policy, attn_implementation=cfg.attn_implementation, seed=seed,
                              device=device, **cfg.policy_overrides)
    env = RetailEnv(cfg.source)
    train_ids = env.task_ids(cfg.train_split)
    val_ids = validation_tasks(env, cfg)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    t_start = time.perf_counter()

    start_step, window = 1, deque(maxlen=cfg.traj_window)
    if resume and (ckpt / "state.pt").exists():
        state = load_checkpoint(ckpt, policy, opt)
        start_step = state["step"] + 1
        window = deque(state["window"], maxlen=cfg.traj_window)
        keep = [r for r in read_metrics(out_dir) if r.get("step", 0) <= state["step"]]
        metrics_path.write_text("".join(json.dumps(r) + "\n" for r in keep))
        log(f"resumed from {ckpt} at step {state['step']}")
    else:
        metrics_path.write_text("")
        append_metrics(metrics_path, {"kind": "config", "step": 0, "seed": seed, "device": device,
                                "parameters": num_parameters(policy.model), **dataclasses.asdict(cfg)})
        # warm start
        bc_ids = list(np.random.default_rng(seed).permutation(train_ids)[:cfg.bc_episodes])
        t0 = time.perf_counter()
        hist = warm_start(policy, bc_ids, epochs=cfg.bc_epochs, batch_size=cfg.bc_batch_size,
                          lr=cfg.bc_lr, max_tokens=cfg.bc_max_tokens, seed=seed, source=cfg.source,
                          grad_clip=cfg.grad_clip, log=log)
        for h in hist:
            append_metrics(metrics_path, {"kind": "warm_start", "step": 0, **h})
        log(f"warm start: {len(bc_ids)} oracle episodes x {cfg.bc_epochs} epochs, loss "
            f"{hist[0]['loss']:.3f} -> {hist[-1]['loss']:.3f} in {time.perf_counter() - t0:.0f}s")
        if cfg.beta > 0:
            policy.freeze_reference()
        val = validate(policy, cfg, val_ids, seed)
        append_metrics(metrics_path, {"kind": "val", "step": 0, "elapsed_s": time.perf_counter() - t_start, **val})
        log(f"step 0 validation mean@1 {val['val_reward']:.3f} ({len(val_ids)} held-out tasks)")
        save_checkpoint(ckpt, policy, opt, {"step": 0, "window": list(window), "config": dataclasses.asdict(cfg)})

    last_step = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    rcfg = cfg.rollout_config()
    for step in range(start_step, last_step + 1):
        ts = time.perf_counter()
        if torch.device(device).type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        rng = np.random.default_rng([seed, step])
        n_groups = cfg.sample_groups or cfg.groups_per_step
        tids = [str(t) for t in rng.choice(train_ids, n_groups, replace=False)]
        tseeds = [int(s) for s in rng.integers(0, 2**31 - 1, n_groups)]
        gen = torch.Generator().manual_seed(_step_seed(seed, step))
        rstats = {}
        rollouts = rollout_batch(policy, group_specs(tids, cfg.group_size, tseeds), rcfg, gen, rstats)
        window.extend(r.reward for r in rollouts)
        batch = (informative_groups(rollouts, cfg.group_size, cfg.groups_per_step) if cfg.sample_groups
                 else rollouts)
        tu = time.perf_counter()
        upd = grpo_update(policy, opt, batch, cfg, rng)
        upd["update_groups"] = len(batch) // cfg.group_size
        update_s = time.perf_counter() - tu
        step_s = time.perf_counter() - ts
        row = {"kind": "train", "step": step, **_rollout_metrics(rollouts, cfg.group_size),
               "trajectory_reward": float(np.mean(window)), **upd,
               "rollout_s": rstats["rollout_s"], "update_s": update_s, "step_s": step_s,
               "tokens_per_s": (rstats["rollout_forward_tokens"] + upd["update_tokens"]) / step_s,
               "peak_mem_gb": peak_memory_gb(device), "elapsed_s": time.perf_counter() - t_start,
               "tasks": tids}
        row["training_score"] = row["reward_mean"]
        append_metrics(metrics_path, row)
        msg = (f"step {step}/{cfg.steps} score {row['reward_mean']:.3f} traj {row['trajectory_reward']:.3f} "
               f"zero-spread {row['zero_spread_frac']:.2f} kl {row.get('kl', float('nan')):.4f} "
               f"ent {row.get('entropy', float('nan')):.3f} len {row['response_length']:.0f} "
               f"{row['tokens_per_s']:.0f} tok/s {step_s:.1f}s")
        if step % cfg.val_every == 0 or step == cfg.steps:
            val = validate(policy, cfg, val_ids, seed)
            append_metrics(metrics_path, {"kind": "val", "step": step, "elapsed_s": time.perf_counter() - t_start, **val})
            msg += f" | val mean@1 {val['val_reward']:.3f}"
        log(msg)
        if step % cfg.ckpt_every == 0 or step == last_step:
            save_checkpoint(ckpt, policy, opt, {"step": step, "window": list(window),
                                                "config": dataclasses.asdict(cfg)})
    rows = read_metrics(out_dir)
    vals = [r for r in rows if r["kind"] == "val"]
    return {"out_dir": str(out_dir), "device": device, "seconds": time.perf_counter() - t_start,
            "val_start": vals[0]["val_reward"] if vals else math.nan,
            "val_end": vals[-1]["val_reward"] if vals else math.nan, "policy": policy}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.train", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu", choices=sorted(PROFILES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=None, help="override the profile's GRPO steps")
    ap.add_argument("--attn", default=None, help="attention implementation (default: sinkflex)")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    over = {}
    if args.steps is not None:
        over["steps"] = args.steps
    if args.attn:
        over["attn_implementation"] = args.attn
    cfg = TrainConfig.from_profile(args.profile, **over)
    res = train(cfg, args.out, seed=args.seed, resume=args.resume, device=args.device,
                log=lambda m: print(m, flush=True))
    print(json.dumps({k: v for k, v in res.items() if k != "policy"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
