"""The student release: stubs per cell language, nothing secret ships, notebooks/ stays in sync."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.preprocessors import ClearHiddenTests

from autograder import REPO_ROOT, SOLUTIONS_DIR
from autograder.release.build import (Release, ReleaseError, build_release, find_assignments, stale_notebooks, verify_release,
                                write_release)
from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions, MissingSolutionDelimitersError, cell_language
from notebook_factory import cell, notebook

PYTHON_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


# ---------------------------------------------------------------------------------------------
# A small instructor notebook with one solution cell per language
# ---------------------------------------------------------------------------------------------

SOLUTION_LINES = {  # grade_id -> a line that only the solution has
    "add": "return a + b  # SOLUTION_PY",
    "saxpy_cu": "x[i] = a * x[i];  // SOLUTION_CU",
    "add_metal": "x[0] += 1.0f;  // SOLUTION_METAL",
    "twice_cpp": "return 2 * x;  // SOLUTION_CPP",
    "triton_kernel": "tl.store(x_ptr + i, i)  # SOLUTION_TRITON",
}
HIDDEN_LINE = "assert add(-1, 1) == 0  # HIDDEN_CASE"


def lesson_notebook() -> nbformat.NotebookNode:
    s = SOLUTION_LINES
    return notebook([
        cell("# Lesson\nWrite `add`, a CUDA kernel, a Metal kernel, a C helper and a Triton kernel.", "markdown"),
        cell(f"def add(a, b):\n    ### BEGIN SOLUTION\n    {s['add']}\n    ### END SOLUTION", grade_id="add", solution=True),
        cell(f"assert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\n{HIDDEN_LINE}\n### END HIDDEN TESTS",
             grade_id="test_add", grade=True, locked=True, points=2),
        cell("%%cuda saxpy\n__global__ void saxpy(float a, float* x) {\n    int i = threadIdx.x;\n"
             f"    // BEGIN SOLUTION\n    {s['saxpy_cu']}\n    // END SOLUTION\n}}", grade_id="saxpy_cu", solution=True),
        cell("%%writefile add.metal\nkernel void add(device float* x [[buffer(0)]]) {\n"
             f"    // BEGIN SOLUTION\n    {s['add_metal']}\n    // END SOLUTION\n}}", grade_id="add_metal", solution=True),
        cell("%%writefile -a helper.cpp\nint twice(int x) {\n"
             f"    /* BEGIN SOLUTION */\n    {s['twice_cpp']}\n    /* END SOLUTION */\n}}", grade_id="twice_cpp", solution=True),
        cell("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef fill(x_ptr):\n    i = tl.program_id(0)\n"
             f"    # BEGIN SOLUTION\n    {s['triton_kernel']}\n    # END SOLUTION\n", grade_id="triton_kernel", solution=True),
    ])


def write_assignment(solutions: Path, name: str = "lesson", nb: nbformat.NotebookNode | None = None) -> Path:
    folder = solutions / name
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or lesson_notebook(), folder / f"{name}.ipynb")
    return folder


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def released_sources(path: Path) -> dict[str, str]:
    nb = json.loads(path.read_text())
    return {c["metadata"].get("nbgrader", {}).get("grade_id", f"#{i}"): "".join(c["source"])
            for i, c in enumerate(nb["cells"])}


def strip_in_process(nb: nbformat.NotebookNode, hidden_tests: bool = False) -> nbformat.NotebookNode:
    """Run the stub preprocessor (and with ``hidden_tests`` nbgrader's ClearHiddenTests) without nbgrader's CLI."""
    out, resources = LanguageAwareClearSolutions().preprocess(nb, {})
    if hidden_tests:
        out, _ = ClearHiddenTests().preprocess(out, resources)
    return out


# ---------------------------------------------------------------------------------------------
# Stubs (fast: the preprocessor alone)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, language", [
    ("%%cuda saxpy\n__global__ void f() {}", "cuda"),
    ("%%writefile kernel.cu\n", "cuda"),
    ("%%writefile -a common.cuh\n", "cuda"),
    ("%%writefile shader.metal\n", "metal"),
    ("%%writefile helper.c\n", "c"),
    ("%%writefile helper.cpp\n", "c"),
    ("%%writefile helper.h\n", "c"),
    ("%%writefile helper.py\n", None),
    ("%%time\nx = 1", None),
    ("def f():\n    pass", None),
])
def test_cell_language_comes_from_the_magic_line(source: str, language: str | None) -> None:
    assert cell_language(source) == language


def test_each_language_gets_its_own_stub() -> None:
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in strip_in_process(lesson_notebook()).cells}
    assert cells["add"] == "def add(a, b):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert cells["saxpy_cu"].splitlines() == [
        "%%cuda saxpy", "__global__ void saxpy(float a, float* x) {", "    int i = threadIdx.x;", "    // YOUR CODE HERE", "}"]
    assert cells["add_metal"].splitlines()[0] == "%%writefile add.metal"
    assert "    // YOUR CODE HERE" in cells["add_metal"].splitlines()
    assert "    /* YOUR CODE HERE */" in cells["twice_cpp"].splitlines()
    # A Triton kernel is Python: the interpreter runs the stub and reports "not implemented".
    assert cells["triton_kernel"].splitlines()[-2:] == ["    # YOUR CODE HERE", "    raise NotImplementedError()"]
    for grade_id in ("saxpy_cu", "add_metal", "twice_cpp"):
        assert "raise NotImplementedError" not in cells[grade_id], grade_id
    for grade_id, line in SOLUTION_LINES.items():
        assert line not in cells[grade_id], grade_id


@pytest.mark.parametrize("magic", ["%%cuda saxpy", "%%writefile kernel.metal", "%%writefile kernel.py", "%%bash"])
def test_magic_cell_without_delimiters_is_refused(magic: str) -> None:
    nb = notebook([cell(f"{magic}\nwhole cell is the answer", grade_id="kernel_cell", solution=True)])
    with pytest.raises(MissingSolutionDelimitersError, match=r"'kernel_cell'.*BEGIN SOLUTION"):
        strip_in_process(nb)


def test_python_cell_without_delimiters_is_still_replaced_whole() -> None:
    nb = notebook([cell("answer = 42", grade_id="answer", solution=True)])
    assert strip_in_process(nb).cells[0].source == PYTHON_STUB


# ---------------------------------------------------------------------------------------------
# Release guards (fast: on hand-made release folders)
# ---------------------------------------------------------------------------------------------

def test_verify_release_accepts_a_clean_notebook(tmp_path: Path) -> None:
    nbformat.write(strip_in_process(lesson_notebook(), hidden_tests=True), tmp_path / "lesson.ipynb")
    assert list(verify_release(tmp_path, "lesson")) == ["lesson.ipynb"]


@pytest.mark.parametrize("marker", ["BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"])
def test_verify_release_refuses_leftover_markers(tmp_path: Path, marker: str) -> None:
    nb = notebook([cell(f"x = 1\n# {marker}\n", grade_id="leaky", solution=True)])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    with pytest.raises(ReleaseError, match=rf"cell 0 \('leaky'\) still contains '{marker}'"):
        verify_release(tmp_path, "lesson")


@pytest.mark.parametrize("extra", ["kernel.cu", "data/weights.bin", "sub/other.ipynb"])
def test_verify_release_refuses_anything_but_top_level_notebooks(tmp_path: Path, extra: str) -> None:
    nbformat.write(strip_in_process(lesson_notebook(), hidden_tests=True), tmp_path / "lesson.ipynb")
    (tmp_path / extra).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / extra).write_text("secret")
    with pytest.raises(ReleaseError, match=rf"not notebooks: {extra}"):
        verify_release(tmp_path, "lesson")


def test_stale_notebooks_names_missing_changed_and_leftover_files(tmp_path: Path) -> None:
    fresh = nbformat.writes(strip_in_process(lesson_notebook(), hidden_tests=True)).encode()
    built = Release({"lesson": {"lesson.ipynb": fresh}})
    assert stale_notebooks(built, tmp_path) == [f"{tmp_path / 'lesson' / 'lesson.ipynb'} is missing"]
    (tmp_path / "lesson").mkdir()
    (tmp_path / "lesson" / "lesson.ipynb").write_bytes(fresh)
    assert stale_notebooks(built, tmp_path) == []
    changed = json.loads(fresh)
    changed["cells"][2]["source"] = "assert True"
    (tmp_path / "lesson" / "lesson.ipynb").write_text(json.dumps(changed))
    (tmp_path / "lesson" / "old.ipynb").write_text("{}")
    problems = stale_notebooks(built, tmp_path)
    assert len(problems) == 2
    assert "lesson.ipynb is out of date with solutions/lesson/lesson.ipynb (first difference in cell 2 ('test_add'))" in problems[0]
    assert "old.ipynb has no source in solutions/lesson" in problems[1]


# ---------------------------------------------------------------------------------------------
# The release through nbgrader (slow)
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_release_end_to_end_on_a_fixture(tmp_path: Path) -> None:
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    folder = write_assignment(solutions)
    # What an instructor's own run leaves behind; none of it may ship, none of it may stop the release.
    (folder / "kernel.ptx").write_text("// compiled SOLUTION_CU")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "lesson-checkpoint.ipynb").write_text("{}")

    args = ["--solutions", str(solutions), "--notebooks", str(notebooks)]
    first = run_cli("release", *args)
    assert first.returncode == 0, first.stderr
    assert sorted(p.relative_to(notebooks).as_posix() for p in notebooks.rglob("*")) == ["lesson", "lesson/lesson.ipynb"]
    released = notebooks / "lesson" / "lesson.ipynb"
    text = released.read_text()
    for secret in [*SOLUTION_LINES.values(), HIDDEN_LINE, "BEGIN SOLUTION", "HIDDEN TESTS"]:
        assert secret not in text, secret
    cells = released_sources(released)
    assert cells["saxpy_cu"].startswith("%%cuda saxpy\n") and "    // YOUR CODE HERE" in cells["saxpy_cu"]
    assert cells["add_metal"].startswith("%%writefile add.metal\n") and "    // YOUR CODE HERE" in cells["add_metal"]
    assert "    /* YOUR CODE HERE */" in cells["twice_cpp"]
    assert cells["test_add"] == "assert add(1, 2) == 3"

    before = released.read_bytes()
    assert run_cli("release", *args).returncode == 0
    assert released.read_bytes() == before, "two releases of the same source differ"

    check = run_cli("release", "--check", *args)
    assert check.returncode == 0, check.stderr
    nb = json.loads(before)
    nb["cells"][1]["source"] = "def add(a, b):\n    return a + b\n"
    released.write_text(json.dumps(nb))
    stale = run_cli("release", "--check", *args)
    assert stale.returncode == 1
    assert f"{released} is out of date with solutions/lesson/lesson.ipynb" in stale.stderr
    assert "run `make release`" in stale.stderr
    assert "Traceback" not in stale.stderr


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["non_notebook_file", "magic_without_delimiters"])
def test_release_fails_loudly_and_writes_nothing(tmp_path: Path, problem: str) -> None:
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    if problem == "non_notebook_file":
        folder = write_assignment(solutions)
        (folder / "reference.cu").write_text("// the instructor's full kernel")
        expected = "would ship files that are not notebooks: reference.cu"
    else:
        write_assignment(solutions, nb=notebook([cell("%%writefile k.cu\n__global__ void k() {}", grade_id="k_cu", solution=True)]))
        expected = "solution cell 'k_cu' starts with '%%writefile k.cu' but has no BEGIN SOLUTION"
    result = run_cli("release", "--solutions", str(solutions), "--notebooks", str(notebooks))
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert not notebooks.exists()


def test_a_release_nbgrader_refuses_names_the_lesson_and_keeps_its_log(tmp_path: Path) -> None:
    """nbgrader itself refuses a notebook (two cells with one grade id): the release says which lesson and why in a
    sentence, writes nothing, and leaves nbgrader's whole log beside the work folder."""
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    twice = [cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION", grade_id="add",
                  solution=True),
             cell("assert add(1, 2) == 3", grade_id="add", grade=True, points=1)]
    write_assignment(solutions, nb=notebook(twice))
    result = run_cli("release", "--solutions", str(solutions), "--notebooks", str(notebooks))
    assert result.returncode == 2, result.stderr
    assert "nbgrader could not release solutions/lesson" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not notebooks.exists()
    log = result.stderr.split("(full log: ")[-1].rstrip().rstrip(")")
    logged = (REPO_ROOT / log) if not Path(log).is_absolute() else Path(log)
    assert logged.name == "release.log" and "add" in logged.read_text(), result.stderr


# ---------------------------------------------------------------------------------------------
# The course's own lessons (slow)
# ---------------------------------------------------------------------------------------------

LESSONS = find_assignments(SOLUTIONS_DIR)


def _regions(source: str, begin: str, end: str) -> tuple[set[str], set[str]]:
    """(lines inside begin/end regions, lines outside them), stripped and non-blank."""
    inside, outside, within = set(), set(), False
    for line in source.splitlines():
        if begin in line:
            within = True
        elif end in line:
            within = False
        elif line.strip():
            (inside if within else outside).add(line.strip())
    return inside, outside


def _check_no_secret_in(assignment: str, released_path: Path) -> None:
    """No marker, and no line found only inside a solution or hidden-test region, is in the released cell."""
    source = nbformat.read(SOLUTIONS_DIR / assignment / f"{assignment}.ipynb", as_version=4)
    released_text = released_path.read_text()
    released = released_sources(released_path)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in released_text
    checked = 0
    for c in source.cells:
        grade_id = c.metadata.get("nbgrader", {}).get("grade_id")
        if not grade_id:
            continue
        for begin, end in (("BEGIN SOLUTION", "END SOLUTION"), ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")):
            inside, outside = _regions(c.source, begin, end)
            secret = inside - outside  # a line also written outside the region is not a secret
            checked += len(secret)
            leaked = secret & {line.strip() for line in released[grade_id].splitlines()}
            assert not leaked, f"{assignment} cell {grade_id} leaks {leaked}"
    assert checked > 0, f"{assignment} has no solution region to check"


@pytest.mark.slow
@pytest.mark.skipif(not LESSONS, reason="no lesson notebooks in solutions/ yet")
def test_lesson_release_holds_no_secret_and_check_catches_a_hand_edit(tmp_path: Path) -> None:
    # One release of every lesson serves both checks (a module fixture would run once per xdist worker).
    built = build_release(LESSONS, SOLUTIONS_DIR, tmp_path / "workspace")
    released = tmp_path / "notebooks"
    write_release(built, released)
    for assignment in LESSONS:
        _check_no_secret_in(assignment, released / assignment / f"{assignment}.ipynb")

    assert stale_notebooks(built, released) == [], "control: an unedited release is up to date"
    target = released / LESSONS[-1] / f"{LESSONS[-1]}.ipynb"
    nb = json.loads(target.read_text())
    nb["cells"][0]["source"] = "# an edit made by hand in the student copy\n"
    target.write_text(json.dumps(nb))
    assert stale_notebooks(built, released) == [
        f"{target} is out of date with solutions/{LESSONS[-1]}/{LESSONS[-1]}.ipynb (first difference in cell 0)"]


@pytest.mark.slow
@pytest.mark.skipif(not LESSONS, reason="no lesson notebooks in solutions/ yet")
def test_committed_notebooks_are_up_to_date() -> None:
    check = run_cli("release", "--check")  # the command `make check-release` runs, kernel-cell sync included
    assert check.returncode == 0, check.stderr
    assert "up to date" in check.stdout
