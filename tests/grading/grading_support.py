"""Helpers the grading tests share: writing submissions, reading feedback, a lesson's two notebooks."""
from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests

from autograder import NOTEBOOKS_DIR, SOLUTIONS_DIR
from autograder.grade.pipeline import StudentResult
from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions


def put(path: Path, nb: nbformat.NotebookNode | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb))
    return path


def feedback_text(result: StudentResult) -> str:
    """The feedback page as a reader sees it: tags and syntax-highlighting spans removed."""
    assert result.feedback_html is not None and result.feedback_html.exists()
    return html.unescape(re.sub(r"<[^>]+>", "", result.feedback_html.read_text()))


def by_student(results: list[StudentResult]) -> dict[str, StudentResult]:
    return {r.student_id: r for r in results}


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What ``generate_assignment`` hands out: stubs instead of solutions, no hidden tests."""
    out, resources = LanguageAwareClearSolutions().preprocess(nbformat.reads(nbformat.writes(nb), as_version=4), {})
    out, _ = ClearHiddenTests().preprocess(out, resources)
    return out


def lesson_notebooks(assignment: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    """(instructor notebook, student notebook) for a lesson; the committed student copy when there is one."""
    source = nbformat.read(SOLUTIONS_DIR / assignment / f"{assignment}.ipynb", as_version=4)
    committed = NOTEBOOKS_DIR / assignment / f"{assignment}.ipynb"
    student = nbformat.read(committed, as_version=4) if committed.exists() else student_version(source)
    return source, student


def hidden_lines(nb: nbformat.NotebookNode) -> list[str]:
    lines, inside = [], False
    for c in nb.cells:
        for line in c.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    return lines
