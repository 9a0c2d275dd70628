"""Solution stubs chosen per cell, so a CUDA or Metal cell never receives Python.

nbgrader's ``ClearSolutions`` picks one stub for the whole notebook from its kernel language. In this
course a Python notebook also holds ``%%cuda`` cells and ``%%writefile kernel.metal`` cells, where
``raise NotImplementedError()`` would be a compile error in the student's scaffolding. The subclass
here looks at each cell's magic line and uses a comment stub of the right language instead.

It also refuses a magic cell that is a solution cell without ``BEGIN SOLUTION`` / ``END SOLUTION``
lines: nbgrader would replace the whole cell by the stub, magic line included, and the student's
notebook would silently stop writing (or compiling) the file.

The region rule itself (which lines go, what replaces them) is ``course.solution_regions``, the one
place that knows it: the learner's lab strips kernel files with it, and this preprocessor strips cells.
"""
from __future__ import annotations

import re
import shlex
from typing import Any

from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import ClearSolutions
from traitlets import Dict, default

# course.solution_regions is imported inside the functions below, not here: importing it runs the course
# package (torch included, 1.3 s measured), and every nbgrader command, grading ones included, loads this
# module with its configuration; only the release strips solutions.

__all__ = ["LanguageAwareClearSolutions", "MissingSolutionDelimitersError", "cell_language"]

# Cell magics whose body is not Python, by magic name.
MAGIC_LANGUAGES: dict[str, str] = {"cuda": "cuda", "metal": "metal"}


class MissingSolutionDelimitersError(RuntimeError):
    """A solution cell starting with a cell magic has no BEGIN/END SOLUTION region."""


def _magic_line(source: str) -> str | None:
    """The cell magic line (``%%name args``) when the cell starts with one."""
    for line in source.splitlines():
        if line.strip():
            return line.strip() if line.lstrip().startswith("%%") else None
    return None


def _writefile_target(arguments: str) -> str | None:
    """The file name given to ``%%writefile [-a|--append] NAME``."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        words = arguments.split()
    names = [w for w in words if not w.startswith("-")]
    return names[0] if names else None


def cell_language(source: str) -> str | None:
    """The stub language a cell's magic asks for, or None for a Python cell (or an unknown magic)."""
    magic = _magic_line(source)
    if magic is None:
        return None
    name, _, arguments = magic[2:].partition(" ")
    if name in MAGIC_LANGUAGES:
        return MAGIC_LANGUAGES[name]
    if name == "writefile":
        target = _writefile_target(arguments) or ""
        from course.solution_regions import EXTENSION_LANGUAGES
        suffix = re.search(r"\.[^./\\]+$", target)
        return EXTENSION_LANGUAGES.get(suffix.group(0).lower()) if suffix else None
    return None


class LanguageAwareClearSolutions(ClearSolutions):
    """``ClearSolutions`` with a stub per cell: ``//`` for CUDA and Metal, ``/* */`` for C, else the notebook's."""

    code_stub = Dict(help="The code snippet that replaces a solution region, by language.").tag(config=True)

    @default("code_stub")
    def _default_code_stub(self) -> dict[str, str]:
        from course.solution_regions import CODE_STUBS
        return {**ClearSolutions.class_traits()["code_stub"].make_dynamic_default(), **CODE_STUBS}

    def preprocess_cell(self, cell: NotebookNode, resources: dict[str, Any], cell_index: int
                        ) -> tuple[NotebookNode, dict[str, Any]]:
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, cell_index)
        magic = _magic_line(cell.source)
        if magic and utils.is_solution(cell) and self.begin_solution_delimeter not in cell.source:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", f"#{cell_index}")
            raise MissingSolutionDelimitersError(
                f"solution cell '{grade_id}' starts with '{magic}' but has no BEGIN SOLUTION / END SOLUTION "
                f"lines; nbgrader would replace the whole cell, magic line included. Mark the part the "
                f"student writes with '// BEGIN SOLUTION' and '// END SOLUTION' (or '### ...' in Python).")
        notebook_language = resources["language"]
        resources["language"] = cell_language(cell.source) or notebook_language
        try:
            return super().preprocess_cell(cell, resources, cell_index)
        finally:
            resources["language"] = notebook_language

    def _replace_solution_region(self, cell: NotebookNode, language: str) -> bool:
        """nbgrader's hook, answered by the course's one region rule (same lines, same stubs)."""
        from course.solution_regions import BEGIN_SOLUTION, END_SOLUTION, clear_solution_regions
        if self.begin_solution_delimeter != BEGIN_SOLUTION or self.end_solution_delimeter != END_SOLUTION:
            return super()._replace_solution_region(cell, language)
        stub = self.code_stub[language] if cell.cell_type == "code" else self.text_stub
        replaced = BEGIN_SOLUTION in cell.source
        cell.source = clear_solution_regions(cell.source, stub)
        return replaced
