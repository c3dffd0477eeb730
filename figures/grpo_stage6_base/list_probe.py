"""Can the tiny policy step from one id of a call's list to the next? Trains a policy on list
look-ups alone (`sinkflex_lib.rl.lookups.list_lookup`: a request of 2-3 items, "yes", the write
call) and scores, every 50 steps, the call's item ids teacher-forced in 64 list look-ups of
eval-world:7 (never trained on): the first token and the whole id, first id of a list against later
ones. Writes list_probe.md beside itself and the last weights to OUT (a policy folder for item_lists.py).
With REQUESTS > 0, each step also trains on that many request look-ups (`request_lookup`: a user's
request of 1-3 items of an order, then the confirmation request that states them), whose item ids
are scored the same way in 64 of eval-world:7: list_probe_requests.md.

python figures/grpo_stage6_base/list_probe.py OUT [STEPS=200] [REQUESTS=0]   (one thread; ~8 minutes quiet at 0)
python figures/grpo_stage6_base/list_probe.py --score [--out NAME.md] LABEL=POLICY ...   (the same scores of other
                                                  policies -> list_probe_scores.md or NAME.md here; seconds each)
"""
import argparse
import shutil
import time
from pathlib import Path

import torch

from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.lookups import list_lookup, request_lookup
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.pretrain import train_world, weighted_loss
from sinkflex_lib.rl.rollout import collate
from sinkflex_lib.tables import markdown_table

from item_lists import id_spans   # this folder's script: first and later ids of a call's lists

BASE, BATCH, LR, SEED, HELD_OUT, N_HELD = "data/checkpoints/base-tiny", 32, 1e-3, 0, "eval-world:7", 64


def id_starts(tok, r) -> list[tuple[bool, int, int]]:
    """(later id of its list, index of its first token, of its last) for the item ids of r's weighted
    text (a call or a confirmation request)."""
    first = r.mask.index(1)
    call = tok.decode(r.ids[first:first + sum(r.mask)])
    enc = tok(call, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    out = []
    for where, a, b in id_spans(call):
        js = [j for j, (s, e) in enumerate(enc) if s < b and e > a]
        out.append((where.endswith("later"), first + js[0], first + js[-1]))
    return out


@torch.no_grad()
def score(policy, held, lookup=list_lookup) -> dict[str, tuple[int, int, int]]:
    """"first"/"later": (ids, first token right, whole id right) in N_HELD of `lookup`'s examples."""
    policy.model.eval()
    hits = {"first": [0, 0, 0], "later": [0, 0, 0]}
    for i in range(N_HELD):
        r = lookup(policy.tokenizer, held, 10**9 + i)
        pred = policy.model(input_ids=torch.tensor([r.ids]), use_cache=False).logits[0].argmax(-1)
        for later, p0, p1 in id_starts(policy.tokenizer, r):
            h = hits["later" if later else "first"]
            h[0] += 1
            h[1] += int(pred[p0 - 1] == r.ids[p0])
            h[2] += int(all(pred[p - 1] == r.ids[p] for p in range(p0, p1 + 1)))
    policy.model.train()
    return {k: tuple(v) for k, v in hits.items()}


def columns(s: dict[str, tuple[int, int, int]], where: str = "") -> dict[str, int]:
    return {f"{where}{k} ids: {what}": v[j] for k, v in s.items()
            for j, what in ((0, "scored"), (1, "first token right"), (2, "whole right"))}


def scores(policy, held, requests: int) -> dict[str, int]:
    """The list look-ups' columns; with `requests`, the request look-ups' after them."""
    if not requests:
        return columns(score(policy, held))
    return {**columns(score(policy, held), "lists, "), **columns(score(policy, held, request_lookup), "requests, ")}


def score_policies(pairs: list[str], out: str = "list_probe_scores.md") -> None:
    held, rows = load_source(HELD_OUT), []
    for label, path in (a.split("=", 1) for a in pairs):
        s = score(build_policy(path), held)
        rows.append({"policy": label, **columns(s)})
        print(rows[-1], flush=True)
    text = (f"# List look-ups of {HELD_OUT}, scored as in `list_probe.md` (`list_probe.py --score`)\n\n"
            f"Item ids of the write call in {N_HELD} list look-ups, teacher-forced.\n\n" + markdown_table(rows))
    (Path(__file__).parent / out).write_text(text)


def step_loss(policy, world, step: int, requests: int) -> torch.Tensor:
    """Step `step`'s loss: its list look-ups, plus (a second forward, not padded to their length)
    `requests` request look-ups; weight 3."""
    tok = policy.tokenizer
    loss, _ = weighted_loss(policy, collate([list_lookup(tok, world, step * BATCH + i, 3.0) for i in range(BATCH)],
                                            policy.pad_id))
    if requests:
        loss = loss + weighted_loss(policy, collate([request_lookup(tok, world, step * requests + i, 3.0)
                                                     for i in range(requests)], policy.pad_id))[0]
    return loss


def train_alone(out: Path, steps: int = 200, requests: int = 0) -> None:
    """`steps` steps of list look-ups (and `requests` request look-ups a step) from the shipped base,
    scored every 50; the weights to `out`."""
    torch.manual_seed(SEED)
    policy, held = build_policy(BASE), load_source(HELD_OUT)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=LR, weight_decay=0.0)
    rows, t0, world = [], time.time(), None
    for step in range(steps + 1):
        if step % 50 == 0:
            s = scores(policy, held, requests)
            rows.append({"step": step, "minutes (2 cores shared with another run)": f"{(time.time() - t0) / 60:.1f}",
                         **s})
            print(rows[-1], flush=True)
        if step == steps:
            break
        k = step * BATCH // 2000       # a fresh training world every 2,000 examples
        world = world if world and world[0] == k else (k, load_source(train_world(99, k)))
        loss = step_loss(policy, world[1], step, requests)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        opt.step()
    shutil.copytree(BASE, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("manifest.json", "*.jsonl"))
    policy.model.save_pretrained(out)
    if requests:
        text = (f"# List and request look-ups alone, from the shipped base (`list_probe.py OUT {steps} {requests}`: "
                f"{BATCH} list and {requests} request look-ups a step, lr {LR}, seed {SEED}, one thread)\n\nItem ids "
                f"of the write call in {N_HELD} list look-ups and of the confirmation request in {N_HELD} request "
                f"look-ups of {HELD_OUT} (never trained on), teacher-forced.\n\n" + markdown_table(rows))
    else:
        text = (f"# List look-ups alone, from the shipped base (`list_probe.py`: batch {BATCH}, lr {LR}, seed {SEED}, "
                f"one thread)\n\nItem ids of the write call in {N_HELD} list look-ups of {HELD_OUT} (never trained on), "
                "teacher-forced.\n\n" + markdown_table(rows))
    (Path(__file__).parent / ("list_probe_requests.md" if requests else "list_probe.md")).write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--score", action="store_true", help="score the policies LABEL=POLICY instead of training")
    parser.add_argument("--out", default="list_probe_scores.md", help="with --score: the table's file here")
    parser.add_argument("args", nargs="+", metavar="OUT [STEPS [REQUESTS]] | LABEL=POLICY ...")
    a = parser.parse_intermixed_args(argv)
    torch.set_num_threads(1)
    if a.score:
        if not all("=" in pair for pair in a.args):
            parser.error("--score takes LABEL=POLICY pairs")
        score_policies(a.args, a.out)
        return
    if len(a.args) > 3 or not all(n.isdigit() for n in a.args[1:]):
        parser.error("training takes OUT [STEPS [REQUESTS]], the counts whole numbers")
    train_alone(Path(a.args[0]), *(int(n) for n in a.args[1:]))

if __name__ == "__main__":
    main()
