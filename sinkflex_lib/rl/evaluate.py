"""Evaluation that cannot flatter: held-out worlds, every task counted, per kind, two baselines.

    python -m sinkflex_lib.rl.evaluate --policy DIR --world-seed S [--tasks N] [--samples N] [--json]
    python -m sinkflex_lib.rl.evaluate --policy DIR --source tau2 --json     # the real tasks

The held-out world ``eval-world:S`` is generated on the fly (:mod:`sinkflex_lib.envs.data`):
its user ids, e-mails, order, item, product and payment ids never occur in a training world.
Every selected task is played once, greedily (mean@1), and scored by the environment. Beside
the policy, the same tasks are scored for

- **do-nothing**: an agent that ends the conversation at once. It scores 1 exactly where the
  gold needs no write and no information (refuse, transfer): a rise that it also reaches is
  not learning;
- **the oracle**: the gold actions with policy-abiding messages (1.0 when the environment,
  the tasks and the reward agree);
- **the oracle within the budgets** (``oracle_in_budget``): the oracle's turns, as the policy's
  chat format writes them, replayed through the rollout worker's budgets (tokens a turn and an
  episode, turns): the most that imitating the oracle can score under those budgets. Below 1 on a
  kind, the budgets, not the policy, cap it.

With ``--samples N`` the same tasks are also played N times each at temperature 1
(``--temperature``; the user seed of the greedy episode, other policy draws) and scored as **pass@k** (:func:`pass_at_k`,
k = 1, 2, 4, ..., N) and as **greedy or any sample**, the share of tasks that the greedy episode or
one of the N sampled ones solves. RL that reweights the policy's own episodes (GRPO) can raise
greedy mean@1 toward what sampling reaches; a task that no sample solves gives it no reward.

Each greedy episode is also given one cause (``failures``, :mod:`.failures`): solved; out of turns,
out of tokens, too many tool errors or otherwise cut short; a fact not said; a write on a task that
needs none; no write; a write other than the gold's; the gold's write with wrong arguments (which
ones, with both values); an extra write; other. And, however it ended, what its write calls did:
where a policy fails, beside how often.

Results are given overall, per task kind (``description.purpose``: one of the 11 synthetic kinds,
a free-text purpose for the few real tau2 tasks that have one, "tau2" for the others) and for the
**write tasks** (those whose gold actions call a write tool).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

import numpy as np

from ..envs import RetailEnv, load_source
from ..envs.data import world_source
from ..envs.episode import run_episode
from ..envs.oracle import OracleAgent, ScriptAgent
from ..envs.reward import gold_writes
from ..machine import THREADS_HELP, choose_threads
from .config import int_arg
from .failures import CAUSES, failure_cause, tally
from .oracle_prefix import oracle_turns
from .rollout import RolloutConfig, replay_turns, rollout_batch

NAN = float("nan")
EVAL_TASKS = 110    # tasks of a held-out world evaluated by default (10 of each of the 11 kinds)


def task_kind(task: dict) -> str:
    return (task.get("description") or {}).get("purpose") or "tau2"


def is_write_task(task: dict) -> bool:
    return bool(gold_writes(task))


def tasks_by_kind(task_ids, tasks: dict) -> dict[str, list[str]]:
    """`task_ids` grouped by :func:`task_kind` (`tasks`: id -> task), kinds in order of first appearance."""
    kinds: dict[str, list[str]] = {}
    for t in task_ids:
        kinds.setdefault(task_kind(tasks[t]), []).append(t)
    return kinds


def balanced_task_ids(source: str, n: int | None = None) -> list[str]:
    """`n` task ids of `source` taken round-robin over the task kinds (each kind in id order),
    so any prefix mixes every kind; None: every task."""
    tasks = load_source(source).tasks
    queues = [sorted(v) for v in tasks_by_kind(tasks, tasks).values()]
    ids = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    if n is not None and not 1 <= n <= len(ids):
        raise ValueError(f"tasks must be between 1 and {len(ids)} for source {source!r}, got {n}")
    return ids[:n]


def baseline_rewards(source: str, task_ids: list[str], agent: str, max_turns: int) -> dict[str, float]:
    """Reward per task of the "do_nothing" or the "oracle" agent."""
    makers = {"do_nothing": lambda task: ScriptAgent([]), "oracle": OracleAgent}
    if agent not in makers:
        raise ValueError(f"agent must be one of {sorted(makers)}, got {agent!r}")
    env = RetailEnv(source, max_steps=max(max_turns, 60))   # the oracle is never cut short
    return {t: run_episode(env, makers[agent], t).reward for t in task_ids}


def oracle_in_budget_rewards(fmt, source: str, task_ids: list[str], cfg: RolloutConfig) -> dict[str, float]:
    """Reward per task of the oracle's turns in chat format `fmt` replayed under `cfg`'s
    budgets (:func:`.rollout.replay_turns`)."""
    cfg = dataclasses.replace(cfg, source=source)
    data = load_source(source)
    tasks, products = data.tasks, data.db.tables["products"]
    return {t: replay_turns(fmt, t, oracle_turns(fmt, tasks[t], products), cfg).reward for t in task_ids}


def all_baselines(policy, source: str, task_ids: list[str], cfg: RolloutConfig) -> dict[str, dict[str, float]]:
    """Reward per task of do-nothing, the oracle and the oracle within `cfg`'s budgets in the
    chat format of `policy`."""
    return {**{a: baseline_rewards(source, task_ids, a, cfg.max_turns) for a in ("do_nothing", "oracle")},
            "oracle_in_budget": oracle_in_budget_rewards(policy.chat, source, task_ids, cfg)}


def summarize(rewards: dict[str, float], source: str, baselines: dict[str, dict[str, float]]) -> dict:
    """mean@1 overall, on write tasks and per kind, each next to every baseline."""
    tasks = load_source(source).tasks
    write = [t for t in rewards if is_write_task(tasks[t])]

    def means(scores: dict[str, float], ids: list[str]) -> float:
        return float(np.mean([scores[t] for t in ids])) if ids else float("nan")

    out = {"n_tasks": len(rewards), "n_write_tasks": len(write),
           "mean_at_1": means(rewards, list(rewards)), "write_mean_at_1": means(rewards, write)}
    for name, scores in baselines.items():
        out[f"{name}_mean_at_1"] = means(scores, list(rewards))
        out[f"{name}_write_mean_at_1"] = means(scores, write)
    out["per_kind"] = {}
    for kind, ids in tasks_by_kind(rewards, tasks).items():
        row = {"n": len(ids), "write": is_write_task(tasks[ids[0]]), "mean_at_1": means(rewards, ids)}
        row.update({name: means(scores, ids) for name, scores in baselines.items()})
        out["per_kind"][kind] = row
    return out


def write_counts(rollouts, source: str) -> dict[str, dict[str, int]]:
    """Per task kind, how often the policy called each write tool (without a tool error): shows
    whether it picks the write the request asks for, or one write for everything."""
    tasks, out = load_source(source).tasks, {}
    for r in rollouts:
        kind = out.setdefault(task_kind(tasks[r.task_id]), {})
        for name in r.writes:
            kind[name] = kind.get(name, 0) + 1
    return out


def failures_by_kind(rollouts, source: str) -> dict:
    """Why each episode ended as it did (:mod:`.failures`): per task its cause and what its write
    calls did (`per_task_writes`); per kind the causes counted (:func:`.failures.tally`); where a
    write call got arguments wrong, whatever the cause, the values that differed ({name: [gold, called]})."""
    tasks = load_source(source).tasks
    found = {r.task_id: failure_cause(r.reward, r.end_reason, r.reward_info, r.write_calls, tasks[r.task_id])
             for r in rollouts}
    return {"per_kind": {k: tally(found[t] for t in ids) for k, ids in tasks_by_kind(found, tasks).items()},
            "per_task": {t: f.cause for t, f in found.items()},
            "per_task_writes": {t: f.writes for t, f in found.items()},
            "differences": {t: {n: [g, c] for n, g, c in f.differences} for t, f in found.items() if f.differences}}


def causes_by_group(res: dict, source: str) -> dict[str, dict[str, int]]:
    """An evaluation's (:func:`evaluate_policy`) episodes counted per cause, over its write tasks
    and over the others: {"write tasks": {cause: n}, "other tasks": {cause: n}}, every cause of
    :data:`.failures.CAUSES` in order, zeros kept."""
    tasks = load_source(source).tasks
    out = {"write tasks": dict.fromkeys(CAUSES, 0), "other tasks": dict.fromkeys(CAUSES, 0)}
    for task_id, cause in res["failures"]["per_task"].items():
        out["write tasks" if is_write_task(tasks[task_id]) else "other tasks"][cause] += 1
    return out


def solved_changes(before: dict, after: dict) -> dict[str, dict[str, str]]:
    """What changed between two evaluations of the same tasks: the tasks `after` solves and
    `before` did not ("gained", each with `before`'s cause there) and the reverse ("lost", each
    with `after`'s cause)."""
    was, now = before["failures"]["per_task"], after["failures"]["per_task"]
    if set(was) != set(now):
        raise ValueError("the two evaluations played different tasks")
    return {"gained": {t: was[t] for t in was if now[t] == "solved" != was[t]},
            "lost": {t: now[t] for t in was if was[t] == "solved" != now[t]}}


def solved_by_failed_calls(res: dict) -> dict[str, dict[str, int]]:
    """An evaluation's (:func:`evaluate_policy`) tasks split by whether the episode made a failed
    call (a tool call answered with an error, or an action that looked like a call and did not
    parse; `per_task_failed_calls`): {"no failed call": {"tasks": n, "solved": s}, "a failed call":
    {...}}. Where the second row's share is far below the first's, the policy does not recover."""
    out = {"no failed call": {"tasks": 0, "solved": 0}, "a failed call": {"tasks": 0, "solved": 0}}
    for task_id, failed in res["per_task_failed_calls"].items():
        row = out["a failed call" if failed else "no failed call"]
        row["tasks"] += 1
        row["solved"] += res["per_task"][task_id] == 1.0
    return out


def evaluate_policy(policy, source: str, task_ids: list[str], cfg: RolloutConfig | None = None,
                    with_baselines: bool = True) -> dict:
    """Greedy mean@1 of `policy` on `task_ids` of `source` (see module docstring); with
    per-task rewards (`per_task`), the writes made per kind (`write_counts`), why each episode
    failed (`failures`, :func:`failures_by_kind`), each episode's failed calls
    (`per_task_failed_calls`: tool errors and unparsed calls) and their totals."""
    cfg = cfg or RolloutConfig()
    cfg = dataclasses.replace(cfg, temperature=0.0, source=source)
    t0 = time.perf_counter()
    rollouts = rollout_batch(policy, [(t, 0) for t in task_ids], cfg)
    rewards = {r.task_id: r.reward for r in rollouts}
    baselines = all_baselines(policy, source, task_ids, cfg) if with_baselines else {}
    out = {"source": source, **summarize(rewards, source, baselines), "per_task": rewards,
           "writes": write_counts(rollouts, source), "failures": failures_by_kind(rollouts, source),
           "per_task_failed_calls": {r.task_id: r.tool_errors + r.parse_errors for r in rollouts},
           "tool_calls": sum(r.tool_calls for r in rollouts),
           "tool_errors": sum(r.tool_errors + r.parse_errors for r in rollouts),
           "seconds": time.perf_counter() - t0}
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k episodes drawn without replacement from n sampled ones,
    c of which succeeded, succeeds: 1 - C(n-c, k) / C(n, k), the unbiased estimator of pass@k
    (Chen et al., 2021, "Evaluating large language models trained on code")."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sampled_successes(policy, source: str, task_ids: list[str], samples: int, cfg: RolloutConfig | None = None,
                      seed: int = 0, batch: int = 64, log=None) -> dict[str, int]:
    """Successes (reward 1) of `samples` episodes per task sampled at `cfg.temperature` (> 0),
    user seed 0 as in the greedy evaluation, `batch` episodes a decode loop, the policy's draws
    from one generator seeded with `seed`. `log`: called with a progress line per batch."""
    import torch

    cfg = dataclasses.replace(cfg or RolloutConfig(), source=source)
    if samples < 1 or batch < 1 or cfg.temperature <= 0:
        raise ValueError(f"need samples >= 1, batch >= 1, temperature > 0; got {samples}, {batch}, {cfg.temperature}")
    specs = [(t, 0) for t in task_ids for _ in range(samples)]
    gen, wins, t0 = torch.Generator().manual_seed(seed), dict.fromkeys(task_ids, 0), time.perf_counter()
    for start in range(0, len(specs), batch):
        for r in rollout_batch(policy, specs[start:start + batch], cfg, gen):
            wins[r.task_id] += r.reward == 1.0
        if log is not None:
            done = min(start + batch, len(specs))
            log(f"sampled {done}/{len(specs)} episodes, {time.perf_counter() - t0:.0f} s")
    return wins


def summarize_samples(wins: dict[str, int], samples: int, source: str, greedy: dict[str, float] | None = None) -> dict:
    """pass@k (k = 1, 2, 4, ..., `samples`) overall, on the write tasks and per kind, from the
    successes per task; with `greedy` (reward per task), the share solved greedily or by a sample."""
    tasks = load_source(source).tasks
    ks = sorted({2 ** i for i in range(samples.bit_length())} | {samples})

    def stats(ids: list[str]) -> dict:
        row = {"n": len(ids), "pass_at_k": {k: float(np.mean([pass_at_k(samples, wins[t], k) for t in ids]))
                                            for k in ks}}
        if greedy is not None:
            row["greedy_or_any_sample"] = float(np.mean([greedy[t] == 1.0 or wins[t] > 0 for t in ids]))
        return row

    write = [t for t in wins if is_write_task(tasks[t])]
    return {"samples": samples, "all": stats(list(wins)), "write": stats(write) if write else None,
            "per_kind": {k: stats(ids) for k, ids in tasks_by_kind(wins, tasks).items()}, "per_task_successes": wins}


def main(argv=None) -> int:
    from .policy import build_policy

    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.evaluate", description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="a checkpoint directory, or a preset (tiny, micro)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--world-seed", type=int, default=0, help="held-out world eval-world:S (default 0)")
    where.add_argument("--source", default=None, help="another data source instead (mini, tau2, a folder)")
    ap.add_argument("--tasks", type=int, default=None,
                    help=f"tasks, round-robin over kinds (default: {EVAL_TASKS} of a world, all of a source)")
    defaults = RolloutConfig()
    ap.add_argument("--max-turns", type=int, default=defaults.max_turns)
    ap.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    ap.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
    ap.add_argument("--samples", type=int_arg(0), default=0,
                    help="also sample N episodes a task and report pass@k (default 0: greedy only)")
    ap.add_argument("--temperature", type=float, default=defaults.temperature, help="of the sampled episodes")
    ap.add_argument("--sample-seed", type=int, default=0, help="seed of the sampled episodes' draws")
    ap.add_argument("--threads", type=int_arg(1), default=None, help=THREADS_HELP)
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    import torch
    try:    # bad input says what is wrong, before any episode runs
        source = args.source or world_source("eval", args.world_seed)
        n = args.tasks if args.tasks is not None else (None if args.source else EVAL_TASKS)
        task_ids = balanced_task_ids(source, n)
        choose_threads(args.threads, None if args.json else print)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        policy = build_policy(args.policy, device=device, dtype=getattr(torch, args.dtype))
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    cfg = RolloutConfig(max_turns=args.max_turns, max_tokens=args.max_tokens,
                        max_new_tokens=args.max_new_tokens)
    res = evaluate_policy(policy, source, task_ids, cfg)
    if args.samples:
        sample_cfg = dataclasses.replace(cfg, temperature=args.temperature)
        wins = sampled_successes(policy, source, task_ids, args.samples, sample_cfg, args.sample_seed,
                                 log=lambda line: print(line, file=sys.stderr, flush=True))
        res["sampled"] = {**summarize_samples(wins, args.samples, source, res["per_task"]),
                          "temperature": args.temperature, "seed": args.sample_seed}
    if args.json:
        print(json.dumps(res))
    else:
        print(format_table(res) + "\n\n" + format_failures_table(res["failures"]))
        if args.samples:
            print("\n" + format_samples_table(res["sampled"]))
    return 0


def format_table(res: dict) -> str:
    """A Markdown table of a result: one row per kind, then write tasks and all."""
    names = ("do_nothing", "oracle", "oracle_in_budget")
    cells = lambda get: " | ".join(f"{get(n):.3f}" for n in names)  # noqa: E731
    lines = ["| kind | tasks | policy | do-nothing | oracle | oracle within the budgets | writes made |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for kind, row in res["per_kind"].items():
        writes = ", ".join(f"{w} {n}" for w, n in sorted(res.get("writes", {}).get(kind, {}).items()))
        lines.append(f"| {kind}{' (write)' if row['write'] else ''} | {row['n']} | {row['mean_at_1']:.3f} "
                     f"| {cells(lambda n: row.get(n, NAN))} | {writes} |")
    lines.append(f"| **write tasks** | {res['n_write_tasks']} | {res['write_mean_at_1']:.3f} | "
                 f"{cells(lambda n: res.get(f'{n}_write_mean_at_1', NAN))} | |")
    lines.append(f"| **all** | {res['n_tasks']} | {res['mean_at_1']:.3f} | "
                 f"{cells(lambda n: res.get(f'{n}_mean_at_1', NAN))} | |")
    return "\n".join(lines)


def format_failures_table(failures: dict) -> str:
    """A Markdown table of :func:`failures_by_kind`: episodes per kind and cause (the causes seen),
    the argument names that differed in the "wrong arguments" episodes, and what the write calls
    of the episodes cut short had done."""
    rows = failures["per_kind"]
    seen = [c for c in CAUSES if any(c in row["causes"] for row in rows.values())]
    lines = ["| kind | " + " | ".join(seen) + " | arguments that differed | cut short, its writes |",
             "|---|" + "---:|" * len(seen) + "---|---|"]
    counts = lambda d: ", ".join(f"{n} {c}" for n, c in d.items())  # noqa: E731
    for kind, row in rows.items():
        lines.append(f"| {kind} | " + " | ".join(str(row["causes"].get(c, 0)) for c in seen)
                     + f" | {counts(row['arguments'])} | {counts(row['cut_short_writes'])} |")
    return "\n".join(lines)


def format_samples_table(sampled: dict) -> str:
    """A Markdown table of :func:`summarize_samples`: pass@k per kind, then write tasks and all."""
    ks = list(sampled["all"]["pass_at_k"])
    lines = ["| kind | tasks | " + " | ".join(f"pass@{k}" for k in ks) + " | greedy or any sample |",
             "|---|" + "---:|" * (len(ks) + 2)]
    rows = [*sampled["per_kind"].items(), ("**write tasks**", sampled["write"]), ("**all**", sampled["all"])]
    for name, row in rows:
        if row is None:
            continue
        cells = " | ".join(f"{row['pass_at_k'][k]:.3f}" for k in ks)
        lines.append(f"| {name} | {row['n']} | {cells} | {row.get('greedy_or_any_sample', NAN):.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
