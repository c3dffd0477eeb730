"""The Papermill runner: progress, manifest, and a clear failure naming notebook and cell."""

import ast
import json
import os
from pathlib import Path

import nbformat
import pytest

from sinkflex_lib import reproduce


def write_notebook(path, body):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('import os\nPROFILE = os.environ.get("SINKFLEX_PROFILE", "cpu")\nN = 3')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_runs_notebooks_and_writes_a_manifest(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "print(PROFILE, N * 2)")
    write_notebook(nbs / "02_b.ipynb", "assert PROFILE == 'smoke'")
    path = reproduce.run("smoke", notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    manifest = json.loads(path.read_text())
    assert [e["notebook"] for e in manifest["notebooks"]] == ["01_a.ipynb", "02_b.ipynb"]
    assert all(e["status"] == "ok" for e in manifest["notebooks"])
    assert manifest["notebooks"][0]["parameters"] == {"PROFILE": "smoke", "N": 3}
    assert manifest["packages"]["torch"].startswith("2.13")
    assert "commit" in manifest["git"] and "cpu" in manifest["device"]
    executed = nbformat.read(tmp_path / "runs" / "smoke" / "01_a.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "smoke 6\n"
    assert "[2/2] 02_b.ipynb" in capsys.readouterr().out


def test_a_notebook_sees_the_git_state_of_the_run_not_its_outputs(tmp_path, monkeypatch):
    """git_commit() inside a run's notebook is the state when the run began (the run's own outputs
    dirty the tree as it goes); outside a run it asks git again."""
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "from sinkflex_lib.reproduce import git_commit\nprint(git_commit())")
    monkeypatch.setattr(reproduce, "git_commit", lambda: {"commit": "abc123", "dirty": False})
    monkeypatch.delenv(reproduce.RUN_GIT_ENV, raising=False)
    reproduce.run("smoke", notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    executed = nbformat.read(tmp_path / "runs" / "smoke" / "01_a.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "{'commit': 'abc123', 'dirty': False}\n"
    assert reproduce.RUN_GIT_ENV not in os.environ


def test_partial_run_keeps_the_other_notebooks_entries(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "print(N)")
    write_notebook(nbs / "02_b.ipynb", "print(N + 1)")
    reproduce.run("smoke", notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    first = json.loads((tmp_path / "runs" / "smoke" / "manifest.json").read_text())
    path = reproduce.run("smoke", only=["02"], notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    entries = {e["notebook"]: e for e in json.loads(path.read_text())["notebooks"]}
    assert list(entries) == ["01_a.ipynb", "02_b.ipynb"]
    assert entries["01_a.ipynb"]["from_earlier_run"] is True
    assert entries["01_a.ipynb"]["wall_seconds"] == first["notebooks"][0]["wall_seconds"]
    assert "from_earlier_run" not in entries["02_b.ipynb"] and "commit" in entries["02_b.ipynb"]["git"]
    assert entries["01_a.ipynb"]["device"] == first["device"] == entries["02_b.ipynb"]["device"]


def test_an_old_entry_without_a_device_is_not_given_another_runs(tmp_path):
    old = {"git": {"commit": "abc", "dirty": False}, "device": {"cpu": "the last run's"},
           "notebooks": [{"notebook": "01_a.ipynb", "status": "ok"}, {"notebook": "02_b.ipynb", "status": "ok",
                                                                      "device": {"cpu": "its own"}}]}
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    kept = reproduce.previous_entries(tmp_path / "manifest.json", [Path("03_c.ipynb")])
    assert [e["device"] for e in kept] == [None, {"cpu": "its own"}]
    assert all(e["from_earlier_run"] and e["git"]["commit"] == "abc" for e in kept)


def test_the_committed_cpu_run_is_one_clean_run_of_every_notebook():
    """The committed notebooks are the executed copies of one `reproduce --profile cpu` run on a
    clean tree at one commit (not a patchwork of partial runs)."""
    runs = reproduce.RUNS_DIR / "cpu"
    manifest = json.loads((runs / "manifest.json").read_text())
    names = [e["notebook"] for e in manifest["notebooks"]]
    assert names == sorted(nb.name for nb in reproduce.find_notebooks(None, reproduce.NOTEBOOKS_DIR))
    assert manifest["git"]["commit"] and manifest["git"]["dirty"] is False
    for e in manifest["notebooks"]:
        assert e["status"] == "ok" and "from_earlier_run" not in e, e["notebook"]
        assert e["git"] == manifest["git"] and e["device"] == manifest["device"], e["notebook"]
        committed = (reproduce.NOTEBOOKS_DIR / e["notebook"]).read_bytes()
        assert committed == (runs / e["notebook"]).read_bytes(), f"{e['notebook']} differs from the run's copy"


def test_failure_names_notebook_and_cell_and_exits_nonzero(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_bad.ipynb", "raise RuntimeError('boom')")
    with pytest.raises(SystemExit) as exc:
        reproduce.run("smoke", notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "FAILED 01_bad.ipynb, cell 1" in err and "RuntimeError: boom" in err
    manifest = json.loads((tmp_path / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["notebooks"][0]["status"] == "failed"


def test_a_failed_notebook_does_not_stop_the_others_nor_replace_its_committed_copy(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_bad.ipynb", "raise RuntimeError('boom')")
    write_notebook(nbs / "02_good.ipynb", "print('ran')")
    committed = {p.name: p.read_bytes() for p in nbs.iterdir()}
    with pytest.raises(SystemExit) as exc:
        reproduce.run("smoke", update_notebooks=True, notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    assert exc.value.code == 1
    assert "1 of 2 notebooks failed (01_bad.ipynb)" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "runs" / "smoke" / "manifest.json").read_text())
    assert [(e["notebook"], e["status"]) for e in manifest["notebooks"]] == [("01_bad.ipynb", "failed"),
                                                                               ("02_good.ipynb", "ok")]
    assert (nbs / "01_bad.ipynb").read_bytes() == committed["01_bad.ipynb"]
    good = nbformat.read(nbs / "02_good.ipynb", as_version=4)
    assert good.cells[1].outputs[0]["text"] == "ran\n"
    assert (nbs / "02_good.ipynb").read_bytes() == (tmp_path / "runs" / "smoke" / "02_good.ipynb").read_bytes()


def test_bad_profile_and_unknown_notebook_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="--profile: PROFILE must be one of"):
        reproduce.run("laptop", notebooks_dir=tmp_path)
    with pytest.raises(SystemExit, match="--only"):
        reproduce.find_notebooks(["99"], notebooks_dir=tmp_path)


def test_kernels_talk_over_unix_sockets_not_tcp(tmp_path, capfd):
    """ipykernel warns on every kernel started over unencrypted loopback TCP; ours use IPC."""
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "import os\nprint(os.getpid())")
    manager = reproduce.ipc_kernel_manager(tmp_path)(kernel_name="python3")
    assert manager.transport == "ipc" and manager.ip == str(tmp_path.resolve() / "kernel")
    reproduce.run("smoke", notebooks_dir=nbs, runs_dir=tmp_path / "runs")
    assert "without encryption" not in capfd.readouterr().err


@pytest.mark.parametrize("nb", reproduce.find_notebooks(), ids=lambda p: p.name)
def test_papermill_p_profile_reaches_every_size(nb, monkeypatch):
    """`papermill -p PROFILE smoke` injects its cell after the parameters cell: what the profile
    picks must come after it (the `sizes` cell), so the run gets the smoke sizes even where the
    environment says cpu, and its figures go to figures/smoke, not over the committed cpu ones.
    Emulated here: parameters (cpu), the injected PROFILE, then the sizes."""
    from sinkflex_lib.plotting import figures_dir
    from sinkflex_lib.paths import FIGURES_DIR

    cells = json.loads(nb.read_text())["cells"]
    source = lambda tag: "\n".join("".join(c["source"]) for c in cells if tag in c["metadata"].get("tags", []))  # noqa: E731
    monkeypatch.setenv("SINKFLEX_PROFILE", "cpu")
    monkeypatch.delenv("SINKFLEX_FIGURES_DIR", raising=False)
    ns: dict = {}
    exec(source("parameters"), ns)
    exec("PROFILE = 'smoke'", ns)
    exec(source("sizes"), ns)
    want = reproduce.notebook_parameters(nb, "smoke")
    assert {k: ns[k] for k in want} == want
    assert figures_dir() == FIGURES_DIR / "smoke"
    ns["PROFILE"] = "laptop"
    with pytest.raises(ValueError, match="PROFILE must be one of"):
        exec(source("sizes"), ns)


def _sizes_names(nb) -> list[str]:
    cells = json.loads(nb.read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if "sizes" in c["metadata"].get("tags", []))
    return [n.targets[0].id for n in ast.parse(source).body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "by_profile"]


@pytest.mark.parametrize("nb", reproduce.find_notebooks(), ids=lambda p: p.name)
def test_papermill_p_of_a_size_takes_effect(nb, monkeypatch):
    """`papermill -p NAME value` for a size: the sizes cell keeps the passed value instead of
    silently replacing it with the profile's (every size is a None in the parameters cell)."""
    cells = json.loads(nb.read_text())["cells"]
    source = lambda tag: "\n".join("".join(c["source"]) for c in cells if tag in c["metadata"].get("tags", []))  # noqa: E731
    names = _sizes_names(nb)
    assert names and "[PROFILE]" not in source("sizes")     # every pick goes through by_profile
    monkeypatch.setenv("SINKFLEX_PROFILE", "smoke")
    defaults: dict = {}
    exec(source("parameters"), defaults)
    assert all(defaults[n] is None for n in names), names
    ns: dict = {}
    exec(source("parameters"), ns)
    injected = {n: ("passed", i) for i, n in enumerate(names)}
    ns.update(injected)
    exec(source("sizes"), ns)
    assert {n: ns[n] for n in names} == injected


def test_use_profile_sets_the_run_profile_and_refuses_an_unknown_one(monkeypatch):
    monkeypatch.setenv("SINKFLEX_PROFILE", "cpu")
    assert reproduce.use_profile("smoke") == "smoke" and os.environ["SINKFLEX_PROFILE"] == "smoke"
    with pytest.raises(ValueError, match="PROFILE must be one of"):
        reproduce.use_profile("laptop")
    assert os.environ["SINKFLEX_PROFILE"] == "smoke"


def test_by_profile_takes_a_passed_value_else_the_profiles_and_refuses_gaps():
    choices = {"smoke": 1, "cpu": 2, "gpu": 3}
    assert reproduce.by_profile(None, choices, "cpu") == 2 and reproduce.by_profile(0, choices, "cpu") == 0
    with pytest.raises(ValueError, match="every profile"):
        reproduce.by_profile(None, {"smoke": 1, "cpu": 2}, "cpu")
    with pytest.raises(ValueError, match="PROFILE"):
        reproduce.by_profile(None, choices, "laptop")
