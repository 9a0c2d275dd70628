"""Imports that the grader's processes never use, left out before anything pulls them in.

Importing nbformat (every nbgrader command does) imports jsonschema, and jsonschema, when the optional
package ``rfc3987_syntax`` is installed (Jupyter's ``format-nongpl`` extra brings it), builds that
package's IRI grammars with Lark while it is imported: more than a second of CPU, over half of an
nbgrader command's start-up, paid again by every graded student. Neither nbgrader nor nbformat checks
an IRI, so the grader's own processes (``python -m autograder``, the nbgrader commands it starts, a
cluster worker's grading) go without it: jsonschema then has no checker for the ``iri`` formats, as on
a machine without that package. Call :func:`skip_unused_imports` first thing in such a process.
"""
from __future__ import annotations

import sys

__all__ = ["UNUSED", "skip_unused_imports"]

UNUSED = ("rfc3987_syntax",)


def skip_unused_imports() -> None:
    """Make the imports in ``UNUSED`` fail at once (as if not installed), unless one was imported already."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  (None in sys.modules: ImportError)
