"""The workflow files under .github/ (a macOS runner's): they parse, say that this project's CI does not run them,
and name only tests, Pythons and a PyTorch that exist in the course as it is."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_the_macos_workflow_exists_and_says_it_is_not_run_here():
    assert [p.name for p in WORKFLOWS] == ["macos.yml"]
    text = WORKFLOWS[0].read_text()
    assert text.startswith("# NOT RUN BY THIS PROJECT'S CI.")
    assert "not run by this project's CI" in yaml.safe_load(text)["name"]


def test_workflows_name_what_exists():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    torch_pin = re.search(r'pair="(torch==[\d.]+)"', setup).group(1)
    for path in WORKFLOWS:
        text = path.read_text()
        workflow = yaml.safe_load(text)
        assert workflow["jobs"], path.name
        tests = re.findall(r"\btests/[\w/]+\.py", text)
        assert tests and [t for t in tests if not (REPO / t).is_file()] == [], path.name
        versions = re.findall(r'python-version: "([\d.]+)"', text)
        assert versions and all((3, 10) <= tuple(map(int, v.split("."))) <= (3, 13) for v in versions), versions
        assert set(re.findall(r"torch==[\d.]+", text)) == {torch_pin}, path.name
