"""A new lesson is its own files: added to a copy of the course, every tool picks it up.

The copy holds the repository's files (those git tracks or would); lesson 10 is added to it from
``tests/tools/new_lesson/``: its module (``course/lessons/lesson10.py``: a Python exercise and one kernel step, whose
rows of the kernel table it declares as ``KERNEL_ROWS``), its solution notebook, its kernel file in Triton, CUDA C and
Metal (lesson 01's naive kernel under a new name, which every tool of the course accepts), its wrong answers, and its
row of the README's lessons table. No other file changes. Then, in the copy, each tool runs in a process of its own
and must list, check or build lesson 10: the release (nbgrader's generate_assignment), ``python -m course run`` on each
track, the Triton compile gate, the benchmark's smoke, the slides, the tier report (``python -m course doctor``), the
wrong-answer corpus, and the project's own quick tests of what every lesson must have. The README says how many files
a lesson takes; the test counts them.

A lesson that leaves something undeclared is told so: a copy whose lesson 10 declares no compile-gate calls for its
Triton file fails the gate with a sentence naming them.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "new_lesson"
ASSIGNMENT = "10_one_row"
STEP = "one_row"
TRACK_FILES = {"triton": "kernels/triton/10_one_row.py", "cuda": "kernels/cuda/10_one_row.cu",
               "metal": "kernels/metal/10_one_row.metal"}
# The compile gate on the smallest matrix: one dtype, one head dim, one target, one compile process.
GATE_ONE_COMPILE = ("--head-dims", "16", "--dtypes", "fp32", "--targets", "80", "--jobs", "1")
# The README's row of the new lesson in its lessons table (the one shared file a lesson edits).
README_ROW = ("| 10 | one program per query row, in every track | `notebooks/10_one_row/` | `kernels/triton/10_one_row.py` "
              "| `kernels/cuda/10_one_row.cu` | `kernels/metal/10_one_row.metal` |")


def _tracked_files() -> list[str]:
    """The course's files: tracked, and new ones git does not ignore (a module not committed yet is part of it)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


def copy_course(target: Path) -> None:
    """The repository's tracked files (as they are in the working tree) under ``target``, with its .venv linked."""
    for name in _tracked_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, destination)
    (target / ".venv").symlink_to(REPO / ".venv")


def lesson_files(root: Path) -> dict[str, str]:
    """Path -> text of every file lesson 10 brings: the lesson's own files only."""
    files = {"course/lessons/lesson10.py": (FIXTURE / "lesson10.py").read_text(encoding="utf-8"),
             "autograder/corpora/wrong/lesson10.py": (FIXTURE / "corpus_lesson10.py").read_text(encoding="utf-8"),
             f"solutions/{ASSIGNMENT}/{ASSIGNMENT}.ipynb": (FIXTURE / f"{ASSIGNMENT}.ipynb").read_text(encoding="utf-8")}
    # The kernel: lesson 01's naive kernel, under lesson 10's name and command.
    for track, name in TRACK_FILES.items():
        original = (root / "kernels" / track / Path(name).name.replace("10_one_row", "01_naive")).read_text(encoding="utf-8")
        files[name] = original.replace("Lesson 01", "Lesson 10").replace("course run 01 ", "course run 10 ")
    return files


# What lesson 10's Triton row declares for the compile gate (left out by the negative case).
GATE_DECLARATION = """, "gate_cases": "forward",
     "gate_calls": (("naive_attention", "row row row"),)"""


def add_lesson(root: Path, forget_gate: bool = False) -> list[str]:
    """Lesson 10 written into the course at ``root`` (without its compile-gate declaration if ``forget_gate``), and the
    README's lessons table given its row; the paths written."""
    written = []
    for name, text in lesson_files(root).items():
        if forget_gate and name.endswith("lesson10.py") and name.startswith("course/"):
            assert GATE_DECLARATION in text, "the fixture's gate declaration changed; update GATE_DECLARATION"
            text = text.replace(GATE_DECLARATION, "")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(name)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    last_row = next(line for line in text.splitlines() if line.startswith("| 09 |"))
    readme.write_text(text.replace(last_row, last_row + "\n" + README_ROW, 1), encoding="utf-8")
    return written


def run_in(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python args`` in the copy, importing the copy's packages."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    env.pop("COURSE_ROOT", None)
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"{' '.join(result.args[1:])} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


# Slow, the tests that run the tools on a copy: they run as a learner and an instructor run them, nbgrader's release and
# the real compilers included (about a minute and a half on two cores, the release and the CUDA C check the longest).
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def course_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    copy_course(root)
    add_lesson(root)
    ok(run_in(root, "-m", "course", "sync"))  # the notebook's kernel cells, from the kernel files
    # The release, as an instructor runs it: the student notebook, which the corpus's tests read too.
    ok(run_in(root, "-m", "autograder", "release", ASSIGNMENT))
    return root


def test_a_lesson_is_the_number_of_files_the_readme_says(tmp_path):
    """The files a lesson brings are its own; the README states how many, and that its table is the one shared edit."""
    copy_course(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in _tracked_files()}
    written = add_lesson(tmp_path)
    changed = sorted(name for name, data in before.items() if (tmp_path / name).read_bytes() != data)
    assert changed == ["README.md"], f"adding lesson 10 changed shared files: {changed}"
    assert sorted(written) == sorted(set(written)) and not set(written) & set(before)
    stated = re.search(r"A new lesson is (\d+) files of its own", (REPO / "README.md").read_text(encoding="utf-8"))
    assert stated, "the README no longer says how many files a new lesson takes (\"A new lesson is N files of its own\")"
    assert int(stated.group(1)) == len(written), (f"the README says a lesson is {stated.group(1)} files; lesson 10 is "
                                                  f"{len(written)}: {', '.join(sorted(written))}")


@slow
def test_the_release_builds_the_student_notebook(course_copy):
    released = json.loads((course_copy / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text(encoding="utf-8"))
    text = "\n".join("".join(cell["source"]) for cell in released["cells"])
    assert "YOUR CODE HERE" in text and "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    assert "%%cuda one_row_cuda" in text and "%%metal one_row_metal" in text


@slow
@pytest.mark.parametrize("track", list(TRACK_FILES))
def test_course_run_checks_each_track(course_copy, track):
    out = ok(run_in(course_copy, "-m", "course", "run", "10", "--track", track, "--no-timing"))
    assert f"10.{STEP}_{track}" in out, out


@slow
def test_the_python_exercise_and_its_hints_are_the_course_s(course_copy):
    out = ok(run_in(course_copy, "-c", (
        "import course\n"
        "course.check('10.programs', lambda batch, heads, n_q: batch * heads * n_q, drawn=3)\n"
        "print(sorted(e for e in course.exercises.EXERCISES if e.startswith('10.')))\n"
        "course.hint('10.one_row_metal')\n")))
    assert "['10.one_row_cuda', '10.one_row_metal', '10.one_row_triton', '10.programs']" in out, out
    assert "One program owns one query row" in out, out


@slow
def test_the_compile_gate_compiles_the_triton_file(course_copy):
    out = ok(run_in(course_copy, "-m", "course.tools.triton_gate", "--lessons", "10_one_row", *GATE_ONE_COMPILE))
    done = re.search(r"(\d+)/(\d+) compiles succeeded", out)
    assert "10_one_row" in out and done and done.group(1) == done.group(2) != "0", out


@slow
def test_the_benchmark_smoke_runs_the_step(course_copy):
    """The benchmark's smoke (what `make bench` runs without a GPU), on lesson 10's Triton step alone: the whole smoke
    takes half a minute on this machine's two cores, and its other steps are the course's own tests' business."""
    out = ok(run_in(course_copy, "-c", (
        "import sys\n"
        "from course.tools import bench_triton\n"
        "bench_triton.STEPS = [step for step in bench_triton.STEPS if step.lesson == '10']\n"
        "sys.exit(0 if bench_triton.run_smoke() else 1)\n")))
    assert f"10.{STEP}_triton: 1 case passed" in out and "1 of 1 steps passed" in out, out


@slow
def test_the_slides_build_the_lesson_deck(course_copy, tmp_path):
    ok(run_in(course_copy, "-m", "course.slides", "10", "--no-pdf", "--out", str(tmp_path)))
    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    deck = next((d for d in manifest["decks"] if d["name"] == ASSIGNMENT), None)
    assert deck, f"no deck {ASSIGNMENT} in {[d['name'] for d in manifest['decks']]}"
    html = (tmp_path / deck["html"]).read_text(encoding="utf-8")
    assert all(name in html for name in TRACK_FILES.values()), "the deck does not show every kernel file of lesson 10"
    assert "score-matrix-10" in html, "the deck does not show the picture lesson 10 declares"
    assert deck["html"] in (tmp_path / "index.html").read_text(encoding="utf-8"), "the slides' index misses lesson 10"


@slow
def test_the_tier_report_counts_the_lesson(course_copy):
    out = ok(run_in(course_copy, "-m", "course", "doctor"))
    tracks = next(line for line in out.splitlines() if line.startswith("Tracks you can work in here"))
    for track in ("Triton", "CUDA C", "Metal"):
        assert re.search(rf"{track} \(lessons [^)]*\b10\)", tracks), tracks


@slow
def test_the_wrong_answer_corpus_holds_the_lesson_and_its_entry_fails(course_copy):
    out = ok(run_in(course_copy, "-c", (
        "import nbformat, course\n"
        "from course.errors import CheckFailed\n"
        "from autograder.corpora.wrong import corpus, lesson_corpora, make_submission\n"
        "from pathlib import Path\n"
        f"entries = corpus('{ASSIGNMENT}')\n"
        "print('modules', [m.__name__ for m in lesson_corpora()][-1], len(entries))\n"
        f"nb = make_submission(Path('solutions/{ASSIGNMENT}/{ASSIGNMENT}.ipynb'), entries[0])\n"
        "cell = next(c for c in nb.cells if c.metadata.get('nbgrader', {}).get('grade_id') == entries[0].cell)\n"
        "space = {}\n"
        "exec(cell.source, space)\n"
        "try:\n"
        "    course.check('10.programs', space['programs'])\n"
        "except CheckFailed as failed:\n"
        "    print('failed:', failed)\n")))
    assert re.search(r"modules autograder\.corpora\.wrong\.lesson10 (\d+)", out), out
    assert "failed:" in out and "multiply by the heads too" in out, out


# The project's own quick tests of what every lesson must have, run on the copy: the table's naming rules, the kernel
# files' layout, the README's layout, no lesson named in shared code, every exercise's hint ladder, the lessons'
# loader, the corpus's coverage (three wrong answers a cell; that each fails its check is the corpus's slow test, a
# minute for lesson 10).
COURSE_RULES = ("tests/tracks/test_table.py", "tests/tracks/test_kernel_layout.py", "tests/tools/test_readme_layout.py",
                "tests/tools/test_no_lesson_branches.py",
                "tests/course/test_hint_ladder.py::test_every_graded_exercise_has_a_ladder_of_at_least_three_rungs",
                "tests/course/test_lesson_modules.py",
                "tests/grading/test_wrong_corpus.py")


@slow
def test_the_course_s_own_rules_hold_for_the_lesson(course_copy):
    out = ok(run_in(course_copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not browser",
                    *COURSE_RULES, timeout=600))
    assert re.search(r"\d+ passed", out) and "failed" not in out, out[-3000:]


@slow
def test_a_lesson_that_forgets_its_gate_calls_is_told(tmp_path):
    """The negative case: lesson 10's Triton row without its compile-gate declaration fails the gate with a sentence
    that names what to declare."""
    copy_course(tmp_path)
    add_lesson(tmp_path, forget_gate=True)
    result = run_in(tmp_path, "-m", "course.tools.triton_gate", "--lessons", "10_one_row", *GATE_ONE_COMPILE)
    said = result.stdout + result.stderr
    assert result.returncode != 0, said
    assert "declares no compile-gate cases for kernels/triton/10_one_row.py (gate_cases on its row" in said, said
    assert "Traceback" not in said, said


# ---- the rows a lesson module declares, read without importing it -------------------------------------------------


def test_the_rows_a_lesson_declares_are_rows_of_the_table(tmp_path):
    from course.tracks import table
    (tmp_path / "lesson10.py").write_text((FIXTURE / "lesson10.py").read_text(encoding="utf-8"), encoding="utf-8")
    rows = table.lesson_rows(tmp_path)
    assert [row.id for row in rows] == [f"10.{STEP}_triton", f"10.{STEP}_cuda", f"10.{STEP}_metal"]
    triton, cuda, _ = rows
    assert triton.gate_cases == "forward" and triton.gate_calls == (table.GateCall("naive_attention", ("row",) * 3),)
    assert triton.smoke_case == {"n_q": 9, "n_k": 9, "d": 16} and not triton.key_blocks
    assert cuda.options == {"layout": "naive"} and cuda.kernel_file == TRACK_FILES["cuda"]


@pytest.mark.parametrize("declared, said", [
    ('KERNEL_ROWS = (dict(track="cuda", step="s", entry="k"),)', "must hold literals only"),
    ('KERNEL_ROWS = ({"track": "cuda", "step": "s"},)', "has no 'entry'"),
    ('KERNEL_ROWS = ({"track": "tpu", "step": "s", "entry": "k"},)', "names the track 'tpu'"),
])
def test_a_row_the_table_cannot_read_is_a_sentence(tmp_path, declared, said):
    from course.errors import CourseError
    from course.tracks import table
    (tmp_path / "lesson11.py").write_text(declared + "\n", encoding="utf-8")
    with pytest.raises(CourseError, match=re.escape(said)) as raised:
        table.lesson_rows(tmp_path)
    assert str(raised.value).startswith("course/lessons/lesson11.py: ")
