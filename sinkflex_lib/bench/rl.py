"""Speed of the RL loop, measured side by side in one process on one policy and one set of episodes.

    python -m sinkflex_lib.bench rl --policy tiny|micro|base-tiny|DIR [--batch B] [--device cpu|cuda]

Rows of the table (all on the same policy weights, but the busy rows: after the GRPO step's update):

- ``rollout (ours)``: `rollout_batch` over B episodes of a training world (sampled, T = 1, fixed
  seed): sampled tokens per second, milliseconds per batched decode forward, the mean KV-cache
  slots a forward attends over, and the share of the rollout time spent in model forwards, in
  sampling and in the environment plus observation tokenization;
- ``rollout, <option> off``: the same with one speed option of `RolloutConfig` switched off
  (and with all of them off, the loop as it was before them): what each is worth. The rollouts run
  in `repeats` rounds over these variants (default 3): each row is its median-time run, with the
  fastest and slowest (`seconds_min`, `seconds_max`): single runs of a few seconds moved by up to
  1.5x between two bench runs on this project's shared 2-core machines. Greedy episodes
  would be the same; a sampled one parts where float rounding moves a token's cumulative
  probability across its uniform draw and then goes its own way (the rows' token counts differ by
  up to 1% in the committed run), and with `fast_sampling` or `overlap_turns` off a seed's draws
  go to other tokens or other rows;
- ``generate() (transformers)``: transformers' `generate()` with its KV cache from the same
  B first prompts (left-padded), `max_new_tokens` new tokens each, no environment: its tokens
  per second and milliseconds per forward (the comparable part of a rollout: decoding);
- ``update T=<n>, <attention>``: forward and backward of the GRPO loss (random advantages) on
  the pad-free episodes just rolled out, cut to their first n tokens, in the trainer's
  minibatches, for the sinkflex attention and transformers' eager one: tokens per second
  (timed twice, the faster kept), at lengths up to the longest episode;
- ``update T=<longest>, sinkflex, trainer's scoring``: the same at the longest length, scored as
  the trainer scores (`token_logprobs`: rows in groups of similar length, each group's common
  prompt prefix run once);
- ``GRPO step, full update``: that rollout plus the trainer's own update on its episodes, every
  group given reward spread (groups of the cpu profile's 8, or fewer for a smaller batch), with
  the step's shares of decode forwards, sampling, environment and update;
- with `--compete N`, ``<case>, quiet, <k> thread(s)`` and ``<case>, beside <N> busy, <k> thread(s)``:
  our rollout and the updates at T = 512 and 1,024 (the first 16 episodes), timed quiet and then
  beside N single-thread processes that multiply matrices all the while (a user's second kernel),
  at the thread count `machine.choose_threads` picks there and at one thread per core, in
  `repeats` rounds (`bench_busy`): what a busy machine costs each path, and what the pick saves.

Every row runs at `--threads` (default: `choose_threads`' pick at the start, one per core that no
other process keeps busy) but the busy rows. The last lines give the ratios, the device and the
versions; `--out DIR` writes DIR/bench_rl.csv and .md. Timings need a quiet machine but the
busy rows'.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import time

import numpy as np
import torch

from ..grpo import grpo_loss
from ..machine import choose_threads, competing_processes, cpu_model, deterministic_backward, usable_cores
from ..rl.config import PROFILES
from ..rl.policy import build_policy
from ..rl.rollout import LENGTH_GROUPS, RolloutConfig, collate, rollout_batch, token_logprobs, without_pads
from ..tables import markdown_table, save_table

CPU_PROFILE = PROFILES["cpu"]      # the sizes the bench defaults to: the cpu profile's
SOURCE = CPU_PROFILE["source"]
ROLLOUT_REPEATS = 3                # rounds over the rollout variants; each row is its median-time run


def _specs(batch: int) -> list[tuple[str, int]]:
    from ..rl.evaluate import balanced_task_ids

    return [(t, i) for i, t in enumerate(balanced_task_ids(SOURCE, batch))]


# RolloutConfig's speed-only switches
SPEED_OPTIONS = ("cache_in_place", "drop_pad_slots", "share_prompt_prefix", "lean_forward", "fast_sampling",
                 "overlap_turns")
UPDATE_LENGTHS = (256, 512, 1024)                      # and the longest episode


def bench_rollout(policy, specs, cfg: RolloutConfig, what: str = "rollout (ours)", seed: int = 0) -> tuple[dict, list]:
    stats = {}
    rows = rollout_batch(policy, specs, cfg, torch.Generator().manual_seed(seed), stats)
    sampled = sum(r.n_sampled for r in rows)
    s = stats["rollout_s"]
    return ({"what": what, "tokens": sampled, "seconds": s, "tokens_per_s": sampled / s,
             "ms_per_forward": 1e3 * stats["forward_s"] / stats["forwards"], "forwards": stats["forwards"],
             "cache_slots": stats["cache_slots"] / stats["forwards"],
             "forward_share": stats["forward_s"] / s, "sample_share": stats["sample_s"] / s,
             "env_share": stats["env_s"] / s}, rows)


def bench_rollouts(policy, specs, cfg: RolloutConfig, repeats: int, log=print) -> tuple[list[dict], list]:
    """The rollout rows: ours, each speed option off, all of them off. `repeats` rounds over them in
    turn (a slow spell of a shared machine touches every variant alike); each row is its run of
    median time, with the fastest and slowest beside it. Also the episodes of ours (first round)."""
    variants = [("rollout (ours)", cfg)] + [
        (f"rollout, {' and '.join(off)} off", dataclasses.replace(cfg, **{o: False for o in off}))
        for off in [(o,) for o in SPEED_OPTIONS] + [SPEED_OPTIONS]]
    runs, episodes = {what: [] for what, _ in variants}, None
    for k in range(repeats):
        for what, c in variants:
            log(f"{what}: {len(specs)} episodes of {SOURCE} (round {k + 1} of {repeats}) ...")
            row, eps = bench_rollout(policy, specs, c, what)
            runs[what].append(row)
            episodes = episodes or eps
    rows = []
    for what, _ in variants:
        timed = sorted(runs[what], key=lambda r: r["seconds"])
        rows.append({**timed[(len(timed) - 1) // 2], "seconds_min": timed[0]["seconds"],
                     "seconds_max": timed[-1]["seconds"]})
    return rows, episodes


@torch.no_grad()
def bench_generate(policy, specs, cfg: RolloutConfig) -> dict:
    """transformers' generate() from the episodes' first prompts, `max_new_tokens` tokens each."""
    from ..envs import RetailEnv

    prompts = []
    for tid, seed in specs:
        env = RetailEnv(SOURCE, max_steps=cfg.max_turns)
        obs, info = env.reset(seed=seed, options={"task_id": tid})
        prompts.append(policy.chat.prompt(env, obs, info))
    width = max(map(len, prompts))
    pad = policy.pad_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=policy.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=policy.device)
    model = policy.model.eval()
    t0 = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=cfg.max_new_tokens,
                         min_new_tokens=cfg.max_new_tokens, do_sample=True, temperature=1.0, top_k=0,
                         pad_token_id=pad, use_cache=True)
    s = time.perf_counter() - t0
    new = (out.shape[1] - width) * len(prompts)
    return {"what": "generate() (transformers)", "tokens": new, "seconds": s, "tokens_per_s": new / s,
            "ms_per_forward": 1e3 * s / max(1, out.shape[1] - width), "forwards": out.shape[1] - width}


def bench_update(policy, rollouts, attn: str, length: int, minibatch: int, repeats: int = 2,
                 trainer: bool = False) -> dict:
    """Forward + backward of the GRPO loss on the pad-free episodes cut to `length` tokens, in
    minibatches of `minibatch` episodes as the trainer takes them; the faster of `repeats`.
    `trainer`: the trainer's scoring, rows in groups of similar length and the prompts' common
    prefix run once per group (sinkflex only); off, every slot of every row is computed (the
    attention kernels compared)."""
    if attn != "sinkflex":
        other = build_policy(policy.name, attn_implementation=attn, device=policy.device)
        other.model.load_state_dict(policy.model.state_dict())
        policy = other
    batch = collate([without_pads(r) for r in rollouts], policy.pad_id)
    batch = {k: v[:, :length] for k, v in batch.items() if k != "reward"}
    adv = torch.from_numpy(np.random.default_rng(0).standard_normal(len(rollouts))).float()
    model = policy.model.train()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a in range(0, len(rollouts), minibatch):
            sub = {k: v[a:a + minibatch] for k, v in batch.items()}
            logp, _ = token_logprobs(model, sub, share_prefix=trainer, groups=LENGTH_GROUPS if trainer else 1)
            dev = logp.device
            loss, _ = grpo_loss(logp, sub["old_logp"].to(dev), adv[a:a + minibatch].to(dev), sub["mask"].to(dev))
            deterministic_backward(loss)
            model.zero_grad(set_to_none=True)
        best = min(best, time.perf_counter() - t0)
    n = int(batch["attention_mask"].sum())
    what = f"update T={length}, {attn}" + (", trainer's scoring" if trainer else "")
    return {"what": what, "tokens": n, "seconds": best, "tokens_per_s": n / best}


def bench_grpo_step(policy, episodes, roll: dict, group_size: int, minibatch: int) -> dict:
    """A GRPO step as the trainer takes it: the rollout measured in `roll`, then the trainer's
    `grpo_update` (cpu profile's settings, the bench's minibatch) on those episodes with rewards
    1, 0, 1, 0, ... so that every group has spread and no minibatch is skipped: a full update.
    The shares split the step into decode forwards, sampling, environment and update.
    It trains the policy's weights: the bench runs it last."""
    from ..rl.config import TrainConfig
    from ..rl.train import grpo_update

    cfg = TrainConfig.from_profile("cpu", group_size=group_size, minibatch_size=minibatch)
    if cfg.beta > 0:    # the KL term's reference: the weights before the update, as the trainer keeps them
        policy.freeze_reference()
    episodes = [dataclasses.replace(r, reward=float(i % 2 == 0)) for i, r in enumerate(episodes)]
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    t0 = time.perf_counter()
    upd = grpo_update(policy, opt, episodes, cfg, np.random.default_rng(0))
    update_s = time.perf_counter() - t0
    step_s = roll["seconds"] + update_s
    return {"what": "GRPO step, full update", "tokens": roll["tokens"], "seconds": step_s,
            "tokens_per_s": roll["tokens"] / step_s, "update_tokens": upd["update_tokens"],
            "forward_share": roll["forward_share"] * roll["seconds"] / step_s,
            "sample_share": roll["sample_share"] * roll["seconds"] / step_s,
            "env_share": roll["env_share"] * roll["seconds"] / step_s, "update_share": update_s / step_s}


def run_rl_bench(policy_name: str = "tiny", batch: int = CPU_PROFILE["groups_per_step"] * CPU_PROFILE["group_size"],
                 device: str = "cpu", max_turns: int = CPU_PROFILE["max_turns"],
                 max_tokens: int = CPU_PROFILE["max_tokens"], max_new_tokens: int = CPU_PROFILE["max_new_tokens"],
                 minibatch: int = CPU_PROFILE["minibatch_size"], out=None, log=print, compete: int = 0,
                 repeats: int = ROLLOUT_REPEATS, threads: int | None = None) -> list[dict]:
    """All rows (module docstring) at `threads` (default: `choose_threads`' pick), then, when
    `compete` > 0, the busy rows (`bench_busy`); writes <out>/bench_rl.csv and .md when `out` is given."""
    if batch < 1 or minibatch < 1:
        raise ValueError(f"batch and minibatch must be >= 1, got batch={batch}, minibatch={minibatch}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if compete < 0:
        raise ValueError(f"compete must be >= 0, got {compete}")
    choose_threads(threads, log)
    policy = build_policy(policy_name, device=device)
    rows, episodes, cfg = _rl_rows(policy, batch, max_turns, max_tokens, max_new_tokens, minibatch, log, repeats)
    if compete:
        rows += bench_busy(policy, _specs(batch), cfg, episodes, minibatch, compete, repeats, log)
    if out is not None:
        save_table(rows, "bench_rl", floatfmt=".4g", directory=out)
    return rows


def _rl_rows(policy, batch, max_turns, max_tokens, max_new_tokens, minibatch, log, repeats):
    """The rows of the module docstring, in its order, on `policy`; also the episodes of our rollout
    and its config."""
    cfg = RolloutConfig(max_turns=max_turns, max_tokens=max_tokens, max_new_tokens=max_new_tokens, source=SOURCE)
    specs = _specs(batch)
    log(f"warm-up: {batch} episodes of {SOURCE}, 2 turns (not timed) ...")
    rollout_batch(policy, specs, dataclasses.replace(cfg, max_turns=2))   # the first rollout of a process pays set-up
    rows, episodes = bench_rollouts(policy, specs, cfg, repeats, log)
    roll = rows[0]
    log("generate() from the same prompts ...")
    rows.append(bench_generate(policy, specs, cfg))
    longest = max(r.n_tokens for r in episodes)
    for length in sorted({n for n in UPDATE_LENGTHS if n < longest} | {longest}):
        for attn in ("sinkflex", "eager"):
            log(f"update T={length} on {attn} ...")
            rows.append(bench_update(policy, episodes, attn, length, minibatch))
    log(f"update T={longest} on sinkflex, scored as the trainer scores ...")
    rows.append(bench_update(policy, episodes, "sinkflex", longest, minibatch, trainer=True))
    group = math.gcd(CPU_PROFILE["group_size"], batch)   # the cpu profile's groups, or fewer rows each
    if group >= 2:
        log(f"a GRPO step with a full update (groups of {group}) ...")
        rows.append(bench_grpo_step(policy, episodes, roll, group, minibatch))
    for r in rows:
        r["threads"] = torch.get_num_threads()
    return rows, episodes, cfg


BUSY_LENGTHS = (512, 1024)   # update lengths timed on a busy machine (the cpu profile's episodes are ~850 tokens)
BUSY_EPISODES = 16           # the updates' episodes there: the first 16 (eager at T = 1,024 takes ~20 s each)


def bench_busy(policy, specs, cfg: RolloutConfig, episodes, minibatch: int, compete: int, repeats: int,
               log=print) -> list[dict]:
    """What a busy machine costs each path, and what `choose_threads` saves: our rollout and the
    update at BUSY_LENGTHS (those shorter than the longest episode, else the longest) on sinkflex and
    eager, timed quiet at the thread count found, then beside `compete` single-thread busy processes
    at the count `choose_threads` picks there and at one thread per usable core (torch's default), in
    `repeats` rounds (a slow spell of a shared machine touches every setting alike); each row is its
    median-time run, with the fastest and slowest. Restores the thread count it found."""
    found, cores = torch.get_num_threads(), len(usable_cores())
    longest = max(r.n_tokens for r in episodes)
    cases = {"rollout (ours)": lambda what: bench_rollout(policy, specs, cfg, what)[0]}
    for n in [n for n in BUSY_LENGTHS if n < longest] or [longest]:
        for attn in ("sinkflex", "eager"):
            cases[f"update T={n}, {attn}"] = lambda what, n=n, attn=attn: bench_update(
                policy, episodes[:BUSY_EPISODES], attn, n, minibatch, repeats=1)
    runs = {}

    def time_all(setting: str, threads: int, k: int) -> None:
        torch.set_num_threads(threads)
        for what, run in cases.items():
            log(f"{what}, {setting}, {threads} thread(s) (round {k + 1} of {repeats}) ...")
            runs.setdefault((f"{what}, {setting}, {threads} thread(s)", threads), []).append(run(what))

    for k in range(repeats):
        time_all("quiet", found, k)
        with competing_processes(compete):
            picked = choose_threads(None, log)
            for threads in dict.fromkeys((picked, cores)):
                time_all(f"beside {compete} busy", threads, k)
    torch.set_num_threads(found)
    rows = []
    for (what, threads), timed in runs.items():
        timed = sorted(timed, key=lambda r: r["seconds"])
        rows.append({**timed[(len(timed) - 1) // 2], "what": what, "threads": threads,
                     "seconds_min": timed[0]["seconds"], "seconds_max": timed[-1]["seconds"]})
    return rows


def environment_line(device: str, compete: int = 0) -> str:
    from importlib.metadata import version

    where = torch.cuda.get_device_name(0) if device == "cuda" else f"{cpu_model()}, torch threads {torch.get_num_threads()}"
    busy = f"; the busy rows beside {compete} competing single-thread process(es)" if compete else ""
    return (f"device: {where}{busy}; python {platform.python_version()}, torch {torch.__version__}, "
            f"transformers {version('transformers')}")


def report(rows: list[dict], device: str, compete: int = 0) -> str:
    """The table, then the ratios the speed issue asks for, then the device and versions."""
    by = {r["what"]: r for r in rows}
    ours, gen = by["rollout (ours)"], by["generate() (transformers)"]
    all_off = by[f"rollout, {' and '.join(SPEED_OPTIONS)} off"]
    ratios = [f"rollout tokens/s, ours / generate(): {ours['tokens_per_s'] / gen['tokens_per_s']:.2f}",
              f"rollout tokens/s, ours / speed options off: {ours['tokens_per_s'] / all_off['tokens_per_s']:.2f}"]
    for r in rows:
        if r["what"].startswith("update") and r["what"].endswith("sinkflex"):
            eager = by[r["what"].replace("sinkflex", "eager")]
            ratios.append(f"{r['what'].split(',')[0]} tokens/s, sinkflex / eager: "
                          f"{r['tokens_per_s'] / eager['tokens_per_s']:.2f}")
        if r["what"].endswith("trainer's scoring"):
            plain = by[r["what"].removesuffix(", trainer's scoring")]
            ratios.append(f"{r['what'].split(',')[0]} seconds, sinkflex / sinkflex as the trainer scores: "
                          f"{plain['seconds'] / r['seconds']:.2f}")
        if ", beside " in r["what"]:     # a busy row against its quiet row of the same rounds
            what = r["what"].split(", beside ")[0]
            quiet = next(q for q in rows if q["what"].startswith(what + ", quiet, "))
            ratios.append(f"{r['what']}: slower than quiet ({quiet['threads']} thread(s)) by "
                          f"{quiet['tokens_per_s'] / r['tokens_per_s']:.2f}x (median runs' tokens/s)")
    cols = ["what", "threads", "tokens", "seconds", "seconds_min", "seconds_max", "tokens_per_s", "ms_per_forward",
            "cache_slots", "forward_share", "sample_share", "env_share", "update_share"]
    return (markdown_table(rows, cols, floatfmt=".4g") + "\n" + "\n".join(ratios) + "\n"
            + environment_line(device, compete))
