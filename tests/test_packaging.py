"""`pip install .` (not editable) gives a working library: its data travels with it."""

import json
import os
import subprocess
import sys
import tomllib

from tests.conftest import REPO_ROOT


def test_pyproject_lists_every_package():
    listed = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "sinkflex_lib").rglob("__init__.py")}
    assert listed == found | {"sinkflex_lib.data"}


PROBE = """
import json, sys
import sinkflex_lib, sinkflex_lib.paths as paths
from sinkflex_lib.envs import RetailEnv
from sinkflex_lib.rl.policy import build_policy
from sinkflex_lib.rl.evaluate import main
env = RetailEnv("mini")
obs, info = env.reset(seed=0, options={"task_id": "cancel_000"})
policy = build_policy("tiny")
base = build_policy("base-tiny")
print(json.dumps({"package": sinkflex_lib.__file__, "data": str(paths.DATA_DIR), "obs": obs[:20],
                  "vocab": len(policy.tokenizer), "base": base.name}))
sys.stdout.flush()
main(["--policy", "micro", "--world-seed", "3", "--tasks", "2", "--max-turns", "2", "--json"])
"""


def test_non_editable_install_runs_from_another_folder(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-compile", "--target", str(target), str(REPO_ROOT)], check=True, capture_output=True)
    assert (target / "sinkflex_lib" / "data" / "tokenizer" / "tokenizer.json").is_file()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    env.pop("SINKFLEX_DATA_DIR", None)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    first, result = out.stdout.splitlines()[0], json.loads(out.stdout.splitlines()[-1])
    probe = json.loads(first)
    assert probe["package"].startswith(str(target)) and probe["data"].startswith(str(target))
    assert probe["obs"].startswith("user: ") and probe["vocab"] > 1000
    assert probe["base"].startswith(str(target))
    assert result["n_tasks"] == 2 and 0.0 <= result["mean_at_1"] <= 1.0


def test_data_dir_setting_overrides_both_locations(tmp_path):
    code = "import sinkflex_lib.paths as p; print(p.DATA_DIR, p.TOKENIZER_DIR, p.CHECKPOINTS_DIR, sep='|')"
    env = {**os.environ, "SINKFLEX_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().split("|") == [str(tmp_path), str(tmp_path / "tokenizer"), str(tmp_path / "checkpoints")]
    env.pop("SINKFLEX_DATA_DIR")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split("|")[0] == str(REPO_ROOT / "data")     # a source checkout
