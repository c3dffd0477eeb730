"""environment.yml and pyproject.toml pin the same packages at the same versions."""

import tomllib

import yaml

from tests.conftest import REPO_ROOT


def pins(lines):
    out = {}
    for line in lines:
        name, sep, version = line.partition("==")
        assert sep, f"unpinned requirement {line!r}"
        out[name.strip().lower()] = version.strip()
    return out


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    want = pins(project["dependencies"] + project["optional-dependencies"]["dev"])
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    assert "python=3.11" in env["dependencies"]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = pins([p for p in pip_section if p != "-e ."])
    assert got == want
    assert "-e ." in pip_section
