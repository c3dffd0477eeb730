"""Teacher-forced, in the oracle's own episodes: does a policy copy the second and third item ids of
a write's list as well as the first? The 15 tasks of eval-world:0's 110 whose write lists two or
three item ids (no policy solves one, `failure_causes.md`). Writes item_lists.md beside itself.

python figures/grpo_stage6_base/item_lists.py [--out NAME.md] LABEL=POLICY [LABEL=POLICY ...]   (one thread, seconds a policy)

--out writes another file of this folder (item_lists_requests.md: the shipped base, the lists stage and
the requests stage after it, README.md here, "Requests of several items, taught").

The committed output: the shipped base and grpo-tiny (data/checkpoints/; the grpo-tiny of the run at 12e62f0,
shipped until d73b107), and the step-30 P0 seed 2, the
step-90 P0 runs on the other 225 tasks (seed 0) and on these 110 tasks, and the supervised seed 7's step
300, each as a policy folder outside the repository (its weights with the base's config and tokenizer;
README.md here), step 250 of a `calls` stage from the base (its run folder's step_250/), and the
list look-ups of `list_probe.py` (its OUT) and the `lists` stages after them or without them (their
run folders' step_<N>/; README.md here, "The step from one id of a list to the next").

An id counts as copied when the argmax prediction is right at every one of its tokens, each given the
oracle's text before it (`sinkflex_lib.rl.pretrain.teacher_forced_tokens`, as `copy_accuracy` scores
copies); its first token
and the tokens after it are also counted apart. Scored in the
write call (`item_ids`, `new_item_ids`) and in the confirmation request before it, where the oracle
states each item as "name,item_id:<id>"; "first" is the first id of its list or request, "later"
the others.
"""
import re
import sys
from pathlib import Path

import torch

from sinkflex_lib.envs import RetailEnv, WRITE_TOOLS
from sinkflex_lib.envs.actions import argument_value_spans
from sinkflex_lib.rl.evaluate import balanced_task_ids
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.pretrain import teacher_forced_tokens
from sinkflex_lib.tables import markdown_table

from failure_causes import items_listed   # this folder's script

SOURCE = "eval-world:0"
STATED_ID = re.compile(r"item_id:(\d+)")


def multi_item_tasks(env) -> list[str]:
    return [t for t in balanced_task_ids(SOURCE, 110) if items_listed(env.data.tasks[t]) > 1]


def id_spans(action: str) -> list[tuple[str, int, int]]:
    """(where, start, end) of the item ids of an action: "call first"/"call later" in a write call's
    id lists, "request first"/"request later" where a message states "item_id:<id>"."""
    spans = [(n, a, b) for n, a, b in argument_value_spans(action) if n in ("item_ids", "new_item_ids")]
    if spans:
        firsts = {n: min(a for m, a, _ in spans if m == n) for n, _, _ in spans}
        return [("call " + ("first" if a == firsts[n] else "later"), a, b) for n, a, b in spans]
    found = list(STATED_ID.finditer(action)) if not action.startswith(tuple(WRITE_TOOLS)) else []
    return [("request " + ("first" if i == 0 else "later"), m.start(1), m.end(1)) for i, m in enumerate(found)]


def scores(policy, env, task_ids: list[str]) -> dict[str, list[tuple[bool, bool]]]:
    """Per place ("call later", ...), for each id there: (its first token right, every later token right)."""
    tokens = teacher_forced_tokens(policy, env, task_ids, lambda action, _: id_spans(action), max_tokens=8192)
    return {where: [(right[0], all(right[1:])) for right in ids] for where, ids in tokens.items()}


def main() -> None:
    args, out = sys.argv[1:], "item_lists.md"
    if args[:1] == ["--out"] and len(args) > 1:
        out, args = args[1], args[2:]
    if not args or not all("=" in a for a in args):
        sys.exit(__doc__)
    torch.set_num_threads(1)
    env = RetailEnv(SOURCE, max_steps=60)
    tasks = multi_item_tasks(env)
    rows = []
    for label, policy in (a.split("=", 1) for a in args):
        hits = scores(build_policy(policy), env, tasks)
        for where, h in sorted(hits.items()):
            rows.append({"policy": label, "where": where, "ids": len(h), "whole id right": sum(f and r for f, r in h),
                         "first token right": sum(f for f, _ in h), "the tokens after it right": sum(r for _, r in h)})
    text = (f"# Item ids copied teacher-forced, first against later ({len(tasks)} tasks: {', '.join(tasks)})\n\n"
            "Written by `item_lists.py`. Every token is predicted from the oracle's text before it, so the "
            "tokens after a wrong first one are scored given the right first token.\n\n" + markdown_table(rows))
    (Path(__file__).parent / out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
