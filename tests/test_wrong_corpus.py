"""Every wrong solution in autograder/wrong loses points on its exercise when graded by nbgrader.

One honest submission is graded in the same batch and must get full marks, which also proves that
each wrong entry loses points because of its mistake, not because of the way submissions are built.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.wrong import corpus, exercise_of, make_submission

ASSIGNMENTS = ["00_orientation", "01_naive_attention", "02_online_softmax"]


def test_corpus_covers_every_exercise_with_three_mistakes(repo):
    for assignment in ASSIGNMENTS:
        nb = nbformat.read(repo / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
        exercises = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                     if c.metadata.get("nbgrader", {}).get("solution")}
        counts = {e: sum(1 for w in corpus(assignment) if w.cell == e) for e in exercises}
        assert all(n >= 3 for n in counts.values()), counts


def test_every_entry_applies_to_the_current_solution(repo):
    for wrong in corpus():
        nb = make_submission(repo / "solutions" / wrong.assignment / f"{wrong.assignment}.ipynb", wrong)
        assert nb.cells, wrong.student_id
    assert len({w.student_id for w in corpus()}) == len(corpus()), "student ids must be unique"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_grader_takes_points_from_every_wrong_solution(repo, tmp_path, assignment):
    from autograder.grade import grade_submissions

    solution = repo / "solutions" / assignment / f"{assignment}.ipynb"
    submissions = tmp_path / "submissions"
    entries = corpus(assignment)
    for wrong in entries:
        folder = submissions / wrong.student_id
        folder.mkdir(parents=True)
        nbformat.write(make_submission(solution, wrong), folder / f"{assignment}.ipynb")
    (submissions / "honest").mkdir()
    nbformat.write(nbformat.read(solution, as_version=4), submissions / "honest" / f"{assignment}.ipynb")

    results = {r.student_id: r for r in grade_submissions(submissions, assignment, tmp_path / "work", jobs=2)}
    honest = results["honest"]
    assert honest.score == honest.max_score > 0, honest

    survivors = []
    for wrong in entries:
        result = results[wrong.student_id]
        own = {cell: pts for cell, pts in result.cells.items() if exercise_of(cell) == wrong.cell}
        others = {cell: pts for cell, pts in result.cells.items() if exercise_of(cell) != wrong.cell}
        assert own, f"no test cell belongs to {wrong.cell}"
        if sum(own.values()) >= sum(honest.cells[c] for c in own):
            survivors.append(f"{wrong.student_id} ({wrong.mistake}) kept {own}")
        # A mistake in one exercise must not cost points elsewhere.
        assert others == {c: honest.cells[c] for c in others}, (wrong.student_id, others)
    assert not survivors, "wrong solutions that kept their points:\n" + "\n".join(survivors)
