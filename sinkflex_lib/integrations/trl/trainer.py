"""The GRPO training of notebook 05 on TRL's GRPOTrainer, in one process or under torchrun.

    train_trl(cfg, out_dir, seed)           warm start (our `train` with steps=0), then TRL GRPO

Warm start. On the main process, `sinkflex_lib.rl.train.train(cfg with steps=0)` runs our
warm start and the step-0 validation into `out_dir/warm_start/` (skipped when that folder
already holds a warm start of the same config); then every process loads those weights, so all
ranks, and a run of our own trainer resumed from the same folder, start from identical weights.

Per GRPO step (one generation batch): TRL samples `groups_per_step` tasks, each repeated
`group_size` times, spread over the processes; `RetailRollout` plays them with our worker; TRL
computes group advantages and takes `steps_per_generation x num_iterations` optimizer steps
(see :mod:`.config`). `ScaleOutLog` then prints, on every process, what it rolled out and a
checksum of the weights (equal on all ranks: the update was synchronised), runs our
`validate` on the main process every `val_every` steps, and appends rows to
`out_dir/metrics.jsonl` ("val" rows as our trainer writes them; "train" rows with TRL's
metrics under our names where one exists, all of TRL's under "trl").
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from ...machine import choose_threads, deterministic_on_cpu
from ...models import ensure_registered
from ...rl.policy import Policy, lora_config
from ...rl.runstate import append_metrics, read_metrics
from ...rl.config import TrainConfig
from ...rl.train import TrainResult, policy_of, train, training_tasks, validate, validation_tasks
from .chat import prepare_tokenizer
from .config import grpo_config
from .rollout import RetailRollout, env_reward, generation_model, updates_per_step

# TRL's logged names -> ours (metrics.jsonl "train" rows)
TRL_TO_OURS = {"reward": "reward_mean", "reward_std": "reward_std", "frac_reward_zero_std": "zero_spread_frac",
               "kl": "kl", "entropy": "entropy", "clip_ratio/low_mean": "clip_frac_low",
               "clip_ratio/high_mean": "clip_frac_high", "completions/mean_length": "response_length",
               "loss": "loss", "grad_norm": "grad_norm"}


def distributed_state():
    """accelerate's process state (rank, world size, device); CPU processes use gloo."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def weights_checksum(model: torch.nn.Module) -> float:
    """Sum of every parameter in float64: equal on all ranks iff their updates agreed."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def _sharded(accelerator) -> bool:
    """Parameters sharded across processes (DeepSpeed ZeRO-3, FSDP): no per-rank checksum."""
    from trl.distributed import DistributedBackend

    backend = DistributedBackend(accelerator)
    return backend.is_zero3 or backend.is_fsdp


def warm_start_run(cfg: TrainConfig, out_dir, seed: int = 0, device: str | None = None, log=print) -> Path:
    """Our warm start and step-0 validation into `out_dir` (`train` with steps=0); reused when
    `out_dir` already holds one for the same config and seed. Returns `out_dir`."""
    out_dir = Path(out_dir)
    want = {**dataclasses.asdict(cfg), "steps": 0}
    rows = read_metrics(out_dir)
    if (out_dir / "checkpoint" / "model.safetensors").exists() and rows:
        have = {k: rows[0].get(k) for k in want}
        if rows[0].get("seed") == seed and have == json.loads(json.dumps(want)):
            log(f"warm start: reusing {out_dir}")
            return out_dir
        raise ValueError(f"{out_dir} holds a warm start of another config or seed; use a fresh output folder")
    train(dataclasses.replace(cfg, steps=0), out_dir, seed=seed, device=device, log=log)
    return out_dir


def load_warm_start(policy: Policy, warm_dir) -> None:
    """Load the warm-start weights written by :func:`warm_start_run` into `policy`."""
    from safetensors.torch import load_file

    path = Path(warm_dir) / "checkpoint" / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"no warm start at {path}; run warm_start_run first")
    policy.model.load_state_dict(load_file(str(path), device=str(policy.device)))


class ScaleOutLog(TrainerCallback):
    """Per-rank rollout and weight-checksum lines, validation, metrics.jsonl rows."""

    def __init__(self, cfg: TrainConfig, seed: int, rollout: RetailRollout, metrics_path: Path, log=print):
        self.cfg, self.seed, self.rollout, self.metrics_path, self.log = cfg, seed, rollout, metrics_path, log
        self.val_ids = validation_tasks(cfg)
        self.trainer = None          # set by make_trainer
        self.pending_val = None
        self.checksum = None
        self.t0 = time.perf_counter()

    def _step(self, state) -> tuple[int, bool]:
        per = updates_per_step(self.trainer.args)
        return math.ceil(state.global_step / per), state.global_step % per == 0

    def on_train_begin(self, args, state, control, **kwargs):
        if not _sharded(self.trainer.accelerator):
            self.checksum = weights_checksum(self.trainer.model)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        acc = self.trainer.accelerator
        step, boundary = self._step(state)
        if not boundary:
            return control
        r = self.rollout.last
        rank = f"[rank {acc.process_index}/{acc.num_processes}] step {step}/{self.cfg.steps}"
        rolled = (f"{r['episodes']} episodes of {','.join(r['tasks'])}, reward {r['reward_mean']:.3f}, "
                  f"{r['sampled_tokens']} sampled tokens, rollout {r['seconds']:.1f}s")
        if _sharded(acc):
            self.log(f"{rank}: {rolled}; weights sharded (no checksum)")
        else:
            checksum, before = weights_checksum(self.trainer.model), self.checksum
            change = "" if before is None else f" (changed by {checksum - before:+.3e})"
            self.checksum = checksum
            self.log(f"{rank}: {rolled}; weights checksum {checksum:.12e}{change}")
            sums = acc.gather(torch.tensor([checksum], dtype=torch.float64, device=acc.device)).tolist()
            if len(set(sums)) != 1:
                raise RuntimeError(f"step {step}: weights differ across processes after the update: {sums}")
            if acc.is_main_process and acc.num_processes > 1:
                n = acc.num_processes
                self.log(f"step {step}/{self.cfg.steps}: " + (
                    f"weights unchanged by this update (equal on {n} processes)" if checksum == before
                    else f"update synchronised across {n} processes (equal weights checksum)"))
        if step % self.cfg.val_every == 0 or step == self.cfg.steps:
            with generation_model(self.trainer) as model:       # every rank: ZeRO-3 gathers collectively
                if acc.is_main_process:
                    policy = self.rollout.policy(model)
                    self.pending_val = validate(policy, self.cfg, self.val_ids, self.seed)
                    append_metrics(self.metrics_path, {"kind": "val", "step": step,
                                                "elapsed_s": time.perf_counter() - self.t0, **self.pending_val})
                acc.wait_for_everyone()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return control
        step, _ = self._step(state)
        row = {"kind": "train", "step": step, "global_step": state.global_step,
               **{ours: logs[k] for k, ours in TRL_TO_OURS.items() if k in logs},
               "elapsed_s": time.perf_counter() - self.t0, "trl": logs}
        if "reward_mean" in row:
            row["training_score"] = row["reward_mean"]
        append_metrics(self.metrics_path, row)
        msg = (f"step {step}/{self.cfg.steps} (update {state.global_step}/{state.max_steps}) "
               f"loss {logs['loss']:.4f}")
        for key, name in (("reward", "score"), ("frac_reward_zero_std", "zero-spread"), ("kl", "kl"),
                          ("entropy", "ent")):
            if key in logs and logs[key] is not None:
                msg += f" {name} {logs[key]:.3f}"
        if self.pending_val is not None:
            msg += f" | val mean@1 {self.pending_val['val_reward']:.3f}"
            self.pending_val = None
        self.log(msg)
        return control


def processing_class(policy: Policy):
    """The tokenizer GRPOTrainer is given: the policy's own, or for a Harmony preset (whose format
    holds the encoding, no HF tokenizer) openai-harmony's o200k_harmony as an HF tokenizer."""
    if policy.tokenizer is not None:
        return policy.tokenizer
    from ...rl.harmony import harmony_tokenizer

    return harmony_tokenizer()


def deterministic_backward_pass(trainer):
    """Route `trainer`'s backward passes (`accelerator.backward`, which Trainer.training_step
    calls) through `machine.deterministic_on_cpu`, as our trainer's `deterministic_backward`: on a
    CPU a run then repeats bit for bit at two threads too (that function's docstring says what
    raced). Returns `trainer`."""
    plain = trainer.accelerator.backward

    def backward(loss, **kwargs):
        with deterministic_on_cpu(loss.device):
            return plain(loss, **kwargs)

    trainer.accelerator.backward = backward
    return trainer


def make_trainer(cfg: TrainConfig, policy: Policy, out_dir, seed: int = 0, decode: str = "batch",
                 lora_r: int | None = None, log=print, **grpo_overrides):
    """A GRPOTrainer on `policy` for `cfg` (rollout_func, reward, config, dataset, logging).

    The dataset is the training split's task ids; `out_dir/metrics.jsonl` receives the rows.
    With beta > 0 (and no LoRA, where the reference is the adapter switched off) TRL loads its
    KL reference from `config._name_or_path`: the policy's current weights are saved to
    `out_dir/reference` and named there, so the reference is the starting point, as ours.
    """
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    out_dir = Path(out_dir)
    state = distributed_state()
    args = grpo_config(cfg, out_dir / "trl", seed, state.num_processes, **grpo_overrides)
    if args.beta > 0 and not lora_r:
        with state.main_process_first():
            if state.is_main_process:
                policy.model.save_pretrained(out_dir / "reference")
        policy.model.config._name_or_path = str(out_dir / "reference")
    rollout = RetailRollout(cfg.rollout_config(), policy.tokenizer, seed=seed, decode=decode, chat=policy.chat)
    callback = ScaleOutLog(cfg, seed, rollout, out_dir / "metrics.jsonl", log)
    dataset = Dataset.from_dict({"prompt": training_tasks(cfg)})
    trainer = GRPOTrainer(model=policy.model, reward_funcs=env_reward, args=args, train_dataset=dataset,
                          processing_class=processing_class(policy), rollout_func=rollout, callbacks=[callback],
                          peft_config=lora_config(lora_r) if lora_r else None)
    trainer.remove_callback(PrinterCallback)
    callback.trainer = trainer
    return deterministic_backward_pass(trainer)


def lora_rank(cfg: TrainConfig, lora_r: int | None) -> int | None:
    """The LoRA rank of a TRL run: `lora_r` (``--lora-r``) or the config's `lora`; both given
    and different is a ValueError."""
    if lora_r and cfg.lora and lora_r != cfg.lora:
        raise ValueError(f"two LoRA ranks: lora_r={lora_r} and the config's lora={cfg.lora}")
    return lora_r or cfg.lora


def train_trl(cfg: TrainConfig, out_dir, seed: int = 0, warm_start_dir=None, decode: str = "batch",
              lora_r: int | None = None, log=print, **grpo_overrides) -> TrainResult:
    """Warm start (or load `warm_start_dir`), then GRPO on TRL's GRPOTrainer (module docstring).

    Works in one process and under torchrun / accelerate launch (one policy per process, DDP).
    Returns a `TrainResult` (the trained policy's model is the peft model with LoRA; the
    validation values are NaN on ranks other than the main one).
    """
    lora_r = lora_rank(cfg, lora_r)
    if cfg.dtype != "float32":
        raise ValueError(f"the TRL path trains in float32 (it was not run on a GPU here); got dtype={cfg.dtype!r}: "
                         "run the paper's bf16 LoRA setup with python -m sinkflex_lib.rl.train")
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    state = distributed_state()
    choose_threads(cfg.threads, log)
    ensure_registered(cfg.attn_implementation)       # the same attention name in every process
    warm_dir = Path(warm_start_dir) if warm_start_dir is not None else out_dir / "warm_start"
    with state.main_process_first():
        if state.is_main_process:
            out_dir.mkdir(parents=True, exist_ok=True)
            if warm_start_dir is None:
                warm_start_run(cfg, warm_dir, seed, device=str(state.device), log=log)
            (out_dir / "metrics.jsonl").write_text("")
            append_metrics(out_dir / "metrics.jsonl", {"kind": "config", "step": 0, "trainer": "trl", "seed": seed,
                                                "processes": state.num_processes, "decode": decode,
                                                "lora_r": lora_r, "warm_start": str(warm_dir),
                                                **dataclasses.asdict(cfg), "grpo_overrides": grpo_overrides})
            for row in read_metrics(warm_dir):
                if row["kind"] == "val" and row["step"] == 0:
                    append_metrics(out_dir / "metrics.jsonl", row)
    policy = policy_of(dataclasses.replace(cfg, lora=None), seed, device=state.device)   # TRL adds the LoRA
    load_warm_start(policy, warm_dir)
    if policy.chat.name == "compact":
        prepare_tokenizer(policy.tokenizer)     # the project tokenizer has them; a loaded HF one may not
    trainer = make_trainer(cfg, policy, out_dir, seed, decode=decode, lora_r=lora_r, log=log, **grpo_overrides)
    log(f"[rank {state.process_index}/{state.num_processes}] TRL GRPOTrainer: {cfg.steps} GRPO steps, "
        f"{trainer.args.max_steps} updates, loss_type {trainer.args.loss_type}, device {state.device}")
    trainer.train()
    policy = Policy(trainer.accelerator.unwrap_model(trainer.model), policy.tokenizer, policy.name,
                    lora=bool(lora_r), chat=policy.chat)
    vals = [r for r in read_metrics(out_dir) if r["kind"] == "val"] if state.is_main_process else []
    return TrainResult(out_dir=str(out_dir), device=str(state.device), seconds=time.perf_counter() - t0,
                       val_start=vals[0]["val_reward"] if vals else math.nan,
                       val_end=vals[-1]["val_reward"] if vals else math.nan, policy=policy,
                       processes=state.num_processes)
