"""The rollout worker: the agent loop over `RetailEnv`, batched, with a KV cache.

verl's rollout contract, one row per episode: token ids, an attention mask, position ids, a
`mask` that is 1 exactly on the tokens the policy sampled, and the sampling log-probs
(`old_logp`, 0 where mask is 0). Tokens accumulate turn by turn and are never re-tokenized:
each observation is tokenized once, on arrival, and appended.

Batching. All rows (the G rollouts of a group, or several groups, or the validation tasks)
advance in one decode loop over one `DynamicCache`. Each forward feeds every live row the
tokens it has pending (its new observation, or its last sampled token), left-padded to the
longest with pad tokens whose attention mask is 0. A row's *layout* is everything fed to
the cache in order, pads included, with the position ids (pads do not advance positions).
Scoring this layout (same pads, same positions) gives the sampling log-probs up to float
rounding. With the "sinkflex" attention the sliding window counts real tokens
(`SinkMask.positions`), so the pads change nothing at all: the layout scores as its pad-free
episode (`without_pads`: what the warm start trains on, what TRL rescores, and what the trainer
scores on sinkflex). Finished rows leave the batch (their cache rows are dropped).

A turn, in the policy's chat format (:mod:`.formats`; shown for the compact one): feed pending
-> sample tokens until a stop token, <|end|> (or `max_new_tokens`: a forced <|end|> with mask 0
closes the turn) -> parse the sampled tokens into an action -> env.step(action) -> tokenize
the observation + <|assistant|> as the next pending tokens. Budgets: `max_turns` (the env's
max_steps: truncated, scored by the env as tau2 does) and `max_tokens` per row (if the next
observation plus a full turn would not fit, the episode stops: truncated, reward 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..envs import RetailEnv
from ..envs.actions import ParseError, ToolCall


@dataclass
class RolloutConfig:
    max_turns: int = 16            # agent actions per episode (env max_steps)
    max_tokens: int = 2048         # real tokens per episode (prompt + responses + observations)
    max_new_tokens: int = 64       # sampled tokens per agent turn
    temperature: float = 1.0       # 0: greedy
    source: str = "mini"
    user: str = "scripted"         # the user simulator (:func:`sinkflex_lib.envs.users.make_user`)


@dataclass
class Rollout:
    task_id: str
    seed: int
    ids: list[int] = field(default_factory=list)
    attn: list[int] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    old_logp: list[float] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    end_reason: str = ""
    tool_calls: int = 0
    tool_errors: int = 0           # tool calls whose result is an "Error: ..." string
    parse_errors: int = 0          # actions that looked like calls but did not parse
    reward_info: dict = field(default_factory=dict)

    @property
    def n_sampled(self) -> int:
        return sum(self.mask)

    @property
    def n_tokens(self) -> int:
        return sum(self.attn)

    @property
    def turns(self) -> int:
        return len(self.actions)

    def append(self, tok: int, attn: int, pos: int, mask: int = 0, logp: float = 0.0) -> None:
        self.ids.append(tok)
        self.attn.append(attn)
        self.pos.append(pos)
        self.mask.append(mask)
        self.old_logp.append(logp)


@torch.no_grad()
def rollout_batch(policy, specs: list[tuple[str, int]], cfg: RolloutConfig | None = None,
                  generator: torch.Generator | None = None, stats: dict | None = None) -> list[Rollout]:
    """Play one episode per (task_id, seed) in `specs`, all in one batched decode loop, in the
    policy's chat format (`policy.chat`, :mod:`.formats`)."""
    from transformers import DynamicCache

    cfg = cfg or RolloutConfig()
    model, fmt = policy.model, policy.chat
    device = policy.device
    pad_id = fmt.pad_id
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    n_forward_tokens = 0

    rows = [Rollout(str(tid), int(seed)) for tid, seed in specs]
    envs, pending, next_pos, turn_tokens = [], [], [], []
    for r in rows:
        env = RetailEnv(cfg.source, max_steps=cfg.max_turns, user=cfg.user)
        obs, info = env.reset(seed=r.seed, options={"task_id": r.task_id})
        envs.append(env)
        pending.append([(t, 0, 0.0) for t in fmt.prompt(env, obs, info)])
        next_pos.append(0)
        turn_tokens.append([])
    live = list(range(len(rows)))          # row indices in cache order
    generating = set(live)
    cache = DynamicCache()
    attn_hist = torch.zeros(len(live), 0, dtype=torch.long, device=device)

    while live:
        # 1) one forward: each live row's pending tokens, left-padded
        L = max(1, max(len(pending[i]) for i in live))
        ids = torch.full((len(live), L), pad_id, dtype=torch.long)
        am = torch.zeros((len(live), L), dtype=torch.long)
        pos = torch.zeros((len(live), L), dtype=torch.long)
        for b, i in enumerate(live):
            pend, pad = pending[i], L - len(pending[i])
            p0 = next_pos[i]
            for j in range(pad):
                rows[i].append(pad_id, 0, p0)
                pos[b, j] = p0
            for j, (t, m, lp) in enumerate(pend):
                rows[i].append(t, 1, p0 + j, m, lp)
                ids[b, pad + j], am[b, pad + j], pos[b, pad + j] = t, 1, p0 + j
            next_pos[i] = p0 + len(pend)
            pending[i] = []
        attn_hist = torch.cat([attn_hist, am.to(device)], dim=1)
        out = model(input_ids=ids.to(device), attention_mask=attn_hist, position_ids=pos.to(device),
                    cache=cache, use_cache=True, logits_to_keep=1)   # only the last position samples
        n_forward_tokens += int(am.sum())
        logits = out.logits[:, -1].float()
        # 2) sample the next token of every generating row
        if generating:
            # sampled on the CPU so a CPU generator drives it on every device (reproducible);
            # temperature 0 is greedy decoding (log-probs then under the temperature-1 softmax)
            logp_all = torch.log_softmax(logits / (cfg.temperature or 1.0), dim=-1).cpu()
            if cfg.temperature > 0:
                sampled = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(1)
            else:
                sampled = logp_all.argmax(-1)
        finished_turn = []
        for b, i in enumerate(live):
            if i not in generating:
                continue
            t = int(sampled[b])
            pending[i].append((t, 1, float(logp_all[b, t])))
            turn_tokens[i].append(t)
            if t in fmt.stop_ids:
                finished_turn.append(i)
            elif len(turn_tokens[i]) >= cfg.max_new_tokens:
                pending[i].extend((c, 0, 0.0) for c in fmt.close_ids)   # forced close, not sampled
                finished_turn.append(i)
        generating.difference_update(finished_turn)
        if generating:
            continue
        # 3) every live row has finished its turn: step the environments
        done = []
        for i in live:
            r, env = rows[i], envs[i]
            text, parsed = fmt.parse(turn_tokens[i])
            turn_tokens[i] = []
            r.actions.append(text)
            obs, reward, term, trunc, info = env.step(parsed)
            if isinstance(parsed, ToolCall):
                r.tool_calls += 1
                r.tool_errors += obs.startswith("tool: Error")
            elif isinstance(parsed, ParseError):
                r.parse_errors += 1
            if term or trunc:
                r.reward, r.terminated, r.truncated = float(reward), term, trunc
                r.reward_info = info.get("reward_info", {})
                r.end_reason = r.reward_info.get("termination", "max_turns" if trunc else "terminated")
                done.append(i)
                continue
            nxt = fmt.observation(obs, parsed)
            used = sum(r.attn) + len(pending[i])
            if used + len(nxt) + cfg.max_new_tokens + 1 > cfg.max_tokens:
                r.reward, r.truncated, r.end_reason = 0.0, True, "max_tokens"
                done.append(i)
                continue
            pending[i].extend((t, 0, 0.0) for t in nxt)
        for i in done:  # unfed sampled tokens (the last <|end|>) still belong to the layout
            for j, (t, m, lp) in enumerate(pending[i]):
                rows[i].append(t, 1, next_pos[i] + j, m, lp)
            pending[i] = []
        if done:
            keep = [b for b, i in enumerate(live) if i not in done]
            live = [live[b] for b in keep]
            if live:
                idx = torch.tensor(keep, device=device)
                for layer in cache.layers:
                    if getattr(layer, "keys", None) is not None and layer.keys.numel():
                        layer.keys = layer.keys.index_select(0, idx)
                        layer.values = layer.values.index_select(0, idx)
                attn_hist = attn_hist.index_select(0, idx)
        generating = set(live)
    if was_training:
        model.train()
    if stats is not None:
        stats["rollout_s"] = time.perf_counter() - t0
        stats["rollout_forward_tokens"] = n_forward_tokens
    return rows


def without_pads(r: Rollout) -> Rollout:
    """The episode with its decode pads dropped: real tokens only, positions 0..n-1 unchanged
    (pads never advance them). Under the sinkflex attention it scores exactly as its layout
    (the window counts real tokens), in fewer positions."""
    out = Rollout(r.task_id, r.seed, actions=r.actions, reward=r.reward, terminated=r.terminated,
                  truncated=r.truncated, end_reason=r.end_reason, tool_calls=r.tool_calls,
                  tool_errors=r.tool_errors, parse_errors=r.parse_errors, reward_info=r.reward_info)
    for t, a, p, m, lp in zip(r.ids, r.attn, r.pos, r.mask, r.old_logp):
        if a:
            out.append(t, 1, p, m, lp)
    return out


def scores_without_pads(model) -> bool:
    """True when `model` runs on the sinkflex attention, whose window counts real tokens, so a
    layout and its pad-free episode get the same log-probs (transformers' eager and sdpa count
    cache slots: their layouts must be scored with the pads)."""
    return str(getattr(model.config, "_attn_implementation", "")).startswith("sinkflex")


def group_specs(task_ids: list[str], group_size: int, seeds: list[int]) -> list[tuple[str, int]]:
    """G copies of each task with that task's seed, group-contiguous."""
    return [(tid, s) for tid, s in zip(task_ids, seeds) for _ in range(group_size)]


def collate(rollouts: list[Rollout], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad layouts into (B, T) tensors: input_ids, attention_mask, position_ids, mask,
    old_logp, reward. Right padding has attention 0 and mask 0."""
    T = max(len(r.ids) for r in rollouts)
    B = len(rollouts)
    out = {"input_ids": torch.full((B, T), pad_id, dtype=torch.long),
           "attention_mask": torch.zeros((B, T), dtype=torch.long),
           "position_ids": torch.zeros((B, T), dtype=torch.long),
           "mask": torch.zeros((B, T), dtype=torch.float32),
           "old_logp": torch.zeros((B, T), dtype=torch.float32)}
    for b, r in enumerate(rollouts):
        n = len(r.ids)
        out["input_ids"][b, :n] = torch.tensor(r.ids)
        out["attention_mask"][b, :n] = torch.tensor(r.attn)
        out["position_ids"][b, :n] = torch.tensor(r.pos)
        out["position_ids"][b, n:] = r.pos[-1] if n else 0
        out["mask"][b, :n] = torch.tensor(r.mask, dtype=torch.float32)
        out["old_logp"][b, :n] = torch.tensor(r.old_logp)
    out["reward"] = torch.tensor([r.reward for r in rollouts], dtype=torch.float32)
    return out


def previous_real_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) index of the last position before t whose attention mask is 1 (-1 if none)."""
    B, T = attention_mask.shape
    idx = torch.arange(T, device=attention_mask.device).expand(B, T)
    real = torch.where(attention_mask > 0, idx, torch.full_like(idx, -1))
    last = torch.cummax(real, dim=1).values
    return torch.nn.functional.pad(last[:, :-1], (1, 0), value=-1)


def token_logprobs(model, batch: dict, temperature: float = 1.0, with_entropy: bool = False,
                   chunk: int = 512):
    """Log-probs (B, T) of each token under the distribution it was sampled from, from one
    forward pass over the layout; optionally that distribution's entropy. Tokens with no
    real token before them get 0.

    A token at layout index t was sampled from the logits of the last *real* token fed before
    it (pads may sit in between: a row's last sampled token is fed, after left pads, with its
    next observation), so the source index is `previous_real_index`, not simply t - 1.
    The normaliser (and entropy) of each position is computed `chunk` positions at a time and
    only the target's logit is gathered: no second (B, T, vocab) tensor is made, which matters
    for a 201k vocabulary (gpt-oss: 0.8 MB per position in float32).
    """
    dev = next(model.parameters()).device
    am = batch["attention_mask"].to(dev)
    logits = model(input_ids=batch["input_ids"].to(dev), attention_mask=am,
                   position_ids=batch["position_ids"].to(dev), use_cache=False).logits
    B, T, _ = logits.shape
    scaled = lambda x: (x.float() / temperature) if temperature != 1.0 else x.float()  # noqa: E731
    lse, ent = [], []
    for a in range(0, T, chunk):
        x = scaled(logits[:, a:a + chunk])
        z = torch.logsumexp(x, dim=-1)
        lse.append(z)
        if with_entropy:
            ent.append(z - (torch.softmax(x, dim=-1) * x).sum(-1))
    src = previous_real_index(am)
    valid = src >= 0
    src_c = src.clamp(min=0)
    tgt = batch["input_ids"].to(dev)
    picked = scaled(logits[torch.arange(B, device=dev).unsqueeze(1), src_c, tgt])
    logp = (picked - torch.cat(lse, 1).gather(1, src_c)) * valid
    if not with_entropy:
        return logp, None
    return logp, torch.cat(ent, 1).gather(1, src_c) * valid
