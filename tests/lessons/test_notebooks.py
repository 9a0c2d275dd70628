"""The lesson notebooks: complete, runnable on the CPU tier, in sync with kernels/, and honest about failures."""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import SOLUTIONS_DIR
from autograder.kernel_polling import poll_shell_in_slices
from autograder.release.build import find_assignments
from course.tools.sync import sync_all

LESSONS = find_assignments(SOLUTIONS_DIR)  # every lesson in solutions/, a new one included
# Lessons with fewer exercises than the three a lesson has: the orientation has two, the capstone one (the whole
# FlashAttention operator).
FEWER_EXERCISES = {"00_orientation": 2, "08_capstone": 1}
# Lesson 09 runs a dataflow machine simulated on the CPU: no tensor of it lives on a GPU.
OFF_THE_GPU = {"09_dataflow"}


def _solution(repo: Path, lesson: str) -> Path:
    return repo / "solutions" / lesson / f"{lesson}.ipynb"


# Per cell. Alone, lesson 01 runs in about 13 s; in one full-suite run, beside two grading jobs on
# two cores, the same notebook took 312 s, so the limit leaves room for a loaded machine.
def _run(path: Path, timeout: int = 900) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.on_cell_start = lambda cell, cell_index: poll_shell_in_slices(client.kc)
    client.execute()
    return nb


def test_kernel_cells_match_kernel_files():
    assert sync_all(write=False) == [], "run `python -m course sync`"


def test_drift_is_detected_and_repaired(repo, tmp_path):
    lesson = "01_naive_attention"
    (tmp_path / lesson).mkdir()
    copy = tmp_path / lesson / f"{lesson}.ipynb"
    shutil.copy(_solution(repo, lesson), copy)
    nb = nbformat.read(copy, as_version=4)
    kernel_cell = next(c for c in nb.cells if c.metadata.get("course", {}).get("source"))
    drifted = kernel_cell.source.replace("tl.exp(scores - m)", "tl.exp(scores)")
    assert drifted != kernel_cell.source
    kernel_cell.source = drifted
    nbformat.write(nb, copy)
    assert sync_all(write=False, root=tmp_path) == [str(copy)]
    assert sync_all(write=True, root=tmp_path) == [str(copy)]
    assert sync_all(write=False, root=tmp_path) == []


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_has_the_parts_a_lesson_needs(repo, lesson):
    nb = nbformat.read(_solution(repo, lesson), as_version=4)
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    solutions = [m for m in meta if m.get("solution")]
    tests = [m for m in meta if m.get("grade") and not m.get("solution")]
    assert len(solutions) >= FEWER_EXERCISES.get(lesson, 3)
    assert all(t.get("locked") and t.get("points", 0) > 0 for t in tests)
    assert any("BEGIN HIDDEN TESTS" in c.source for c in nb.cells)
    assert "By the end of this lesson you can" in nb.cells[0].source
    assert any("explorer()" in c.source or "from course.widgets import" in c.source for c in nb.cells), \
        "each lesson has an interactive widget"
    for cell in nb.cells:
        assert not cell.get("outputs"), "notebooks are kept without outputs"
    # Run All must not stop at a failing check: every code cell but the setup may raise without stopping it.
    code = [c for c in nb.cells if c.cell_type == "code"]
    untagged = [c.source.splitlines()[0] for c in code
                if c.metadata.get("nbgrader", {}).get("grade_id") != "setup" and "raises-exception" not in c.metadata.get("tags", [])]
    assert not untagged, f"cells that would stop Run All: {untagged}"


# That each solution notebook runs top to bottom, clean and with every check passing, is proved by the run
# that starts tests/grading/test_wrong_corpus.py::test_each_wrong_solution_fails_its_own_tests (one run of
# each notebook serves both).


@pytest.mark.slow
def test_a_failing_check_in_jupyter_is_short_and_still_an_error(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import course, torch\n"
        "def attention_torch(q, k, v, scale=None):\n"
        "    return torch.zeros_like(q)\n"
        "course.check('01.attention_torch', attention_torch)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "failing.ipynb"
    nbformat.write(nb, path)
    outputs = _run(path).cells[0].outputs
    errors = [o for o in outputs if o.output_type == "error"]
    assert len(errors) == 1, "the cell must still count as failed (nbgrader scores error outputs as 0)"
    shown = "\n".join(errors[0].traceback)
    assert "all zeros" in shown and "check failed" in shown
    assert "site-packages" not in shown and "course/grading/" not in shown and len(shown.splitlines()) < 10


# ------------------------------------------------------------------------------------------------
# The tier's device in demonstration cells. On the GPU tier a Triton kernel reads GPU memory only, so a
# cell that hands tensors to one must make them on course.tiers.device() (or say on which device it wants
# them, as a cell that counts bytes on the CPU does). Checks make their own tensors (tests/tracks run them
# under the GPU's device rules); this reads the cells a learner runs by hand.
# ------------------------------------------------------------------------------------------------

_FACTORIES = {"randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "linspace", "tensor",
              "as_tensor", "from_numpy", "eye", "make_qkv"}
_MOVES = {"to", "cuda"}


def _triton_functions(nb) -> set[str]:
    """Names of the Python functions the notebook's Triton kernel cells define (their wrappers)."""
    names = set()
    for cell in nb.cells:
        if str(cell.metadata.get("course", {}).get("source", "")).startswith("kernels/triton/"):
            tree = ast.parse(cell.source)
            names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                      and not any("jit" in ast.unparse(d) for d in n.decorator_list)}
    return names


def tensors_without_a_device(nb) -> list[str]:
    """``cell N, line L: <call>`` for every tensor made without a device in a demonstration cell (neither a
    solution nor a test cell) that calls a function of a Triton kernel cell."""
    kernels = _triton_functions(nb)
    found = []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or cell.source.startswith("%%") or meta.get("solution") or meta.get("grade"):
            continue
        tree = ast.parse(cell.source)
        # A bare name: `cuda_track.naive_attention(...)` is another track's launcher of the same name.
        called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if not called & kernels:
            continue
        moved = {id(n.func.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr in _MOVES and (n.args or n.keywords)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in _FACTORIES and not any(k.arg == "device" for k in node.keywords) and id(node) not in moved:
                found.append(f"cell {index}, line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", [lesson for lesson in LESSONS if lesson not in OFF_THE_GPU])
def test_demonstration_cells_make_tensors_on_the_tiers_device(repo, folder, lesson):
    nb = nbformat.read(repo / folder / lesson / f"{lesson}.ipynb", as_version=4)
    assert tensors_without_a_device(nb) == []


def test_a_tensor_made_without_a_device_is_found(repo):
    """The rule above can fail: lesson 02's demonstration of merged states, with the device taken out."""
    nb = nbformat.read(_solution(repo, "02_online_softmax"), as_version=4)
    cell = next(c for c in nb.cells if "partial_states(x, n_splits)" in c.source and not c.metadata.get("nbgrader"))
    cell.source = cell.source.replace("torch.randn(4, 1000).to(course.tiers.device())", "torch.randn(4, 1000)")
    assert [problem.split(": ", 1)[1] for problem in tensors_without_a_device(nb)] == ["torch.randn(4, 1000)"]


# ------------------------------------------------------------------------------------------------
# The GPU suite (make test-gpu): every solution notebook of lessons 00-08 runs top to bottom on the GPU tier
# (COURSE_TIER=auto), every cell without an error: checks, hidden tests, demonstrations and widgets.
# ------------------------------------------------------------------------------------------------

GPU_LESSONS = [lesson for lesson in LESSONS if lesson not in OFF_THE_GPU]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("lesson", GPU_LESSONS)
def test_solution_notebook_runs_on_the_gpu_tier(repo, lesson, tmp_path):
    import course
    if course.tiers.device() != "cuda":
        pytest.skip("runs in the GPU suite (make test-gpu): on the CPU tier the grading tests run every notebook")
    work = tmp_path / lesson
    shutil.copytree(repo / "solutions" / lesson, work)
    nb = _run(work / f"{lesson}.ipynb", timeout=600)
    errors = [(i, c.source.splitlines()[0] if c.source else "", o) for i, c in enumerate(nb.cells)
              if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    shown = "\n\n".join(f"cell {i} ({first}):\n{o.ename}: {o.evalue}" for i, first, o in errors)
    assert not errors, f"{lesson} on the GPU tier:\n{shown}"
    grading = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream"
               and "grading tier:" in o.text]
    assert not grading or "GPU tier" in grading[0].text, grading[0].text
