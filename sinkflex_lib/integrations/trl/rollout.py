"""TRL's `rollout_func`: our rollout worker over `RetailEnv`, returned in GRPOTrainer's shape.

`GRPOTrainer(..., rollout_func=RetailRollout(rollout_cfg, seed))` calls the function once per
generation batch with this process's prompts and the trainer. A prompt is a task id (the
dataset's "prompt" column); TRL's sampler has already repeated each task `num_generations`
times, and every copy of a task starts from the same task seed (`task_seed(seed, step, task)`),
so the copies differ only by what the policy samples. Each prompt is played as one episode by
:func:`sinkflex_lib.rl.rollout.rollout_batch`: user turns are the environment's real user turns
(dual control), tool results are the environment's. Per episode the function returns

    prompt_ids      the initial prompt: system text, greeting, first user message, <|assistant|>
    completion_ids  every later token: sampled actions, tool results, user turns, role markers
    logprobs        the sampling log-prob of each completion token (0.0 where env_mask is 0)
    env_mask        1 exactly on the tokens the policy sampled (TRL's tool mask); 0 on
                    observations, role markers and a forced <|end|> that closes a cut turn
    env_reward      the environment's reward R = R_DB * R_COMM (0 for a max_tokens cut)
    reward_info     its breakdown (`RetailEnv`'s info["reward_info"]; {} when not evaluated)
    end_reason, turns, task_seed

and TRL hands all but env_mask to the reward functions as keyword arguments (:func:`env_reward`
passes the reward through and logs its breakdown).

Layout. Our worker's rows hold decode pads (attention 0) where a row waited for others in a
batched decode loop; pads never advance the position ids. TRL scores prompt + completion with
implicit positions 0..n-1 and no interior padding, so the pads are dropped here: the real tokens
keep exactly their positions. The "sinkflex" attention counts its sliding window in real tokens
(`SinkMask.positions`), so pads change nothing and TRL's log-probs equal the sampling ones up to
float rounding with `decode="batch"` (the default: all of this process's episodes in one decode
loop). `decode="episode"` plays each episode in its own loop, without pads: slower (one decode
loop per episode), and exact with any attention implementation (those whose sliding window counts
cache slots, such as transformers' eager and sdpa, would see fewer real keys under pads).
"""

from __future__ import annotations

import contextlib
import hashlib
import time

import torch

from ...envs import RetailEnv
from ...rl.policy import Policy
from ...rl.rollout import Rollout, RolloutConfig, rollout_batch, without_pads

DECODE_MODES = ("batch", "episode")


def _seed(*parts) -> int:
    """A seed in [0, 2**31 - 1) from `parts`, the same in every process (no Python hash())."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**31 - 1)


def task_seed(seed: int, step: int, task_id: str) -> int:
    """The environment seed of `task_id` at GRPO step `step`: shared by every copy of the task
    (in every process), new at every step."""
    return _seed("task", seed, step, task_id)


def sampling_seed(seed: int, step: int, process_index: int) -> int:
    """The seed of this process's sampling generator at GRPO step `step`."""
    return _seed("sample", seed, step, process_index)


def play(policy, specs: list[tuple[str, int]], cfg: RolloutConfig, generator: torch.Generator,
         decode: str = "batch") -> list[Rollout]:
    """One episode per (task_id, seed) in `specs` with our worker: all in one decode loop
    ("batch"), or each in its own ("episode"). Same generator, consumed in `specs` order."""
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
    if decode == "batch":
        return rollout_batch(policy, specs, cfg, generator)
    return [rollout_batch(policy, [spec], cfg, generator)[0] for spec in specs]


def to_trl(rollouts: list[Rollout]) -> dict[str, list]:
    """Our rollouts as the dict a TRL rollout_func returns (module docstring); pads dropped.

    Raises if a row breaks the layout invariants TRL relies on: real tokens at positions
    0..n-1 (TRL's implicit positions), at least one sampled token.
    """
    out = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward",
                           "reward_info", "end_reason", "turns", "task_seed")}
    for r in map(without_pads, rollouts):
        ids, mask, logp = r.ids, r.mask, r.old_logp
        if r.pos != list(range(len(ids))):
            raise RuntimeError(f"episode {r.task_id!r}: real tokens are not at positions 0..n-1")
        if 1 not in mask:
            raise RuntimeError(f"episode {r.task_id!r} has no sampled token")
        start = mask.index(1)            # the prompt ends where the policy first samples
        out["prompt_ids"].append(ids[:start])
        out["completion_ids"].append(ids[start:])
        out["env_mask"].append(mask[start:])
        out["logprobs"].append(logp[start:])
        out["env_reward"].append(float(r.reward))
        out["reward_info"].append(r.reward_info)
        out["end_reason"].append(r.end_reason)
        out["turns"].append(r.turns)
        out["task_seed"].append(r.seed)
    return out


@contextlib.contextmanager
def generation_model(trainer):
    """The trainer's model, unwrapped for a local decode loop (DeepSpeed ZeRO-3: parameters
    gathered, as TRL does for its own generation). FSDP is refused: the decode loop runs a
    different number of forwards on each process, and FSDP's per-layer all-gathers need them
    in lockstep."""
    from trl.models import unwrap_model_for_generation

    if getattr(trainer, "is_fsdp_enabled", False):
        raise NotImplementedError(
            "RetailRollout does not support FSDP (uneven decode loops across processes would "
            "deadlock FSDP's all-gathers); use DeepSpeed ZeRO-3 or DDP, see the README's "
            "'Scaling out' section")
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     gather_deepspeed3_params=trainer.args.ds3_gather_for_generation) as model:
        yield model


def updates_per_step(args) -> int:
    """Optimizer steps per GRPO step (one generation batch) under GRPOConfig `args`."""
    return args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps


class RetailRollout:
    """A GRPOTrainer `rollout_func` playing `RetailEnv` episodes with our rollout worker.

    rollout_cfg: budgets and temperature (`TrainConfig.rollout_config()`); its temperature must
        equal GRPOConfig.temperature, which TRL uses to rescore.
    seed: the run seed; task and sampling seeds derive from (seed, GRPO step, task / process).
    decode: "batch" or "episode" (module docstring).
    tokenizer, chat: the policy's tokenizer and chat format (`Policy.chat`: compact, or Harmony
        for gpt-oss); the episodes are played and returned in that format.
    After each call, `last` holds this process's rollout summary (tasks, episodes, rewards,
    sampled tokens, seconds), for logging.
    """

    def __init__(self, rollout_cfg: RolloutConfig, tokenizer, seed: int = 0, decode: str = "batch", chat=None):
        if decode not in DECODE_MODES:
            raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
        self.cfg, self.tokenizer, self.seed, self.decode = rollout_cfg, tokenizer, int(seed), decode
        self.chat = chat
        self._known = set(RetailEnv(rollout_cfg.source).task_ids(None))
        self.last: dict = {}

    def policy(self, model) -> Policy:
        """`model` (the trainer's, unwrapped) as a policy in this rollout's chat format."""
        return Policy(model, self.tokenizer, name="trl-policy", chat=self.chat)

    def __call__(self, prompts: list[str], trainer) -> dict[str, list]:
        unknown = sorted({p for p in prompts if not isinstance(p, str) or p not in self._known}, key=str)
        if unknown:
            raise ValueError(f"RetailRollout: prompts must be task ids of source {self.cfg.source!r} (the "
                             f"dataset's 'prompt' column); unknown: {unknown[:5]}")
        if trainer.args.temperature != self.cfg.temperature:
            raise ValueError(f"GRPOConfig.temperature ({trainer.args.temperature}) must equal the rollout "
                             f"temperature ({self.cfg.temperature}): TRL rescores at its temperature")
        step = trainer.state.global_step // updates_per_step(trainer.args) + 1
        rank = trainer.accelerator.process_index
        specs = [(p, task_seed(self.seed, step, p)) for p in prompts]
        generator = torch.Generator().manual_seed(sampling_seed(self.seed, step, rank))
        t0 = time.perf_counter()
        with generation_model(trainer) as model:
            policy = self.policy(model)
            rollouts = play(policy, specs, self.cfg, generator, self.decode)
        out = to_trl(rollouts)
        self.last = {"step": step, "process": rank, "tasks": sorted(set(prompts)), "episodes": len(rollouts),
                     "reward_mean": sum(out["env_reward"]) / len(rollouts),
                     "sampled_tokens": sum(map(sum, out["env_mask"])), "seconds": time.perf_counter() - t0}
        return out


def env_reward(prompts, completions, env_reward, reward_info=None, log_metric=None, **kwargs) -> list[float]:
    """TRL reward function: the environment's reward, passed through from the rollout.

    Logs the breakdown (mean R_DB and R_COMM over the episodes the environment scored) through
    TRL's `log_metric`, as env/db_reward and env/communicate_reward.
    """
    if log_metric is not None and reward_info:
        scored = [i for i in reward_info if i]
        if scored:
            log_metric("env/db_reward", sum(i["db"]["reward"] for i in scored) / len(scored))
            log_metric("env/communicate_reward", sum(i["communicate"]["reward"] for i in scored) / len(scored))
    return [float(r) for r in env_reward]
