"""`python -m sinkflex_lib.integrations.trl train --profile smoke`, in one process and under torchrun.

Each run is a subprocess with one thread per process. The smoke policy scores 0 on every
episode, so GRPO's own gradient is 0; `--trl entropy_coef=0.01` adds TRL's entropy bonus so
that every update changes the weights, and equal weight checksums on both ranks then show
that the gradients were all-reduced (each rank rolled out different tasks).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from sinkflex_lib.rl.runstate import read_metrics

ARGS = ["-m", "sinkflex_lib.integrations.trl", "train", "--profile", "smoke", "--threads", "1",
        "--trl", "entropy_coef=0.01"]
RANK_LINE = re.compile(r"^\[rank (\d)/(\d)\] step (\d)/2: \d+ episodes of (\S+), .* weights checksum (\S+)"
                       r" \(changed by (\S+)\)$", re.MULTILINE)


def run(cmd, out_dir):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "SINKFLEX_PROFILE": "smoke"}
    proc = subprocess.run([sys.executable, *cmd, "--out", str(out_dir)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-20000:]   # the failing rank's traceback too
    return proc.stdout


def check_run(stdout, out_dir, processes):
    lines = RANK_LINE.findall(stdout)
    assert sorted((int(r), int(s)) for r, _, s, _, _, _ in lines) == [(r, s) for r in range(processes)
                                                                        for s in (1, 2)]
    assert all(int(w) == processes for _, w, _, _, _, _ in lines)
    for step in ("1", "2"):
        at_step = [ln for ln in lines if ln[2] == step]
        assert len({ln[4] for ln in at_step}) == 1                      # same weights on every rank
        assert all(float(ln[5]) != 0.0 for ln in at_step)              # ... after a real update
        assert len({ln[3] for ln in at_step}) == processes             # each rank its own group
    rows = read_metrics(out_dir)
    assert [r["step"] for r in rows if r["kind"] == "val"] == [0, 1, 2]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2]
    (summary,) = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"out_dir"')]
    assert summary["processes"] == processes and summary["val_end"] == summary["val_end"]
    assert (out_dir / "final" / "model.safetensors").exists()


@pytest.mark.slow
def test_single_process(tmp_path):
    stdout = run(ARGS, tmp_path)
    check_run(stdout, tmp_path, 1)


@pytest.mark.slow
def test_torchrun_two_processes(tmp_path):
    stdout = run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *ARGS], tmp_path)
    check_run(stdout, tmp_path, 2)
    assert stdout.count("update synchronised across 2 processes") == 2
    assert sorted(re.findall(r"\[rank (\d)/2\] process group destroyed", stdout)) == ["0", "1"]


@pytest.mark.cuda
def test_torchrun_on_cuda(tmp_path):
    """The same on a CUDA machine (nccl, flex attention): `make gpu-check` runs it."""
    stdout = run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *ARGS], tmp_path)
    check_run(stdout, tmp_path, 1)
