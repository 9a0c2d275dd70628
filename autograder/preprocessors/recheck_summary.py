"""Feedback that opens with the tests the re-check failed.

The re-check (:mod:`autograder.preprocessors.recheck_tests`) gives each test cell it failed an error output saying
why, so the feedback page shows the reason in the cell itself. :class:`RecheckSummary` adds a box at the top of the
page listing those cells, from the record the re-check left in the autograded notebook's metadata.
"""
from __future__ import annotations

import html

from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.preprocessors.recheck_tests import RECHECK_RECORD
from autograder.preprocessors.sandboxed_execute import METADATA_KEY

__all__ = ["RecheckSummary"]


class RecheckSummary(NbGraderPreprocessor):
    """Feedback: a box at the top of the page listing the test cells the re-check failed, and why.

    Each such cell says so itself (its output is the re-check's error); the box makes sure a student who
    scrolls to their score first sees every point lost, and why."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        record = nb.metadata.get(METADATA_KEY, {})
        recheck = record.get(RECHECK_RECORD, {}) if isinstance(record, dict) else {}
        changes = [str(line) for line in recheck.get("changes", [])] if isinstance(recheck, dict) else []
        if changes:
            items = "".join(f"<li><pre style='white-space: pre-wrap'>{html.escape(line)}</pre></li>" for line in changes)
            nb.cells.insert(0, new_markdown_cell(
                "<div id='course-recheck' style='border: 2px solid #b00; padding: 0.5em 1em; margin: 1em 0'>"
                "<h2>Checked by the grader</h2><p>Each test was graded in a fresh process that ran only your kernels "
                "and answer cells, with the course's own checks. These tests failed there, and earn no points:</p><ul>" + items + "</ul></div>"))
        return nb, resources
