"""GRPO trainer: warm start, then rollouts -> rewards -> group advantages -> clipped updates.

    python -m sinkflex_lib.rl.train --profile smoke|cpu|gpu --seed S --out DIR [--resume] [--set FIELD=VALUE ...]

or `train(TrainConfig.from_profile("cpu"), out_dir, seed)` (a :class:`TrainResult`; the
config and its profiles live in :mod:`.config`). Per GRPO step (`grpo_step`): sample
`groups_per_step` training tasks (each with its own task seed; with `kind_phase_steps`, tasks of
one kind, the kinds in turn: `task_pools`; with `world_steps`, of a fresh training world every
that many steps: `step_world`), roll out `group_size`
episodes of each in one batched decode loop, score them (the environment's reward), compute
group advantages (paper eq. 3), and take `ppo_epochs` passes of minibatch updates of the
clipped loss (eqs. 4-7) with gradient clipping, one optimizer step per `accumulation_steps`
minibatches. With `sample_groups` set (DAPO's dynamic
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
update_groups (groups the update trained on), minibatches and optimizer_steps (the update's),
tasks (the task of each group rolled out; with `world_steps`, source: the step's training world),
group_rewards (each group's rewards, in the same order), anchor_loss (the supervised term's
loss with `anchor_weight` > 0, `anchor_loss`; NaN when off) and, with `oracle_prefix` > 0,
prefix_turns (the oracle turns each group started after, :mod:`.oracle_prefix`; its episodes'
rewards, and so the training score, count those given turns).

Checkpoints in DIR/checkpoint/: model.safetensors, optimizer.pt (tensors only, read with
weights_only=True), state.json (step, RNG states, the running-reward window, config): reading
one runs no code. All randomness of a step derives from (seed, step), so `--resume` continues
exactly as an uninterrupted run would; it refuses (one line, nothing touched) a folder without
a checkpoint, a torn checkpoint, and a command line whose config or seed differs from the run's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..envs import RetailEnv
from ..grpo import group_advantages, grpo_loss, permute_within_groups, scale_negative
from ..envs.data import load_source, parse_world, world_source
from .evaluate import all_baselines, balanced_task_ids, is_write_task, summarize, task_kind
from ..machine import ThreadPicker, deterministic_backward, peak_memory_gb
from .config import PROFILES, SEED, TrainConfig, int_arg, train_config_overrides
from .oracle_prefix import oracle_prefixes, prefix_fraction
from .policy import build_policy, num_parameters
from .pretrain import VARIANTS, EpisodeStream, PretrainConfig, weighted_loss
from .runstate import (ResumeError, append_metrics, load_checkpoint, read_metrics, rewrite_metrics,
                       save_checkpoint)
from .runstate import resume_state as run_resume_state
from .rollout import (collate, group_specs, rollout_batch, scores_without_pads,
                      token_logprobs, without_pads)
from .warmstart import warm_start
from .write_credit import credited


def _step_seed(seed: int, step: int, salt: int = 0) -> int:
    return (int(seed) * 1_000_003 + int(step) * 7919 + salt) % (2**31 - 1)


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


def training_tasks(cfg: TrainConfig) -> list[str]:
    """The task ids of `train_split` of `source`, or exactly `train_tasks` when set (unknown,
    repeated or validation ids are refused); of those, only the kinds in `train_kinds` when set (an
    unknown kind is refused)."""
    if cfg.train_tasks is not None:
        ids = _fixed_training_tasks(cfg)
    else:
        ids = RetailEnv(cfg.source).task_ids(cfg.train_split)
    if cfg.train_kinds is not None:
        tasks = load_source(cfg.source).tasks
        unknown = set(cfg.train_kinds) - {task_kind(tasks[t]) for t in ids}
        if unknown:
            raise ValueError(f"train_kinds: no task of kind(s) {sorted(unknown)} among the training tasks of {cfg.source!r}")
        ids = [t for t in ids if task_kind(tasks[t]) in cfg.train_kinds]
    for pool in task_pools(cfg, ids):
        _check_drawable(cfg, pool)
    return ids


def task_pools(cfg: TrainConfig, ids: list[str]) -> list[list[str]]:
    """What the GRPO steps draw their tasks from, in turn: [ids], or with `kind_phase_steps` one
    list per task kind (in `train_kinds`' order when set, else sorted by kind), each in ids' order."""
    if not cfg.kind_phase_steps:
        return [list(ids)]
    tasks = load_source(cfg.source).tasks
    kinds = cfg.train_kinds or sorted({task_kind(tasks[t]) for t in ids})
    return [[t for t in ids if task_kind(tasks[t]) == k] for k in dict.fromkeys(kinds)]


def step_pool(cfg: TrainConfig, pools: list[list[str]], step: int) -> list[str]:
    """The pool step `step` (from 1) draws from: each pool for `kind_phase_steps` steps, then the next."""
    return pools[(step - 1) // max(1, cfg.kind_phase_steps) % len(pools)]


def step_world(run: "_Run", step: int) -> tuple[TrainConfig, list[list[str]]]:
    """The config and task pools of GRPO step `step` (from 1): the run's own, or with `world_steps`
    the same config on the training world S + (step - 1) // world_steps (source "train-world:S")
    and that world's pools."""
    cfg = run.cfg
    if not cfg.world_steps:
        return cfg, run.pools
    _, first = parse_world(cfg.source)
    cfg = dataclasses.replace(cfg, source=world_source("train", first + (step - 1) // cfg.world_steps))
    return cfg, task_pools(cfg, training_tasks(cfg))


def _check_drawable(cfg: TrainConfig, ids: list[str]) -> None:
    drawn = cfg.sample_groups or cfg.groups_per_step
    if drawn > len(ids):
        what = "a kind's phase has" if cfg.kind_phase_steps else "are trained on"
        raise ValueError(f"a step draws {drawn} distinct tasks, but only {len(ids)} {what}")


def _fixed_training_tasks(cfg: TrainConfig) -> list[str]:
    """`cfg.train_tasks` as given, checked: distinct task ids of `cfg.source`, none of them a
    validation task when validation draws from the same source; ValueError otherwise."""
    ids, known = list(cfg.train_tasks), set(RetailEnv(cfg.source).task_ids(None))
    unknown = [t for t in ids if t not in known]
    if unknown or not ids or len(set(ids)) < len(ids):
        raise ValueError(f"train_tasks must be distinct task ids of {cfg.source!r}, got {ids}")
    held_out = set(ids) & set(validation_tasks(cfg)) if cfg.val_source == cfg.source else set()
    if held_out:
        raise ValueError(f"train_tasks: {sorted(held_out)} are validation tasks")
    return ids


def validation_tasks(cfg: TrainConfig) -> list[str]:
    """Every task of `val_split` of `val_source` when set (tau2's test split); else `val_tasks`
    tasks of the held-out `val_source`, round-robin over the task kinds (the same for every
    run seed)."""
    if cfg.val_split:
        return RetailEnv(cfg.val_source).task_ids(cfg.val_split)
    return balanced_task_ids(cfg.val_source, cfg.val_tasks)


def validate(policy, cfg: TrainConfig, task_ids: list[str], seed: int) -> dict:
    """Validation mean@1 on `val_source`: one episode per task, decoded at cfg.val_temperature
    (0: greedy); also the write-task mean and the mean per task kind."""
    g = torch.Generator().manual_seed(_step_seed(seed, 0, salt=17))
    t0 = time.perf_counter()
    rcfg = dataclasses.replace(cfg.rollout_config(cfg.val_temperature), source=cfg.val_source)
    rollouts = rollout_batch(policy, [(t, 0) for t in task_ids], rcfg, g)
    out = _rollout_metrics(rollouts, 1)
    del out["zero_spread_frac"], out["reward_std"]
    out = {"val_" + k: v for k, v in out.items()}
    out["val_reward"] = out.pop("val_reward_mean")
    out["val_s"] = time.perf_counter() - t0
    out["val_per_task"] = {x.task_id: x.reward for x in rollouts}
    summary = summarize(out["val_per_task"], cfg.val_source, {})
    out["val_write_reward"] = summary["write_mean_at_1"]
    out["val_per_kind"] = {k: v["mean_at_1"] for k, v in summary["per_kind"].items()}
    return out


RESUMABLE_CHANGES = ("steps", "threads")  # config fields --resume may change (named in the log)


def resume_state(out_dir, cfg: TrainConfig, seed: int, log=print) -> dict:
    """The checkpoint state of `out_dir` if `cfg` and `seed` continue its run (only
    RESUMABLE_CHANGES may differ; :func:`.runstate.resume_state`)."""
    return run_resume_state(out_dir, {**dataclasses.asdict(cfg), "seed": seed}, RESUMABLE_CHANGES, log)


# -- the loop ------------------------------------------------------------------------------


def groups_of(rollouts, group_size: int) -> list[list]:
    """The rollouts split into their groups, in order (a group: `group_size` episodes of one task)."""
    return [rollouts[k:k + group_size] for k in range(0, len(rollouts), group_size)]


def informative_groups(rollouts, group_size: int, limit: int) -> list:
    """DAPO's dynamic sampling: the rollouts of the first `limit` groups whose rewards are not
    all equal (a zero-spread group has zero advantage everywhere: no policy gradient)."""
    keep = [g for g in groups_of(rollouts, group_size) if len({r.reward for r in g}) > 1][:limit]
    return [r for g in keep for r in g]


def write_tasks_with_spread(train_rows: list[dict], source: str, k: int) -> list[str]:
    """The first `k` distinct write tasks (`evaluate.is_write_task`) whose group had reward spread
    in a run's train rows (their `tasks` and `group_rewards`), in step order: where that run's
    policy sometimes did the job and sometimes not, so GRPO had something to learn from. Rows of
    another training world (`world_steps`' "source") are refused: their ids name other tasks."""
    tasks, found = load_source(source).tasks, []
    for row in _train_steps(train_rows):
        if row.get("source", source) != source:
            raise ValueError(f"a train row of step {row.get('step')} is from {row['source']!r}, not {source!r}")
        for tid, rewards in zip(row["tasks"], row["group_rewards"]):
            if len(set(rewards)) > 1 and is_write_task(tasks[tid]) and tid not in found:
                found.append(tid)
    return found[:k]


def _train_steps(rows: list[dict]) -> list[dict]:
    """A run's rows of kind "train" (a row without a kind counts as one)."""
    return [r for r in rows if r.get("kind", "train") == "train"]


def learning_check_tasks(train_rows: list[dict], source: str, k: int) -> tuple[list[str], int]:
    """`k` tasks for notebook 05's learning check: `write_tasks_with_spread` first, then, where the
    run had fewer (a policy that never succeeds, as in a smoke run), the run's other tasks in step
    order. Returns (task ids, how many of them had reward spread: the first ones)."""
    spread = write_tasks_with_spread(train_rows, source, k)
    seen = dict.fromkeys(t for r in _train_steps(train_rows) for t in r["tasks"])
    return spread + [t for t in seen if t not in spread][:k - len(spread)], len(spread)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of GRPO step `step` (1-based): `lr` * step / `warmup_steps` during the
    warmup, then `lr` (Adam's first updates move every weight by about lr whatever its gradient)."""
    return cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps > 0 else cfg.lr


ANCHOR_SEED = 10_000   # anchor episodes come from training worlds of this pretraining seed plus the run's seed
ANCHOR_STRIDE = 64     # episode indices a GRPO step's minibatch may draw from (a step has fewer minibatches)


def anchor_stream(policy, cfg: TrainConfig, seed: int) -> EpisodeStream:
    """The oracle episodes the anchor term trains on: weighted as the shipped base's last
    pretraining stage weighed them (`pretrain.VARIANTS`), cut at the rollouts' `max_tokens`, from
    training worlds of pretraining seed ANCHOR_SEED + `seed`, far above the seeds of the pretraining
    runs recorded here (the highest, 22; the `cpu` profile's GRPO source is seed 0's world 1000;
    validation worlds are `eval-world:*`, another partition)."""
    return EpisodeStream(policy, PretrainConfig(**{**VARIANTS, "max_tokens": cfg.max_tokens}), ANCHOR_SEED + seed)


def anchor_loss(policy, stream: EpisodeStream, step: int, minibatch: int, n: int) -> torch.Tensor:
    """The weighted mean NLL (`pretrain.weighted_loss`) of the `n` oracle episodes of GRPO step
    `step`'s minibatch `minibatch`: episodes (step x ANCHOR_STRIDE + minibatch) x n + i of
    `stream`, a pure function of (seed, step, minibatch), so a resumed run draws the same."""
    if not 0 <= minibatch < ANCHOR_STRIDE:
        raise ValueError(f"minibatch must lie in [0, {ANCHOR_STRIDE}), got {minibatch}")
    first = (step * ANCHOR_STRIDE + minibatch) * n
    rows = [stream.example(first + i, short=False) for i in range(n)]
    return weighted_loss(policy, collate(rows, policy.pad_id))[0]


def minibatch_loss(policy, sub: dict, adv: torch.Tensor, cfg: TrainConfig) -> tuple[torch.Tensor, dict]:
    """The GRPO loss of one minibatch (`sub`: collated rollouts, `adv`: their advantages, (B,))
    in the model's current mode, and its metrics: log-probs at `cfg.temperature`, the KL term to the
    reference model when `cfg.beta` > 0 (else KL to the sampling policy, logged only)."""
    logp, ent = token_logprobs(policy.model, sub, cfg.temperature, with_entropy=True)
    dev = logp.device
    if cfg.beta > 0:
        with torch.no_grad(), policy.reference_model() as ref:
            ref_logp, _ = token_logprobs(ref, sub, cfg.temperature)
    else:
        ref_logp = sub["old_logp"].to(dev)
    return grpo_loss(logp, sub["old_logp"].to(dev), adv.to(dev), sub["mask"].to(dev), ref_logp=ref_logp,
                     clip_low=cfg.clip_low, clip_high=cfg.clip_high, beta=cfg.beta, agg=cfg.loss_agg_mode,
                     entropy=ent, norm_length=float(cfg.max_tokens))


def update_minibatches(n: int, adv: torch.Tensor, cfg: TrainConfig, rng: np.random.Generator) -> list:
    """The minibatches of an update of `n` rollouts, in order: `ppo_epochs` permutations cut into
    `minibatch_size` index tensors, without those that carry no gradient (beta 0 and every
    advantage 0), grouped `accumulation_steps` to an optimizer step: a list of lists."""
    kept = []
    for _ in range(cfg.ppo_epochs):
        order = rng.permutation(n)
        for k in range(0, n, cfg.minibatch_size):
            idx = torch.as_tensor(order[k:k + cfg.minibatch_size])
            if cfg.beta > 0 or not bool((adv[idx] == 0).all()):
                kept.append(idx)
    a = cfg.accumulation_steps
    return [kept[k:k + a] for k in range(0, len(kept), a)]


def grpo_update(policy, opt, rollouts, cfg: TrainConfig, rng: np.random.Generator, anchor=None) -> dict:
    """`ppo_epochs` passes of minibatch updates on one batch of rollouts, an optimizer step per
    `accumulation_steps` minibatches (the mean of their gradients); averaged metrics.
    anchor: None, or a function of the minibatch's index (0, 1, ...) giving a loss that is added
    to it times `cfg.anchor_weight` (`anchor_loss`)."""
    if not rollouts:  # dynamic sampling found no group with reward spread
        return _update_metrics({}, 0, 0, 0, cfg, 0.0)
    if scores_without_pads(policy.model):  # same log-probs, fewer positions to score
        rollouts = [without_pads(r) for r in rollouts]
    batch = collate(rollouts, policy.pad_id)
    rewards = batch["reward"]
    if cfg.shuffle_rewards:  # the control without signal: which episode of a group counts as good is random
        rewards = permute_within_groups(rewards, cfg.group_size, rng)   # (so its minibatch order differs too)
    adv = scale_negative(group_advantages(rewards, cfg.group_size, norm_by_std=cfg.norm_adv_by_std),
                         cfg.negative_advantage_scale)
    model = policy.model
    model.train()
    sums, n_mb, n_tok = {}, 0, 0
    optimizer_steps = update_minibatches(len(rollouts), adv, cfg, rng)
    for window in optimizer_steps:
        opt.zero_grad(set_to_none=True)
        for idx in window:
            T = int(max(len(rollouts[i].ids) for i in idx.tolist()))
            sub = {key: v[idx][:, :T] for key, v in batch.items() if key != "reward"}
            loss, met = minibatch_loss(policy, sub, adv[idx], cfg)
            if anchor is not None:
                a_loss = anchor(n_mb)
                loss = loss + cfg.anchor_weight * a_loss
                met["anchor_loss"] = a_loss.detach()
            deterministic_backward(loss / len(window))   # / 1 is exact: one minibatch a step as before
            met = {k: float(v) for k, v in met.items()}
            met["loss"] = float(loss.detach())
            for key, v in met.items():
                sums[key] = sums.get(key, 0.0) + v
            n_mb += 1
            n_tok += int(sub["attention_mask"].sum())
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(gn)
    return _update_metrics(sums, n_mb, len(optimizer_steps), n_tok, cfg, float(adv.abs().mean()))


def _update_metrics(sums: dict, n_mb: int, n_steps: int, n_tok: int, cfg: TrainConfig, adv_abs_mean: float) -> dict:
    keys = ("policy_loss", "clip_frac_low", "clip_frac_high", "ratio_mean", "kl", "kl_loss", "entropy",
            "loss", "anchor_loss")
    out = {k: (sums[k] / n_mb if n_mb and k in sums else math.nan) for k in keys}
    out["grad_norm"] = sums["grad_norm"] / n_steps if n_steps else math.nan
    out["kl_reference"] = "ref" if cfg.beta > 0 else "sampling"
    out["minibatches"] = n_mb
    out["optimizer_steps"] = n_steps
    out["update_tokens"] = n_tok
    out["adv_abs_mean"] = adv_abs_mean
    return out


def _warm_start_phase(policy, cfg: TrainConfig, train_ids: list[str], seed: int, metrics_path: Path,
                      log) -> None:
    """Behaviour cloning on `bc_episodes` oracle episodes of the training tasks, logged per step."""
    bc_ids = list(np.random.default_rng(seed).permutation(train_ids)[:cfg.bc_episodes])
    t0 = time.perf_counter()
    hist = warm_start(policy, bc_ids, epochs=cfg.bc_epochs, batch_size=cfg.bc_batch_size,
                      lr=cfg.bc_lr, max_tokens=cfg.bc_max_tokens, seed=seed, source=cfg.source,
                      grad_clip=cfg.grad_clip, log=log)
    for h in hist:
        append_metrics(metrics_path, {"kind": "warm_start", "step": 0, **h})
    log(f"warm start: {len(bc_ids)} oracle episodes x {cfg.bc_epochs} epochs, loss "
        f"{hist[0]['loss']:.3f} -> {hist[-1]['loss']:.3f} in {time.perf_counter() - t0:.0f}s")


@dataclass
class TrainResult:
    """What `train` (and the TRL path's `train_trl`) returns: the run folder, where it ran, its
    wall time, the first and last validation mean@1, the trained policy (live, in memory) and
    the number of processes that trained it."""
    out_dir: str
    device: str
    seconds: float
    val_start: float
    val_end: float
    policy: object = field(repr=False)
    processes: int = 1

    def summary(self) -> dict:
        """The result without the policy (what the command line prints)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "policy"}


@dataclass
class _Run:
    """A training run in progress: what every GRPO step needs."""
    cfg: TrainConfig
    out_dir: Path
    seed: int
    device: str
    policy: object
    opt: torch.optim.Optimizer
    train_ids: list
    pools: list       # task_pools: what the steps draw from, in turn
    val_ids: list
    window: deque
    t_start: float
    anchor: EpisodeStream | None = None   # the anchor term's episodes (cfg.anchor_weight > 0)

    @property
    def metrics(self) -> Path:
        return self.out_dir / "metrics.jsonl"

    def checkpoint(self, step: int) -> None:
        save_checkpoint(self.out_dir / "checkpoint", self.policy, self.opt,
                        {"step": step, "window": list(self.window), "config": dataclasses.asdict(self.cfg)})


def policy_of(cfg: TrainConfig, seed: int = 0, device: str = "cpu"):
    """The policy `cfg` trains, before any update (its preset or directory, dtype, LoRA, chat format)."""
    return build_policy(cfg.policy, attn_implementation=cfg.attn_implementation, seed=seed, device=device,
                        dtype=getattr(torch, cfg.dtype), lora=cfg.lora, format=cfg.chat_format,
                        reasoning_effort=cfg.reasoning_effort, **cfg.policy_overrides)


def _prepare(cfg: TrainConfig, out_dir: Path, seed: int, device, policy) -> _Run:
    """Seeds, the policy and optimizer, the task lists: a run at step 0, nothing written yet."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if policy is None:
        policy = policy_of(cfg, seed, device)
    if cfg.bc_episodes > 0 and policy.chat.name != "compact":
        raise ValueError(f"the warm start clones compact-format demonstrations; set bc_episodes=0 for "
                         f"a {policy.chat.name} policy")
    if cfg.anchor_weight > 0 and policy.chat.name != "compact":
        raise ValueError(f"the anchor term trains on compact-format oracle episodes; set anchor_weight=0 for "
                         f"a {policy.chat.name} policy")
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    anchor = anchor_stream(policy, cfg, seed) if cfg.anchor_weight > 0 else None
    train_ids = training_tasks(cfg)
    return _Run(cfg, out_dir, seed, device, policy, opt, train_ids, task_pools(cfg, train_ids),
                validation_tasks(cfg), deque(maxlen=cfg.traj_window), time.perf_counter(), anchor)


def _begin(run: _Run, log) -> None:
    """Step 0 of a new run: the config row, the warm start, validation beside both baselines."""
    cfg = run.cfg
    run.metrics.write_text("")
    append_metrics(run.metrics, {"kind": "config", "step": 0, "seed": run.seed, "device": run.device,
                                 "parameters": num_parameters(run.policy.model), "torch_threads": torch.get_num_threads(),
                                 **dataclasses.asdict(cfg)})
    if cfg.bc_episodes > 0:
        _warm_start_phase(run.policy, cfg, run.train_ids, run.seed, run.metrics, log)
    if cfg.beta > 0:
        run.policy.freeze_reference()
        _save_reference(run)
    val = validate(run.policy, cfg, run.val_ids, run.seed)
    base = {f"val_{a}_reward": float(np.mean(list(r.values()))) for a, r in all_baselines(
        run.policy, cfg.val_source, run.val_ids, cfg.rollout_config(cfg.val_temperature)).items()}
    append_metrics(run.metrics, {"kind": "val", "step": 0, "elapsed_s": time.perf_counter() - run.t_start,
                                 **val, **base})
    log(f"step 0 validation mean@1 {val['val_reward']:.3f}, write tasks {val['val_write_reward']:.3f} "
        f"({len(run.val_ids)} held-out tasks of {cfg.val_source}; do-nothing {base['val_do_nothing_reward']:.3f}, "
        f"oracle within the budgets {base['val_oracle_in_budget_reward']:.3f})")
    run.checkpoint(0)


REFERENCE_FILE = "reference.safetensors"   # in the checkpoint folder: the KL reference's weights


def _save_reference(run: _Run) -> None:
    """Keep the KL reference (beta > 0, full fine-tuning: the weights after the warm start) beside
    the checkpoint, so that a resumed run measures KL against the same weights."""
    if run.policy.reference is not None:
        from safetensors.torch import save_file

        (run.out_dir / "checkpoint").mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in run.policy.reference.state_dict().items()},
                  str(run.out_dir / "checkpoint" / REFERENCE_FILE))


def _restore_reference(run: _Run) -> None:
    """The KL reference of a resumed run (beta > 0): the saved one, else (a run from before it
    was saved) the weights as built, which is the reference when no warm start ran. Call before
    the checkpoint's weights are loaded."""
    if run.cfg.beta <= 0:
        return
    run.policy.freeze_reference()                    # LoRA: nothing to keep (the adapter switched off)
    path = run.out_dir / "checkpoint" / REFERENCE_FILE
    if run.policy.reference is None:
        return
    if path.exists():
        from safetensors.torch import load_file

        run.policy.reference.load_state_dict(load_file(str(path), device=str(run.policy.device)))
    elif run.cfg.bc_episodes > 0:
        raise ResumeError(f"{path} is missing: the KL reference (the weights after the warm start) "
                          "cannot be restored")


def _resume(run: _Run, log) -> int:
    """Load the run's checkpoint (all checks first: ResumeError touches nothing); its step."""
    ckpt = run.out_dir / "checkpoint"
    state = resume_state(run.out_dir, run.cfg, run.seed, log)
    _restore_reference(run)
    state = load_checkpoint(ckpt, run.policy, run.opt, state)
    run.window.extend(state["window"])
    rewrite_metrics(run.out_dir, state["step"])
    log(f"resumed from {ckpt} at step {state['step']}")
    return state["step"]


def grpo_step(run: _Run, step: int) -> dict:
    """One GRPO step: sample tasks, roll out their groups, update; the step's metrics row.
    All randomness derives from (seed, step)."""
    ts = time.perf_counter()
    cfg, pools = step_world(run, step)
    if torch.device(run.device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rng = np.random.default_rng([run.seed, step])
    n_groups = cfg.sample_groups or cfg.groups_per_step
    tids = [str(t) for t in rng.choice(step_pool(cfg, pools, step), n_groups, replace=False)]
    tseeds = [int(s) for s in rng.integers(0, 2**31 - 1, n_groups)]
    gen = torch.Generator().manual_seed(_step_seed(run.seed, step))
    rstats, prefixes = {}, step_prefixes(run, tids, step, cfg.source)
    rollouts = rollout_batch(run.policy, group_specs(tids, cfg.group_size, tseeds, prefixes), cfg.rollout_config(),
                             gen, rstats)
    run.window.extend(r.reward for r in rollouts)
    trained = credited(rollouts, load_source(cfg.source).tasks, cfg.write_credit) if cfg.write_credit else rollouts
    batch = informative_groups(trained, cfg.group_size, cfg.groups_per_step) if cfg.sample_groups else trained
    tu = time.perf_counter()
    for group in run.opt.param_groups:
        group["lr"] = lr_at(cfg, step)
    anchor = None if run.anchor is None else (
        lambda m: anchor_loss(run.policy, run.anchor, step, m, cfg.anchor_batch))
    upd = grpo_update(run.policy, run.opt, batch, cfg, rng, anchor)
    upd["update_groups"] = len(batch) // cfg.group_size
    update_s, step_s = time.perf_counter() - tu, time.perf_counter() - ts
    row = {"kind": "train", "step": step, **_rollout_metrics(rollouts, cfg.group_size),
           "trajectory_reward": float(np.mean(run.window)), **upd,
           "rollout_s": rstats["rollout_s"], "update_s": update_s, "step_s": step_s,
           **{f"rollout_{k}": rstats[k] for k in ("forward_s", "sample_s", "env_s", "forwards")},
           "tokens_per_s": (rstats["rollout_forward_tokens"] + upd["update_tokens"]) / step_s,
           "peak_mem_gb": peak_memory_gb(run.device), "elapsed_s": time.perf_counter() - run.t_start,
           "tasks": tids, "group_rewards": [[r.reward for r in g] for g in groups_of(rollouts, cfg.group_size)]}
    if prefixes is not None:
        row["prefix_turns"] = [len(p) for p in prefixes]
    if cfg.world_steps:
        row["source"] = cfg.source
    if cfg.write_credit:
        row["trained_reward_mean"] = float(np.mean([r.reward for r in trained]))
    row["training_score"] = row["reward_mean"]
    return row


def step_prefixes(run: _Run, task_ids: list[str], step: int, source: str | None = None) -> list | None:
    """Per task of the step (of `source`, None: the run's), the oracle turns its group starts after
    (`cfg.oracle_prefix`'s reverse curriculum, drawn from (seed, step) apart from the step's other
    draws); None when it is off."""
    if not run.cfg.oracle_prefix:
        return None
    data = load_source(source or run.cfg.source)
    fraction = prefix_fraction(run.cfg.oracle_prefix, step, run.cfg.steps)
    return oracle_prefixes(run.policy.chat, data.tasks, data.db.tables["products"], task_ids, fraction,
                           np.random.default_rng([run.seed, step, 1]))


def _step_line(row: dict, steps: int) -> str:
    return (f"step {row['step']}/{steps} score {row['reward_mean']:.3f} traj {row['trajectory_reward']:.3f} "
            f"zero-spread {row['zero_spread_frac']:.2f} kl {row.get('kl', float('nan')):.4f} "
            f"ent {row.get('entropy', float('nan')):.3f} len {row['response_length']:.0f} "
            f"{row['tokens_per_s']:.0f} tok/s {row['step_s']:.1f}s")


def train(cfg: TrainConfig, out_dir, seed: int = 0, resume: bool = False, log=print,
          device: str | None = None, policy=None, stop_after: int | None = None) -> TrainResult:
    """Warm start then GRPO (see module docstring).

    stop_after: end after this GRPO step (a checkpoint is written there), to test resume.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = ThreadPicker(cfg.threads, log)
    run = _prepare(cfg, out_dir, seed, device, policy)
    if resume:
        start = _resume(run, log) + 1
    else:
        _begin(run, log)
        start = 1
    last_step = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    for step in range(start, last_step + 1):
        used = threads()                       # looked at again every minute or so: machine.ThreadPicker
        row = {**grpo_step(run, step), "torch_threads": used}
        append_metrics(run.metrics, row)
        msg = _step_line(row, cfg.steps)
        if step % cfg.val_every == 0 or step == cfg.steps:
            val = validate(run.policy, cfg, run.val_ids, seed)
            append_metrics(run.metrics, {"kind": "val", "step": step,
                                         "elapsed_s": time.perf_counter() - run.t_start, **val})
            msg += f" | val mean@1 {val['val_reward']:.3f}"
        log(msg)
        if step % cfg.ckpt_every == 0 or step == last_step:
            run.checkpoint(step)
    vals = [r for r in read_metrics(out_dir) if r["kind"] == "val"]
    return TrainResult(str(out_dir), run.device, time.perf_counter() - run.t_start,
                       vals[0]["val_reward"] if vals else math.nan, vals[-1]["val_reward"] if vals else math.nan,
                       run.policy)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.train", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu", choices=sorted(PROFILES))
    ap.add_argument("--seed", type=SEED, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int_arg(1), default=None, help="override the profile's GRPO steps")
    ap.add_argument("--attn", default=None, help="attention implementation (default: sinkflex)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--policy", default=None, help="a preset, shipped checkpoint or local HF directory "
                    "(a gpt-oss directory runs in Harmony); default: the profile's")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a TrainConfig field (VALUE read as JSON), e.g. --set beta=0.5 "
                         "--set shuffle_rewards=true (the control without signal)")
    args = ap.parse_args(argv)
    try:
        over = train_config_overrides(args.set)
    except ValueError as e:
        ap.error(str(e))
    policy_dir = None                       # None: $SINKFLEX_POLICY decides (gpu profile)
    if args.policy is not None:             # a local model on the gpu profile: the paper's setup
        over["policy"] = args.policy
        policy_dir = args.policy if Path(args.policy).is_dir() else ""
    if args.steps is not None:
        over["steps"] = args.steps
    if args.attn:
        over["attn_implementation"] = args.attn
    cfg = TrainConfig.from_profile(args.profile, policy_dir=policy_dir, **over)
    try:
        if args.resume:  # before any work: a run that cannot resume exactly is refused
            resume_state(args.out, cfg, args.seed, log=lambda m: None)
        res = train(cfg, args.out, seed=args.seed, resume=args.resume, device=args.device,
                    log=lambda m: print(m, flush=True))
    except ResumeError as e:
        print(f"error: --resume: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
