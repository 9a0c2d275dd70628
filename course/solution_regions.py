"""Solution regions: the one place that knows how a solution is marked and what replaces it.

A kernel file or a solution cell marks what the learner writes with a pair of comment lines:

    # BEGIN SOLUTION                 (// BEGIN SOLUTION in CUDA C and Metal)
    ...
    # END SOLUTION

:func:`clear_solution_regions` replaces every region by a stub, line by line as nbgrader's
``ClearSolutions`` does in a notebook cell (the release's preprocessor calls it for each cell, the
learner's lab for each kernel file, so both are stripped alike). The stub is what the learner sees
(:data:`CODE_STUBS`, ``YOUR CODE HERE``) or, in the grader's sandbox, a line that says the solution was
removed (:func:`grading_stub`). Readers of a solution find its regions with :data:`SOLUTION_REGION`, and
the line of a handed-out Python cell where the learner's code goes with :data:`PYTHON_STUB_LINE`. This module
imports nothing of the course, so every layer, and the autograder, can use it.
"""
from __future__ import annotations

import re

__all__ = ["BEGIN_SOLUTION", "END_SOLUTION", "BEGIN_HIDDEN_TESTS", "END_HIDDEN_TESTS", "LEAK_MARKERS",
           "MARKER_LINE", "SOLUTION_REGION", "PYTHON_STUB_LINE", "CODE_STUBS", "EXTENSION_LANGUAGES", "REMOVED_FOR_GRADING", "SolutionRegionError",
           "file_language", "grading_stub", "has_solution_region", "clear_solution_regions"]

BEGIN_SOLUTION = "BEGIN SOLUTION"
END_SOLUTION = "END SOLUTION"
BEGIN_HIDDEN_TESTS = "BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS = "END HIDDEN TESTS"
# Text that must never reach a learner: a solution or a hidden test left in a released file.
LEAK_MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)
# A comment line that is a marker (a named region's, a solution's or a hidden test's), not code.
MARKER_LINE = re.compile(r"^\s*(?:#|//)\s*(?:region:|endregion:|BEGIN SOLUTION|END SOLUTION|BEGIN HIDDEN|END HIDDEN)")

# A whole region, marker lines included; its group 1 is the solution between them.
SOLUTION_REGION = re.compile(rf"^[ \t]*(?:#|//)+[ \t]*{BEGIN_SOLUTION}[ \t]*\n(.*?)^[ \t]*(?:#|//)+[ \t]*{END_SOLUTION}[ \t]*$",
                             re.S | re.M)

# What the learner finds in place of a region, by language (Python's is nbgrader's own default).
CODE_STUBS: dict[str, str] = {
    "python": "# YOUR CODE HERE\nraise NotImplementedError()",
    "cuda": "// YOUR CODE HERE",
    "metal": "// YOUR CODE HERE",
    "c": "/* YOUR CODE HERE */",
}

# The line of a handed-out Python cell where the learner's code goes: the stub's last line, with its comment line
# above it or without; group 1 is its indentation.
_COMMENT, _STATEMENT = CODE_STUBS["python"].split("\n")
PYTHON_STUB_LINE = re.compile(rf"^([ \t]*)(?:{re.escape(_COMMENT)}\n[ \t]*)?{re.escape(_STATEMENT)}[ \t]*$", re.M)

# Source files whose contents are not Python, by extension.
EXTENSION_LANGUAGES: dict[str, str] = {
    ".cu": "cuda", ".cuh": "cuda",
    ".metal": "metal",
    ".c": "c", ".h": "c", ".cc": "c", ".cpp": "c", ".hpp": "c",
}

# What the grader's sandbox shows in place of a region of the course's kernels.
REMOVED_FOR_GRADING = "(solution removed for grading)"


class SolutionRegionError(RuntimeError):
    """A ``BEGIN SOLUTION`` without its own ``END SOLUTION`` (unclosed, or another region begun inside it)."""


def file_language(name: str) -> str | None:
    """The stub language of a source file, by extension (``.py`` is Python); None when unknown."""
    suffix = re.search(r"\.[^./\\]+$", name)
    if not suffix:
        return None
    suffix = suffix.group(0).lower()
    return "python" if suffix == ".py" else EXTENSION_LANGUAGES.get(suffix)


def grading_stub(language: str) -> str:
    """The line the grader's sandbox puts in place of a region: in Python a statement (a region that was a
    block's whole body still parses), elsewhere a ``//`` comment."""
    if language == "python":
        return f'raise NotImplementedError("{REMOVED_FOR_GRADING}")'
    return f"// {REMOVED_FOR_GRADING}"


def has_solution_region(text: str) -> bool:
    """Whether ``text`` holds a solution marker line (a begin or an end)."""
    return BEGIN_SOLUTION in text or END_SOLUTION in text


def clear_solution_regions(source: str, stub: str) -> str:
    """``source`` with every ``BEGIN SOLUTION`` ... ``END SOLUTION`` region, marker lines included, replaced
    by ``stub`` indented like the region's first line (``stub`` may hold several lines; "" leaves one blank
    line of indentation). This is nbgrader's ``ClearSolutions`` rule; raises :class:`SolutionRegionError` on
    an unclosed or nested region."""
    stub_lines = stub.split("\n")
    kept: list[str] = []
    inside = False
    for line in source.split("\n"):
        if BEGIN_SOLUTION in line:
            if inside:
                raise SolutionRegionError("encountered nested begin solution statements")
            inside = True
            indent = re.match(r"\s*", line).group(0)
            kept.extend(indent + stub_line for stub_line in stub_lines)
        elif END_SOLUTION in line:
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise SolutionRegionError("no end solution statement found")
    return "\n".join(kept)
