"""Grading throughput's batch: synthetic submissions of known kinds, and every grade accounted for.

``python -m autograder.bench`` grades such a batch on this machine (``--jobs``) or on clusters
(``--cluster``). The submissions cycle through known kinds: the full solution, the untouched student
notebook, and every entry of the wrong-solution corpus. A run counts only when no grade was lost or
duplicated: the CSV and the gradebook both hold exactly one graded row per student, and every copy of one
kind got the same points in every test cell.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import nbformat

from autograder import NOTEBOOKS_DIR, SOLUTIONS_DIR
from autograder.corpora.wrong import corpus, make_submission

__all__ = ["make_submissions", "gradebook_rows", "verify"]


def make_submissions(assignment: str, count: int, folder: Path) -> dict[str, str]:
    """Write ``count`` student folders; returns student id -> kind of submission."""
    notebook = f"{assignment}.ipynb"
    kinds: list[tuple[str, nbformat.NotebookNode]] = [
        ("solution", nbformat.read(SOLUTIONS_DIR / assignment / notebook, as_version=4)),
        ("untouched", nbformat.read(NOTEBOOKS_DIR / assignment / notebook, as_version=4)),
    ]
    kinds += [(f"wrong:{w.student_id}", make_submission(SOLUTIONS_DIR / assignment / notebook, w))
              for w in corpus(assignment)]
    students = {}
    for i in range(count):
        kind, nb = kinds[i % len(kinds)]
        student = f"s{i:04d}"
        (folder / student).mkdir(parents=True)
        nbformat.write(nb, folder / student / notebook)
        students[student] = kind
    return students


def gradebook_rows(workdir: Path, assignment: str) -> list[str]:
    from nbgrader.api import Gradebook

    from autograder.nbgrader_config import COURSE_ID
    db = workdir / "nbgrader" / "gradebook.db"
    with Gradebook(f"sqlite:///{db}", COURSE_ID) as gb:
        return [s.student.id for s in gb.assignment_submissions(assignment)]


def verify(results, students: dict[str, str], gradebook: list[str]) -> list[str]:
    """Every way a grade could have been lost or duplicated, as sentences (empty when all is well)."""
    problems = []
    ids = [r.student_id for r in results]
    if sorted(ids) != sorted(students):
        problems.append(f"CSV has {len(ids)} rows for {len(students)} students")
    if len(gradebook) != len(set(gradebook)) or sorted(gradebook) != sorted(students):
        problems.append(f"gradebook has {len(gradebook)} submissions ({len(set(gradebook))} distinct) "
                        f"for {len(students)} students")
    problems += [f"{r.student_id}: {r.status}" for r in results if not r.status.startswith("graded")]
    by_kind: dict[str, set] = defaultdict(set)
    for r in results:
        by_kind[students[r.student_id]].add(tuple(sorted(r.cells.items())))
    problems += [f"copies of {kind} got different grades: {grades}" for kind, grades in by_kind.items() if len(grades) > 1]
    solution = [r for r in results if students[r.student_id] == "solution"]
    problems += [f"{r.student_id} (the solution) scored {r.score}/{r.max_score}" for r in solution if r.score != r.max_score]
    return problems
