"""The Python versions the course supports (README: 3.10 to 3.13) can read every module of it.

The suite runs on one Python (.venv's). A whole second environment per version would need a PyTorch for each, so
here every other supported Python that this machine has compiles every module of ``course/``, ``autograder/`` and
``kernels/`` (syntax newer than it is refused) and finds every standard-library module they import (``tomllib`` is
3.11's, for one). Run in each interpreter without writing bytecode.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))

_CHECK = """import importlib.util, json, sys
files, stdlib = json.loads(sys.stdin.read())
problems = []
for path in files:
    try:
        compile(open(path, encoding="utf-8").read(), path, "exec", dont_inherit=True)
    except SyntaxError as e:
        problems.append(f"{path}:{e.lineno}: {e.msg}")
problems += [f"no module {name!r} in the standard library" for name in stdlib if importlib.util.find_spec(name) is None]
print(json.dumps(problems))
"""


def _interpreter(version: tuple[int, int]) -> str | None:
    """A Python of ``version`` on this machine (on PATH, or one of pyenv's), or None."""
    name = f"python{version[0]}.{version[1]}"
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for candidate in [shutil.which(name), *sorted(glob.glob(os.path.join(root, "versions", f"{version[0]}.{version[1]}.*",
                                                                           "bin", name)))]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True, timeout=60).returncode == 0:
            return candidate
    return None


def _sources() -> list[Path]:
    return sorted(p for folder in ("course", "autograder", "kernels") for p in (REPO / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _catches_a_missing_module(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(t is None or (isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError")) for t in caught)


def _guarded(tree: ast.AST) -> set[int]:
    """Nodes inside ``try:`` blocks that catch ImportError or ModuleNotFoundError: an import there may fail on an older
    Python (``tomllib`` before 3.11), and the module says what it does instead."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_a_missing_module(h) for h in node.handlers):
            inside.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return inside


def _stdlib_imports(files: list[Path]) -> list[str]:
    """Top-level standard-library modules imported anywhere in ``files`` (as this Python names its library), except
    where an import is guarded against a missing module."""
    names = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(n for n in names if n in sys.stdlib_module_names and not n.startswith("_"))


@pytest.mark.parametrize("version", [v for v in SUPPORTED if v != sys.version_info[:2]],
                         ids=lambda v: f"python{v[0]}.{v[1]}")
def test_every_module_reads_under_each_supported_python(version):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine")
    files = _sources()
    payload = json.dumps([[str(p) for p in files], _stdlib_imports(files)])
    out = subprocess.run([python, "-B", "-I", "-c", _CHECK], input=payload, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == []


def test_the_check_sees_newer_syntax_and_a_missing_module(tmp_path):
    """The check above can fail: a 3.12 type statement, and a module no Python has."""
    python = _interpreter((3, 10)) or _interpreter((3, 11))
    if python is None:
        pytest.skip("no Python 3.10 or 3.11 on this machine")
    newer = tmp_path / "newer.py"
    newer.write_text("type Pair = tuple[int, int]\n")
    payload = json.dumps([[str(newer)], ["no_such_module_anywhere"]])
    out = subprocess.run([python, "-B", "-I", "-c", _CHECK], input=payload, capture_output=True, text=True, timeout=300)
    problems = json.loads(out.stdout)
    assert len(problems) == 2 and problems[0].startswith(f"{newer}:1:"), problems
    assert problems[1] == "no module 'no_such_module_anywhere' in the standard library"


def test_only_an_unguarded_import_is_asked_of_every_python(tmp_path):
    """``import tomllib`` alone must exist in every supported Python; inside ``try: ... except ModuleNotFoundError``
    the module has a way without it, and the import is not asked for."""
    plain, guarded = tmp_path / "plain.py", tmp_path / "guarded.py"
    plain.write_text("import tomllib\n")
    guarded.write_text("try:\n    import tomllib\nexcept ModuleNotFoundError:\n    tomllib = None\n")
    assert "tomllib" in _stdlib_imports([plain]) and "tomllib" not in _stdlib_imports([guarded])
