"""The rollout worker: the agent loop over `RetailEnv`, batched, with a KV cache.

verl's rollout contract, one row per episode: token ids, an attention mask, position ids, a
`mask` that is 1 exactly on the tokens the policy sampled, and the sampling log-probs
(`old_logp`, 0 where mask is 0). Tokens accumulate turn by turn and are never re-tokenized:
each observation is tokenized once, on arrival, and appended.

Batching. All rows (the G rollouts of a group, or several groups, or the validation tasks)
advance in one decode loop over one KV cache (:mod:`.kv_cache`). Each forward feeds every live row the
tokens it has pending (its new observation, or its last sampled token), left-padded to the
longest with pad tokens whose attention mask is 0. A row's *layout* is everything fed to
the cache in order, pads included, with the position ids (pads do not advance positions).
Scoring this layout (same pads, same positions) gives the sampling log-probs up to float
rounding. With the "sinkflex" attention the sliding window counts real tokens
(`SinkMask.positions`), so the pads change nothing at all: the layout scores as its pad-free
episode (`without_pads`: what the warm start trains on, what TRL rescores, and what the trainer
scores on sinkflex). Finished rows leave the batch (their cache rows are dropped). On sinkflex
the cache also drops its pad slots at every turn boundary (`drop_pad_slots`), so a later
forward attends over real tokens only; the recorded layout keeps them (it scores the same).

Speed (`RolloutConfig`'s switches; `python -m sinkflex_lib.bench rl` times each off): the
prompts' common prefix (the system text and greeting) is fed once and its cache copied to every
row (`share_prompt_prefix`; a row's layout is then prefix, pads, the rest of its prompt); a
gpt-oss policy runs :class:`.lean_forward.LeanGptOss`, the same logits in fewer operations
(`lean_forward`); tokens are drawn by inverse-CDF sampling (`fast_sampling`, :func:`sample_tokens`);
rows whose turn ended do not wait for the slowest row: once half the live rows wait, their
environments step and their observations are fed beside the other rows' next tokens
(`overlap_turns`; at the `cpu` profile's budgets the shipped base's turns run 1 to 128 sampled
tokens, median 13, and a turn-synchronous loop sampled ~9 tokens a forward out of 32 rows).

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

from ..envs import RetailEnv, WRITE_TOOLS
from ..envs.actions import ParseError, ToolCall


@dataclass
class RolloutConfig:
    max_turns: int = 16            # agent actions per episode (env max_steps)
    max_tokens: int = 3072         # real tokens per episode (prompt + responses + observations)
    max_new_tokens: int = 128      # sampled tokens per agent turn (the oracle's turns fit both:
                                   # :func:`replay_turns`, `evaluate.oracle_in_budget_rewards`)
    temperature: float = 1.0       # 0: greedy
    source: str = "mini"
    user: str = "scripted"         # the user simulator (:func:`sinkflex_lib.envs.users.make_user`)
    # speed only (the bench switches each off; greedy tokens stay the same, log-probs within float
    # rounding; sampled tokens too, but for `fast_sampling` and `overlap_turns`, which hand a seed's
    # draws out otherwise):
    cache_in_place: bool = True    # KV appends write into spare slots (:mod:`.kv_cache`), no full copy
    drop_pad_slots: bool = True    # at each turn boundary, repack the cache to real tokens
                                   # (only where pads change nothing: `scores_without_pads`)
    lean_forward: bool = True      # gpt-oss on sinkflex: :class:`.lean_forward.LeanGptOss` (same logits)
    share_prompt_prefix: bool = True   # the prompts' common prefix (system text, greeting) fed once, its
                                       # cache copied to every row
    fast_sampling: bool = True     # inverse-CDF sampling (`sample_tokens`) rather than torch.multinomial:
                                   # the same distribution, other draws for a seed; greedy is unaffected
    overlap_turns: bool = True     # rows whose turn ended step their environments once half the live rows
                                   # wait (`turns_to_step`), not when the slowest row ends its turn


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
    writes: list[str] = field(default_factory=list)   # the write tools called without a tool error, in order
    write_calls: list[ToolCall] = field(default_factory=list)   # every write-tool call as parsed, failed ones too
    reward_info: dict = field(default_factory=dict)
    prefix_turns: int = 0          # leading turns given, not sampled (`rollout_batch`'s prefix; counted in `actions`)

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


@dataclass
class _Row:
    """One episode in flight: its layout so far, its environment, the tokens waiting to be fed
    (token, mask, log-prob), the next position id and the current turn's sampled tokens."""
    out: Rollout
    env: RetailEnv
    pending: list = field(default_factory=list)
    next_pos: int = 0
    turn: list = field(default_factory=list)

    def feed_pending(self, width: int, pad_id: int, count: int | None = None) -> list[tuple[int, int, int]]:
        """Append the first `count` pending tokens (default all), left-padded to `width`, to the layout;
        (id, attn, pos) each."""
        count = len(self.pending) if count is None else count
        p0, fed = self.next_pos, []
        for _ in range(width - count):
            self.out.append(pad_id, 0, p0)
            fed.append((pad_id, 0, p0))
        for j, (t, m, lp) in enumerate(self.pending[:count]):
            self.out.append(t, 1, p0 + j, m, lp)
            fed.append((t, 1, p0 + j))
        self.next_pos, self.pending = p0 + count, self.pending[count:]
        return fed


def _start_rows(specs, fmt, cfg: RolloutConfig) -> list[_Row]:
    """A row per spec, (task_id, seed) or (task_id, seed, prefix): its prompt pending, then each turn
    of `prefix` (token lists, e.g. the oracle's first turns) played as given but not sampled (mask
    0) with the environment stepped after it; ValueError if the prefix ends the episode."""
    rows = []
    for tid, seed, *rest in specs:
        r = _Row(Rollout(str(tid), int(seed)), RetailEnv(cfg.source, max_steps=cfg.max_turns, user=cfg.user))
        obs, info = r.env.reset(seed=r.out.seed, options={"task_id": r.out.task_id})
        r.pending = [(t, 0, 0.0) for t in fmt.prompt(r.env, obs, info)]
        for turn in (rest[0] if rest else ()):
            if _queue_turn(r, fmt, cfg, turn, sampled=False):
                raise ValueError(f"{tid}: a prefix of {len(rest[0])} turns ends the episode")
        r.out.prefix_turns = r.out.turns
        rows.append(r)
    return rows


def _queue_turn(r: _Row, fmt, cfg: RolloutConfig, turn: list[int], sampled: bool) -> bool:
    """Queue an agent turn given as tokens (cut at its stop token or `max_new_tokens`, then closed,
    as the worker does; mask 1 if `sampled`, log-probs 0) and step the environment with it
    (:func:`_step_env`'s return)."""
    cut = next((j + 1 for j, t in enumerate(turn) if t in fmt.stop_ids), len(turn))
    r.turn = list(turn[:min(cut, cfg.max_new_tokens)])
    r.pending.extend((t, int(sampled), 0.0) for t in r.turn)
    if r.turn[-1] not in fmt.stop_ids:   # forced close, as the worker does
        r.pending.extend((c, 0, 0.0) for c in fmt.close_ids)
    return _step_env(r, fmt, cfg)


def shared_prefix_length(rows: list[_Row]) -> int:
    """Tokens every row's pending prompt starts with, leaving each row at least one to feed."""
    first = [t for t, _, _ in rows[0].pending]
    n = min(len(r.pending) for r in rows) - 1
    for r in rows[1:]:
        n = next((j for j in range(n) if r.pending[j][0] != first[j]), n)
    return max(0, n)


def _feed_shared_prefix(rows: list[_Row], forward, cache, device) -> torch.Tensor:
    """Feed the rows' common prompt prefix once (a batch of one), copy its cache to every row, and
    put it in every row's layout; returns the attention history (B, n). The prefix's logits predict
    nothing that is sampled (every row keeps at least one prompt token to feed)."""
    n = shared_prefix_length(rows)
    hist = torch.ones(len(rows), n, dtype=torch.long, device=device)
    if n == 0:
        return hist
    ids = torch.tensor([[t for t, _, _ in rows[0].pending[:n]]], device=device)
    forward(ids, hist[:1], torch.arange(n, device=device)[None])
    cache.keep_rows(hist[:1], [0] * len(rows))
    for r in rows:
        r.feed_pending(n, pad_id=-1, count=n)
    return hist


def _feed_batch(rows: list[_Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (B, L): every row's pending tokens, left-padded."""
    width = max(1, max(len(r.pending) for r in rows))
    fed = torch.tensor([r.feed_pending(width, pad_id) for r in rows], dtype=torch.long).reshape(len(rows), width, 3)
    return fed[..., 0], fed[..., 1], fed[..., 2]


def _sample(logits: torch.Tensor, cfg: RolloutConfig, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(sampled token per row, log-prob of every token per row). Sampled on the CPU so a CPU
    generator drives it on every device (reproducible); temperature 0 is greedy decoding (its
    log-probs then under the temperature-1 softmax)."""
    logp_all = torch.log_softmax(logits.float() / (cfg.temperature or 1.0), dim=-1).cpu()
    if cfg.temperature <= 0:
        return logp_all.argmax(-1), logp_all
    if cfg.fast_sampling:
        return sample_tokens(logp_all.exp(), generator), logp_all
    return torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(1), logp_all


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs (B, V) by inverse-CDF sampling: u ~ U[0, 1) per row, the first
    token whose cumulative probability exceeds u times the row's total (never a zero-probability
    token). One uniform a row; torch.multinomial draws an exponential per token (2.2 ms against
    0.1 ms at 32 x 2,048 on 2 cores)."""
    cdf = probs.double().cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)


def _step_env(r: _Row, fmt, cfg: RolloutConfig) -> bool:
    """Parse the finished turn, step the environment, queue the observation; True when the
    episode is over (ended by the environment, or out of its token budget)."""
    text, parsed = fmt.parse(r.turn)
    r.turn = []
    ep = r.out
    ep.actions.append(text)
    obs, reward, term, trunc, info = r.env.step(parsed)
    ep.tool_calls += isinstance(parsed, ToolCall)
    ep.tool_errors += info["tool_error"]
    ep.parse_errors += isinstance(parsed, ParseError)
    if isinstance(parsed, ToolCall) and parsed.name in WRITE_TOOLS:
        ep.write_calls.append(parsed)
        if not info["tool_error"]:
            ep.writes.append(parsed.name)
    if term or trunc:
        ep.reward, ep.terminated, ep.truncated = float(reward), term, trunc
        ep.reward_info = info.get("reward_info", {})
        ep.end_reason = ep.reward_info.get("termination", "max_turns" if trunc else "terminated")
        return True
    nxt = fmt.observation(obs, parsed)
    if ep.n_tokens + len(r.pending) + len(nxt) + cfg.max_new_tokens + 1 > cfg.max_tokens:
        ep.reward, ep.truncated, ep.end_reason = 0.0, True, "max_tokens"
        return True
    r.pending.extend((t, 0, 0.0) for t in nxt)
    return False


@torch.no_grad()
def rollout_batch(policy, specs: list[tuple[str, int]], cfg: RolloutConfig | None = None,
                  generator: torch.Generator | None = None, stats: dict | None = None) -> list[Rollout]:
    """Play one episode per (task_id, seed) in `specs`, all in one batched decode loop, in the
    policy's chat format (`policy.chat`, :mod:`.formats`); a spec (task_id, seed, prefix) starts
    after the agent turns of `prefix` (token lists; mask 0: given, not sampled). A loop
    iteration: one forward over every live row's pending tokens; sample the next token of every
    row still in its turn; step the environments of the rows whose turn ended
    (:func:`turns_to_step`); drop finished rows."""
    from .kv_cache import RolloutCache   # imports transformers
    from .lean_forward import LeanGptOss, supports

    cfg = cfg or RolloutConfig()
    model, fmt, device = policy.model, policy.chat, policy.device
    lean = LeanGptOss(model) if cfg.lean_forward and supports(model) else None
    was_training = model.training
    model.eval()
    t0, n_forward_tokens = time.perf_counter(), 0
    clock = {"forward_s": 0.0, "sample_s": 0.0, "env_s": 0.0, "forwards": 0, "cache_slots": 0}
    all_rows = _start_rows(specs, fmt, cfg)
    live, generating = list(all_rows), set(range(len(all_rows)))   # rows in cache order; in a turn
    cache = RolloutCache(spare=cfg.cache_in_place)
    drop_pads = cfg.drop_pad_slots and scores_without_pads(model)

    def forward(ids, hist, pos):   # the last position's logits (B, V)
        if lean is not None:
            return lean(ids, hist, pos, cache)
        return model(input_ids=ids, attention_mask=hist, position_ids=pos, cache=cache, use_cache=True,
                     logits_to_keep=1).logits[:, -1]

    attn_hist = torch.zeros(len(live), 0, dtype=torch.long, device=device)
    if cfg.share_prompt_prefix and len(live) > 1:
        ta = time.perf_counter()
        attn_hist = _feed_shared_prefix(live, forward, cache, device)
        n_forward_tokens += attn_hist.shape[1]
        clock["forward_s"] += time.perf_counter() - ta
        clock["forwards"] += attn_hist.shape[1] > 0
    while live:
        attn_hist, sampled, chosen, fed = _forward_and_sample(live, attn_hist, forward, fmt, cfg, generator, clock)
        n_forward_tokens += fed
        _take_sampled(live, generating, sampled, chosen, fmt, cfg)
        ended = turns_to_step(len(live), generating, cfg.overlap_turns)
        if not ended:
            continue
        te = time.perf_counter()
        done = [b for b in ended if _step_env(live[b], fmt, cfg)]
        clock["env_s"] += time.perf_counter() - te
        for b in done:
            _flush_pending(live[b])
        keep = [b for b in range(len(live)) if b not in done]
        if done and keep:
            attn_hist = cache.keep_rows(attn_hist, keep)
        if drop_pads and keep:
            attn_hist = cache.drop_pad_slots(attn_hist)
        live = [live[b] for b in keep]
        generating = set(range(len(live)))
    if was_training:
        model.train()
    if stats is not None:
        stats["rollout_s"] = time.perf_counter() - t0
        stats["rollout_forward_tokens"] = n_forward_tokens
        stats.update(clock)   # model forwards (feeding included), sampling, env steps + observation tokens
    return [r.out for r in all_rows]


def _forward_and_sample(live: list, attn_hist, forward, fmt, cfg: RolloutConfig, generator, clock: dict):
    """One forward over every live row's pending tokens, then one sampled token a row.
    Returns (attn_hist grown by this feed, sampled token ids, their log-probs, tokens fed); adds
    the forward's and the sampling's seconds, the forward and the slots attended over to `clock`."""
    ta = time.perf_counter()
    ids, am, pos = _feed_batch(live, fmt.pad_id)
    device = attn_hist.device
    attn_hist = torch.cat([attn_hist, am.to(device)], dim=1)
    logits = forward(ids.to(device), attn_hist, pos.to(device))
    fed = int(am.sum())
    tb = time.perf_counter()
    sampled, logp_all = _sample(logits, cfg, generator)
    clock["forward_s"] += tb - ta
    clock["sample_s"] += time.perf_counter() - tb
    clock["forwards"] += 1
    clock["cache_slots"] += attn_hist.shape[1]   # slots attended over, summed over forwards
    chosen = logp_all.gather(1, sampled[:, None]).squeeze(1).tolist()
    return attn_hist, sampled.tolist(), chosen, fed


def _take_sampled(live: list, generating: set, sampled: list, chosen: list, fmt, cfg: RolloutConfig) -> None:
    """Append each generating row's sampled token (and its log-prob) to its turn; a row whose
    turn ends (a stop token, or max_new_tokens: then closed with unsampled close tokens) leaves
    `generating`."""
    for b in sorted(generating):
        r, t = live[b], sampled[b]
        r.pending.append((t, 1, chosen[b]))
        r.turn.append(t)
        if t in fmt.stop_ids or len(r.turn) >= cfg.max_new_tokens:
            if t not in fmt.stop_ids:   # forced close, not sampled
                r.pending.extend((c, 0, 0.0) for c in fmt.close_ids)
            generating.discard(b)


def _flush_pending(row) -> None:
    """A finished row's unfed sampled tokens (the last stop token) still belong to its layout."""
    for j, (t, m, lp) in enumerate(row.pending):
        row.out.append(t, 1, row.next_pos + j, m, lp)
    row.pending = []


def turns_to_step(n_live: int, generating: set, overlap: bool) -> list[int]:
    """The rows (indices into the live rows) whose environments step now: those whose turn has
    ended, once every row's has, or with `overlap` once at least half of them have (the others go on
    sampling in the same forwards as the stepped rows' observations are fed). [] : keep decoding."""
    ended = [b for b in range(n_live) if b not in generating]
    if not generating or (overlap and 2 * len(ended) >= n_live):
        return ended
    return []


def replay_turns(fmt, task_id: str, turns: list[list[int]], cfg: RolloutConfig | None = None,
                 seed: int = 0) -> Rollout:
    """The episode `rollout_batch` records (batch of one) when a policy in format `fmt` samples
    exactly `turns` (each an agent turn's tokens, stop token included), under `cfg`'s budgets
    and without a model: a turn past `max_new_tokens` is cut and closed, an episode out of
    `max_tokens` or `max_turns` ends unrewarded. The oracle's turns (`fmt.completion`) replayed
    so score what imitating the oracle can reach under those budgets."""
    cfg = cfg or RolloutConfig()
    r = _start_rows([(task_id, seed)], fmt, cfg)[0]
    for turn in turns:
        r.feed_pending(len(r.pending), fmt.pad_id)
        if _queue_turn(r, fmt, cfg, turn, sampled=True):
            break
    r.feed_pending(len(r.pending), fmt.pad_id)
    return r.out


def without_pads(r: Rollout) -> Rollout:
    """The episode with its decode pads dropped: real tokens only, positions 0..n-1 unchanged
    (pads never advance them). Under the sinkflex attention it scores exactly as its layout
    (the window counts real tokens), in fewer positions."""
    out = Rollout(r.task_id, r.seed, actions=r.actions, reward=r.reward, terminated=r.terminated,
                  truncated=r.truncated, end_reason=r.end_reason, tool_calls=r.tool_calls,
                  tool_errors=r.tool_errors, parse_errors=r.parse_errors, writes=r.writes,
                  write_calls=r.write_calls, reward_info=r.reward_info, prefix_turns=r.prefix_turns)
    for t, a, p, m, lp in zip(r.ids, r.attn, r.pos, r.mask, r.old_logp):
        if a:
            out.append(t, 1, p, m, lp)
    return out


def scores_without_pads(model) -> bool:
    """True when `model` runs on the sinkflex attention, whose window counts real tokens, so a
    layout and its pad-free episode get the same log-probs (transformers' eager and sdpa count
    cache slots: their layouts must be scored with the pads)."""
    return str(getattr(getattr(model, "config", None), "_attn_implementation", "")).startswith("sinkflex")


def group_specs(task_ids: list[str], group_size: int, seeds: list[int], prefixes: list | None = None) -> list[tuple]:
    """G copies of each task with that task's seed (and its turn prefix, when given), group-contiguous."""
    if prefixes is None:
        return [(tid, s) for tid, s in zip(task_ids, seeds) for _ in range(group_size)]
    return [(tid, s, p) for tid, s, p in zip(task_ids, seeds, prefixes) for _ in range(group_size)]


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


def common_prefix_length(batch: dict) -> int:
    """Leading columns in which every row holds the same real token at position = column (the
    prompts' shared start), leaving at least one column; 0 for a single row."""
    ids, am, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    if ids.shape[0] < 2:
        return 0
    cols = torch.arange(ids.shape[1], device=ids.device)
    same = (ids == ids[:1]).all(0) & (am > 0).all(0) & (pos == cols).all(0)
    return min(int(same.long().cumprod(0).sum()), ids.shape[1] - 1)


def _hidden_states(base, args: dict, share_prefix: bool) -> torch.Tensor:
    """gpt-oss's last hidden states (B, T, H). With `share_prefix` (the sinkflex attention) the rows'
    common prefix runs once, as a batch of one, and its keys and values are broadcast to every row
    for the rest (gradients sum over the rows through the broadcast): same values, the prefix's
    compute paid once instead of B times."""
    from transformers.cache_utils import DynamicCache

    n = common_prefix_length(args) if share_prefix else 0
    if n == 0:
        return base.model(**args, use_cache=False).last_hidden_state
    b, cache = args["input_ids"].shape[0], DynamicCache()      # plain layers: every key kept
    head = base.model(**{k: v[:1, :n] for k, v in args.items()}, cache=cache, use_cache=True).last_hidden_state
    for layer in cache.layers:
        layer.keys, layer.values = (t.expand(b, -1, -1, -1) for t in (layer.keys, layer.values))
    rest = base.model(input_ids=args["input_ids"][:, n:], attention_mask=args["attention_mask"],
                      position_ids=args["position_ids"][:, n:], cache=cache, use_cache=True).last_hidden_state
    return torch.cat([head.expand(b, -1, -1), rest], dim=1)


def _source_states(model, batch: dict, src: torch.Tensor, share_prefix: bool = True):
    """(x, head): for every token, the final hidden state of its source position and the output
    head that turns it into logits. For gpt-oss the head runs later, chunk by chunk, so the
    episode's logits never exist all at once; for other models x is already the logits (head None).
    A gpt-oss on sinkflex runs the rows' common prefix once (`_hidden_states`)."""
    dev = src.device
    args = dict(input_ids=batch["input_ids"].to(dev), attention_mask=batch["attention_mask"].to(dev),
                position_ids=batch["position_ids"].to(dev))
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "model_type", None) == "gpt_oss":    # logits = lm_head(last hidden state)
        x = _hidden_states(base, args, share_prefix and scores_without_pads(base))
        head = base.get_output_embeddings()
    else:
        x, head = model(**args, use_cache=False).logits, None
    return x.gather(1, src.unsqueeze(-1).expand(-1, -1, x.shape[-1])), head


def _chunk_scores(x, tgt, head, temperature: float, with_entropy: bool):
    """(log-prob of tgt, entropy or None) for one chunk of source states (or logits)."""
    logits = (head(x) if head is not None else x).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - lse
    ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1) if with_entropy else None
    return logp, ent


LENGTH_GROUPS = 2   # token_logprobs: rows scored in up to this many groups of similar length


def length_groups(attention_mask: torch.Tensor, groups: int = LENGTH_GROUPS) -> list[tuple[torch.Tensor, int]]:
    """[(row indices, columns), ...]: the rows sorted by length (up to their last real token) and cut
    into up to `groups` runs of at least two rows, each with its longest row's length."""
    b, t = attention_mask.shape
    cols = torch.arange(1, t + 1, device=attention_mask.device)
    lengths = (cols * (attention_mask > 0)).amax(1)
    order = torch.argsort(lengths, stable=True)
    return [(idx, int(lengths[idx].max())) for idx in torch.tensor_split(order, max(1, min(groups, b // 2)))]


def token_logprobs(model, batch: dict, temperature: float = 1.0, with_entropy: bool = False,
                   chunk: int = 512, share_prefix: bool = True, groups: int = LENGTH_GROUPS):
    """Log-probs (B, T) of each token under the distribution it was sampled from, from one
    forward pass over the layout; optionally that distribution's entropy. Tokens with no
    real token before them get 0; right pads after a row's last real token are no tokens (their
    values depend on the grouping below): mask them.

    A token at layout index t was sampled from the logits of the last *real* token fed before
    it (pads may sit in between: a row's last sampled token is fed, after left pads, with its
    next observation), so the source index is `previous_real_index`, not simply t - 1.
    Logits are formed `chunk` tokens at a time and, when gradients are on, recomputed in
    backward (activation checkpointing of the head): for gpt-oss's 201,088-id vocabulary an
    episode's logits (0.8 MB a position in float32) are never all alive at once.
    Two savings, the same values and gradients within float rounding (tested): rows never
    interact in a forward, so they are scored in up to `groups` groups of similar length, each
    cut to its longest row (`length_groups`: a batch's right pads cost nothing; 1.4-1.8x on
    pretraining batches of 6 episodes, 2 threads); and with `share_prefix`, on sinkflex, a group's
    common prompt prefix runs once (`_hidden_states`).
    """
    keys = ("input_ids", "attention_mask", "position_ids")
    parts = [(idx, _score_rows(model, {k: batch[k][idx, :n] for k in keys}, temperature, with_entropy, chunk,
                               share_prefix)) for idx, n in length_groups(batch["attention_mask"], groups)]
    t = batch["input_ids"].shape[1]
    inverse = torch.argsort(torch.cat([idx for idx, _ in parts])).to(parts[0][1][0].device)

    def assemble(j):   # the groups' rows back in batch order, right-padded to T with zeros
        return torch.cat([torch.nn.functional.pad(out[j], (0, t - out[j].shape[1])) for _, out in parts])[inverse]

    return assemble(0), (assemble(1) if with_entropy else None)


def _score_rows(model, batch: dict, temperature: float, with_entropy: bool, chunk: int, share_prefix: bool):
    """`token_logprobs` of one group of rows, in one forward pass."""
    from torch.utils.checkpoint import checkpoint

    dev = next(model.parameters()).device
    src = previous_real_index(batch["attention_mask"].to(dev))
    x, head = _source_states(model, batch, src.clamp(min=0), share_prefix)
    tgt = batch["input_ids"].to(dev)
    parts = []
    for a in range(0, x.shape[1], chunk):
        args = (x[:, a:a + chunk], tgt[:, a:a + chunk], head, temperature, with_entropy)
        parts.append(checkpoint(_chunk_scores, *args, use_reentrant=False) if torch.is_grad_enabled()
                     else _chunk_scores(*args))
    valid = src >= 0
    logp = torch.cat([p[0] for p in parts], 1) * valid
    if not with_entropy:
        return logp, None
    return logp, torch.cat([p[1] for p in parts], 1) * valid
