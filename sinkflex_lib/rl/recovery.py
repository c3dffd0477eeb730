"""Recovery demonstrations from the policy's own slips (DAgger-style).

Greedy, a policy trained on the oracle's clean episodes solves almost none of its episodes that
make a failed call (figures/grpo_stage6_base/README.md, "No policy here recovers"), and
pretraining on the oracle's own slips (`PretrainConfig.slip_rate`) did not carry over to the
policy's slips, which are other mistakes: wrong copies, broken arguments. Here the states come
from the policy itself: play it on a training world's tasks, and where its episode first leaves
the oracle's script with an action that changes nothing (:func:`~sinkflex_lib.envs.env.changes_nothing`:
a refused call, an unparsed action, a look-up of the wrong record), the oracle's episode with that
action put in before the oracle's next one is a demonstration of the way back
(:func:`~.warmstart.demonstration` with `slip`; no loss on the policy's action).

    python -m sinkflex_lib.rl.recovery --policy DIR --seed S --worlds N --out FILE.jsonl
    python -m sinkflex_lib.rl.pretrain --profile recover --init DIR --recoveries FILE.jsonl --seed S2 --out RUN
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from ..envs import RetailEnv
from ..envs.actions import parse_action
from ..envs.data import load_source
from ..envs.env import changes_nothing
from ..envs.oracle import oracle_script
from .rollout import RolloutConfig, rollout_batch


def recovery_point(env: RetailEnv, task_id: str, actions: list[str], seed: int = 0) -> tuple[int, str] | None:
    """Where the episode of `actions` (the policy's, on `task_id`, user seed `seed`) first leaves
    the oracle's script: (index of the oracle's action it stands in for, the action), if that
    action leaves the episode as it was; None if the episode follows the script throughout or
    first leaves it otherwise (a message, a write that goes through, an action that ends it)."""
    _, info = env.reset(seed=seed, options={"task_id": task_id})
    script = [parse_action(a) for a in oracle_script(info["task"], env.db.products)]
    for k, (action, oracle) in enumerate(zip(actions, script)):
        parsed = parse_action(action)
        if parsed != oracle:
            _, _, term, trunc, info = env.step(parsed)
            return (k, action) if changes_nothing(info, term or trunc) else None
        env.step(parsed)
    return None


def collect_recoveries(policy, source: str, task_ids: list[str], cfg: RolloutConfig | None = None,
                       seed: int = 0, batch: int = 64, log=None) -> list[dict]:
    """Episodes of `policy` on `task_ids` of `source` (user seed `seed`; greedy unless `cfg` sets
    a temperature), in batches of `batch`; one record {"source", "task_id", "seed", "slip_at",
    "slip"} per episode with a :func:`recovery_point`, in task order."""
    cfg = dataclasses.replace(cfg or RolloutConfig(temperature=0.0), source=source)
    env, out, t0 = RetailEnv(source, max_steps=60), [], time.perf_counter()
    for start in range(0, len(task_ids), batch):
        episodes = rollout_batch(policy, [(t, seed) for t in task_ids[start:start + batch]], cfg)
        for ep in episodes:
            point = recovery_point(env, ep.task_id, ep.actions, seed)
            if point is not None:
                out.append({"source": source, "task_id": ep.task_id, "seed": seed,
                            "slip_at": point[0], "slip": point[1]})
        if log:
            done = min(start + batch, len(task_ids))
            log(f"{source}: {done}/{len(task_ids)} episodes, {len(out)} recovery points, "
                f"{time.perf_counter() - t0:.0f}s")
    return out


def read_recoveries(path: str | Path) -> list[dict]:
    """The records of a JSONL file written by :func:`main` (ValueError if it has none)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} holds no recovery records")
    return rows


def main(argv=None) -> int:
    from ..machine import THREADS_HELP, choose_threads
    from .config import int_arg
    from .policy import build_policy
    from .pretrain import train_world

    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.recovery", description=__doc__.split("\n")[0])
    ap.add_argument("--policy", required=True, help="the policy whose slips are collected (a checkpoint directory)")
    ap.add_argument("--seed", type=int, required=True, help="training worlds train-world:<seed * 1e6 + k>")
    ap.add_argument("--worlds", type=int_arg(1), default=1, help="worlds k = 0 .. N-1 (default 1)")
    ap.add_argument("--tasks", type=int_arg(1), default=None, help="the first N tasks of each world (default: all)")
    ap.add_argument("--max-turns", type=int_arg(1), default=RolloutConfig().max_turns)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy, as evaluation plays")
    ap.add_argument("--threads", type=int_arg(1), default=None, help=THREADS_HELP)
    ap.add_argument("--out", required=True, help="JSONL file of recovery records")
    args = ap.parse_args(argv)
    choose_threads(args.threads, print)
    try:
        policy = build_policy(args.policy)
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    cfg = RolloutConfig(max_turns=args.max_turns, temperature=args.temperature)
    n = 0
    with open(args.out, "w") as out:      # world by world: a crash keeps the worlds done
        for k in range(args.worlds):
            source = train_world(args.seed, k)
            rows = collect_recoveries(policy, source, list(load_source(source).tasks)[:args.tasks], cfg,
                                      log=lambda line: print(line, file=sys.stderr, flush=True))
            out.write("".join(json.dumps(r) + "\n" for r in rows))
            out.flush()
            n += len(rows)
    print(f"{n} recovery records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
