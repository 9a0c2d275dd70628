"""What a learner sees, in a real Jupyter kernel, when a cell cannot run yet (course.grading.answers): a demonstration
cell that reaches an unfinished exercise shows its sentence and nothing else (what it printed first, lesson 07's
table header, lesson 03's and 06's labels, is cleared), and a check cell that grades every track, run before a
track's cell was (a learner who studies Triton skips the CUDA C and Metal cells), names the cell to run."""
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


def test_a_check_of_every_track_names_the_track_cell_that_was_not_run(tmp_path):
    check = _grade_id_cell("04_double_buffering", "test_double_buffer_kernel")
    assert "course.check_tracks(" in check and "cuda=double_buffer_cuda" in check
    outputs = _run(["import course", check,                                   # no track's cell run yet
                    "def pipelined_attention(q, k, v, scale=None):\n    raise NotImplementedError()", check,
                    "print(undefined_name)"], tmp_path)                          # control: any other NameError
    first, second, other = ("".join(o[0].traceback) for o in (outputs[1], outputs[3], outputs[4]))
    assert first == ("`pipelined_attention` is not defined: this check grades your best track and takes every track's "
                     "answer, so run the Triton cell that defines `pipelined_attention` above, as handed out if you "
                     "study another track, then this cell again (Run All from the top runs every cell).")
    assert second.startswith("`double_buffer_cuda` is not defined") and \
        "run the cell that starts with `%%cuda double_buffer_cuda` above" in second
    assert "Traceback" in other and "NameError" in other and "check grades" not in other
