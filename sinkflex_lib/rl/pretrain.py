"""Pretraining a base policy that copies ids: oracle episodes from a stream of fresh worlds.

    python -m sinkflex_lib.rl.pretrain --out DIR [--resume] [--steps N] [--threads T]

A policy trained from random weights on one small world memorises its ids; GRPO then has
nothing to lift. Here every `episodes_per_world` episodes come from a new generated world
(``train-world:K``, :mod:`sinkflex_lib.envs.data`), so ids never repeat and only copying them
from the context lowers the loss. Episodes are the oracle's, rendered and tokenized exactly as
the rollout worker builds them (:func:`.chat.oracle_transcript`), with the project tokenizer,
under which an id, a name or an e-mail is the same token sequence wherever it appears.

Schedule, four phases (a phase of 0 steps is skipped). `induction_steps` of the induction task (a
random token string, a gap, then the same string again; loss on the repeat,
:meth:`EpisodeStream.induction`): matching content, not a fixed offset, is what copies an id. Then
`lookup_steps` of look-ups alone: flat key -> value look-ups (:mod:`.lookups`: a digit-only id is
found by its key, not by the token before it), or with `lookup_kind` "list" list look-ups, with
"new_item" new-item look-ups, in the training worlds; after them every step may add `lookup_mix`
look-ups in the current training world's own tool results, `item_lookup_mix` item look-ups
(:func:`.lookups.item_lookup`: an item stated as a confirmation request states it) and
`new_item_lookup_mix` new-item look-ups (:func:`.lookups.new_item_lookup`: the variant an exchange
asks for), `call_lookup_mix` write calls after their confirmation request (:func:`.lookups.call_lookup`), `list_lookup_mix` short
requests of 2-3 items and their calls (:func:`.lookups.list_lookup`) and `request_lookup_mix`
users' requests of 1-3 items and the confirmation request stating them (:func:`.lookups.request_lookup`),
in forwards of their own, one a kind. Then
`copy_steps` of a copy curriculum: the episodes without the system message, cut at
`copy_max_tokens` (the first look-ups and calls, where most ids are copied: many copies per token
of compute). Then whole episodes (cut at the
last agent turn that fits `max_tokens`). After the induction phase every step may add
`induction_mix` induction examples (a second forward), so the circuit is kept while episodes train.
A run can also start from another policy's weights (`init`, ``--init``) instead of random ones.
Measured on 2 cores (EXPERIMENTS.md, section 2): from random weights the induction loss of these settings
(strings of 8-32 tokens, gaps of 0-16, batch 64, lr 3e-3) falls from 7.47 to 2.07 nats by step
600, while the earlier settings (gaps up to 64, small alphabets, batch 32) and the same settings
started from a base trained on episodes (7.47 -> 7.02 in 840 steps) formed no circuit.
Loss: cross-entropy on the agent's tokens (weight 1) and on the tool results' tokens (`tool_loss_weight`: tool results repeat ids seen before, more copy
signal); the logged `agent_loss` counts agent tokens only. AdamW, linear warm-up, cosine decay
to `min_lr_frac` of `lr`.

Logged to DIR/metrics.jsonl: "train" rows per step and every `eval_every` steps an "eval" row
on the held-out world ``eval-world:<eval_world_seed>`` (never trained on): teacher-forced
exact-copy accuracy per argument kind (:func:`copy_accuracy`) and greedy mean@1
(:mod:`.evaluate`). Checkpoints in DIR/checkpoint/ every `ckpt_every` steps (the model in
safetensors, optimizer state, and the step as JSON); the data stream is a function of
(seed, step), so `--resume` continues exactly (bit for bit on one thread); it refuses a folder
without a whole checkpoint or a command line that differs from the run (:mod:`.runstate`).
Every evaluation also saves the model as DIR/step_<N>/ (a loadable policy directory) to pick a base from.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..envs import RetailEnv, load_source
from ..envs.actions import argument_value_spans
from ..envs.oracle import decision_spans, slip_points, with_next_action
from ..envs.data import world_source
from .chat import END, oracle_transcript
from .evaluate import EVAL_TASKS, balanced_task_ids, evaluate_policy
from .lookups import (call_lookup, flat_lookup, item_lookup, list_lookup, new_item_lookup, request_lookup,
                      world_lookup)
from ..machine import THREADS_HELP, choose_threads, deterministic_backward
from .policy import build_policy, num_parameters, policy_source
from .config import SEED, int_arg
from .recovery import read_recoveries
from .warmstart import demonstration
from .rollout import Rollout, RolloutConfig, collate, token_logprobs
from .runstate import (ResumeError, append_metrics, load_checkpoint, read_checkpoint_state, read_metrics, resume_state,
                       rewrite_metrics, save_checkpoint)


LOOKUP_KINDS = ("flat", "list", "new_item")    # what the look-up phase trains on (`PretrainConfig.lookup_kind`)
SLIP_STREAM = 7                     # the random stream of the slips, apart from every other draw of a run
RECOVERY_STREAM = 8                 # the order of the recovery records


@dataclass
class PretrainConfig:
    policy: str = "tiny"
    init: str | None = None          # a policy directory to start from (another run's step_<N>/); None: random weights
    steps: int = 4000
    induction_steps: int = 900       # phase 1: random strings, a gap, the string again
    induction_batch: int = 64
    induction_len: int = 32          # longest string; the gap before its repeat is 0..induction_gap
    induction_gap: int = 16
    induction_alphabets: tuple = (0,)   # symbols a string draws from, example by example (0: the vocabulary)
    induction_mix: int = 16          # induction examples added to every later step (keeps the circuit)
    lookup_steps: int = 0            # phase 1b: look-ups alone, of the kind `lookup_kind` names
    lookup_kind: str = "flat"        # "flat": key -> value records (:func:`.lookups.flat_lookup`); "list":
                                     # requests of 2-3 items and their calls in the training worlds
                                     # (:func:`.lookups.list_lookup`); "new_item": the variant a request asks
                                     # for (:func:`.lookups.new_item_lookup`), in the training worlds
    lookup_batch: int = 32
    lookup_mix: int = 0              # look-ups in training-world tool results added to every later step
    item_lookup_mix: int = 0         # item look-ups as a request states them (:func:`.lookups.item_lookup`), same
    new_item_lookup_mix: int = 0     # new items as a request states them (:func:`.lookups.new_item_lookup`), same
    call_lookup_mix: int = 0         # write calls after their confirmation request (:func:`.lookups.call_lookup`), same
    list_lookup_mix: int = 0         # short requests of 2-3 items and their calls (:func:`.lookups.list_lookup`), same
    request_lookup_mix: int = 0      # users' requests of 1-3 items, then the confirmation request
                                     # (:func:`.lookups.request_lookup`), same
    copy_steps: int = 2000           # phase 2: short episodes without the system message
    copy_batch: int = 24
    copy_max_tokens: int = 256
    batch: int = 6                   # phase 3: whole episodes per step
    max_tokens: int = 2048
    lr: float = 3e-3
    warmup: int = 100
    min_lr_frac: float = 0.1
    grad_clip: float = 1.0
    tool_loss_weight: float = 0.25
    value_weight: float = 3.0        # loss weight of the tokens of a call's argument values (the copies)
    decision_weight: float = 1.0     # loss weight of what a request decides: which write, a cancel's reason, and
                                     # (since the shipped base) the argument values as the confirmation states them
    id_start_weight: float = 1.0     # loss weight of the first token of each item and product id a call or a
                                     # confirmation request writes (which record it names), over the two above
    slip_rate: float = 0.0           # share of whole episodes with a failed call first (:meth:`EpisodeStream.slip_of`)
    recoveries: str | None = None    # a JSONL of a policy's own slips (:mod:`.recovery`), whose demonstrations ...
    recovery_mix: int = 0            # ... join every episode step, this many (:meth:`EpisodeStream.recoveries`)
    episodes_per_world: int = 200
    eval_world_seed: int = 0
    eval_every: int = 500
    eval_tasks: int = 33             # greedy mean@1 tasks during pretraining (3 per kind)
    copy_eval_tasks: int = 33        # oracle episodes scored for copy accuracy
    ckpt_every: int = 50
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)

    def __post_init__(self):
        if self.lookup_kind not in LOOKUP_KINDS:
            raise ValueError(f"lookup_kind must be one of {LOOKUP_KINDS}, got {self.lookup_kind!r}")
        if not 0.0 <= self.slip_rate <= 1.0:
            raise ValueError(f"slip_rate must lie in [0, 1], got {self.slip_rate!r}")
        if self.recovery_mix and not self.recoveries:
            raise ValueError("recovery_mix needs a file of recoveries (--recoveries)")


# the stage-6 profile (below), the one the later stages from the shipped base vary
VARIANTS = dict(induction_steps=0, copy_steps=0, steps=800, lr=7e-4, warmup=50, decision_weight=5.0,
                max_tokens=3072, item_lookup_mix=4, new_item_lookup_mix=8)

PROFILES = {
    "smoke": dict(policy="micro", steps=6, induction_steps=1, induction_batch=2, induction_len=6, induction_gap=3,
                  induction_alphabets=(3, 0), lookup_steps=1, lookup_batch=2, lookup_mix=1,
                  copy_steps=2, copy_batch=4, batch=2, max_tokens=768,
                  warmup=1, episodes_per_world=3, eval_every=2, eval_tasks=3, copy_eval_tasks=3,
                  ckpt_every=2, rollout=RolloutConfig(max_turns=3, max_tokens=768, max_new_tokens=12)),
    "cpu": {},
    # a second stage (``--init`` the first run, another ``--seed``: fresh worlds): whole episodes
    # only, the schedule warmed up again to the lr under which the first stage's episode phase
    # began (7.6e-4 at its step 2,900; stable, and its loss fell fastest there). That phase's
    # 1,100 steps left the base copying 67-91% of argument values teacher-forced (step 4,000 of two
    # runs), agent loss still falling, greedy turns garbled (mean@1 below do-nothing's). 2,000 steps
    # (about 85 minutes on 2 cores) so that the stage finishes inside one working session.
    # A run of this stage without `decision_weight` copied 94% of argument values by its step 500,
    # but its greedy episodes always confirmed "cancel, reason 'ordered by mistake'" whatever the
    # request (EXPERIMENTS.md, section 2): the few words a request decides (`decision_spans`, scored as
    # "write_choice" and "cancel_reason" by `copy_accuracy`) weigh 5 here. An A/B to step 500 from
    # the shipped base (EXPERIMENTS.md, section 2): teacher-forced "write_choice" 0.65 at weight 1, 0.78 and
    # 0.67 in two runs at 5 (other float rounding): no effect shown yet; greedy, all still cancel.
    # The shipped base ran this stage with the weight on the write's words and a cancel's reason
    # only; `decision_spans` now also gives the argument values where the confirmation request
    # states them (teacher-forced 47% right in that base, against 93% of the calls' copies, which
    # repeat them from the request just before), so a rerun weighs those too.
    "episodes": dict(induction_steps=0, copy_steps=0, steps=2000, lr=7e-4, warmup=50, decision_weight=5.0),
    # a third stage from the second (``--init`` the shipped base, another ``--seed``): the same
    # episodes, now with the argument values a confirmation request states among the weighted words,
    # and cut at 3,072 tokens (at 2,048, 11 of 70 item changes and 21 of 70 exchanges lost their
    # write); a lower lr, as the base it starts from already acts.
    "confirm": dict(induction_steps=0, copy_steps=0, steps=1500, lr=4e-4, warmup=50, decision_weight=5.0,
                    max_tokens=3072),
    # a fourth stage (``--init`` the shipped base, another ``--seed``): the confirm stage's settings
    # on the rendering where an item's id follows its name or options in tool results and a
    # confirmation request names each item the same way (:mod:`~sinkflex_lib.envs.render`): the
    # shipped base stated no item id right in a confirmation (0% teacher-forced; the id sat two
    # keys after the item's name), now the id continues a copy of the words before it.
    "names": dict(induction_steps=0, copy_steps=0, steps=1500, lr=4e-4, warmup=50, decision_weight=5.0,
                  max_tokens=3072),
    # a fifth stage (``--init`` the names stage's last step): its episodes with 8 item look-ups mixed
    # into every step (:func:`.lookups.item_lookup`): after 1,500 steps of episodes alone the names
    # stage stated the first token of no item id right in a confirmation (0 of 37 teacher-forced),
    # while 300 steps of item look-ups alone took it to 22 of 37 (EXPERIMENTS.md, section 2). lr 7e-4, as stage 2.
    "items": dict(induction_steps=0, copy_steps=0, steps=1000, lr=7e-4, warmup=50, decision_weight=5.0,
                  max_tokens=3072, item_lookup_mix=8),
    # a sixth stage (``--init`` the shipped stage-5 base): its episodes with 4 item look-ups and 8
    # new-item look-ups a step (:func:`.lookups.new_item_lookup`): the stage-5 base stated the first
    # id token of 1 of 23 new items right in an exchange's or item change's confirmation
    # (teacher-forced), 30 of 37 items already bought (EXPERIMENTS.md, section 2). lr as stage 5. Shipped at
    # 4456670: new items 2 -> 7 of 32 (first tokens, another count), mean@1 0.345 -> 0.391 on 110 tasks.
    "variants": VARIANTS,
    # a seventh stage (``--init`` the shipped stage-6 base): its episodes with 8 call look-ups a step
    # (:func:`.lookups.call_lookup`: the write call after its confirmation request), 2 item, 4
    # new-item and 2 world look-ups (the product a user's words name: product ids in calls 25%).
    # Teacher-forced, the stage-6 base got the first token of a new item's id wrong in the write
    # call after a request that stated it right (item ids in calls 31%; EXPERIMENTS.md, section 2).
    "calls": dict(induction_steps=0, copy_steps=0, steps=500, lr=7e-4, warmup=50, decision_weight=5.0,
                  max_tokens=3072, eval_every=250, lookup_mix=2, item_lookup_mix=2, new_item_lookup_mix=4,
                  call_lookup_mix=8),
    # list look-ups alone (not shipped; ``--init`` the shipped base): the step from one id of a
    # call's list to the next, as ``figures/grpo_stage6_base/list_probe.py OUT 200`` first taught it
    # (batch 32, lr 1e-3 constant, no induction rows). That probe's AdamW kept torch's default betas
    # (0.9, 0.999); a run of this profile has the pretraining's (0.9, 0.95). Seed 11 (`make pretrain-lists`):
    # later ids' first token 1 -> 132 of 142 in held-out list look-ups (the probe: 139) in 3.8 minutes.
    # From NILV2 (the `new-item-lookups` comment below; seed 15): a call's new item in the episodes
    # 0.01 -> 0.30 teacher-forced, where the `idstart` weight and the `calls` stage left it at 0.01-0.04
    # (figures/grpo_stage6_base/README.md, "The write call's copy of the new item").
    "list-lookups": dict(induction_steps=0, induction_mix=0, lookup_steps=200, lookup_kind="list", lookup_batch=32,
                         copy_steps=0, steps=200, lr=1e-3, warmup=1, min_lr_frac=1.0, max_tokens=3072,
                         eval_every=200),
    # new-item look-ups alone (not shipped; ``--init`` the shipped base), as `list-lookups` taught the
    # list step: the variant a user's request asks for, stated in a confirmation request after the
    # user's, order's and product's tool results (~1,300 tokens; batch 16). Teacher-forced, the shipped
    # base starts 0.18 of the new items a confirmation states right, and 37 of its 80 wrong first
    # tokens start a variant whose options end as the asked-for one's (`figures/grpo_stage6_base/id_choice.md`).
    # Seed 14 with the look-up phase at 600 steps: the variant's first id token in 200 held-out look-ups
    # 51 (the base) -> 37 / 68 / 95 at steps 200 / 400 / 600 (a random variant: 26), the rest of the job
    # forgotten (`figures/grpo_stage6_base/new_item_lookups.md`; EXPERIMENTS.md, section 2). Continued
    # to 1,500 steps: 126 / 152 / 163 at steps 1,000 / 1,200 / 1,500; 900 steps of the variants stage
    # after it kept the choice (165) but brought the job back to 0.313 of the 1,005 tasks, not the base's
    # 0.382 (figures README, "The choice taught longer").
    "new-item-lookups": dict(induction_steps=0, induction_mix=0, lookup_steps=200, lookup_kind="new_item",
                             lookup_batch=16, copy_steps=0, steps=200, lr=1e-3, warmup=1, min_lr_frac=1.0,
                             max_tokens=3072, eval_every=200),
    # an eighth stage (not shipped): the variants stage with 12 list look-ups a step
    # (:func:`.lookups.list_lookup`: a request of 2-3 items, "yes", the write call; ~150 tokens),
    # ``--init`` a policy that has first learned the step from one id of a call's list to the next
    # from list look-ups alone (the run of `list-lookups` or, as first measured,
    # ``figures/grpo_stage6_base/list_probe.py OUT 200``, both from the shipped base). No policy
    # from the shipped base got the first token of a call list's later id
    # right in the oracle's episodes (0 of 25 teacher-forced, `figures/grpo_stage6_base/item_lists.md`). Mixed in from
    # the shipped base, 200 steps left it so (0 of 25; 3 of 142 in held-out list look-ups); after
    # the look-ups alone (12 of 25; 139 of 142, the requests' ids mostly lost) 400 steps of this
    # stage, seed 9, ended at 21 of 25 whole ids with the requests' ids back: greedy 0.364 on the 110
    # tasks (the shipped base 0.391), its samples' reach 0.573 (0.527) (EXPERIMENTS.md, section 3).
    # Run twice after the look-ups with seeds 12 and 13 (`make pretrain-lists`): 0.400 on the 110 tasks,
    # against 0.482 after seeds 9 and 10.
    "lists": dict(induction_steps=0, copy_steps=0, steps=400, lr=7e-4, warmup=50, decision_weight=5.0,
                  max_tokens=3072, eval_every=200, item_lookup_mix=4, new_item_lookup_mix=8, list_lookup_mix=12),
    # recovery (not shipped; ``--init`` the shipped base): the variants stage's episodes, half of them
    # with a failed call first (`slip_rate`: one of the oracle's calls with an id cut by a digit,
    # answered with an error, no loss on it; the oracle's right call follows). Greedy on the 110
    # held-out tasks, no policy trained on the oracle's clean episodes solved more than 2 of its
    # 41-52 episodes with a failed call (figures/grpo_stage6_base/README.md, "No policy here
    # recovers"); 300 steps, as the supervised comparison of seeds 7 and 8 without slips. Seed 7
    # (20.7 minutes): 0.409 on the 110 tasks; teacher-forced, the oracle's call after its slip right
    # in 66 and 39 of 110 (a look-up, the last call; the base: 18 and 9), but 0 of its 40 greedy
    # episodes with a failed call of its own solved (figures/grpo_stage6_base/README.md, "slips").
    "slips": {**VARIANTS, "steps": 300, "slip_rate": 0.5},
    # recovery from the policy's own slips (not shipped; ``--init`` the shipped base, ``--recoveries``
    # a file of that base's slips on training worlds of another seed, :mod:`.recovery`): the variants
    # stage's episodes, 4 a step, and 4 demonstrations of the way back from the base's own first
    # slip (its action, no loss on it, then the oracle's), as long as the slips stage.
    "recover": {**VARIANTS, "steps": 300, "batch": 4, "recovery_mix": 4},
    # the variants stage (``--init`` the shipped base), 300 steps as its supervised comparison (seeds 7
    # and 8), with the first token of each item and product id weighted 20 (about 6% of an episode's
    # loss weight, against 0.3% at weight 1): teacher-forced, the shipped base starts 0.39 of item
    # ids and 0.38 of product ids right and continues 0.88-0.99 of their later tokens
    # (figures/grpo_stage6_base/id_ambiguity.md): the choice of the record fails, not the copy. Seed 7
    # (D4's episodes): new items in calls 0.08 -> 0.38 and as requests state them 0.18 -> 0.21
    # teacher-forced against D4 run again, -0.001 ± 0.020 from D4 on the 1,005 tasks
    # (`figures/grpo_stage6_base/id_choice.md`, `multi_world.md`).
    "idstart": {**VARIANTS, "steps": 300, "id_start_weight": 20.0},
    # a ninth stage (not shipped): the lists stage with 4 request look-ups a step
    # (:func:`.lookups.request_lookup`: a user's request of 1-3 items of an order, then the
    # confirmation request that states them), ``--init`` the lists stage's last step. After it the
    # requests' later item ids were the weak copy: 13 of 34 whole, teacher-forced in the oracle's
    # episodes (`figures/grpo_stage6_base/item_lists.md`). Seed 10, 400 steps: 15 of 34 (the first
    # ids 10 -> 14 of 15), greedy 0.455 on the 110 tasks; the lists stage continued as long on the
    # same episodes without them, 0.482: they did not pay (EXPERIMENTS.md, section 3).
    "requests": dict(induction_steps=0, copy_steps=0, steps=400, lr=7e-4, warmup=50, decision_weight=5.0,
                     max_tokens=3072, eval_every=200, item_lookup_mix=4, new_item_lookup_mix=8, list_lookup_mix=12,
                     request_lookup_mix=4),
    # a third stage: digit-only ids (item, product) were never copied after the two stages above
    # (their first token, even with one candidate in the context): flat look-ups form a key -> value
    # circuit, then episodes with look-ups in the worlds' own tool results (EXPERIMENTS.md, section 2).
    "lookups": dict(induction_steps=0, lookup_steps=400, copy_steps=0, steps=3000, lr=7e-4, warmup=50,
                    lookup_mix=4),
}

ARG_KINDS = {"email": "email", "user_id": "user_id", "order_id": "order_id", "item_ids": "item_id",
             "new_item_ids": "item_id", "product_id": "product_id", "zip": "zip",
             "payment_method_id": "payment_method", "first_name": "name", "last_name": "name",
             "address1": "address", "address2": "address", "city": "address", "state": "address"}


def train_world(seed: int, k: int) -> str:
    """The k-th training world of a run seeded `seed` (distinct worlds for distinct seeds)."""
    return world_source("train", seed * 1_000_000 + k)


class EpisodeStream:
    """Example e of a run is episode e % episodes_per_world of world e // episodes_per_world, a
    fixed shuffle of that world's tasks: a pure function of (seed, e)."""

    def __init__(self, policy, cfg: PretrainConfig, seed: int):
        self.policy, self.cfg, self.seed = policy, cfg, seed
        self._env: tuple[int, RetailEnv, list[str]] | None = None
        self._records = read_recoveries(cfg.recoveries) if cfg.recovery_mix else []
        self._record_envs: dict[str, RetailEnv] = {}

    def _world(self, k: int) -> tuple[RetailEnv, list[str]]:
        if self._env is None or self._env[0] != k:
            src = train_world(self.seed, k)
            ids = list(load_source(src).tasks)
            order = np.random.default_rng([self.seed, k]).permutation(len(ids))
            self._env = (k, RetailEnv(src, max_steps=60), [ids[i] for i in order])
        return self._env[1], self._env[2]

    def example(self, e: int, short: bool) -> Rollout:
        n = self.cfg.episodes_per_world
        env, ids = self._world(e // n)
        task_id = ids[(e % n) % len(ids)]
        cap = self.cfg.copy_max_tokens if short else self.cfg.max_tokens
        return self._demonstration(env, task_id, e, cap, drop_system=short,
                                   slip_at=None if short else self.slip_of(env, task_id, e))

    def _demonstration(self, env: RetailEnv, task_id: str, seed: int, cap: int, **kw) -> Rollout:
        """The oracle's episode with the config's loss weights (:func:`~.warmstart.demonstration`)."""
        c = self.cfg
        return demonstration(self.policy, env, task_id, seed, cap, tool_weight=c.tool_loss_weight,
                             value_weight=c.value_weight, decision_weight=c.decision_weight,
                             id_start_weight=c.id_start_weight, **kw)

    def slip_of(self, env: RetailEnv, task_id: str, e: int) -> int | None:
        """Whether example e's oracle episode starts one of its calls with a slip, a failed call
        the oracle then makes right (:func:`~sinkflex_lib.envs.oracle.slipped_call`), and before
        which: with chance `slip_rate`, one of the script's calls with an id argument, uniformly;
        a pure function of (seed, e). None: the oracle's episode as it is."""
        rng = np.random.default_rng([self.seed, e, SLIP_STREAM])
        if self.cfg.slip_rate == 0.0 or rng.random() >= self.cfg.slip_rate:
            return None
        calls = slip_points(env.data.tasks[task_id])
        return int(rng.choice(calls)) if calls else None

    def induction(self, step: int, i: int) -> Rollout:
        """A random string of n non-special tokens (n uniform in [`induction_len`//4,
        `induction_len`]), a gap of 0..`induction_gap` random tokens, then the string again; loss
        (mask and weight 1) on the repeat after its first token. The varying length and gap mean
        no fixed offset finds the earlier copy: only matching content does, as in copying an id.
        Example i draws its string from a random alphabet of `induction_alphabets[i % len]` tokens:
        with few symbols a token recurs inside the string, so the repeat can be predicted only by
        keeping the place (as in copying a number whose digit pairs recur in the context)."""
        c, specials = self.cfg, len(self.policy.tokenizer.all_special_ids)
        rng = np.random.default_rng([self.seed, step, i])
        vocab = np.arange(specials, len(self.policy.tokenizer))
        k = c.induction_alphabets[i % len(c.induction_alphabets)]
        n = int(rng.integers(max(1, c.induction_len // 4), c.induction_len + 1))
        x = list(rng.choice(rng.choice(vocab, k, replace=False) if k else vocab, n))
        gap = list(rng.choice(vocab, int(rng.integers(0, c.induction_gap + 1))))
        r = Rollout("induction", step)
        start = n + len(gap)
        for j, t in enumerate(x + gap + x):
            r.append(int(t), 1, j, mask=int(j > start), logp=float(j > start))
        return r

    def batch(self, step: int) -> tuple[list[Rollout], str]:
        """The examples of optimizer step `step` (0-based) and its phase."""
        c, phase = self.cfg, phase_of(self.cfg, step)
        if phase == "induction":
            return [self.induction(step, i) for i in range(c.induction_batch)], phase
        if phase == "lookup":
            return self.lookups(step), phase
        first = episodes_before(c, step)
        n = c.copy_batch if phase == "copy" else c.batch
        episodes = [self.example(first + i, phase == "copy") for i in range(n)]
        return episodes + (self.recoveries(step) if phase == "episodes" else []), phase

    def recoveries(self, step: int) -> list[Rollout]:
        """The `recovery_mix` recovery demonstrations of episode step `step` (counted from the
        phase's start): the records in a fixed shuffle per pass over them, a pure function of
        (seed, step); each the oracle's episode with the policy's slip before the oracle's action
        it stood in for (:func:`~.warmstart.demonstration`)."""
        c, n = self.cfg, len(self._records)
        first = (step - episodes_start(c)) * c.recovery_mix
        out = []
        for j in range(first, first + c.recovery_mix):
            order = np.random.default_rng([self.seed, j // n, RECOVERY_STREAM]).permutation(n)
            rec = self._records[order[j % n]]
            env = self._record_envs.setdefault(rec["source"], RetailEnv(rec["source"], max_steps=60))
            out.append(self._demonstration(env, rec["task_id"], rec["seed"], c.max_tokens,
                                           slip_at=rec["slip_at"], slip=rec["slip"]))
        return out

    def lookups(self, step: int) -> list[Rollout]:
        """The `lookup_batch` look-ups of step `step` of the look-up phase: flat records, or list
        or new-item look-ups in training world k of the run, the phase's first `episodes_per_world`
        examples from world 0, the next from world 1, and so on (a step's examples share its first
        one's world)."""
        c, tok = self.cfg, self.policy.tokenizer
        if c.lookup_kind == "flat":
            return [flat_lookup(tok, self._seed(step, i), c.value_weight) for i in range(c.lookup_batch)]
        data = load_source(train_world(self.seed, (step - c.induction_steps) * c.lookup_batch // c.episodes_per_world))
        make = list_lookup if c.lookup_kind == "list" else new_item_lookup
        return [make(tok, data, self._seed(step, i), c.value_weight) for i in range(c.lookup_batch)]

    def mixed_induction(self, step: int) -> list[Rollout]:
        """The `induction_mix` induction examples added to step `step` after the induction phase
        (drawn apart from the phase's: example indices from `induction_batch` on)."""
        c = self.cfg
        if phase_of(c, step) == "induction":
            return []
        return [self.induction(step, c.induction_batch + i) for i in range(c.induction_mix)]

    def mixed_lookups(self, step: int) -> list[Rollout]:
        """The `lookup_mix` look-ups, the `item_lookup_mix` item look-ups, the
        `new_item_lookup_mix` new-item look-ups, the `call_lookup_mix` call look-ups, the
        `list_lookup_mix` list look-ups, then the `request_lookup_mix` request look-ups, in the
        tool results of the world the episodes of step `step` come from, added to every step after
        the flat look-up phase."""
        c = self.cfg
        kinds = ((world_lookup, c.lookup_mix), (item_lookup, c.item_lookup_mix),
                 (new_item_lookup, c.new_item_lookup_mix), (call_lookup, c.call_lookup_mix),
                 (list_lookup, c.list_lookup_mix), (request_lookup, c.request_lookup_mix))
        if not any(n for _, n in kinds) or phase_of(c, step) in ("induction", "lookup"):
            return []
        data = load_source(train_world(self.seed, episodes_before(c, step) // c.episodes_per_world))
        tok = self.policy.tokenizer
        makers = [make for make, n in kinds for _ in range(n)]   # example i's seed: (run seed, step, i)
        return [make(tok, data, self._seed(step, i), c.value_weight, c.max_tokens) for i, make in enumerate(makers)]

    def _seed(self, step: int, i: int) -> int:
        """The seed of look-up example i of step `step`: a function of (run seed, step, i)."""
        return int(np.random.default_rng([self.seed, step, i, 7]).integers(2**63 - 1))


def phase_of(cfg: PretrainConfig, step: int) -> str:
    if step < cfg.induction_steps:
        return "induction"
    if step < cfg.induction_steps + cfg.lookup_steps:
        return "lookup"
    return "copy" if step < episodes_start(cfg) else "episodes"


def episodes_start(cfg: PretrainConfig) -> int:
    """The first step of the episode phase."""
    return cfg.induction_steps + cfg.lookup_steps + cfg.copy_steps


def episodes_before(cfg: PretrainConfig, step: int) -> int:
    """Episodes of the stream used by steps 0 .. step-1."""
    s = max(0, step - cfg.induction_steps - cfg.lookup_steps)
    return cfg.copy_batch * min(s, cfg.copy_steps) + cfg.batch * max(0, s - cfg.copy_steps)


def _weighted_nll(policy, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of weight x NLL over `batch`'s tokens, sum of weights, token log-probs (B, T-1))."""
    logp, _ = token_logprobs(policy.model, batch)
    w = batch["old_logp"].to(logp.device)
    return -(logp * w).sum(), w.sum(), logp


def weighted_loss(policy, batch: dict) -> tuple[torch.Tensor, float]:
    """(weighted mean NLL over tokens with weight > 0, mean NLL of the agent tokens)."""
    total, weight, logp = _weighted_nll(policy, batch)
    m = batch["mask"].to(logp.device)
    agent = float(-(logp.detach() * m).sum() / m.sum().clamp(min=1))
    return total / weight.clamp(min=1e-9), agent


def grouped_loss(policy, rows: list[Rollout]) -> torch.Tensor:
    """The weighted mean NLL of `rows` as one batch would give it (:func:`weighted_loss`), computed
    with one forward per task kind (`task_id`), so that short rows are not padded to long ones'
    length (a list look-up, ~150 tokens, beside a request look-up of ~2,000)."""
    kinds: dict[str, list[Rollout]] = {}
    for r in rows:
        kinds.setdefault(r.task_id, []).append(r)
    sums = [_weighted_nll(policy, collate(group, policy.pad_id))[:2] for group in kinds.values()]
    return sum(t for t, _ in sums) / sum(w for _, w in sums).clamp(min=1e-9)


def lr_at(cfg: PretrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# -- copy accuracy -----------------------------------------------------------------------------


def _argument_spans(action: str) -> list[tuple[str, int, int]]:
    """(kind, start, end) character spans of the copyable argument values of a tool call."""
    return [(ARG_KINDS[n], a, b) for n, a, b in argument_value_spans(action) if n in ARG_KINDS]


def _confirmed_kind(kind: str) -> str:
    """"confirmed_address1" -> "confirmed_address" (the argument kinds of `ARG_KINDS`)."""
    key = kind.removeprefix("confirmed_")
    return f"confirmed_{ARG_KINDS.get(key, key)}" if key != kind else kind


@torch.no_grad()
def teacher_forced_predictions(policy, env, task_ids: list[str], spans_of, max_tokens: int = 2048):
    """Yield (kind, ids, pred, positions) for each character span that `spans_of(action,
    next_action)` (-> [(kind, start, end)]) marks in the oracle's actions of `task_ids` (`env`'s
    episodes, cut at `max_tokens`): the episode's token ids, the argmax prediction of the token
    after each position (pred[p - 1] predicts ids[p], given the oracle's text before it) and the
    span's token positions, all inside the cut."""
    tok = policy.tokenizer
    was_training = policy.model.training
    policy.model.eval()
    for tid in task_ids:
        prompt, turns = oracle_transcript(env, tid)
        ids, targets = tok(prompt, add_special_tokens=False)["input_ids"], []
        for action, obs, nxt in with_next_action(turns):   # nxt: the action a confirmation is for
            enc = tok(action, add_special_tokens=False, return_offsets_mapping=True)
            for kind, a, b in spans_of(action, nxt):
                targets.append((kind, [len(ids) + j for j, (s, e) in enumerate(enc["offset_mapping"])
                                       if s < b and e > a]))
            ids = ids + enc["input_ids"] + [policy.token_id(END)] + tok(obs, add_special_tokens=False)["input_ids"]
        ids = ids[:max_tokens]
        x = torch.tensor([ids], device=policy.device)
        pred = policy.model(input_ids=x, use_cache=False).logits[0].argmax(-1).cpu().tolist()
        for kind, positions in targets:
            if positions and positions[-1] < len(ids):
                yield kind, ids, pred, positions
    policy.model.train(was_training)


def teacher_forced_tokens(policy, env, task_ids: list[str], spans_of,
                          max_tokens: int = 2048) -> dict[str, list[list[bool]]]:
    """Per kind, for each span of :func:`teacher_forced_predictions`: whether the argmax
    prediction is right at each of its tokens, each given the oracle's text before it."""
    hits = {}
    for kind, ids, pred, positions in teacher_forced_predictions(policy, env, task_ids, spans_of, max_tokens):
        hits.setdefault(kind, []).append([pred[p - 1] == ids[p] for p in positions])
    return hits


def copy_accuracy(policy, source: str, task_ids: list[str], max_tokens: int = 2048) -> dict[str, float]:
    """Teacher-forced exact-copy rate per argument kind on the oracle episodes of `task_ids`:
    an argument value counts as copied when the argmax prediction is right at every one of its
    tokens. Keys: the kinds of `ARG_KINDS`, "all" (over those), and, scored the same way but
    not counted in "all", the words a request decides in a confirmation request
    (:func:`~sinkflex_lib.envs.oracle.decision_spans`: "write_choice", "cancel_reason", and
    "confirmed_<kind>": the argument values as the request states them, before the call
    repeats them; "confirmed" over all of those)."""
    env = RetailEnv(source, max_steps=60)

    def spans_of(action: str, nxt: str) -> list[tuple[str, int, int]]:
        decided = [(_confirmed_kind(k), a, b) for k, a, b in decision_spans(action, nxt, env.db.products)]
        return _argument_spans(action) + decided

    tokens = teacher_forced_tokens(policy, env, task_ids, spans_of, max_tokens)
    hits = {k: [all(v) for v in vs] for k, vs in tokens.items()}
    out = {k: float(np.mean(v)) for k, v in sorted(hits.items())}
    copies = [h for k, v in hits.items() if k in ARG_KINDS.values() for h in v]
    out["all"] = float(np.mean(copies)) if copies else float("nan")
    confirmed = [h for k, v in hits.items() if k.startswith("confirmed_") for h in v]
    out["confirmed"] = float(np.mean(confirmed)) if confirmed else float("nan")
    return out


# -- the loop ----------------------------------------------------------------------------------


def evaluate_base(policy, cfg: PretrainConfig) -> dict:
    """Copy accuracy and greedy mean@1 on the held-out world (never trained on)."""
    src = world_source("eval", cfg.eval_world_seed)
    copy = copy_accuracy(policy, src, balanced_task_ids(src, cfg.copy_eval_tasks), cfg.max_tokens)
    res = evaluate_policy(policy, src, balanced_task_ids(src, cfg.eval_tasks), cfg.rollout,
                          with_baselines=True)
    keep = ("mean_at_1", "write_mean_at_1", "do_nothing_mean_at_1", "oracle_mean_at_1",
            "oracle_in_budget_mean_at_1", "oracle_in_budget_write_mean_at_1", "n_tasks",
            "tool_calls", "tool_errors", "writes")
    return {"copy": copy, **{k: res[k] for k in keep},
            "per_kind": {k: v["mean_at_1"] for k, v in res["per_kind"].items()}}


def _evaluate_and_keep(policy, cfg: PretrainConfig, out_dir: Path, step: int, log) -> None:
    """Log an "eval" row (:func:`evaluate_base`) and keep the model as out_dir/step_<step>/."""
    t0 = time.perf_counter()
    ev = evaluate_base(policy, cfg)
    append_metrics(out_dir / "metrics.jsonl", {"kind": "eval", "step": step, **ev,
                                               "seconds": time.perf_counter() - t0})
    policy.model.save_pretrained(out_dir / f"step_{step}")
    policy.tokenizer.save_pretrained(out_dir / f"step_{step}")
    log(f"step {step} eval: copy {ev['copy']['all']:.3f} "
        f"({', '.join(f'{k} {v:.2f}' for k, v in ev['copy'].items() if k != 'all')}); "
        f"mean@1 {ev['mean_at_1']:.3f} write {ev['write_mean_at_1']:.3f} "
        f"(do-nothing {ev['do_nothing_mean_at_1']:.3f})")


def _train_step(policy, opt, stream: EpisodeStream, cfg: PretrainConfig, step: int) -> dict:
    """One optimizer step on `step`'s batch (plus its mixed-in induction rows, their own forward,
    and look-up rows, a forward for each kind); returns its metrics row."""
    ts, pad_id = time.perf_counter(), policy.pad_id
    examples, phase = stream.batch(step)
    batch, mixed = collate(examples, pad_id), stream.mixed_induction(step)
    for g in opt.param_groups:
        g["lr"] = lr_at(cfg, step)
    policy.model.train()
    loss, agent_loss = weighted_loss(policy, batch)
    if mixed:    # a separate forward: short rows padded to an episode's length would waste compute
        loss = loss + weighted_loss(policy, collate(mixed, pad_id))[0]
    looks = stream.mixed_lookups(step)
    if looks:
        loss = loss + grouped_loss(policy, looks)
    opt.zero_grad(set_to_none=True)
    deterministic_backward(loss)
    gn = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.grad_clip)
    opt.step()
    n_tok = int(batch["attention_mask"].sum()) + sum(len(r.ids) for r in mixed + looks)
    return {"kind": "train", "step": step + 1, "phase": phase,
            "loss": float(loss.detach()), "agent_loss": agent_loss, "grad_norm": float(gn),
            "lr": lr_at(cfg, step), "tokens": n_tok, "seconds": time.perf_counter() - ts}


def pretrain(cfg: PretrainConfig, out_dir, seed: int = 0, resume: bool = False, log=print,
             stop_after: int | None = None) -> Path:
    """Pretrain `cfg.policy` (see module docstring); returns the run folder."""
    from ..reproduce import git_commit

    out_dir = Path(out_dir)
    ckpt, metrics = out_dir / "checkpoint", out_dir / "metrics.jsonl"
    torch.manual_seed(seed)
    policy = build_policy(cfg.init or cfg.policy, seed=seed)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    conf = {"seed": seed, **json.loads(json.dumps(dataclasses.asdict(cfg)))}
    if cfg.recoveries:   # resume checks the records too
        conf["recoveries_sha256"] = hashlib.sha256(Path(cfg.recoveries).read_bytes()).hexdigest()
    start = 0
    if resume:   # all checks first (ResumeError touches nothing)
        state = load_checkpoint(ckpt, policy, opt, resume_state(out_dir, conf, log=log))
        start = state["step"]
        rewrite_metrics(out_dir, start)
        log(f"resumed {out_dir} at step {start}")
    else:
        if (ckpt / "state.json").exists():
            raise FileExistsError(f"{out_dir} holds a run; pass --resume or choose another --out")
        out_dir.mkdir(parents=True, exist_ok=True)
        keep_shipped_history(cfg.init, out_dir)
        metrics.write_text("")
        append_metrics(metrics, {"kind": "config", "step": 0, "parameters": num_parameters(policy.model), **conf})
    append_metrics(metrics, {"kind": "session", "step": start, "git": git_commit()})   # the code of steps >= start
    stream = EpisodeStream(policy, cfg, seed)
    t0, tokens = time.perf_counter(), 0
    last = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    for step in range(start, last):
        row = _train_step(policy, opt, stream, cfg, step)
        tokens += row["tokens"]
        append_metrics(metrics, row)
        done = step + 1
        if done % 10 == 0 or done == last:
            rate = tokens / (time.perf_counter() - t0)
            eta = (last - done) * (time.perf_counter() - t0) / (done - start)
            log(f"step {done}/{cfg.steps} [{row['phase']}] loss {row['loss']:.3f} agent {row['agent_loss']:.3f} "
                f"{rate:.0f} tok/s ETA {eta / 60:.0f} min")
        if done % cfg.eval_every == 0 or done == cfg.steps:
            _evaluate_and_keep(policy, cfg, out_dir, done, log)
        if done % cfg.ckpt_every == 0 or done == last:
            save_checkpoint(ckpt, policy, opt, {"step": done})
    return out_dir


BASE_BAND = (0.15, 0.40)      # overall mean@1 that leaves GRPO room (the paper starts at 0.25)
MIN_WRITE = 0.10              # and the write tasks must already be solved sometimes


def select_step(rows: list[dict]) -> dict:
    """The eval row of the base to ship: the latest step whose mean@1 lies in `BASE_BAND` with
    write tasks above `MIN_WRITE`; if none does, the last evaluated step, the most trained (its
    `in_band` is then False: below the band, mean@1 mostly counts how often a policy ends the
    conversation at once, which do-nothing does best)."""
    evals = [r for r in rows if r["kind"] == "eval"]
    if not evals:
        raise ValueError("the run has no evaluation yet")
    ok = [r for r in evals if BASE_BAND[0] <= r["mean_at_1"] <= BASE_BAND[1] and r["write_mean_at_1"] > MIN_WRITE]
    return {**(ok[-1] if ok else evals[-1]), "in_band": bool(ok)}


def config_of_run(row: dict) -> PretrainConfig:
    """The PretrainConfig a run's "config" row records (fields the code no longer has are dropped)."""
    fields = {k: v for k, v in row.items() if k in PretrainConfig.__dataclass_fields__ and k != "rollout"}
    return PretrainConfig(**fields, rollout=RolloutConfig(**row["rollout"]))


def stage_chain(out_dir, step: int) -> list[tuple[Path, int]]:
    """(run folder, last step used) of every stage behind step `step` of run `out_dir`, first stage
    first: a run started with ``--init <run>/step_<N>/`` continues that run's first N steps."""
    out_dir = Path(out_dir)
    init = config_of_run(read_metrics(out_dir, log=lambda m: None)[0]).init
    init = Path(init) if init else None
    before = []
    if init is not None and init.name.startswith("step_") and (init.parent / "metrics.jsonl").is_file():
        before = stage_chain(init.parent, int(init.name.removeprefix("step_")))
    return before + [(out_dir, step)]


SHIPPED_HISTORY = ("init_manifest.json", "init_history.jsonl")   # a shipped init's, kept in the run folder


def keep_shipped_history(init: str | None, out_dir: Path) -> None:
    """If `init` is a shipped base (`ship`'s manifest.json and pretrain_metrics.jsonl beside its
    weights), copy both into the run folder: the new stage continues that history even after a
    later ship replaces the base (a stage may ship to the folder it started from)."""
    for name in SHIPPED_HISTORY:       # a fresh start: nothing of an earlier attempt in this folder
        (out_dir / name).unlink(missing_ok=True)
    if init and (Path(init) / "manifest.json").is_file() and (Path(init) / "pretrain_metrics.jsonl").is_file():
        for src, dst in zip(("manifest.json", "pretrain_metrics.jsonl"), SHIPPED_HISTORY):
            shutil.copyfile(Path(init) / src, out_dir / dst)


def shipped_history(run: Path) -> tuple[list[dict], list[dict]]:
    """(history rows, stage totals) of the shipped base that run `run` started from, if any
    (`keep_shipped_history`); a one-stage base shipped before stages were recorded counts as
    stage 0 with its own step numbers."""
    manifest, history = (Path(run) / name for name in SHIPPED_HISTORY)
    if not history.is_file():
        return [], []
    rows = [json.loads(x) for x in history.read_text().splitlines() if x.strip()]
    rows = [{**r, "stage": r.get("stage", 0), "total_step": r.get("total_step", r.get("step", 0))} for r in rows]
    m = json.loads(manifest.read_text())
    stages = m.get("stages") or [{"run": None, "command": m["command"], "step": m["step"], "seed": m["seed"],
                                  "init": None, "code": [m["git"]], **m.get("data", {}),
                                  "tokens_seen": m["tokens_seen"], "wall_time_s": m["wall_time_s"]}]
    return rows, stages


def run_totals(out_dir, step: int) -> dict:
    """Data, tokens seen and wall time of run `out_dir` up to `step`, with those of what it started
    from added, stage by stage, first stage first (a shipped base's, `shipped_history`, then the
    runs of `stage_chain`): a base's whole history."""
    chain = stage_chain(out_dir, step)
    stages = shipped_history(chain[0][0])[1] + [_stage_totals(run, upto) for run, upto in chain]
    return {"stages": stages, "tokens_seen": sum(s["tokens_seen"] for s in stages),
            "wall_time_s": sum(s["wall_time_s"] for s in stages)}


def _stage_totals(out_dir: Path, step: int) -> dict:
    rows = read_metrics(out_dir, log=lambda m: None)
    conf = rows[0]
    cfg = config_of_run(conf)
    upto = [r for r in rows if r.get("step", 0) <= step and r["kind"] in ("train", "eval")]
    examples = episodes_before(cfg, step)
    return {"run": str(out_dir), "step": step, "seed": conf["seed"], "init": cfg.init,
            "worlds": [train_world(conf["seed"], 0),
                       train_world(conf["seed"], max(0, examples - 1) // cfg.episodes_per_world)],
            "episodes": examples, "episodes_per_world": cfg.episodes_per_world,
            "code": [{"from_step": r["step"], **r["git"]} for r in rows
                     if r["kind"] == "session" and r["step"] <= step],   # the commit of each (re)start
            "tokens_seen": sum(r.get("tokens", 0) for r in upto if r["kind"] == "train"),
            "wall_time_s": sum(r.get("seconds", 0.0) for r in upto)}


def history_rows(out_dir, step: int) -> list[dict]:
    """Every metrics row of the stages behind step `step` of run `out_dir` (a shipped base's
    history first, then `stage_chain`), each with its `stage` (0 first) and `total_step` (steps
    of all earlier stages added): one curve."""
    chain = stage_chain(out_dir, step)
    out, stages = shipped_history(chain[0][0])
    offset = sum(s["step"] for s in stages)
    for i, (run, upto) in enumerate(chain, start=len(stages)):
        out += [{**r, "stage": i, "total_step": offset + r.get("step", 0)}
                for r in read_metrics(run, log=lambda m: None) if r.get("step", 0) <= upto]
        offset += upto
    return out


def ship(out_dir, dest, seed: int, command: str) -> Path:
    """Export the selected step of the run in `out_dir` to `dest`, with its manifest and a full
    evaluation (every kind, both baselines) on the held-out world."""
    from ..reproduce import device_description, git_commit
    from .checkpoints import export_checkpoint

    out_dir = Path(out_dir)
    rows = read_metrics(out_dir)
    conf = rows[0]
    chosen = select_step(rows)
    step = chosen["step"]
    cfg = config_of_run(conf)
    src = world_source("eval", cfg.eval_world_seed)
    policy = build_policy(str(out_dir / f"step_{step}"))
    evaluation = {k: v for k, v in evaluate_policy(policy, src, balanced_task_ids(src, EVAL_TASKS),
                                                   cfg.rollout).items() if k != "per_task"}
    evaluation["copy"] = copy_accuracy(policy, src, balanced_task_ids(src, EVAL_TASKS), cfg.max_tokens)
    manifest = {"name": Path(dest).name, "command": command, "git": git_commit(), "seed": seed, "step": step,
                "selected": chosen, **run_totals(out_dir, step), "device": device_description(),
                "config": conf, "evaluation": evaluation}
    dest = export_checkpoint(out_dir / f"step_{step}", dest, cfg.policy, manifest)
    (dest / "pretrain_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history_rows(out_dir, step)))
    return dest


def last_step_dir(path: str | None) -> str | None:
    """`path`, or for a run folder (one with metrics.jsonl) its latest step_<N>/ policy directory."""
    if path is None or not (Path(path) / "metrics.jsonl").is_file():
        return path
    steps = sorted(Path(path).glob("step_*"), key=lambda d: int(d.name.removeprefix("step_")))
    if not steps:
        raise FileNotFoundError(f"the run {path} has saved no step_<N>/ yet")
    return str(steps[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.pretrain", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default="cpu", choices=sorted(PROFILES),
                    help="cpu: the first stage from random weights; episodes: a second stage (with --init)")
    ap.add_argument("--seed", type=SEED, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int_arg(1), default=None,
                    help="optimizer steps in all; the profile's phases keep their lengths (but see --lookup-steps), "
                         "so steps after them train whole episodes")
    ap.add_argument("--lookup-steps", type=int_arg(0), default=None,
                    help="the look-up phase's length (default: the profile's)")
    ap.add_argument("--threads", type=int_arg(1), default=None, help=THREADS_HELP)
    ap.add_argument("--init", default=None, metavar="DIR",
                    help="start from this policy directory, or a run folder's last step_<N>/, instead of random weights")
    ap.add_argument("--recoveries", default=None, metavar="FILE",
                    help="a JSONL of a policy's slips (python -m sinkflex_lib.rl.recovery), for profile recover")
    ap.add_argument("--ship", default=None, metavar="DEST",
                    help="after training, export the selected step (select_step) to DEST with a manifest")
    args = ap.parse_args(argv)
    log = lambda m: print(m, flush=True)  # noqa: E731
    choose_threads(args.threads, log)
    try:
        init = last_step_dir(args.init)
        if init is not None:
            policy_source(init)     # checked here, not in PretrainConfig: a run's recorded init may be gone later
        over = {k: v for k, v in (("steps", args.steps), ("lookup_steps", args.lookup_steps), ("init", init),
                                  ("recoveries", args.recoveries and str(Path(args.recoveries).resolve())))
                if v is not None}
        cfg = PretrainConfig(**{**PROFILES[args.profile], **over})
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    try:
        done = args.resume and read_checkpoint_state(Path(args.out) / "checkpoint")["step"] >= cfg.steps
        if not done:
            pretrain(cfg, args.out, seed=args.seed, resume=args.resume, log=log)
    except (ResumeError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.ship and shipped_from(args.ship, args.out):
        log(f"{args.ship} already holds (or was built on) the selected step of {args.out}: not shipped again")
    elif args.ship:
        dest = ship(args.out, args.ship, args.seed, "python -m sinkflex_lib.rl.pretrain " + " ".join(argv or sys.argv[1:]))
        log(f"shipped {dest}: {json.loads((Path(dest) / 'manifest.json').read_text())['selected']}")
    return 0


def shipped_from(dest, out_dir) -> bool:
    """Whether the base in `dest` is, or was built on, the step `select_step` picks from run
    `out_dir` (one of its manifest's stages): rerunning a finished stage ships nothing, and
    never puts an earlier stage over a later one."""
    manifest = Path(dest) / "manifest.json"
    if not manifest.is_file():
        return False
    step = select_step(read_metrics(out_dir, log=lambda m: None))["step"]
    stages = json.loads(manifest.read_text()).get("stages", [])
    return any(s.get("run") == str(out_dir) and s.get("step") == step for s in stages)


if __name__ == "__main__":
    sys.exit(main())
