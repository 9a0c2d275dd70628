"""Grading one submission in a scratch course directory: data in, data out.

This is the whole grading of a student, wherever it runs: in a thread of ``python -m autograder grade``
or on a Dask worker on another machine (:mod:`autograder.grade.cluster`). It needs no file of the
batch: what it needs arrives as data (:mod:`autograder.grade.bundle`) and what it finds leaves as data.
Its stages are in :mod:`autograder.grade.stages`. The client alone writes the batch's gradebook, files
and CSV (:mod:`autograder.grade.record`).
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from autograder.grade.bundle import PreparedRelease, SubmissionOutcome, SubmissionTask
from autograder.grade.gradebook import read_submission
from autograder.grade.results import StudentResult
from autograder.grade.stages import autograde, import_submission, make_feedback, products, read_scores

__all__ = ["grade_one"]


def grade_one(task: SubmissionTask, release: PreparedRelease, scratch_parent: Path, where: str = "") -> SubmissionOutcome:
    """Grade one submission in a scratch course directory under ``scratch_parent`` (deleted afterwards):
    import it, autograde it (the notebook's run in the sandbox, then the re-check; nbgrader writes each grade
    once), make the feedback page, read the grades, and return everything as data."""
    started = time.monotonic()
    s, student = release.settings, task.student_id
    Path(scratch_parent).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{student[:40]}-", dir=scratch_parent))
    try:
        course = release.instantiate(scratch / "course")
        import_submission(course, task, s)
        graded = autograde(course, s, student, release.forks())
        result = StudentResult(student, 0.0, sum(t.points for t in release.tests), graded.status, tier=graded.tier,
                               crashes=graded.crashes)
        gradebook, messages = None, []
        if graded.graded:
            problem = make_feedback(course, s, student)
            messages += [problem] if problem else []
            if task.note:
                result.status += f"; {task.note}"
            result.recheck, result.recheck_seconds = graded.recheck_changes, graded.recheck_seconds
            result.not_rechecked = graded.not_rechecked
            scores = read_scores(course, s, student, {t.grade_id for t in release.tests})
            if scores is None:
                result.status = "failed: nbgrader recorded no grades for this submission"
            else:
                result.score, result.cells = scores
                gradebook = read_submission(course.db_url, s.assignment, student)
        result.wall_seconds = time.monotonic() - started
        return SubmissionOutcome(student, task.digest, result.as_data(), gradebook, products(course, s, student),
                                 messages, where)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
