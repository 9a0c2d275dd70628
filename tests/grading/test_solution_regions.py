"""The one rule that strips solution regions is nbgrader's: the same lines go, the same stub comes in."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearSolutions

from course.solution_regions import (CODE_STUBS, SolutionRegionError, clear_solution_regions, file_language,
                                     grading_stub)

REPO = Path(__file__).resolve().parents[2]


def _nbgrader(source: str, stub: str) -> str:
    cell = NotebookNode(cell_type="code", source=source, metadata={})
    ClearSolutions(code_stub={"any": stub})._replace_solution_region(cell, "any")
    return cell.source


def _course_texts() -> list[tuple[str, str]]:
    texts = [(file_language(p.name), p.read_text(encoding="utf-8")) for p in sorted((REPO / "kernels").rglob("*"))
             if p.is_file() and file_language(p.name) and "__pycache__" not in p.parts]
    for path in sorted((REPO / "solutions").glob("*/*.ipynb")):
        texts += [("python", "".join(c["source"])) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                  if c["cell_type"] == "code"]
    return texts


def test_every_kernel_and_solution_cell_is_stripped_as_nbgrader_strips_it():
    compared = 0
    for language, text in _course_texts():
        if "BEGIN SOLUTION" not in text:
            continue
        for stub in (CODE_STUBS[language], grading_stub(language), ""):
            assert clear_solution_regions(text, stub) == _nbgrader(text, stub), text[:120]
        compared += 1
    assert compared >= 30


def test_the_rule_differs_from_a_wrong_one_and_refuses_broken_regions():
    text = "a\n    # BEGIN SOLUTION\n    x = 1\n    # END SOLUTION\nb"
    assert clear_solution_regions(text, CODE_STUBS["python"]) == (
        "a\n    # YOUR CODE HERE\n    raise NotImplementedError()\nb")
    assert clear_solution_regions(text, "") == _nbgrader(text, "") != "a\nb"  # the indented blank line stays
    with pytest.raises(SolutionRegionError, match="no end solution"):
        clear_solution_regions("# BEGIN SOLUTION\nx = 1\n", "")
    with pytest.raises(SolutionRegionError, match="nested"):
        clear_solution_regions("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "")
