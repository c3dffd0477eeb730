"""The state of a training run on disk: checkpoints and metrics rows, read so that no file runs code.

A run folder holds ``metrics.jsonl`` (one JSON row per line; the first is the run's config) and
``checkpoint/``: ``model.safetensors``, ``optimizer.pt`` (tensors only, read with
``weights_only=True``) and ``state.json`` (the step, the RNG states as lists of ints, whatever
else the trainer keeps). Used by the GRPO trainer (:mod:`.train`) and pretraining
(:mod:`.pretrain`). Resume is all-or-nothing: :func:`resume_state` and :func:`load_checkpoint`
raise :class:`ResumeError` (one line, nothing touched) when a folder cannot continue exactly.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch


class ResumeError(RuntimeError):
    """A run folder cannot resume exactly; the message says why in one line."""


def _plain(x):
    """Tensors, arrays and tuples as lists, recursively: the JSON layout of a checkpoint's state."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return {k: _plain(v) for k, v in x.items()} if isinstance(x, dict) else x


def _rng_states() -> dict:
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return _plain(rng)


def _set_rng_states(rng: dict) -> None:
    version, mt, gauss = rng["python"]
    random.setstate((version, tuple(mt), gauss))
    name, keys, *rest = rng["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])


# what an older run's state.pt holds beyond tensors: numpy's RNG key array
_NUMPY_ARRAY = (np.ndarray.__reduce__(np.zeros(0))[0], np.ndarray, np.dtype, type(np.dtype(np.uint32)))


def _safe_load(path: Path, allow=()):
    """torch.load with weights_only=True (tensors and plain data: no code runs)."""
    if not path.is_file():
        raise ResumeError(f"{path} is missing")
    try:
        with torch.serialization.safe_globals(list(allow)):
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 (UnpicklingError, EOFError, RuntimeError: all a bad file)
        raise ResumeError(f"{path} cannot be read safely with weights_only=True ({type(e).__name__}): "
                          "refusing to unpickle it; start a fresh run in a new folder") from None


def save_checkpoint(ckpt: Path, policy, opt, state: dict) -> None:
    """model.safetensors, optimizer.pt (tensors only) and state.json (`state` and the RNG states)
    into `ckpt`. All three are written, then renamed into place, state.json last; each carries
    the step, so that a checkpoint a kill left half-replaced is refused on resume."""
    from safetensors.torch import save_file

    ckpt.mkdir(parents=True, exist_ok=True)
    step = int(state["step"])
    sd = {k: v.detach().contiguous().cpu() for k, v in policy.model.state_dict().items()}
    save_file(sd, str(ckpt / "model.safetensors.tmp"), metadata={"step": str(step)})
    torch.save({"step": step, "optimizer": opt.state_dict()}, ckpt / "optimizer.pt.tmp")
    (ckpt / "state.json.tmp").write_text(json.dumps({**state, "rng": _rng_states()}))
    for name in ("model.safetensors", "optimizer.pt", "state.json"):
        os.replace(ckpt / f"{name}.tmp", ckpt / name)
    (ckpt / "state.pt").unlink(missing_ok=True)  # an older version's state, now superseded


def read_checkpoint_state(ckpt: Path) -> dict:
    """The state of checkpoint `ckpt`: state.json, else an older version's state.pt read with
    weights_only=True. ResumeError when there is none or it cannot be read."""
    if (ckpt / "state.json").exists():
        try:
            return json.loads((ckpt / "state.json").read_text())
        except (OSError, ValueError) as e:
            raise ResumeError(f"{ckpt / 'state.json'} cannot be read ({e})") from None
    if (ckpt / "state.pt").exists():
        return _plain(_safe_load(ckpt / "state.pt", allow=_NUMPY_ARRAY))
    raise ResumeError(f"nothing to resume: {ckpt} holds no checkpoint state (state.json)")


def load_checkpoint(ckpt: Path, policy, opt, state: dict | None = None) -> dict:
    """Load checkpoint `ckpt` (its `state`, read if None) into `policy`, `opt` and the global
    RNGs; returns the state. Reads tensors and plain data only; ResumeError when a file is
    missing, unreadable or from another step than the state."""
    from safetensors import safe_open

    state = read_checkpoint_state(ckpt) if state is None else state
    try:
        with safe_open(str(ckpt / "model.safetensors"), "pt", device=str(policy.device)) as f:
            weights = {k: f.get_tensor(k) for k in f.keys()}
            model_step = (f.metadata() or {}).get("step")
    except Exception as e:  # noqa: BLE001 (missing or truncated file)
        raise ResumeError(f"{ckpt / 'model.safetensors'} cannot be read ({e})") from None
    saved = _safe_load(ckpt / "optimizer.pt")
    opt_step = saved.get("step") if "optimizer" in saved else None  # older versions: no step
    for what, step in (("model.safetensors", model_step), ("optimizer.pt", opt_step)):
        if step is not None and int(step) != state["step"]:
            raise ResumeError(f"{ckpt / what} is from step {step} but state.json from step "
                              f"{state['step']}: the checkpoint was interrupted while being written")
    policy.model.load_state_dict(weights)
    opt.load_state_dict(saved.get("optimizer", saved))
    _set_rng_states(state["rng"])
    return state


def append_metrics(path: Path, row: dict) -> None:
    """Append one JSON row to a metrics.jsonl file (both trainers write through this): the whole
    line in one write, so a kill or a full disk leaves at most a partial last line."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def read_metrics(out_dir, log=None) -> list[dict]:
    """The rows of out_dir/metrics.jsonl ([] without one). A partial last line (no newline, not
    JSON: an interrupted write) is dropped and reported to `log` (default: stderr); a line
    elsewhere that is not JSON is a ValueError."""
    path = Path(out_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    *lines, last = path.read_text().split("\n")
    try:
        rows = [json.loads(line) for line in lines]
    except ValueError as e:
        raise ValueError(f"{path} is corrupt before its last line ({e})") from None
    try:
        rows += [json.loads(last)] if last.strip() else []
    except ValueError:
        (log or (lambda m: print(m, file=sys.stderr)))(
            f"{path}: dropped a partial last row ({len(last)} characters): an interrupted write")
    return rows


def curve(rows: list[dict], kind: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over the metrics rows of `kind`, averaged per step (one row a step
    in our trainer; TRL logs once per optimizer step, several per GRPO step when
    steps_per_generation > 1)."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if r.get("kind") == kind and r.get(key) is not None:
            by_step.setdefault(int(r["step"]), []).append(float(r[key]))
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def column(rows: list[dict], kind: str, key: str) -> list[float]:
    """Every value of `key` over the metrics rows of `kind`, in order, with no per-step averaging
    (the warm start's rows all carry step 0)."""
    return [float(r[key]) for r in rows if r.get("kind") == kind and r.get(key) is not None]


def resume_state(out_dir, config: dict, resumable=(), log=print) -> dict:
    """The checkpoint state of run folder `out_dir`, if `config` (the command line's, as the run's
    config row holds it) continues that run: equal to that row but for the fields in `resumable`
    (logged) and for fields, at any depth, that the row lacks (the code gained them after the run
    started: they take their value now, logged). Reads only; ResumeError (one line) otherwise."""
    out_dir = Path(out_dir)
    state = read_checkpoint_state(out_dir / "checkpoint")
    try:
        run = next((r for r in read_metrics(out_dir, log) if r.get("kind") == "config"), None)
    except ValueError as e:
        raise ResumeError(str(e)) from None
    if run is None:
        raise ResumeError(f"{out_dir / 'metrics.jsonl'} has no config row to check the command line against")
    now = json.loads(json.dumps(config))
    diff = {k: (run[k], v) for k, v in now.items() if k in run and _known(run[k], v) != v}
    refused = [f"{k} {a!r} in the run, {b!r} now" for k, (a, b) in diff.items() if k not in resumable]
    if refused:
        raise ResumeError(f"the command line differs from the run in {out_dir} ({'; '.join(refused)}): "
                          "resume with the run's values, or start a new run in another folder")
    for k, (a, b) in diff.items():
        log(f"resume: {k} changes from {a!r} to {b!r}")
    for path, v in _added(run, now):
        log(f"resume: {path} is new since the run started; it takes its value now, {v!r}")
    return state


def _known(run, now):
    """`now` as the run knew it: a dict's keys the run's config row lacks (fields the code gained
    since the run started) take their value now, so only fields both know are compared."""
    if isinstance(run, dict) and isinstance(now, dict):
        return {**now, **{k: _known(v, now[k]) if k in now else v for k, v in run.items()}}
    return run


def _added(run, now, prefix=""):
    """(dotted path, value now) of the keys of `now` that `run` lacks, at any depth."""
    for k, v in now.items():
        if k not in run:
            yield prefix + k, v
        elif isinstance(run[k], dict) and isinstance(v, dict):
            yield from _added(run[k], v, f"{prefix}{k}.")


def rewrite_metrics(out_dir, upto: int) -> None:
    """Keep the rows of out_dir/metrics.jsonl up to step `upto` (a resume drops later ones),
    replacing the file atomically."""
    out_dir = Path(out_dir)
    keep = [r for r in read_metrics(out_dir, log=lambda m: None) if r.get("step", 0) <= upto]
    (out_dir / "metrics.jsonl.tmp").write_text("".join(json.dumps(r) + "\n" for r in keep))
    os.replace(out_dir / "metrics.jsonl.tmp", out_dir / "metrics.jsonl")
