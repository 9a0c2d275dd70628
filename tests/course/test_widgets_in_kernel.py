"""The widgets that launch nothing (lessons 01 and 03) and the one that launches the CPU runtime (lesson 05),
built inside a Jupyter kernel whose other threads are busy: each returns, and the notebook goes on.

On the GPU machine these three were reported "still running after 160 s" inside a notebook. There, each
widget's cell had printed its result within 2 to 8 s and the kernel sat idle in its event loop with every
thread waiting: the client's one long poll for the cell's reply had slept through the reply (seen with
COURSE_TIER=cpu as well, so no CUDA was involved). The course's clients wait in short polls
(autograder/kernel_polling.py), as this test does; tests/simt/test_launch_threads.py covers the fork of
a launch beside busy threads.
"""
from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.kernel_polling import poll_shell_in_slices

CELLS = [
    # Threads like a notebook kernel's: one keeps PyTorch's intra-op pool busy, one holds a lock.
    """import threading, torch
import course
stop = threading.Event()
def busy():
    a = torch.randn(512, 512)
    while not stop.is_set():
        a = torch.tanh(a @ a)
def holding():
    with threading.Lock():
        stop.wait()
threads = [threading.Thread(target=f, daemon=True) for f in (busy, holding)]
for t in threads:
    t.start()""",
    "from course.widgets import score_matrix_explorer\nprint(type(score_matrix_explorer()).__name__)",
    "from course.widgets import tiling_explorer\nprint(type(tiling_explorer()).__name__)",
    "from course.widgets import fragment_explorer\nprint(type(fragment_explorer()).__name__)",
    "stop.set()\nfor t in threads:\n    t.join()\nprint('done')",
]


@pytest.mark.slow
def test_lesson_widgets_return_inside_a_kernel_with_busy_threads(repo):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(repo)}})
    client.on_cell_start = lambda cell, cell_index: poll_shell_in_slices(client.kc)
    client.execute()
    printed = ["".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout").strip()
               for cell in nb.cells[1:]]
    assert printed == ["VBox", "VBox", "VBox", "done"], printed
    errors = [o for cell in nb.cells for o in cell.outputs if o.get("output_type") == "error"]
    assert not errors, errors
