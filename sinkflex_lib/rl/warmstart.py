"""Supervised warm start: behaviour cloning on oracle episodes, loss only on agent tokens.

A policy from random weights cannot find the tool syntax by sampling, so GRPO starts from a
policy cloned on a few oracle episodes (:class:`~sinkflex_lib.envs.OracleAgent`: authenticate,
look up, confirm, act, report). Each demonstration is tokenized exactly as the rollout worker
builds an episode (prompt and observations tokenized on arrival, the agent's action plus its
<|end|> as the "sampled" part), and the cross-entropy counts only those agent tokens.
The design lever: few episodes / few epochs leave the policy with some but not full success,
so GRPO's groups have reward variance to learn from.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..envs import RetailEnv
from ..envs.actions import argument_value_spans
from ..envs.oracle import decision_spans, id_spans, with_next_action
from ..machine import deterministic_backward
from .chat import END, TOOL, oracle_transcript
from .rollout import Rollout, collate, token_logprobs


def demonstration(policy, env: RetailEnv, task_id: str, seed: int = 0, max_tokens: int = 4096,
                  tool_weight: float = 0.0, drop_system: bool = False, value_weight: float = 1.0,
                  decision_weight: float = 1.0, id_start_weight: float = 1.0, slip_at: int | None = None,
                  slip: str | None = None) -> Rollout:
    """The oracle episode of `task_id` as a rollout layout (mask 1 on agent tokens), cut at
    the last whole agent turn that fits in `max_tokens`. A demonstration has no sampling
    log-probs: its `old_logp` field carries each token's loss weight instead (1 on agent tokens,
    `value_weight` on the tokens of a tool call's string argument values, the copied ids and
    names; `decision_weight` on the words of a confirmation request that the user's request
    decides (:func:`~sinkflex_lib.envs.oracle.decision_spans`: which write, a cancel's reason,
    the argument values as the request states them); `id_start_weight` on the first token of
    each item and product id a call or a confirmation request writes
    (:func:`~sinkflex_lib.envs.oracle.id_spans`), over the others; `tool_weight` inside tool results,
    0 elsewhere), so `collate` pads it. drop_system: leave out the system message (pretraining's
    copy curriculum). slip_at: a failed call before the oracle's call `slip_at` of its script
    (:func:`~sinkflex_lib.rl.chat.oracle_transcript`), context without loss (mask and weight 0), its
    error message weighted as a tool result: what follows a failed call is the oracle's right turn.
    slip: that action instead of the oracle's own slip (a policy's, :mod:`.recovery`)."""
    tok = policy.tokenizer
    end_id, tool_id = policy.token_id(END), policy.token_id(TOOL)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt, turns = oracle_transcript(env, task_id, seed=seed, slip_at=slip_at, slip=slip)
    ids = enc(prompt)
    r = Rollout(task_id, seed)
    for t in (ids[ids.index(end_id) + 1:] if drop_system else ids):
        r.append(t, 1, len(r.ids))
    oracle = [turn for k, turn in enumerate(turns) if k != slip_at]
    nexts = [n for _, _, n in with_next_action(oracle)]     # the action a confirmation is for
    if slip_at is not None:
        nexts.insert(slip_at, "")
    for k, ((action, obs), nxt) in enumerate(zip(turns, nexts)):
        a = tok(action, add_special_tokens=False, return_offsets_mapping=True)
        act = a["input_ids"] + [end_id]
        if len(r.ids) + len(act) > max_tokens:
            break
        spans = [(s, e, value_weight) for _, s, e in argument_value_spans(action)] if value_weight != 1.0 else []
        if decision_weight != 1.0:
            spans += [(s, e, decision_weight) for _, s, e in decision_spans(action, nxt, env.db.products)]
        if id_start_weight != 1.0:      # first in the list: it wins where spans overlap
            spans = [(s, s + 1, id_start_weight) for _, s, _ in id_spans(action, nxt, env.db.products)] + spans
        learn = int(k != slip_at)
        for t, w in zip(act, span_weights(a["offset_mapping"], spans) + [1.0]):
            r.append(t, 1, len(r.ids), mask=learn, logp=w * learn)
        in_tool = False
        for t in enc(obs):
            in_tool = (in_tool or t == tool_id) and t != end_id
            r.append(t, 1, len(r.ids), logp=tool_weight if in_tool and t != tool_id else 0.0)
    # trailing observation after the last kept action carries no loss: trim it
    last = max(i for i, m in enumerate(r.mask) if m) + 1 if any(r.mask) else len(r.ids)
    for k in ("ids", "attn", "pos", "mask", "old_logp"):
        setattr(r, k, getattr(r, k)[:last])
    r.reward = 1.0
    return r


def span_weights(offsets: list[tuple[int, int]], spans: list[tuple[int, int, float]]) -> list[float]:
    """Loss weight per token (character `offsets`): the weight of the first (start, end, weight)
    span the token overlaps, 1 for a token in none."""
    return [next((w for a, b, w in spans if s < b and e > a), 1.0) for s, e in offsets]


def bc_loss(policy, batch: dict) -> torch.Tensor:
    """Mean negative log-likelihood of the mask-1 (agent) tokens."""
    logp, _ = token_logprobs(policy.model, batch)
    m = batch["mask"].to(logp.device)
    return -(logp * m).sum() / m.sum().clamp(min=1)


def warm_start(policy, task_ids: list[str], epochs: int = 1, batch_size: int = 8, lr: float = 3e-3,
               max_tokens: int = 2048, seed: int = 0, source: str = "mini", grad_clip: float = 1.0,
               log=None, max_seconds: float | None = None) -> list[dict]:
    """Behaviour cloning on the oracle episodes of `task_ids` for `epochs` passes.

    Returns one dict per optimizer step (step, epoch, loss, tokens, seconds). Seeded: the
    episode order comes from `seed`. Stops early after `max_seconds` if given.
    """
    env = RetailEnv(source, max_steps=60)
    demos = [demonstration(policy, env, tid, max_tokens=max_tokens) for tid in task_ids]
    pad_id = policy.pad_id
    opt = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    n_steps = epochs * ((len(demos) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) *
                                              max(0.1, 1 - s / max(1, n_steps)))
    policy.model.train()
    history, step, t0 = [], 0, time.perf_counter()
    lengths = np.array([len(d.ids) for d in demos])
    for epoch in range(epochs):
        # length-bucketed batches (little padding), visited in a random order
        order = rng.permutation(len(demos))
        order = order[np.argsort(lengths[order], kind="stable")]
        batches = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
        for b in rng.permutation(len(batches)):
            ts = time.perf_counter()
            batch = collate([demos[i] for i in batches[b]], pad_id)
            loss = bc_loss(policy, batch)
            opt.zero_grad(set_to_none=True)
            deterministic_backward(loss)
            torch.nn.utils.clip_grad_norm_(policy.model.parameters(), grad_clip)
            opt.step()
            sched.step()
            row = {"step": step, "epoch": epoch, "loss": float(loss.detach()),
                   "tokens": int(batch["attention_mask"].sum()), "seconds": time.perf_counter() - ts}
            history.append(row)
            step += 1
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                return history
        if log:  # one progress line per epoch
            rows = [h for h in history if h["epoch"] == epoch]
            log(f"warm start epoch {epoch + 1}/{epochs}: loss {np.mean([h['loss'] for h in rows]):.3f}, "
                f"{sum(h['tokens'] for h in rows) / sum(h['seconds'] for h in rows):.0f} tok/s, "
                f"{time.perf_counter() - t0:.0f}s")
    return history
