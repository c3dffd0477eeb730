"""Session 51: is the choice of a new item learnable from new-item look-ups alone?

    python figures/grpo_stage6_base/new_item_lookups.py LABEL=POLICY...   # writes new_item_lookups.md

Held out: 200 new-item look-ups (`lookups.new_item_lookup`, seeds 10,000-10,199) in eval-world:2,
a world no training drew from: the user's, order's and product's tool results, the user's request
for another variant, then a confirmation request up to the new item's "<options>,item_id:". Scored:
the argmax prediction of the id's first token, the one that chooses the variant, given everything
before it; beside it, what picking one of the product's other variants at random would score
(the mean of 1 / their count). One thread; under a minute a policy."""
import sys
from pathlib import Path

import torch

from sinkflex_lib.envs import load_source
from sinkflex_lib.rl.lookups import new_item_lookup
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.tables import markdown_table

SOURCE, SEEDS = "eval-world:2", range(10_000, 10_200)


def held_out(tokenizer) -> list:
    """The look-ups, built once for every policy (they share the tokenizer)."""
    data = load_source(SOURCE)
    return [new_item_lookup(tokenizer, data, seed) for seed in SEEDS]


@torch.no_grad()
def first_tokens_right(policy, lookups) -> int:
    """How many of the look-ups' new-item ids the policy starts right."""
    colon = policy.tokenizer(":", add_special_tokens=False)["input_ids"]
    policy.model.eval()
    right = 0
    for r in lookups:
        weighted = [i for i, w in enumerate(r.old_logp) if w > 0]       # "<options>,item_id:<id>"
        p = max(i for i in weighted if r.ids[i] in colon) + 1           # the id's first token
        logits = policy.model(input_ids=torch.tensor([r.ids[:p]], device=policy.device)).logits
        right += int(logits[0, -1].argmax()) == r.ids[p]
    return right


def chance(tokenizer, lookups) -> float:
    """Expected right first tokens when one of the product's variants other than the item bought is
    picked at random."""
    products, total = load_source(SOURCE).db.tables["products"].values(), 0.0
    for r in lookups:
        stated = tokenizer.decode([t for t, w in zip(r.ids, r.old_logp) if w > 0])
        new_id = stated.rsplit("item_id:", 1)[1]
        product = next(p for p in products if new_id in p["variants"])
        total += 1 / (len(product["variants"]) - 1)
    return total


def main(args: list[str]) -> str:
    torch.set_num_threads(1)
    rows, lookups = [], None
    for arg in args:
        label, path = arg.split("=", 1)
        policy = build_policy(path)
        lookups = lookups or held_out(policy.tokenizer)
        rows.append({"policy": label, "first token right": f"{first_tokens_right(policy, lookups)} of {len(SEEDS)}"})
    rows.append({"policy": "a random other variant",
                 "first token right": f"{chance(policy.tokenizer, lookups):.0f} of {len(SEEDS)}"})
    text = (f"# New-item look-ups held out ({len(SEEDS)} in {SOURCE}): the chosen variant's first id token\n\n"
            f"Written by `new_item_lookups.py {' '.join(args)}` (paths as given).\n\n" + markdown_table(rows))
    (Path(__file__).parent / "new_item_lookups.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(sys.argv[1:]))
