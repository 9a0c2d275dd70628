"""Modules a reader can hold in mind and find by name: no module of ``course/`` or ``autograder/`` is over 700 lines,
and no two modules there share a file name (``__init__.py`` and ``__main__.py`` aside), except those the README lists
with the reason, under "## Long modules and shared file names". An entry there that no longer applies fails too, so
the list says what is true."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("course", "autograder")
MAX_LINES = 700
_PACKAGE_FILES = ("__init__.py", "__main__.py")
_LESSON_MODULE = re.compile(r"lesson\d\d\.py")


def listed(readme: str) -> tuple[dict[str, str], dict[str, str]]:
    """(long modules, shared file names) the README's section lists, each with its reason: a first column holding a
    path is a long module, one holding a bare file name a shared name."""
    section = readme.split("## Long modules and shared file names", 1)[1].split("\n## ", 1)[0]
    long, shared = {}, {}
    for name, why in re.findall(r"^\| `([^`]+)` \| (.*?) \|$", section, re.M):
        (long if "/" in name else shared)[name] = why.strip()
    return long, shared


def modules(root: Path) -> list[Path]:
    return [path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))]


def long_modules(root: Path) -> dict[str, int]:
    """Repository-relative path -> lines, for every module over MAX_LINES."""
    found = {}
    for path in modules(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found[path.relative_to(root).as_posix()] = lines
    return found


def shared_names(root: Path) -> dict[str, list[str]]:
    """File name -> the modules that have it, for every name two or more modules share (``lesson01.py`` and its kind
    under one name, ``lessonNN.py``)."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in modules(root):
        if path.name not in _PACKAGE_FILES:
            name = "lessonNN.py" if _LESSON_MODULE.fullmatch(path.name) else path.name
            by_name[name].append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in by_name.items() if len(set(Path(p).name for p in paths)) < len(paths)}


def problems(root: Path, readme: str) -> list[str]:
    """Every long module and shared name the README does not list, and every entry it lists that no longer applies."""
    long, shared = listed(readme)
    found_long, found_shared = long_modules(root), shared_names(root)
    out = [f"{path} has {lines} lines (at most {MAX_LINES}): split it, or list it in the README with the reason"
           for path, lines in found_long.items() if path not in long]
    out += [f"{', '.join(paths)} share the name {name}: rename one for what it holds, or list the name in the README "
            f"with the reason" for name, paths in found_shared.items() if name not in shared]
    out += [f"the README lists {path} as over {MAX_LINES} lines; it is not (any more): remove its entry"
            for path in long if path not in found_long]
    out += [f"the README lists {name} as a shared file name; no two modules share it (any more): remove its entry"
            for name in shared if name not in found_shared]
    out += [f"the README lists {name} without a reason" for name, why in {**long, **shared}.items() if not why]
    return out


def test_no_module_is_long_and_no_two_share_a_name_but_those_the_readme_explains():
    assert problems(REPO, (REPO / "README.md").read_text(encoding="utf-8")) == []


_README = """## Long modules and shared file names

| module over 700 lines | why it is long |
|---|---|
| `course/tools/big.py` | a table of data |

| shared file name | why the modules share it |
|---|---|
| `cuda.py` | a track and its wrong kernels |

## Layout
| `course/` | what a notebook imports |
"""


def _tree(tmp_path: Path, files: dict[str, int]) -> Path:
    for relative, lines in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines)
    return tmp_path


def test_the_check_sees_a_long_module_and_a_shared_name_the_readme_does_not_explain(tmp_path):
    root = _tree(tmp_path, {"course/tools/big.py": 900, "course/tracks/cuda.py": 10,
                            "autograder/corpora/wrong/cuda.py": 10, "course/grading/grown.py": 701,
                            "course/simt/errors.py": 5, "course/errors.py": 5, "course/lessons/lesson01.py": 5,
                            "autograder/corpora/wrong/lesson01.py": 5, "course/grading/__init__.py": 5,
                            "course/simt/__init__.py": 5, "course/grading/exactly.py": MAX_LINES})
    assert problems(root, _README) == [
        f"course/grading/grown.py has 701 lines (at most {MAX_LINES}): split it, or list it in the README with the "
        "reason",
        "course/errors.py, course/simt/errors.py share the name errors.py: rename one for what it holds, or list the "
        "name in the README with the reason",
        "course/lessons/lesson01.py, autograder/corpora/wrong/lesson01.py share the name lessonNN.py: rename one for "
        "what it holds, or list the name in the README with the reason",
    ]


def test_an_entry_that_no_longer_applies_is_named(tmp_path):
    root = _tree(tmp_path, {"course/tools/big.py": 300, "course/tracks/cuda.py": 10})
    assert problems(root, _README) == [
        f"the README lists course/tools/big.py as over {MAX_LINES} lines; it is not (any more): remove its entry",
        "the README lists cuda.py as a shared file name; no two modules share it (any more): remove its entry",
    ]


def test_the_readme_rows_are_read_as_long_modules_and_shared_names():
    long, shared = listed(_README)
    assert long == {"course/tools/big.py": "a table of data"} and shared == {"cuda.py": "a track and its wrong kernels"}
