"""Small nbgrader notebooks built in code, for tests that need a fixture assignment."""
from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def cell(source: str, kind: str = "code", **nbgrader) -> nbformat.NotebookNode:
    """A code or markdown cell; keyword arguments become its nbgrader metadata."""
    made = new_code_cell(source) if kind == "code" else new_markdown_cell(source)
    if nbgrader:
        made.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False, **nbgrader}
    return made


def notebook(cells: list) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for index, c in enumerate(nb.cells):
        c.id = f"cell-{index}"  # fixed ids: a release must be byte-for-byte reproducible
    return nb
