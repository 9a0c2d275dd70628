"""A demonstration cell that reaches an unfinished exercise shows its sentence and nothing else: what it printed first
(lesson 07's table header, lesson 03's and 06's labels) is cleared (course.grading.answers), in a real Jupyter kernel."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

REPO = Path(__file__).resolve().parents[2]


def _run(cells: list[str], folder: Path) -> list:
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return [cell.outputs for cell in nb.cells]


def _student_cell(lesson: str, index: int) -> str:
    return nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4).cells[index].source


def _grade_id_cell(lesson: str, grade_id: str) -> str:
    nb = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_a_cell_that_reaches_a_stub_shows_only_the_sentence(tmp_path):
    lesson = "07_backward_pass"
    table = next(i for i, c in enumerate(nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb",
                                                       as_version=4).cells)
                 if "P written + read" in c.source)
    outputs = _run(["import math\nimport torch\nimport course",
                    _grade_id_cell(lesson, "backward_flops"),                      # the stub, as handed out
                    _student_cell(lesson, table),                                  # prints a header, then needs it
                    "print('header')\nprint(1 / 0)",                               # control: an ordinary error
                    "def done():\n    return 3\nprint('header', done())"], tmp_path)
    assert [o.output_type for o in outputs[2]] == ["error"], json.dumps(outputs[2], indent=1)
    assert "This cell uses `backward_flops`, which is not finished yet" in "".join(outputs[2][0].traceback)
    assert [o.output_type for o in outputs[3]] == ["stream", "error"]  # other errors keep what the cell printed
    assert [(o.output_type, o.text) for o in outputs[4]] == [("stream", "header 3\n")]
