"""Autograding a notebook again leaves no grade from an earlier run behind.

nbgrader's ``--force`` rewrites the automatic scores but keeps every manual score, extra credit and
comment ("graders can override the autograder", as ``SaveAutoGrades`` puts it), and a run that fails
keeps the previous scores entirely. A manual score is also exactly what an unsandboxed submission
forges in the gradebook. This preprocessor runs first in the sanitize pass and clears them all, so
the gradebook shows only what the latest run found.
"""
from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["ForgetEarlierGrades"]


class ForgetEarlierGrades(NbGraderPreprocessor):
    """Reset every score and comment of this student's notebook before it is graded again."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            try:
                notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
            except MissingEntry:
                return nb, resources  # graded for the first time
            for grade in notebook.grades:
                grade.auto_score = grade.manual_score = grade.extra_credit = None
                grade.needs_manual_grade = True  # what nbgrader records until the new run scores it
            for comment in notebook.comments:
                comment.auto_comment = comment.manual_comment = None
            notebook.flagged = False
            gb.db.commit()
        return nb, resources
