"""One student's grades in an nbgrader gradebook, as plain data that can travel between machines.

Each submission is graded in a gradebook of its own (a scratch copy, possibly on another machine);
:func:`read_submission` turns what nbgrader and the re-check stored there into data, and
:func:`write_submission` makes the batch's gradebook hold exactly that, replacing whatever it held
for the student before. Writing the same data twice leaves the same gradebook: a student has one
submission row (nbgrader's gradebook allows no more), whose grades and comments are overwritten.
"""
from __future__ import annotations

import warnings

from autograder.coursedir import COURSE_ID

__all__ = ["read_submission", "write_submission", "remove_submission", "submitted_students"]


def read_submission(db_url: str, assignment: str, student: str) -> dict | None:
    """Everything the gradebook holds about one submission (None when it holds none)."""
    from nbgrader.api import Gradebook, MissingEntry  # seconds to import: only once there is something to read

    with Gradebook(db_url, COURSE_ID) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        notebooks = {}
        for notebook in submission.notebooks:
            notebooks[notebook.name] = {
                "flagged": bool(notebook.flagged),
                "late_submission_penalty": notebook.late_submission_penalty,
                "grades": {g.name: [g.auto_score, g.manual_score, g.extra_credit, bool(g.needs_manual_grade)]
                           for g in notebook.grades},
                "comments": {c.name: [c.auto_comment, c.manual_comment] for c in notebook.comments},
            }
        stamp = submission.timestamp
        return {"timestamp": stamp.isoformat() if stamp is not None else None, "notebooks": notebooks}


def write_submission(db_url: str, assignment: str, student: str, data: dict) -> None:
    """Make the gradebook's submission of ``student`` hold ``data`` (from :func:`read_submission`), in one commit."""
    from nbgrader import utils
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    with Gradebook(db_url, COURSE_ID) as gb, warnings.catch_warnings():
        # nbgrader's add_submission makes SQLAlchemy warn about its own cascade; the rows are right.
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(student)
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            submission = gb.add_submission(assignment, student)
        submission.timestamp = utils.parse_utc(data["timestamp"]) if data.get("timestamp") else None
        for notebook in submission.notebooks:
            saved = data["notebooks"].get(notebook.name, {})
            notebook.flagged = bool(saved.get("flagged", False))
            notebook.late_submission_penalty = saved.get("late_submission_penalty")
            grades, comments = saved.get("grades", {}), saved.get("comments", {})
            for grade in notebook.grades:
                grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade = \
                    grades.get(grade.name, [None, None, None, True])
            for comment in notebook.comments:
                comment.auto_comment, comment.manual_comment = comments.get(comment.name, [None, None])
        gb.db.commit()


def remove_submission(db_url: str, assignment: str, student: str) -> None:
    """Drop the student's submission, if the gradebook holds one."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, COURSE_ID) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


def submitted_students(db_url: str, assignment: str) -> list[str]:
    """Student ids with a submission of ``assignment``, one entry per submission row."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, COURSE_ID) as gb:
        return [s.student.id for s in gb.assignment_submissions(assignment)]
