"""Session 50: are the id tokens a policy miscopies the ones a one-token-back match cannot pick?

    python figures/grpo_stage6_base/id_ambiguity.py [POLICY]    # default: base-tiny; writes id_ambiguity.md

Teacher-forced on the oracle's episodes of the 110 tasks of eval-world:0 (`pretrain.copy_accuracy`'s
spans: the argument values of the oracle's tool calls; `teacher_forced_predictions`), every token of
an id after its first is sorted by what an induction head that keys on the one token before it would
find earlier in the episode: "one-back unique" (every earlier occurrence of that token is followed by
the right token), "one-back ambiguous" (some earlier occurrence is followed by another token; then
"two-back unique" if every earlier occurrence of the two tokens before it is followed by the right
one), "not seen" (no earlier occurrence is followed by the right token). Per argument kind and class:
tokens, the share predicted right, and of the wrong ones the share that is what followed another
earlier occurrence of the token before it (a wrong match). The first token of each id, which no
match inside the id can find (the token before it, a quote or a colon, precedes every id), is
counted apart; there the wrong match is the first token of another id of its kind in the episode's
tool results (after "item_id:", "order_id:", ...: another item, order, ...). One thread, under a
minute."""
import sys
from collections import defaultdict
from pathlib import Path

import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.rl.evaluate import balanced_task_ids
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.pretrain import _argument_spans, teacher_forced_predictions
from sinkflex_lib.tables import markdown_table

SOURCE = "eval-world:0"
KINDS = ("item_id", "product_id", "order_id", "payment_method", "user_id", "zip")
FIELDS = {"item_id": "item_id:", "product_id": "product_id:", "order_id": "order_id:",   # how tool results
          "payment_method": "payment_method_id:", "user_id": "user_id:", "zip": "zip:"}    # name each kind


def followers(ids: list[int], key: tuple[int, ...], p: int) -> set[int]:
    """The tokens that follow an occurrence of `key` earlier than position p (the follower before p)."""
    n = len(key)
    return {ids[q + n] for q in range(p - n) if tuple(ids[q:q + n]) == key}


def token_class(ids: list[int], p: int) -> str:
    after_one = followers(ids, (ids[p - 1],), p)
    if ids[p] not in after_one:
        return "not seen"
    if after_one == {ids[p]}:
        return "one-back unique"
    return "one-back ambiguous, two-back " + (
        "unique" if followers(ids, (ids[p - 2], ids[p - 1]), p) == {ids[p]} else "ambiguous")


def tally(policy) -> dict:
    """(kind, class) -> [tokens, right, wrong ones a wrong match explains]."""
    env, counts = RetailEnv(SOURCE, max_steps=60), defaultdict(lambda: [0, 0, 0])
    spans = lambda action, _: [s for s in _argument_spans(action) if s[0] in KINDS]
    starts = {k: tuple(policy.tokenizer(f, add_special_tokens=False)["input_ids"]) for k, f in FIELDS.items()}
    for kind, ids, pred, positions in teacher_forced_predictions(policy, env, balanced_task_ids(SOURCE, 110),
                                                                 spans, max_tokens=8192):
        for i, p in enumerate(positions):
            cls = "first token" if i == 0 else token_class(ids, p)
            key = starts[kind] if i == 0 else (ids[p - 1],)
            c = counts[kind, cls]
            c[0] += 1
            c[1] += pred[p - 1] == ids[p]
            c[2] += pred[p - 1] != ids[p] and pred[p - 1] in followers(ids, key, p)
    return counts


def main() -> str:
    torch.set_num_threads(1)
    name = sys.argv[1] if len(sys.argv) > 1 else "base-tiny"
    counts = tally(build_policy(name))
    rows = [{"kind": k, "token": cls, "tokens": n, "right": f"{r / n:.2f}",
             "wrong, a wrong match": f"{w}/{n - r}"}
            for (k, cls), (n, r, w) in sorted(counts.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1]))]
    text = (f"# Id tokens by what a one-token-back match finds ({name}, 110 tasks of {SOURCE}, teacher-forced)\n\n"
            "Written by `id_ambiguity.py` (its docstring says how tokens are classed).\n\n" + markdown_table(rows))
    (Path(__file__).parent / "id_ambiguity.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main())
