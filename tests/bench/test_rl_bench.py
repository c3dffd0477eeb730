"""`python -m sinkflex_lib.bench rl`: its rows, files and report (smallest sizes; no timing asserted)."""

import csv

import pytest

from sinkflex_lib.bench.__main__ import main
import torch

from sinkflex_lib.bench.rl import environment_line, report, run_rl_bench
from sinkflex_lib.machine import usable_cores


def test_rows_files_and_report(tmp_path):
    rows = run_rl_bench("micro", batch=2, max_turns=2, max_new_tokens=6, minibatch=1, out=tmp_path, log=lambda m: None,
                        repeats=3)
    whats = [r["what"] for r in rows]
    options = ["cache_in_place", "drop_pad_slots", "share_prompt_prefix", "lean_forward", "fast_sampling",
               "overlap_turns"]
    rollouts = ["rollout (ours)"] + [f"rollout, {o} off" for o in options] + [f"rollout, {' and '.join(options)} off"]
    assert whats[:9] == rollouts + ["generate() (transformers)"]
    by = {r["what"]: r for r in rows}
    ours, gen = by["rollout (ours)"], by["generate() (transformers)"]
    assert gen["tokens"] == 2 * 6 and gen["forwards"] == 6      # max_new_tokens for every row
    assert 0 < ours["tokens"] <= 2 * 2 * 6 and ours["forwards"] >= 6
    assert 0 < ours["forward_share"] + ours["sample_share"] + ours["env_share"] <= 1.0
    # each rollout row: the median of its 3 timed runs, the fastest and slowest beside it
    assert all(by[w]["seconds_min"] <= by[w]["seconds"] <= by[w]["seconds_max"] for w in rollouts)
    assert any(by[w]["seconds_min"] < by[w]["seconds_max"] for w in rollouts)
    # speed options: same episodes; torch.multinomial draws other tokens than inverse-CDF sampling, and
    # overlapping turns hands the draws of a seed to the rows in another order
    same_draws = [w for w in rollouts[1:-1] if "fast_sampling" not in w and "overlap_turns" not in w]
    assert len(same_draws) == 4 and all(by[w]["tokens"] == ours["tokens"] for w in same_draws)
    updates, shared, step = whats[9:-2], by[whats[-2]], by["GRPO step, full update"]
    # a full update: every token of the episodes, as the update row at the longest length counts them
    assert whats[-1] == step["what"] and step["update_tokens"] == by[updates[-2]]["tokens"] > 0
    assert shared["what"] == updates[-2] + ", trainer's scoring" and shared["tokens"] == step["update_tokens"]
    assert step["seconds"] > ours["seconds"] and step["tokens"] == ours["tokens"]
    shares = [step[k] for k in ("forward_share", "sample_share", "env_share", "update_share")]
    assert all(x > 0 for x in shares) and sum(shares) <= 1.0
    assert step["forward_share"] * step["seconds"] == pytest.approx(ours["forward_share"] * ours["seconds"])
    assert updates and len(updates) % 2 == 0
    for s, e in zip(updates[::2], updates[1::2]):   # each length on both attentions, same tokens
        assert s.endswith("sinkflex") and e == s.replace("sinkflex", "eager") and by[s]["tokens"] == by[e]["tokens"] > 0
    assert all(r["tokens_per_s"] > 0 for r in rows)
    with open(tmp_path / "bench_rl.csv") as f:
        assert [r["what"] for r in csv.DictReader(f)] == whats
    text = report(rows, "cpu")
    assert "ours / generate()" in text and "ours / speed options off" in text
    assert sum("sinkflex / eager" in line for line in text.splitlines()) == len(updates) // 2
    assert sum("as the trainer scores" in line for line in text.splitlines()) == 1
    assert text.splitlines()[-1].startswith("device:")


def test_cli_rejects_a_bad_batch(capsys):
    assert main(["rl", "--policy", "micro", "--batch", "0"]) == 2
    assert "batch must be >= 1" in capsys.readouterr().err
    assert main(["rl", "--policy", "micro", "--repeats", "0"]) == 2
    assert "repeats must be >= 1" in capsys.readouterr().err


def test_busy_rows_beside_competing_processes():
    threads = torch.get_num_threads()
    rows = run_rl_bench("micro", batch=2, max_turns=2, max_new_tokens=6, minibatch=1, log=lambda m: None,
                        repeats=2, compete=1, threads=1)
    assert torch.get_num_threads() == 1            # the busy rows restore the count the run chose
    torch.set_num_threads(threads)
    busy = rows[rows.index(next(r for r in rows if r["what"].startswith("GRPO step"))) + 1:]
    longest = next(r for r in rows if r["what"].endswith("trainer's scoring"))["what"].split(",")[0]
    cases = ["rollout (ours)"] + [f"{longest}, {a}" for a in ("sinkflex", "eager")]   # micro episodes: < 512 tokens
    picked, cores = busy[len(cases)]["threads"], len(usable_cores())
    assert 1 <= picked <= max(1, cores - 1)
    settings = [("quiet", 1)] + [("beside 1 busy", k) for k in dict.fromkeys((picked, cores))]
    assert [r["what"] for r in busy] == [f"{c}, {s}, {k} thread(s)" for s, k in settings for c in cases]
    assert [r["threads"] for r in busy] == [k for _, k in settings for _ in cases]
    assert all(r["seconds_min"] <= r["seconds"] <= r["seconds_max"] for r in busy)
    lines = report(rows, "cpu", 1).splitlines()
    assert sum("slower than quiet (1 thread(s)) by" in line for line in lines) == len(busy) - len(cases)
    assert "the busy rows beside 1 competing" in lines[-1] and "competing" not in environment_line("cpu")


def test_cli_refuses_zero_threads_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["rl", "--policy", "micro", "--threads", "0"])
    assert exit_.value.code == 2
    assert "expected an integer in [1, inf], got '0'" in capsys.readouterr().err


def test_cli_rejects_a_negative_compete(capsys):
    assert main(["rl", "--policy", "micro", "--compete", "-1"]) == 2
    assert "compete must be >= 0" in capsys.readouterr().err
