"""Scratch (session 41): how much of a GRPO gradient is signal, and does the training tasks' signal point where
the held-out tasks' does? Nothing is trained.

    python gradient_transfer.py transfer OUT.npz N             # N tasks of each source, one group of 8 each
    python gradient_transfer.py same OUT.npz N TASK...         # N groups of each training task TASK
    python gradient_transfer.py kind OUT.npz 1 KIND...         # one group of every training task of each KIND
    python gradient_transfer.py worlds OUT.npz W KIND...       # one group of every task of each KIND in W worlds a side
    python gradient_transfer.py OUT.npz...                     # the statistics, to stdout and gradient_transfer.md

The shipped base plays groups of 8 at the `cpu` profile's sampling settings (temperature 1, its
budgets). `transfer`: N tasks drawn from the profile's training tasks (train-world:1000) and the first N
of eval-world:1 (balanced over the kinds; a world nothing trains on, used before only to choose the
soups' α). `same`: N groups of each named training task, each with its own user seed. `kind`: one group
of every training task of each named kind (different tasks of one kind: users, orders, items). `worlds` (session
45): one group of every task of each named kind in W training worlds (train-world:1000 on) and in W held-out worlds
(eval-world:1, then eval-world:5 on; never eval-world:2-4, the 1,005 tasks), each side a unit. For each group
with reward spread it takes the gradient of the profile's GRPO loss on that group alone (`train.minibatch_loss`,
token-mean, β = 0, at the sampling weights, where the clipped surrogate's gradient is the policy
gradient with group-normalized advantages), twice: with every advantage (the profile) and with the
negative ones set to 0 (P0); it saves their inner products (the Gram matrix) and each group's task,
kind and rewards. (The committed runs used this script's own copy of that loss; since session 42 it
calls the trainer's, whose gradients are the same bit for bit, checked on two groups.)

The statistics, a group with spread as the unit (the mean of n such groups' gradients has expected
squared norm ‖G‖² + tr(S)/n):
  ‖G‖²     the squared norm of the expected gradient, unbiased: the mean of <g_i, g_j> over i != j;
  tr(S)    a group's variance, the mean of ‖g_i‖² minus ‖G‖²;
  B_noise  tr(S) / ‖G‖², the groups an update must average before its expected signal equals its noise
           (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training": B_simple); also
           with ‖G‖² at the upper end of its interval, a lower bound;
  <G_train, G_held-out>  unbiased: the mean of <g_i, g_j> over a training and a held-out group.
`transfer` and `worlds` also report these per task kind (`transfer`: the kinds with at least 3 groups a side).
± values: 1.96 delete-one jackknife standard errors (each group left out in turn, of either side).
"""
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sinkflex_lib.envs.data import load_source
from sinkflex_lib.grpo import group_advantages, scale_negative
from sinkflex_lib.machine import deterministic_backward
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.evaluate import balanced_task_ids, is_write_task, task_kind
from sinkflex_lib.rl.rollout import collate, group_specs, rollout_batch, scores_without_pads, without_pads
from sinkflex_lib.rl.train import minibatch_loss, policy_of, training_tasks
from sinkflex_lib.tables import markdown_table

SOURCES = ("train-world:1000", "eval-world:1")
HELD_OUT_WORLDS = (1, 5, 6, 7, 8)  # `worlds` mode's held-out side, in order
CHUNK = 8  # tasks per batched rollout (64 episodes, as a profile step)


def plan_of(mode, cfg, n, rng, names=()):
    """[(label, source, task ids)]: `transfer`, n tasks of each source; `same`, n groups of each
    training task in `names` (each group with its own user seed); `kind`, every training task of
    each kind in `names`, one group each; `worlds`, every task of each kind in `names` in n training and n
    held-out worlds, one group each (units "KIND train", "KIND held-out")."""
    if mode == "worlds":
        if not 1 <= n <= len(HELD_OUT_WORLDS):
            raise ValueError(f"worlds: W must be 1 to {len(HELD_OUT_WORLDS)}, got {n}")
        sides = (("train", [f"train-world:{1000 + i}" for i in range(n)]),
                 ("held-out", [f"eval-world:{w}" for w in HELD_OUT_WORLDS[:n]]))
        return [(f"{k} {side}", src, [t for t, spec in load_source(src).tasks.items() if task_kind(spec) == k])
                for k in names for side, worlds in sides for src in worlds]
    if mode == "same":
        return [(t, cfg.source, [t] * n) for t in names]
    if mode == "kind":
        specs = load_source(cfg.source).tasks
        return [(k, cfg.source, [t for t in training_tasks(cfg) if task_kind(specs[t]) == k]) for k in names]
    return [(SOURCES[0], cfg.source, [str(t) for t in rng.choice(training_tasks(cfg), n, replace=False)]),
            (SOURCES[1], SOURCES[1], balanced_task_ids(SOURCES[1], n))]


def group_gradients(policy, cfg, group):
    """The flattened gradient of the group's GRPO loss (`train.minibatch_loss` at beta 0) with every
    advantage and with P0's (in training mode, as `train.grpo_update`)."""
    model = policy.model
    model.train()
    if scores_without_pads(model):
        group = [without_pads(r) for r in group]
    batch = collate(group, policy.pad_id)
    adv = group_advantages(batch["reward"], cfg.group_size, norm_by_std=cfg.norm_adv_by_std)
    out = []
    for a in (adv, scale_negative(adv, 0.0)):
        model.zero_grad(set_to_none=True)
        loss, _ = minibatch_loss(policy, batch, a, dataclasses.replace(cfg, beta=0.0))
        deterministic_backward(loss)
        out.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone())
    return out


def roll(mode, out, n, names=(), policy_name="base-tiny"):
    cfg = TrainConfig.from_profile("cpu", policy=policy_name)
    policy = policy_of(cfg, seed=0)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    grads, rows = {"grpo": [], "p0": []}, []
    for label, source, ids in plan_of(mode, cfg, n, rng, names):
        specs = load_source(source).tasks
        for c in range(0, len(ids), CHUNK):
            chunk = ids[c:c + CHUNK]
            seeds = [int(s) for s in rng.integers(0, 2**31 - 1, len(chunk))]
            gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
            rollouts = rollout_batch(policy, group_specs(chunk, cfg.group_size, seeds), cfg.rollout_config(), gen)
            for i, tid in enumerate(chunk):
                group = rollouts[i * cfg.group_size:(i + 1) * cfg.group_size]
                rewards = [float(r.reward) for r in group]
                rows.append({"unit": label, "source": source, "task": tid, "kind": task_kind(specs[tid]),
                             "write": bool(is_write_task(specs[tid])), "rewards": rewards})
                if len(set(rewards)) > 1:
                    for key, g in zip(("grpo", "p0"), group_gradients(policy, cfg, group)):
                        grads[key].append(g)
                    rows[-1]["spread"] = True
            print(f"{label}: {min(c + CHUNK, len(ids))}/{len(ids)} groups, {sum(r.get('spread', False) for r in rows)} "
                  f"with spread so far, {time.perf_counter() - t0:.0f} s", flush=True)
    spread = [r for r in rows if r.get("spread")]
    # float32 products of 1.4M terms: rounding well under 1e-4 of ‖g‖², far inside the intervals reported
    gram = {k: (torch.stack(v) @ torch.stack(v).T).double().numpy() for k, v in grads.items()}
    np.savez(out, gram_grpo=gram["grpo"], gram_p0=gram["p0"], rows=json.dumps(rows), spread=json.dumps(spread),
             policy=policy_name, n=n, mode=mode)


def sq_norm(gram, ix):
    """Unbiased |G|^2 of the groups `ix`: the mean of <g_i, g_j> over i != j."""
    block = gram[np.ix_(ix, ix)]
    return (block.sum() - np.trace(block)) / (len(ix) * (len(ix) - 1))


def jackknife_half(stat, *units):
    """1.96 delete-one jackknife standard errors of stat(*units), each group of each unit left out in turn."""
    var = 0.0
    for k, ix in enumerate(units):
        vals = np.array([stat(*units[:k], np.delete(ix, i), *units[k + 1:]) for i in range(len(ix))])
        var += (len(ix) - 1) / len(ix) * np.sum((vals - vals.mean()) ** 2)
    return 1.96 * np.sqrt(var)


def noise_cells(gram, ix):
    """tr(S), |G|^2 ± its half-interval, B_noise and B_noise at |G|^2's upper end, as table cells."""
    g2, h = sq_norm(gram, ix), jackknife_half(lambda i: sq_norm(gram, i), ix)
    tr = np.trace(gram[np.ix_(ix, ix)]) / len(ix) - g2
    b = f"{tr / g2:.0f}" if g2 > 0 else "∞ (‖G‖² ≤ 0)"
    return [f"{tr:.3g}", f"{g2:.2e} ± {h:.1e}", b, f"{tr / (g2 + h):.0f}"]


def pair_cells(gram, a, b):
    """Training groups `a` against held-out groups `b`: `noise_cells` of a, then the held-out |G|^2 and
    <G_train, G_held-out>, each ± its half-interval, as table cells."""
    x = lambda i, j: gram[np.ix_(i, j)].mean()  # noqa: E731
    ho, h_ho = sq_norm(gram, b), jackknife_half(lambda j: sq_norm(gram, j), b)
    return [*noise_cells(gram, a), f"{ho:.2e} ± {h_ho:.1e}", f"{x(a, b):.2e} ± {jackknife_half(x, a, b):.1e}"]


def sides(spread, mode):
    """[(label, training groups' mask, held-out groups' mask)]: all tasks, write tasks and each kind with at
    least 3 groups a side (`transfer`), or each kind (`worlds`)."""
    unit, kind = np.array([r["unit"] for r in spread]), np.array([r["kind"] for r in spread])
    if mode == "worlds":
        return [(k, unit == f"{k} train", unit == f"{k} held-out") for k in dict.fromkeys(kind)]
    train, held = unit == SOURCES[0], unit == SOURCES[1]
    write = np.array([r["write"] for r in spread])
    out = [("all tasks", train, held), ("write tasks", train & write, held & write)]
    return out + [(k, train & (kind == k), held & (kind == k)) for k in sorted(set(kind))
                  if (train & (kind == k)).sum() >= 3 and (held & (kind == k)).sum() >= 3]


def report(path):
    z = np.load(path)
    spread, rows, mode = json.loads(str(z["spread"])), json.loads(str(z["rows"])), str(z["mode"])
    unit = np.array([r["unit"] for r in spread])
    units = list(dict.fromkeys(r["unit"] for r in rows))
    lines = [f"policy {z['policy']}, mode {mode}, groups of 8; with reward spread: " + ", ".join(
        f"{u} {(unit == u).sum()} of {sum(r['unit'] == u for r in rows)}" for u in units), ""]
    noise_head = ["tr(S) a group", "‖G‖² ± 95%", "B_noise", "B_noise, ‖G‖² at its upper end"]
    table = []
    for loss, name in (("grpo", "GRPO"), ("p0", "P0")):
        gram = z[f"gram_{loss}"]
        if mode in ("same", "kind"):
            table += [[name, u, int((unit == u).sum()), *noise_cells(gram, np.flatnonzero(unit == u))]
                      for u in units if (unit == u).sum() >= 3]
            continue
        for label, train, held in sides(spread, mode):
            a, b = np.flatnonzero(train), np.flatnonzero(held)
            table.append([name, label, f"{len(a)} / {len(b)}", *pair_cells(gram, a, b)])
    head = (["advantages", "task" if mode == "same" else "kind", "groups with spread", *noise_head]
            if mode in ("same", "kind") else
            ["advantages", "tasks", "groups with spread (train / held-out)", *(f"train: {h}" for h in noise_head),
             "held-out: ‖G‖² ± 95%", "<G_train, G_held-out> ± 95%"])
    lines.append(markdown_table([dict(zip(head, row)) for row in table], head))
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] in ("transfer", "same", "kind", "worlds"):
        roll(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
    else:
        text = "\n\n".join(report(Path(f)) for f in sys.argv[1:])
        print(text)
        (Path(__file__).parent / "gradient_transfer.md").write_text(text + "\n")
