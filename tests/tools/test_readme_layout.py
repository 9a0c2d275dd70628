"""The README's layout table and the tree tell the same story: every module of the course package is named in the
row of its folder, and every folder a row names exists."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROWS = ("course", "course/grading", "course/models", "course/lessons", "course/tracks", "course/tools",
                "course/simt", "course/slides", "course/widgets")


def layout_rows(readme: str) -> dict[str, str]:
    """Folder -> its row's text, from the table under "## Layout"."""
    section = readme.split("## Layout", 1)[1]
    return {m.group(1).rstrip("/"): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| (.*)$", section, re.M)}


def unnamed_modules(rows: dict[str, str], root: Path) -> list[str]:
    """Modules of the package folders that their row does not name (``lessonNN.py`` names the lesson modules)."""
    missing = []
    for folder in PACKAGE_ROWS:
        row = rows.get(folder)
        if row is None:
            missing.append(f"{folder}/ has no row")
            continue
        for path in sorted((root / folder).glob("*.py")):
            named = path.name in row or (re.fullmatch(r"lesson\d\d\.py", path.name) and "lessonNN.py" in row)
            if path.name != "__init__.py" and not named and folder not in ("course/widgets",):
                missing.append(f"{folder}/{path.name}")
    return missing


def test_every_course_module_is_named_in_the_readme_layout():
    rows = layout_rows((REPO / "README.md").read_text())
    assert unnamed_modules(rows, REPO) == []


def test_every_folder_the_layout_names_exists():
    rows = layout_rows((REPO / "README.md").read_text())
    made_by_setup = (".venv",)  # the environments scripts/setup.sh makes are not in a clone
    assert [f for f in rows if not f.startswith(made_by_setup) and not (REPO / f).exists()] == []


def test_the_layout_check_sees_a_module_left_out(tmp_path):
    (tmp_path / "course" / "grading").mkdir(parents=True)
    (tmp_path / "course" / "grading" / "comparison.py").write_text("")
    (tmp_path / "course" / "grading" / "newcomer.py").write_text("")
    rows = {folder: "" for folder in PACKAGE_ROWS} | {"course/grading": "comparing (`comparison.py`)"}
    assert unnamed_modules(rows, tmp_path) == ["course/grading/newcomer.py"]
