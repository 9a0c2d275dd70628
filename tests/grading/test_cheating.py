"""The cheating corpus (autograder/corpora/cheating) graded beside an honest submission.

Each entry must earn exactly its known grade, with the reason on its feedback page; the honest one
keeps full marks; and every entry's trick must really have worked on the notebook's own run where
the entry says the re-check caught it (so the corpus cannot go stale into tricks that fool nothing).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder.corpora.cheating import ASSIGNMENT, as_submission, corpus, stale_outputs
from autograder.corpora.hostile import make_submission


def _text(page: Path) -> str:
    import html
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))

def test_every_entry_applies_and_is_named_once(repo: Path) -> None:
    entries = corpus(repo)
    assert len({e.name for e in entries}) == len(entries)
    source = repo / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    for entry in entries:
        make_submission(source, as_submission(entry, repo))

@pytest.mark.slow
def test_cheating_batch_earns_exactly_what_it_solved(repo: Path, tmp_path: Path) -> None:
    from autograder.grade.pipeline import grade_submissions

    source = repo / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    submissions = tmp_path / "submissions"
    (submissions / "honest").mkdir(parents=True)
    shutil.copyfile(source, submissions / "honest" / source.name)
    entries = {e.name: e for e in corpus(repo)}
    for entry in entries.values():
        notebook = make_submission(source, as_submission(entry, repo))
        if entry.stale_outputs:
            stale_outputs(notebook, repo)
        (submissions / entry.name).mkdir()
        nbformat.write(notebook, submissions / entry.name / source.name)

    results = {r.student_id: r for r in grade_submissions(submissions, ASSIGNMENT, tmp_path / "work", jobs=2,
                                                          timeout=120)}
    honest = results["honest"]
    problems = [] if honest.score == honest.max_score and not honest.recheck else \
        [f"honest: {honest.score}/{honest.max_score}, re-check notes {honest.recheck}"]
    for name, entry in entries.items():
        result = results[name]
        expected = {cell: 0.0 if cell in entry.loses else points for cell, points in honest.cells.items()}
        if result.cells != expected:
            problems.append(f"{name}: earned {result.cells}, expected {expected} ({result.status})")
        page = result.feedback_html
        if page is None or not re.search(entry.feedback, _text(page)):
            problems.append(f"{name}: its feedback page does not say {entry.feedback!r}")
        if "re-checked" in entry.feedback and not result.recheck:
            problems.append(f"{name}: the notebook's own run already failed it, so the trick fooled nothing")
    assert not problems, "\n".join(problems)
