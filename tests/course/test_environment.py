"""environment.yml (conda users) and pyproject.toml (pip users) describe the same dependencies."""
from __future__ import annotations

import tomllib

import yaml


def _normalise(spec: str) -> str:
    return spec.replace(" ", "").lower()


def test_environment_yml_matches_pyproject(repo):
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    wanted = {_normalise(s) for s in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((repo / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {_normalise(s) for s in pip_section if not s.startswith("-e")}
    assert listed == wanted, f"only in pyproject: {wanted - listed}; only in environment.yml: {listed - wanted}"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.replace("python", "") == project["requires-python"]
