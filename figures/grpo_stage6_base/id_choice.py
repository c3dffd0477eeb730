"""Session 51: do policies choose the right item or product id? Teacher-forced, per policy.

    python figures/grpo_stage6_base/id_choice.py LABEL=POLICY...     # writes id_choice.md

On the oracle's episodes of every task of eval-world:2 (335; a world nothing was chosen on), each
item and product id the oracle writes (`envs.oracle.id_spans`: in a call, or stated in a
confirmation request before the write) is scored by the argmax prediction given the oracle's text
before it: its first token (which record it names) and the whole id (every token right). Then the
new items a confirmation request states (the choice of a variant by the options the user asked for)
and the write call repeats: what a wrong first token starts instead, checked in this order: the id
of the item it replaces, of another variant of the product whose options end with the same value
as the asked-for variant's (the last words before ",item_id:"), of any other variant of the
product, of any other 10-digit id in the text before it, or of none (ids are 10 digits, tokens 2
digits: a first token can start several ids; the first class that holds counts). One thread;
about a minute a policy."""
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.actions import ToolCall, parse_action
from sinkflex_lib.envs.oracle import id_spans
from sinkflex_lib.rl.evaluate import balanced_task_ids
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.pretrain import teacher_forced_predictions
from sinkflex_lib.tables import markdown_table

SOURCE, TASKS = "eval-world:2", 335
KINDS = ("item_ids", "new_item_ids", "product_id", "confirmed_item_ids", "confirmed_new_item_ids")


WRONG = ("the item it replaces", "a variant ending with the asked-for option", "another variant of the product",
         "another id in the text before it", "no id in the text before it")
NEW_ITEMS = ("confirmed_new_item_ids", "new_item_ids")


def spans_with_items(env):
    """`teacher_forced_predictions`'s spans_of: id_spans, each kind with (the id, the id it replaces)."""
    def spans_of(action: str, nxt: str) -> list[tuple[tuple, int, int]]:
        old = {}
        for text in (nxt, action):  # a request's write is the next action; a call's, itself
            call = parse_action(text) if text else None
            args = call.arguments if isinstance(call, ToolCall) else {}
            old.update(zip(args.get("new_item_ids", []), args.get("item_ids", [])))
        return [((kind, action[a:b], old.get(action[a:b])), a, b)
                for kind, a, b in id_spans(action, nxt, env.db.products)]
    return spans_of


def wrong_choice(env, first, new_id: str, old_id: str, guess: int, before: str) -> str:
    """Which of `WRONG` a wrong first token `guess` of the new item `new_id` starts (`before`: the
    text before it)."""
    product = next(p for p in env.db.products.values() if new_id in (p.get("variants") or {}))
    last = lambda v: list(v.get("options", {}).values())[-1:]  # noqa: E731
    variants = {i: v for i, v in product["variants"].items() if i not in (new_id, old_id)}
    same = [i for i, v in variants.items() if last(v) == last(product["variants"][new_id])]
    for label, pool in zip(WRONG, ([old_id], same, list(variants), re.findall(r"\d{10}", before))):
        if guess in {first(i) for i in pool}:
            return label
    return WRONG[-1]


def tally(policy) -> tuple[dict[str, list[int]], dict[str, Counter]]:
    """(kind -> [ids, first token right, whole id right], for the new items that confirmation
    requests state and that calls write: what a wrong first token starts, kind -> `WRONG` -> count)."""
    env, counts = RetailEnv(SOURCE, max_steps=60), defaultdict(lambda: [0, 0, 0])
    wrong = {kind: Counter() for kind in NEW_ITEMS}
    first = lambda item: policy.tokenizer(item, add_special_tokens=False)["input_ids"][0]  # noqa: E731
    for (kind, item, old), ids, pred, positions in teacher_forced_predictions(
            policy, env, balanced_task_ids(SOURCE, TASKS), spans_with_items(env), max_tokens=8192):
        assert ids[positions[0]] == first(item), "an id's first token in context is the id's own first token"
        right = [pred[p - 1] == ids[p] for p in positions]
        c = counts[kind]
        c[0], c[1], c[2] = c[0] + 1, c[1] + right[0], c[2] + all(right)
        if kind in NEW_ITEMS and not right[0]:
            before = policy.tokenizer.decode(ids[:positions[0]])
            wrong[kind][wrong_choice(env, first, item, old, pred[positions[0] - 1], before)] += 1
    return counts, wrong


def rows(label: str, counts: dict[str, list[int]]) -> list[dict]:
    out = [{"policy": label, "id": k, "ids": n, "first token right": f"{f / n:.2f}", "whole id right": f"{w / n:.2f}"}
           for k in KINDS for n, f, w in [counts[k]] if n]
    n, f, w = (sum(counts[k][i] for k in KINDS) for i in range(3))
    return out + [{"policy": label, "id": "all", "ids": n, "first token right": f"{f / n:.2f}",
                   "whole id right": f"{w / n:.2f}"}]


def main(args: list[str]) -> str:
    torch.set_num_threads(1)
    table, wrongs = [], []
    for arg in args:
        label, path = arg.split("=", 1)
        counts, wrong = tally(build_policy(path))
        table += rows(label, counts)
        wrongs += [{"policy": label, "id": kind, **{k: wrong[kind][k] for k in WRONG}} for kind in NEW_ITEMS]
    text = (f"# Item and product ids, teacher-forced ({TASKS} tasks of {SOURCE})\n\n"
            f"Written by `id_choice.py {' '.join(args)}` (paths as given).\n\n" + markdown_table(table) +
            "\n\nThe new items a confirmation request states and a call writes, where the first token is wrong: "
            "what it starts instead\n\n"
            + markdown_table(wrongs))
    (Path(__file__).parent / "id_choice.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(sys.argv[1:]))
