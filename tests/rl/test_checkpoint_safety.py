"""Checkpoints that cannot run code, and --resume that either continues exactly or refuses,
touching nothing (issue 14)."""

import dataclasses
import json
import os
import random
import shutil

import numpy as np
import pytest
import torch

from sinkflex_lib.rl import train as train_mod
from sinkflex_lib.rl import runstate
from sinkflex_lib.rl.config import TrainConfig
from sinkflex_lib.rl.runstate import ResumeError, read_metrics
from sinkflex_lib.rl.train import resume_state, train

TINY = dict(bc_episodes=2, bc_epochs=1, steps=2, groups_per_step=2, group_size=2, minibatch_size=2,
            max_turns=2, max_tokens=400, max_new_tokens=8, val_tasks=1, val_every=1, ckpt_every=1,
            traj_window=8, threads=1)
SEED = 3


def quiet(_message):
    pass


@pytest.fixture(scope="module")
def cfg():
    return TrainConfig.from_profile("smoke", **TINY)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, cfg):
    """A run stopped after GRPO step 1 of 2 (checkpoint at step 1)."""
    threads = torch.get_num_threads()
    out = tmp_path_factory.mktemp("stopped")
    try:
        train(cfg, out, seed=SEED, log=quiet, stop_after=1)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture
def run_dir(stopped_run, tmp_path):
    return shutil.copytree(stopped_run, tmp_path / "run")


def snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def resume(cfg, out, seed=SEED, log=quiet):
    threads = torch.get_num_threads()
    try:
        return train(cfg, out, seed=seed, log=log, resume=True)
    finally:
        torch.set_num_threads(threads)


def test_checkpoint_holds_only_tensors_and_json(run_dir):
    ckpt = run_dir / "checkpoint"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 1 and set(state["rng"]) >= {"python", "numpy", "torch"}
    torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert not (ckpt / "state.pt").exists()


def test_rng_states_round_trip_through_json():
    states = json.loads(json.dumps(runstate._rng_states()))
    first = (random.random(), np.random.rand(), torch.rand(3).tolist())
    runstate._set_rng_states(states)
    assert (random.random(), np.random.rand(), torch.rand(3).tolist()) == first


class Payload:
    """Unpickling this creates a folder: proof that loading a checkpoint ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.mark.parametrize("name", ["optimizer.pt", "state.pt"])
def test_a_crafted_checkpoint_file_runs_no_code(name, run_dir, cfg, tmp_path):
    marker = tmp_path / "code-ran"
    ckpt = run_dir / "checkpoint"
    if name == "state.pt":  # an older version's state file, found when there is no state.json
        (ckpt / "state.json").unlink()
    torch.save({"step": 1, "payload": Payload(marker)}, ckpt / name)
    before = snapshot(run_dir)
    with pytest.raises(ResumeError, match="weights_only=True"):
        resume(cfg, run_dir)
    assert not marker.exists() and snapshot(run_dir) == before


def to_old_format(ckpt):
    """Rewrite a checkpoint as the previous version wrote it: state.pt and a bare optimizer state."""
    state = json.loads((ckpt / "state.json").read_text())
    rng = state["rng"]
    state["rng"] = {"python": (rng["python"][0], tuple(rng["python"][1]), rng["python"][2]),
                    "numpy": (rng["numpy"][0], np.array(rng["numpy"][1], dtype=np.uint32), *rng["numpy"][2:]),
                    "torch": torch.tensor(rng["torch"], dtype=torch.uint8)}
    torch.save(state, ckpt / "state.pt")
    torch.save(torch.load(ckpt / "optimizer.pt", weights_only=True)["optimizer"], ckpt / "optimizer.pt")
    (ckpt / "state.json").unlink()


def test_an_old_checkpoint_resumes_safely_and_identically(stopped_run, tmp_path, cfg):
    new, old = (shutil.copytree(stopped_run, tmp_path / name) for name in ("new", "old"))
    to_old_format(old / "checkpoint")
    a, b = resume(cfg, new).policy.model.state_dict(), resume(cfg, old).policy.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (old / "checkpoint" / "state.json").exists() and not (old / "checkpoint" / "state.pt").exists()


@pytest.mark.parametrize("name,match", [("state.json", "nothing to resume"),
                                        ("optimizer.pt", "optimizer.pt is missing"),
                                        ("model.safetensors", "model.safetensors cannot be read")])
def test_resume_without_a_whole_checkpoint_refuses_and_touches_nothing(name, match, run_dir, cfg):
    (run_dir / "checkpoint" / name).unlink()
    before = snapshot(run_dir)
    with pytest.raises(ResumeError, match=match):
        resume(cfg, run_dir)
    assert snapshot(run_dir) == before


def test_cli_resume_failure_is_one_line(tmp_path, capsys):
    assert train_mod.main(["--profile", "smoke", "--out", str(tmp_path / "none"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --resume: nothing to resume") and err.count("\n") == 1
    assert not (tmp_path / "none").exists()


def test_resume_with_another_seed_or_config_is_refused(run_dir, cfg):
    before = snapshot(run_dir)
    with pytest.raises(ResumeError, match="seed 3 in the run, 7 now"):
        resume(cfg, run_dir, seed=7)
    with pytest.raises(ResumeError, match="lr 0.0005 in the run, 0.001 now"):
        resume(dataclasses.replace(cfg, lr=1e-3), run_dir)
    assert snapshot(run_dir) == before


def test_resume_may_extend_the_steps_and_says_so(run_dir, cfg):
    lines = []
    assert resume_state(run_dir, dataclasses.replace(cfg, steps=5), SEED, lines.append)["step"] == 1
    assert lines == ["resume: steps changes from 2 to 5"]


def test_a_torn_checkpoint_is_refused(run_dir, cfg):
    state_path = run_dir / "checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "step": 0}))  # weights and optimizer are from step 1
    before = snapshot(run_dir)
    with pytest.raises(ResumeError, match="model.safetensors is from step 1 but state.json from step 0"):
        resume(cfg, run_dir)
    assert snapshot(run_dir) == before


def test_a_partial_last_metrics_row_is_dropped_logged_and_the_run_resumes(run_dir, cfg):
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 2, "rew')  # a kill in the middle of a write
    lines = []
    resume(cfg, run_dir, log=lines.append)
    assert any("dropped a partial last row" in m for m in lines)
    rows = read_metrics(run_dir)
    assert [(r["kind"], r["step"]) for r in rows if r["kind"] in ("train", "val")] == \
        [("val", 0), ("train", 1), ("val", 1), ("train", 2), ("val", 2)]


def test_read_metrics_keeps_complete_rows_and_refuses_a_corrupt_middle(tmp_path):
    path = tmp_path / "metrics.jsonl"
    train_mod.append_metrics(path, {"step": 0})
    train_mod.append_metrics(path, {"step": 1})
    assert read_metrics(tmp_path) == [{"step": 0}, {"step": 1}]
    path.write_text('{"step": 0}\n{"st\n{"step": 1}\n')
    with pytest.raises(ValueError, match="corrupt before its last line"):
        read_metrics(tmp_path)
