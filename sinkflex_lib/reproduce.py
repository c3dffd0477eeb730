"""Run every notebook headlessly with Papermill and write a manifest of the run.

    python -m sinkflex_lib.reproduce --profile cpu            # what `make reproduce` runs
    python -m sinkflex_lib.reproduce --profile smoke --only 01,02
    python -m sinkflex_lib.reproduce --profile cpu --update-notebooks   # refresh committed outputs

Executed copies go to papermill_runs/<profile>/, with manifest.json: git commit, package
versions, device, and each notebook's wall time, status, parameters, git state and device; a
partial run (`--only`) keeps the earlier entries of the other notebooks (marked
"from_earlier_run", each with the git state and device of its own run). The profile reaches each
notebook through SINKFLEX_PROFILE, which the first line of its `parameters` cell reads, so the
executed notebooks carry no injected cell. A failing cell stops its notebook (the executed copy
keeps the traceback; `--update-notebooks` leaves that notebook's committed copy alone); the run
goes on with the next ones (each is independent) and exits non-zero at the end, naming every
notebook and cell that failed. On POSIX the kernels talk over Unix
sockets in a temporary folder (`ipc_kernel_manager`), not loopback TCP.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from .machine import cpu_model
from .paths import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
RUNS_DIR = REPO_ROOT / "papermill_runs"
PROFILES = ("smoke", "cpu", "gpu")
PACKAGES = ("torch", "transformers", "trl", "peft", "gymnasium", "papermill", "nbval", "numpy",
            "matplotlib", "seaborn", "jupyterlab", "sinkflex-lib")


def by_profile(given, choices: dict, profile: str):
    """A notebook size: `given` where a run passed one (``papermill -p NAME value``; the
    parameters cell's None means none was), else what `profile` picks from `choices`."""
    if set(choices) != set(PROFILES):
        raise ValueError(f"choices must name every profile {PROFILES}, got {sorted(choices)}")
    return choices[_known_profile(profile)] if given is None else given


def _known_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"PROFILE must be one of {PROFILES}, got {profile!r}")
    return profile


def use_profile(profile: str) -> str:
    """Make `profile` this process's run profile (``SINKFLEX_PROFILE``, which `figures_dir` and
    the notebooks' first lines read), so that ``papermill -p PROFILE smoke`` moves the figures
    with the sizes; an unknown profile is refused. Returns it."""
    os.environ["SINKFLEX_PROFILE"] = _known_profile(profile)
    return profile


def find_notebooks(only: list[str] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Notebooks in run order; `only` filters by name prefix (e.g. ["01", "03"])."""
    notebooks = sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
    if only:
        unknown = [p for p in only if not any(nb.name.startswith(p) for nb in notebooks)]
        if unknown:
            names = ", ".join(nb.name for nb in notebooks)
            raise SystemExit(f"--only: no notebook starts with {unknown}; have: {names}")
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(p) for p in only)]
    return notebooks


def notebook_parameters(path: Path, profile: str) -> dict:
    """The literals of the notebook's `parameters` cell and of its `sizes` cell (the sizes the
    profile picks, after the parameters so that Papermill's injected PROFILE reaches them),
    evaluated for `profile`."""
    cells = json.loads(path.read_text())["cells"]
    tagged = lambda tag: ["".join(c["source"]) for c in cells if tag in c.get("metadata", {}).get("tags", [])]  # noqa: E731
    if not tagged("parameters"):
        raise SystemExit(f"{path.name}: no cell tagged 'parameters'")
    source = "\n".join(tagged("parameters") + tagged("sizes"))
    old = os.environ.get("SINKFLEX_PROFILE")
    os.environ["SINKFLEX_PROFILE"] = profile
    try:
        namespace: dict = {}
        exec(compile(source, f"{path.name}:parameters", "exec"), namespace)
    finally:
        if old is None:
            os.environ.pop("SINKFLEX_PROFILE")
        else:
            os.environ["SINKFLEX_PROFILE"] = old
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and isinstance(v, (str, int, float, bool, list, dict, tuple, type(None)))}


def device_description() -> dict:
    import torch

    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu": cpu_model(), "cpu_count": os.cpu_count(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


RUN_GIT_ENV = "SINKFLEX_RUN_GIT"   # set by `run` for its notebooks: the tree's state when the run began


@contextlib.contextmanager
def _run_git(git: dict):
    """RUN_GIT_ENV set to `git` while a run's notebooks execute (their kernels inherit it), then
    restored."""
    before = os.environ.get(RUN_GIT_ENV)
    os.environ[RUN_GIT_ENV] = json.dumps(git)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RUN_GIT_ENV, None)
        else:
            os.environ[RUN_GIT_ENV] = before


def git_commit() -> dict:
    """The checkout's commit and whether its tree is dirty. Inside a `run` (its notebooks' kernels
    inherit RUN_GIT_ENV) the state when the run began: by the time a notebook asks, the run's own
    outputs (figures, executed notebooks) have changed the tree, and that is not a code change."""
    if os.environ.get(RUN_GIT_ENV):
        return json.loads(os.environ[RUN_GIT_ENV])

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def ipc_kernel_manager(folder) -> type:
    """An AsyncKernelManager whose kernels talk over Unix sockets in `folder` (absolute) rather
    than loopback TCP: no open port, and none of ipykernel's warning about unencrypted TCP."""
    from jupyter_client import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(transport="ipc", ip=str(Path(folder).resolve() / "kernel"), **kwargs)

    return IPCKernelManager


def run(profile: str, only: list[str] | None = None, update_notebooks: bool = False,
        kernel: str = "python3", notebooks_dir: Path = NOTEBOOKS_DIR, runs_dir: Path = RUNS_DIR) -> Path:
    import papermill

    try:
        use_profile(profile)
    except ValueError as err:
        raise SystemExit(f"--profile: {err}") from None
    notebooks = find_notebooks(only, notebooks_dir)
    if not notebooks:
        raise SystemExit(f"no notebooks found in {notebooks_dir}")
    out_dir = Path(runs_dir) / profile
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"profile": profile, "git": git_commit(), "packages": package_versions(),
                "device": device_description(), "notebooks": []}
    kept = previous_entries(out_dir / "manifest.json", notebooks) if only else []
    total_start = time.perf_counter()
    sockets = tempfile.TemporaryDirectory(prefix="sinkflex-kernel-")   # removed when the run ends
    manager = {"kernel_manager_class": ipc_kernel_manager(sockets.name)} if os.name == "posix" else {}
    failed = []
    with _run_git(manifest["git"]):   # what a notebook's git_commit() reports
        for i, nb in enumerate(notebooks, 1):
            print(f"[{i}/{len(notebooks)}] {nb.name} (profile {profile}) ...", flush=True)
            entry = {"notebook": nb.name, "git": manifest["git"], "device": manifest["device"],
                     "parameters": notebook_parameters(nb, profile)}
            entry.update(_execute(papermill, nb, out_dir, kernel, notebooks_dir, manager))
            manifest["notebooks"].append(entry)
            _write_manifest(out_dir, manifest, total_start, kept)   # after every notebook: nothing lost on a crash
            if entry["status"] == "failed":
                failed.append(nb.name)
                print(f"FAILED {nb.name}, {entry['error']}\n  executed copy with the traceback: {out_dir / nb.name}",
                      file=sys.stderr, flush=True)
                continue
            print(f"      done in {entry['wall_seconds']:.1f} s", flush=True)
            if update_notebooks:
                shutil.copyfile(out_dir / nb.name, nb)
    path = _write_manifest(out_dir, manifest, total_start, kept)
    if failed:
        print(f"{len(failed)} of {len(notebooks)} notebooks failed ({', '.join(failed)}); the others ran"
              f"{' and were copied to notebooks/' if update_notebooks else ''}; manifest: {path}",
              file=sys.stderr, flush=True)
        raise SystemExit(1)
    print(f"all {len(notebooks)} notebooks ran; manifest: {path}", flush=True)
    return path


def _execute(papermill, nb: Path, out_dir: Path, kernel: str, cwd: Path, manager: dict) -> dict:
    """Run one notebook into out_dir; its status, wall time and, if a cell failed, which and why."""
    from papermill.exceptions import PapermillExecutionError

    start = time.perf_counter()
    try:
        papermill.execute_notebook(str(nb), str(out_dir / nb.name), kernel_name=kernel, cwd=str(cwd),
                                   progress_bar=False, log_output=False, **manager)
    except PapermillExecutionError as err:
        return {"status": "failed", "wall_seconds": round(time.perf_counter() - start, 2),
                "error": f"cell {err.cell_index} (execution count {err.exec_count}): {err.ename}: {err.evalue}"}
    return {"status": "ok", "wall_seconds": round(time.perf_counter() - start, 2)}


def previous_entries(path: Path, notebooks: list[Path]) -> list[dict]:
    """Entries of an earlier manifest at `path` for notebooks not in `notebooks` (a partial run,
    `--only`, keeps the record of the others), each with the git state and device of the run
    that made it (device None where an old entry did not record it)."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    names = {nb.name for nb in notebooks}
    return [{**e, "git": e.get("git", old.get("git")), "device": e.get("device"),   # None: not recorded
             "from_earlier_run": True}
            for e in old.get("notebooks", []) if e["notebook"] not in names]


def _write_manifest(out_dir: Path, manifest: dict, start: float, kept: list[dict] = ()) -> Path:
    """Write the manifest of the run so far: its notebooks and the `kept` entries of earlier runs."""
    record = {**manifest, "total_wall_seconds": round(time.perf_counter() - start, 2),
              "notebooks": sorted([*manifest["notebooks"], *kept], key=lambda e: e["notebook"])}
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=os.environ.get("SINKFLEX_PROFILE", "cpu"), choices=PROFILES)
    parser.add_argument("--only", default="", help="comma-separated notebook prefixes, e.g. 01,03")
    parser.add_argument("--update-notebooks", action="store_true",
                        help="copy the executed notebooks back over notebooks/ (commit the cpu run)")
    parser.add_argument("--kernel", default="python3")
    args = parser.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()] or None
    run(args.profile, only=only, update_notebooks=args.update_notebooks, kernel=args.kernel)


if __name__ == "__main__":
    main()
