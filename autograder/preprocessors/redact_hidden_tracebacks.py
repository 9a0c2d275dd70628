"""Feedback that shows a student their results without showing the hidden tests.

``ClearHiddenTests`` removes the hidden lines from a test cell's source, but the error that a failing
hidden test raised is still in the cell's output, and a traceback quotes the failing line. This
preprocessor cuts such tracebacks down to the error's own message.
"""
from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

__all__ = ["RedactHiddenTracebacks"]


class RedactHiddenTracebacks(NbGraderPreprocessor):
    """Replace the traceback of an error in a test cell with hidden tests by ``ErrorType: message``."""

    begin_test_delimeter = Unicode("BEGIN HIDDEN TESTS", help="The line marking the start of hidden tests").tag(config=True)

    def preprocess_cell(self, cell: NotebookNode, resources: dict[str, Any], cell_index: int
                        ) -> tuple[NotebookNode, dict[str, Any]]:
        if cell.cell_type == "code" and utils.is_grade(cell) and self.begin_test_delimeter in cell.source:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    message = str(output.get("evalue", "")).strip()
                    summary = f"{output.get('ename', 'Error')}: {message}" if message else \
                        f"{output.get('ename', 'Error')} (a test failed)"
                    output["traceback"] = [summary]
        return cell, resources
