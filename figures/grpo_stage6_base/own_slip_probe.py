"""Teacher-forced after the shipped base's own slips on the 110 tasks of eval-world:0: is the
oracle's action right after the base's first action off the oracle's script that changes nothing
(`sinkflex_lib.rl.recovery`: a refused call, an unparsed action, a look-up of another record), as
it is in the clean episode? The slips are the base's greedy episodes' (user seed 0, the GRPO
validation's budgets), collected once into own_slips_base.jsonl beside this file; an action counts
as right when the argmax is right at every one of its tokens and its <|end|> (`slip_probe.call_right`).
A second table says where the first wrong token of the oracle's action lies after the slip (an
argument value, the tool's name or the call's syntax, the turn's end) and whether the policy's
token there is the slip's own text at that place (it repeats the slip). Writes own_slip_probe.md
beside itself.

python figures/grpo_stage6_base/own_slip_probe.py [records=FILE:N] LABEL=POLICY [LABEL=POLICY ...]   (one thread)

records=FILE:N: the first N records of another file of `python -m sinkflex_lib.rl.recovery` (a
training world's) instead; writes own_slip_probe_<file stem>.md.
"""
import json
import sys
from pathlib import Path

import torch

from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.envs.actions import argument_value_spans
from sinkflex_lib.rl.chat import canonical_action
from sinkflex_lib.rl.evaluate import balanced_task_ids
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.recovery import collect_recoveries, read_recoveries
from sinkflex_lib.rl.rollout import RolloutConfig
from sinkflex_lib.rl.warmstart import demonstration
from sinkflex_lib.tables import markdown_table

sys.path.insert(0, str(Path(__file__).parent))
from slip_probe import MAX_TOKENS, SOURCE, call_right, learned_turns  # noqa: E402

HERE = Path(__file__).parent
SLIPS = HERE / "own_slips_base.jsonl"


def base_slips() -> list[dict]:
    if not SLIPS.is_file():
        cfg = RolloutConfig(max_turns=12, temperature=0.0)
        rows = collect_recoveries(build_policy("base-tiny"), SOURCE, balanced_task_ids(SOURCE, 110), cfg)
        SLIPS.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_recoveries(SLIPS)


ENVS: dict[str, RetailEnv] = {}


def env_of(rec: dict) -> RetailEnv:
    return ENVS.setdefault(rec["source"], RetailEnv(rec["source"], max_steps=60))


def row_of(label: str, policy, slips: list[dict]) -> dict:
    counts = {False: [0, 0], True: [0, 0]}
    policy.model.eval()
    for rec in slips:
        env = env_of(rec)
        for slip in (False, True):
            right = call_right(policy, env, rec["task_id"], rec["slip_at"], slip, rec["slip"])
            if right is not None:
                counts[slip][0] += right
                counts[slip][1] += 1
    return {"policy": label, "clean episode: right": "%d of %d" % tuple(counts[False]),
            "after the base's own slip: right": "%d of %d" % tuple(counts[True])}


def first_error(policy, env, rec: dict) -> tuple[str, bool] | None:
    """After the slip of `rec`, teacher-forced: where the first wrong argmax token of the oracle's
    action lies ("argument value", "name or syntax", "turn end") and whether the predicted text
    there continues the slip's own text; None when the action is right or cut off."""
    tok = policy.tokenizer
    r = demonstration(policy, env, rec["task_id"], 0, MAX_TOKENS, slip_at=rec["slip_at"], slip=rec["slip"])
    turns = learned_turns(r.mask)
    if rec["slip_at"] >= len(turns):
        return None
    start, end = turns[rec["slip_at"]].start, turns[rec["slip_at"]].stop
    with torch.no_grad():
        pred = policy.model(input_ids=torch.tensor([r.ids[:end]]), use_cache=False).logits[0].argmax(-1)
    wrong = next((p for p in range(start, end) if int(pred[p - 1]) != r.ids[p]), None)
    if wrong is None:
        return None
    action = tok.decode(r.ids[start:end - 1])
    done = tok.decode(r.ids[start:wrong])
    where = ("turn end" if wrong == end - 1 else
             "argument value" if any(a <= len(done) < b for _, a, b in argument_value_spans(action)) else
             "name or syntax")
    return where, canonical_action(rec["slip"]).startswith(done + tok.decode([int(pred[wrong - 1])]))


def error_rows(label: str, policy, slips: list[dict]) -> list[dict]:
    counts = {}
    for rec in slips:
        got = first_error(policy, env_of(rec), rec)
        if got is not None:
            counts.setdefault(got[0], [0, 0])
            counts[got[0]][0] += 1
            counts[got[0]][1] += got[1]
    return [{"policy": label, "first wrong token": where, "actions": n, "the slip's own text there": rep}
            for where, (n, rep) in sorted(counts.items())]


def main() -> None:
    torch.set_num_threads(1)
    args, slips, out, what = sys.argv[1:], None, HERE / "own_slip_probe.md", "the 110 tasks of eval-world:0"
    if args and args[0].startswith("records="):
        path, n = args.pop(0).split("=", 1)[1].rsplit(":", 1)
        slips, out, what = read_recoveries(path)[:int(n)], HERE / f"own_slip_probe_{Path(path).stem}.md", f"the first {n} records of {Path(path).name}"
    slips = slips or base_slips()
    policies = [(label, build_policy(path)) for label, path in (a.split("=", 1) for a in args)]
    rows = [row_of(label, policy, slips) for label, policy in policies]
    errors = [r for label, policy in policies for r in error_rows(label, policy, slips)]
    text = (f"# The oracle's action after the base's own slips, teacher-forced ({what})\n\n"
            f"Written by `own_slip_probe.py`: {len(slips)} recovery points of the base's greedy episodes, where they "
            "first leave the oracle's script with an action that changes nothing.\n\n" + markdown_table(rows) +
            "\n\n## After the slip: the oracle's action's first wrong token\n\n" + markdown_table(errors) + "\n")
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
