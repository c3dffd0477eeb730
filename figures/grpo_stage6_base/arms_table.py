"""Every GRPO arm from the shipped stage-6 base, or from a policy pretrained further from it (the S7, L9,
R10, L10, L13 and R22 rows, each started by its no-update row), that was scored on all 110 tasks of eval-world:0,
beside its shuffled-reward control where one ran: writes arms_table.md from the *_110_tasks.json
files in this folder, and the same table into the repository README (its block from the table's header row).

python figures/grpo_stage6_base/arms_table.py   (reads this folder, writes arms_table.md and the README's copy; no training)

Each JSON is what the arm's scratch script wrote after its last step (the trainer's greedy validation
with val_tasks=110: the `cpu` profile's budgets, 12 turns). The rows of the shipped base and of S7 (the
supervised comparison's seed-7 policy, where the S7 rows start) are the evaluate command's output
with the same budgets (pass_at_k_base.json, pass_at_k_supervised_seed7.json; its greedy rewards equal
the trainer's validation, task by task), as are L9's, R10's, L10's and L13's (lists9_step400_eval_110.json,
requests10_step400_eval_110.json, lists10_step400_eval_110.json, lists13_step400_eval_110.json), R22's
is failure_causes.py's (failures_recover22.json, the same budgets), the soups' soup_eval.py's
(soup_P0.json, soup_C0.json: the evaluate command, the same budgets), and B232's the evaluate command's
on its step-8 and step-16 checkpoints (arm_B232_step8_eval_110.json, arm_B232_step16_eval_110.json).
How each arm ran: README.md in this folder.
"""
import json
import statistics
from pathlib import Path

from sinkflex_lib.tables import markdown_table, three_places

HERE = Path(__file__).parent
N_TASKS, N_WRITE = 110, 80

# (label, what differs from the `cpu` profile, commit it ran at, arm file, control file or None)
ARMS = [
    ("the profile", "none (its three seeds were scored on 55 tasks only)", "4456670", None, "control_C_step30"),
    ("G16", "32 groups sampled, 16 trained on, minibatches of 64", "2614cc7", "arm_G16_step30", None),
    ("O8", "eight fixed training tasks every step", "2614cc7", None, "control_O8_step30"),
    ("L3", "lr 3e-5", "8296cfd", "control_L3_step30", "control_L3S_step30"),
    ("B5", "beta 0.5", "ac6ea52", "control_B5_step30", "control_B5S_step30"),
    ("L120", "120 steps", "4552915", "control_L120_step120", "control_L120S_step120"),
    ("LoRA8 seed 0", "rank-8 LoRA on the attention projections, lr 5e-4", "46cfe87",
     "arm_LoRA8_seed0_step30", "control_LoRA8_seed0_step30"),
    ("LoRA8 seed 1", "the same, seed 1", "46cfe87", "arm_LoRA8_seed1_step30", "control_LoRA8_seed1_step30"),
    ("V0", "argument-value tokens of sampled calls left out of the loss", "eec836e",
     "arm_V0_step30", "control_V0_step30"),
    ("VA", "argument-value tokens alone", "eec836e", "arm_VA_step30", "control_VA_step30"),
    ("P0 seed 0", "only the successes reinforced (negative_advantage_scale=0)", "eec836e",
     "arm_P0_step30", "control_P0_step30"),
    ("P0 seed 1", "the same, seed 1", "eec836e", "arm_P0_seed1_step30", "control_P0_seed1_step30"),
    ("P0 seed 2", "the same, seed 2", "eec836e", "arm_P0_seed2_step30", "control_P0_seed2_step30"),
    ("N5 seed 0", "negative advantages halved (negative_advantage_scale=0.5)", "184f4a6", "arm_N5_seed0_step30", None),
    ("N5 seed 1", "the same, seed 1", "184f4a6", "arm_N5_seed1_step30", None),
    ("P0 seed 0, 60 steps", "P0 seed 0 resumed to step 60", "eec836e", "arm_P0_step60", None),
    ("P0 seed 1, 60 steps", "P0 seed 1 resumed to step 60", "eec836e", "arm_P0_seed1_step60", None),
    ("S7", "no update: the base after 300 more supervised steps (seed 7, trained at 184f4a6), the start "
     "of the next rows", "05e9ee1",
     "pass_at_k_supervised_seed7", None),
    ("S7-P0 seed 0", "P0 from S7 instead of the base", "05e9ee1", "arm_S7P0_seed0_step30", "control_S7P0_seed0_step30"),
    ("S7-P0 seed 1", "the same, seed 1", "05e9ee1", "arm_S7P0_seed1_step30", "control_S7P0_seed1_step30"),
    ("L9", "no update: the lists stage's step 400 (list look-ups, then the `lists` pretraining profile, seed 9)",
     "065618d", "lists9_step400_eval_110", None),
    ("L9-P0 seed 0", "P0 from L9", "065618d", "arm_L9P0_seed0_step30", None),
    ("L9-P0 seed 1", "the same, seed 1", "065618d", "arm_L9P0_seed1_step30", None),
    ("L9-P0 seed 2", "the same, seed 2", "065618d", "arm_L9P0_seed2_step30", None),
    ("R10", "no update: the requests stage's step 400 (the `requests` profile from L9, seed 10)", "135ab90",
     "requests10_step400_eval_110", None),
    ("R10-P0 seed 0", "P0 from R10", "135ab90", "arm_R10P0_seed0_step30", None),
    ("R10-P0 seed 1", "the same, seed 1", "135ab90", "arm_R10P0_seed1_step30", None),
    ("R10-P0 seed 2", "the same, seed 2", "135ab90", "arm_R10P0_seed2_step30", None),
    ("L10", "no update: the lists stage continued instead (the `lists` profile from L9, seed 10; R10's control)",
     "11906f3", "lists10_step400_eval_110", None),
    ("L10-P0 seed 0", "P0 from L10", "6e7bfd6", "arm_L10P0_seed0_step30", None),
    ("L10-P0 seed 1", "the same, seed 1", "6e7bfd6", "arm_L10P0_seed1_step30", None),
    ("L10-P0 seed 2", "the same, seed 2", "6e7bfd6", "arm_L10P0_seed2_step30", None),
    ("L13", "no update: `make pretrain-lists` (list look-ups, then the `lists` profile twice; seeds 11, 12, 13), "
     "L10's recipe again", "6ba5f7d", "lists13_step400_eval_110", None),
    ("L13-P0 seed 0", "P0 from L13", "b744e12", "arm_L13P0_seed0_step30",
     "control_L13P0_seed0_step30"),
    ("L13-P0 seed 1", "the same, seed 1", "b744e12", "arm_L13P0_seed1_step30",
     "control_L13P0_seed1_step30"),
    ("L13-P0 seed 2", "the same, seed 2", "b744e12", "arm_L13P0_seed2_step30",
     "control_L13P0_seed2_step30"),
    ("W5-P0 seed 0", "P0, and an unsolved episode trains on half its write calls' argument match to the gold "
     "writes (write_credit=0.5); its controls at 55292ae (seeds 0 and 1) and 91b86be (seed 2)", "e900087",
     "arm_W5P0_seed0_step30", "control_W5P0_seed0_step30"),
    ("W5-P0 seed 1", "the same, seed 1", "e900087", "arm_W5P0_seed1_step30", "control_W5P0_seed1_step30"),
    ("W5-P0 seed 2", "the same, seed 2", "e900087", "arm_W5P0_seed2_step30", "control_W5P0_seed2_step30"),
    ("W5 seed 0", "write_credit=0.5 alone (negative advantages kept); its controls at 91b86be", "e900087",
     "arm_W5_seed0_step30", "control_W5_seed0_step30"),
    ("W5 seed 1", "the same, seed 1", "e900087", "arm_W5_seed1_step30", "control_W5_seed1_step30"),
    ("W5 seed 2", "the same, seed 2", "e900087", "arm_W5_seed2_step30", "control_W5_seed2_step30"),
    ("R22", "no update: the `recover` stage (the base's own slips, then the oracle's way back; seed 22, 300 steps)",
     "6442a13", "failures_recover22", None),
    ("R22-P0 seed 0", "P0 from R22", "6442a13", "arm_R22P0_seed0_step30", "control_R22P0_seed0_step30"),
    ("R22-P0 seed 1", "the same, seed 1", "cb318fd", "arm_R22P0_seed1_step30", "control_R22P0_seed1_step30"),
    ("A1-P0 seed 0", "P0, and each minibatch's loss plus the supervised loss on 4 fresh oracle episodes "
     "(anchor_weight=1)", "5c3eb55", "arm_A1P0_seed0_step30", "control_A1P0_seed0_step30"),
    ("A1-P0 seed 1", "the same, seed 1", "5c3eb55", "arm_A1P0_seed1_step30", "control_A1P0_seed1_step30"),
    ("A1-P0 seed 2", "the same, seed 2", "5c3eb55", "arm_A1P0_seed2_step30", "control_A1P0_seed2_step30"),
    ("A1L3-P0 seed 0", "A1-P0 at lr 3e-4, three times the profile's", "5c3eb55", "arm_A1L3P0_seed0_step30", None),
    ("A1L3-P0 seed 1", "the same, seed 1", "5c3eb55", "arm_A1L3P0_seed1_step30", None),
    ("P0 soup", "the weight mean of P0 seeds 0, 1 and 2 (`sinkflex_lib.rl.soup`; the runs again at 1fc4fd5, "
     "bit-identical); its control the mean of their three controls", "1fc4fd5", "soup_P0:alpha 1", "soup_C0:alpha 1"),
    ("P0 soup, α = 2", "the base + 2 × (that mean − the base), α chosen among 1, 2, 3 on eval-world:1", "1fc4fd5",
     "soup_P0:alpha 2", "soup_C0:alpha 2"),
    ("B232", "every training task (232 groups) each step, one AdamW step on all groups with spread "
     "(accumulation_steps=64), lr 3e-4, 8 steps", "8f22456", "arm_B232_step8_eval_110", None),
    ("B232, step 16", "the same run resumed to 16 steps", "f4ec38a", "arm_B232_step16_eval_110", None),
    ("RP0 seed 0", "P0 on the training world's returns only (train_kinds=[\"return\"])", "91b86be",
     "arm_RP0_seed0_step30", "control_RP0_seed0_step30"),
    ("RP0 seed 1", "the same, seed 1 (two threads)", "53b89fc", "arm_RP0_seed1_step30", None),
    ("RRT", "P0 on the training world's returns, refusals and transfers "
     "(train_kinds=[\"return\", \"refuse\", \"transfer\"])", "3b0199a", "arm_RRT_seed0_step30", "control_RRT_seed0_step30"),
    ("RP0-FX seed 0", "RP0 seed 0, then 10 steps of P0 on refusals and transfers only (train_kinds); its control "
     "shuffles that phase's rewards, from the same RP0 policy", "3b0199a", "arm_RP0FX_seed0_step10",
     "control_RP0FX_seed0_step10"),
    ("RP0-FX seed 1", "the same from RP0 seed 1 (two threads; its control alone after it)", "3b0199a",
     "arm_RP0FX_seed1_step10", "control_RP0FX_seed1_step10"),
    ("RRD", "P0 on the training world's 24 returns and 4 of its 24 refusals (train_tasks: every sixth refusal "
     "by id)", "3b0199a", "arm_RRD_seed0_step30", "control_RRD_seed0_step30"),
    ("OP seed 0", "P0 with the reverse curriculum (oracle_prefix=1.0: each group starts after k of its task's oracle "
     "turns, k up to a fraction of them falling from 1 to 0 over the 30 steps)", "173638f", "arm_OP_seed0_step30",
     "control_OP_seed0_step30"),
    ("OP seed 1", "the same, seed 1", "08bac87", "arm_OP_seed1_step30", "control_OP_seed1_step30"),
    ("KP, step 40", "P0 on one task kind at a time (kind_phase_steps=5: 5 steps each of returns, refusals, cancels, "
     "address changes, transfers, payment changes, default addresses, compound requests), one pass",
     "1d2517a", "arm_KP_seed0_step40_eval_110", "control_KP_seed0_step40_eval_110"),
    ("KP, step 80", "the same run, two passes", "1d2517a", "arm_KP_seed0_step80", "control_KP_seed0_step80"),
    ("KP seed 1, step 40", "the same, seed 1, one pass (two threads, no control)", "24deb2d", "arm_KP_seed1_step40", None),
    ("FW seed 0", "P0 on a fresh training world every step (world_steps=1: step k on train-world:999+k)", "2a9be67",
     "arm_FW_seed0_step30", "control_FW_seed0_step30"),
    ("FW seed 1", "the same, seed 1", "2a9be67", "arm_FW_seed1_step30", "control_FW_seed1_step30"),
    ("FW seed 2", "the same, seed 2", "2a9be67", "arm_FW_seed2_step30", "control_FW_seed2_step30"),
]
SEED_GROUPS = {"LoRA8": ["LoRA8 seed 0", "LoRA8 seed 1"], "P0": ["P0 seed 0", "P0 seed 1", "P0 seed 2"],
               "N5": ["N5 seed 0", "N5 seed 1"], "OP": ["OP seed 0", "OP seed 1"], "S7-P0": ["S7-P0 seed 0", "S7-P0 seed 1"],
               "L9-P0": [f"L9-P0 seed {s}" for s in range(3)], "R10-P0": [f"R10-P0 seed {s}" for s in range(3)],
               "L10-P0": [f"L10-P0 seed {s}" for s in range(3)], "L13-P0": [f"L13-P0 seed {s}" for s in range(3)],
               "W5-P0": [f"W5-P0 seed {s}" for s in range(3)], "W5": [f"W5 seed {s}" for s in range(3)],
               "R22-P0": [f"R22-P0 seed {s}" for s in range(2)], "A1-P0": [f"A1-P0 seed {s}" for s in range(3)],
               "A1L3-P0": [f"A1L3-P0 seed {s}" for s in range(2)],
               "RP0": ["RP0 seed 0", "RP0 seed 1"], "RP0-FX": ["RP0-FX seed 0", "RP0-FX seed 1"],
               "FW": [f"FW seed {s}" for s in range(3)]}


def scores(stem: str | None) -> tuple[float, float] | None:
    """(all, write) mean@1 of `stem`_110_tasks.json (the arm script's validation) or of `stem`.json
    (the evaluate command's output), or, for "soup_LABEL:NAME", of NAME's eval-world:0 scores in
    soup_LABEL.json (soup_eval.py); None when there is no such run."""
    if stem is not None and ":" in stem:
        file, name = stem.split(":", 1)
        d = json.loads((HERE / f"{file}.json").read_text())["scores"][name]["eval-world:0"]
        return d["mean_at_1"], d["write_mean_at_1"]
    for path, keys in ((HERE / f"{stem}_110_tasks.json", ("val_reward", "val_write_reward")),
                       (HERE / f"{stem}.json", ("mean_at_1", "write_mean_at_1"))):
        if stem is not None and path.exists():
            d = json.loads(path.read_text())
            return d[keys[0]], d[keys[1]]
    return None


def fmt(pair) -> str:
    """'0.391 / 0.300' (all / write tasks), or '–' for a run that does not exist."""
    if pair is None:
        return "–"
    return f"{three_places(pair[0], N_TASKS)} / {three_places(pair[1], N_WRITE)}"


def mean_std(pairs) -> str:
    """Mean ± sample std over seeds, for all and write tasks."""
    cols = list(zip(*pairs))
    return " / ".join(f"{statistics.mean(c):.3f} ± {statistics.stdev(c):.3f}" for c in cols)


COLUMNS = ["arm", "what differs from the `cpu` profile", "commit", "all / write tasks",
           "its control (shuffled rewards)", "arm minus control, tasks of 110"]


def table() -> str:
    """The Markdown table (the project's one table writer, `tables.markdown_table`)."""
    rows = [dict(zip(COLUMNS, ["the base (step 0)", "no update", "05e9ee1", fmt(scores("pass_at_k_base"))]))]
    got = {}
    for label, change, commit, arm, control in ARMS:
        a, c = got[label] = scores(arm), scores(control)
        diff = f"{round(a[0] * N_TASKS) - round(c[0] * N_TASKS):+d}" if a and c else None
        rows.append(dict(zip(COLUMNS, [label, change, commit, fmt(a), fmt(c), diff])))
    for name, labels in SEED_GROUPS.items():
        arms = [got[l][0] for l in labels if got[l][0]]
        ctrls = [got[l][1] for l in labels if got[l][1]]
        if len(arms) > 1:
            ctrl = mean_std(ctrls) if len(ctrls) > 1 else None
            if ctrl and len(ctrls) != len(arms):
                ctrl += f" ({len(ctrls)} seeds)"
            rows.append({COLUMNS[0]: f"{name}, {len(arms)} seeds (mean ± std)", COLUMNS[3]: mean_std(arms),
                         COLUMNS[4]: ctrl})
    return markdown_table(rows, COLUMNS, align="lllrrr")


def with_table(readme: str, text: str) -> str:
    """`readme` with its arms table (the lines from the header row to the first blank line) replaced by `text`."""
    start = readme.index("| " + " | ".join(COLUMNS) + " |")
    end = readme.index("\n\n", start)
    return readme[:start] + text.rstrip("\n") + readme[end:]


if __name__ == "__main__":
    text = table()
    (HERE / "arms_table.md").write_text(text)
    readme = HERE.parent.parent / "README.md"
    readme.write_text(with_table(readme.read_text(), text))   # the README's copy, so the two cannot differ
    print(text)
