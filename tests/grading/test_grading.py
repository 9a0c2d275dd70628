"""Batch grading: right, wrong, partial, broken and hostile submissions, folder and zip layouts."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import REPO_ROOT
from autograder.grade.pipeline import StudentResult, grade_submissions
from autograder.grade.submissions import collect
from grading_support import by_student, feedback_text, processes_left_behind, put, student_version
from notebook_factory import cell, notebook

# ---------------------------------------------------------------------------------------------
# A small Python assignment: add (2 points, one hidden case) and mul (1 point)
# ---------------------------------------------------------------------------------------------

HIDDEN_LINE = "assert add(-7, 7) == 0"
# The batch's cell time limit: its cells take milliseconds, and kate's notebook sleeps past the limit.
BATCH_TIMEOUT = 5
VISIBLE_LINE = "assert add(1, 2) == 3"


def lesson(add_body: str = "return a + b", mul_body: str = "return a * b") -> nbformat.NotebookNode:
    return notebook([
        cell("# Lesson\nWrite `add` and `mul`.", "markdown"),
        cell("import warnings", grade_id="setup", locked=True),
        cell(f"def add(a, b):\n    ### BEGIN SOLUTION\n    {add_body}\n    ### END SOLUTION", grade_id="add", solution=True),
        # A library warning on stderr must not cost the student the points of a passing test.
        cell(f"warnings.warn('a harmless warning from a library')\n{VISIBLE_LINE}\n"
             f"### BEGIN HIDDEN TESTS\n{HIDDEN_LINE}\n### END HIDDEN TESTS",
             grade_id="test_add", grade=True, locked=True, points=2),
        cell(f"def mul(a, b):\n    ### BEGIN SOLUTION\n    {mul_body}\n    ### END SOLUTION", grade_id="mul", solution=True),
        cell("assert mul(2, 3) == 6", grade_id="test_mul", grade=True, locked=True, points=1),
    ])


@pytest.fixture(scope="module")
def fixture_solutions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    solutions = tmp_path_factory.mktemp("solutions")
    put(solutions / "lesson" / "lesson.ipynb", lesson())
    return solutions


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------------------------------------
# Finding submissions (fast: no nbgrader run)
# ---------------------------------------------------------------------------------------------

def test_zip_members_map_to_students_and_traversal_is_rejected(tmp_path: Path) -> None:
    archive = tmp_path / "lms.zip"
    solution = nbformat.writes(lesson())
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("smithjohn_1234_5678_lesson.ipynb", solution)  # Canvas-style flat name
        zf.writestr("doe/lesson/lesson.ipynb", solution)            # a folder per student
        zf.writestr("doe/lesson/.ipynb_checkpoints/lesson-checkpoint.ipynb", "{}")
        zf.writestr("__MACOSX/doe/._lesson.ipynb", "junk")
        zf.writestr("../evil.ipynb", solution)
        zf.writestr("/abs/evil.ipynb", solution)
        zf.writestr("ok/../../evil.ipynb", solution)
    staging = tmp_path / "staging"
    found = {s.student_id: s for s in collect(archive, staging, "lesson", "lesson.ipynb", {"add", "test_add"})}
    assert sorted(found) == ["../evil.ipynb", "/abs/evil.ipynb", "doe", "ok/../../evil.ipynb", "smithjohn"]
    for name in ("../evil.ipynb", "/abs/evil.ipynb", "ok/../../evil.ipynb"):
        assert found[name].notebook is None
        assert found[name].problem == f"rejected zip member '{name}': its path leaves the archive"
    assert found["smithjohn"].notebook == staging / "smithjohn" / "smithjohn_1234_5678_lesson.ipynb"
    assert found["doe"].notebook == staging / "doe" / "lesson" / "lesson.ipynb"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["lms.zip", "staging/doe/lesson/lesson.ipynb", "staging/smithjohn/smithjohn_1234_5678_lesson.ipynb"]


def test_folder_problems_are_named_per_student(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    put(subs / "amy" / "lesson.ipynb", lesson())
    put(subs / "amy" / "scratch.ipynb", lesson())                 # two notebooks: lesson.ipynb wins
    put(subs / "ben" / "a.ipynb", lesson())
    put(subs / "ben" / "b.ipynb", lesson())                       # two notebooks, neither named lesson
    put(subs / "cat" / "lesson.ipynb", nbformat.writes(lesson())[:200])
    (subs / "dan").mkdir()
    put(subs / "eve" / "answers.pdf", "%PDF")
    put(subs / "fay" / "lesson.ipynb", notebook([cell("x = 1", grade_id="other", solution=True)]))
    put(subs / "gus" / "lesson.ipynb", "\xff\xfe")
    os.utime(subs / "ben" / "a.ipynb", (2_000_000_000, 2_000_000_000))  # a resubmission: a is the newer one
    found = {s.student_id: s for s in collect(subs, tmp_path / "staging", "lesson", "lesson.ipynb", {"add", "test_add"})}
    assert found["amy"].notebook == subs / "amy" / "lesson.ipynb" and found["amy"].problem is None
    assert found["ben"].notebook == subs / "ben" / "a.ipynb" and found["ben"].problem is None
    assert found["ben"].note == "2 notebooks handed in; graded the newest, a.ipynb, set aside b.ipynb"
    assert found["cat"].problem.startswith("not a valid notebook (broken JSON at line")
    assert found["dan"].problem == "nothing submitted (the folder is empty)"
    assert found["eve"].problem.startswith("not a notebook: answers.pdf")
    assert found["fay"].problem.startswith("not a notebook of lesson: none of its exercise cells")
    assert found["gus"].problem.startswith("not a valid notebook")


def test_grade_help_documents_every_option() -> None:
    result = run_cli("grade", "--help")
    assert result.returncode == 0
    for option in ("SUBMISSIONS", "--assignment", "--out", "--workdir", "--timeout", "--jobs", "<student>_<anything>.ipynb"):
        assert option in result.stdout, option


@pytest.mark.parametrize("problem", ["missing_submissions", "unknown_assignment"])
def test_pipeline_errors_exit_2_with_one_sentence(tmp_path: Path, problem: str) -> None:
    subs = tmp_path / ("nowhere" if problem == "missing_submissions" else "subs")
    if problem == "unknown_assignment":
        put(subs / "amy" / "lesson.ipynb", lesson())
    result = run_cli("grade", str(subs), "--assignment", "no_such_lesson" if problem == "unknown_assignment" else "00_orientation",
                     "--workdir", str(tmp_path / "work"))
    assert result.returncode == 2
    assert result.stderr.startswith("grading could not run: ")
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------
# One batch through nbgrader with every kind of submission (slow)
# ---------------------------------------------------------------------------------------------

def _batch_submissions(subs: Path) -> None:
    """One student per kind of submission the pipeline must handle."""
    solution = lesson()
    put(subs / "alice" / "my work.ipynb", solution)
    put(subs / "carol" / "lesson.ipynb", lesson(add_body="return abs(a) + b"))  # passes the visible case only
    put(subs / "dave" / "lesson.ipynb", nbformat.writes(solution)[:300])         # truncated upload
    (subs / "erin").mkdir()
    put(subs / "frank" / "notes.txt", "I did not finish")
    put(subs / "gina" / "lesson.ipynb", notebook([cell("def other(): pass", grade_id="other", solution=True)]))
    # Nested layout, a second notebook beside the right one, and a deleted test cell (graded anyway).
    without_test = lesson()
    without_test.cells = [c for c in without_test.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_mul"]
    put(subs / "henry" / "lesson" / "lesson.ipynb", without_test)
    put(subs / "henry" / "lesson" / "scratch.ipynb", student_version(solution))
    put(subs / "ivan" / "lesson.ipynb", lesson(mul_body="import ctypes; ctypes.string_at(0)"))  # segfaults in test_mul
    put(subs / "kate" / "lesson.ipynb", lesson(mul_body="return a * b\nimport time; time.sleep(120)"))  # hangs after defining mul


def _check_scores(got: dict[str, StudentResult]) -> None:
    assert sorted(got) == ["alice", "carol", "dave", "erin", "frank", "gina", "henry", "ivan", "kate"]
    for student in ("alice", "henry"):
        assert (got[student].score, got[student].status) == (3.0, "graded"), got[student]
        assert got[student].cells == {"test_add": 2.0, "test_mul": 1.0}, student
    assert (got["carol"].score, got["carol"].status, got["carol"].cells) == (1.0, "graded", {"test_add": 0.0, "test_mul": 1.0})
    assert (got["kate"].score, got["kate"].status) == (3.0, f"graded (a cell was stopped at the {BATCH_TIMEOUT} s limit)")
    # The segfault costs only the test that triggered it; the sandbox (no GPU device) means the CPU tier.
    assert got["ivan"].status == "graded (kernel crashed (signal 11: segmentation fault) in cell test_mul)"
    assert (got["ivan"].score, got["ivan"].cells) == (2.0, {"test_add": 2.0, "test_mul": 0.0})
    assert got["ivan"].crashes == ["kernel crashed (signal 11: segmentation fault) in cell test_mul"]
    assert got["alice"].tier == "CPU tier" and got["alice"].wall_seconds > 0
    assert got["dave"].status.startswith("not a valid notebook (broken JSON")
    assert got["erin"].status == "nothing submitted (the folder is empty)"
    assert got["frank"].status.startswith("not a notebook: notes.txt")
    assert got["gina"].status.startswith("not a notebook of lesson")
    for r in got.values():
        assert r.max_score == 3.0
        assert "Traceback" not in r.status
        assert (r.feedback_html is not None) == r.status.startswith("graded"), r.student_id


def _check_feedback(carol: StudentResult) -> None:
    text = feedback_text(carol)
    assert VISIBLE_LINE in text, "control: the feedback shows the visible test"
    assert "AssertionError" in text
    # carol fails the hidden case: its traceback would quote the hidden line if it were not cut down.
    assert HIDDEN_LINE not in text and "add(-7, 7)" not in text
    assert "HIDDEN TESTS" not in text


def _check_csv(path: Path, results: list[StudentResult]) -> None:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["student_id", "assignment", "score", "max_score", "status", "tier", "crashes",
                             "crash_details", "recheck", "seconds", "recheck_seconds", "test_add", "test_mul"]
    assert [r["student_id"] for r in rows] == [r.student_id for r in results]
    row = {r["student_id"]: r for r in rows}
    assert (row["carol"]["score"], row["carol"]["test_add"], row["carol"]["test_mul"]) == ("1", "0", "1")
    assert (row["alice"]["score"], row["alice"]["max_score"], row["alice"]["status"]) == ("3", "3", "graded")
    # The fixture's tests call add() and mul() themselves, so the re-check leaves them as the notebook ran.
    assert row["alice"]["recheck"].endswith("(no course.check in the test): test_add, test_mul")
    assert (row["dave"]["score"], row["dave"]["test_add"], row["dave"]["crashes"], row["dave"]["seconds"]) == ("0", "", "", "")
    assert (row["ivan"]["crashes"], row["alice"]["crashes"], row["alice"]["tier"]) == ("1", "0", "CPU tier")
    assert all(r["assignment"] == "lesson" for r in rows)


@pytest.mark.slow
def test_one_batch_with_every_kind_of_submission(fixture_solutions: Path, tmp_path: Path) -> None:
    # One batch (not one per case) keeps the suite fast; each helper checks one concern.
    subs = tmp_path / "submissions"
    _batch_submissions(subs)
    with processes_left_behind() as left:
        results = grade_submissions(subs, "lesson", tmp_path / "work", jobs=3, timeout=BATCH_TIMEOUT,
                                    solutions=fixture_solutions)
    assert not left, f"processes of the batch outlived it: {left}"
    got = by_student(results)
    _check_scores(got)
    _check_feedback(got["carol"])
    _check_csv(tmp_path / "work" / "grades.csv", results)


@pytest.mark.slow
def test_zip_batch_through_the_command_line(fixture_solutions: Path, tmp_path: Path) -> None:
    archive = tmp_path / "download.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("alice_1001_2002_lesson.ipynb", nbformat.writes(lesson()))
        zf.writestr("../../evil.ipynb", nbformat.writes(lesson()))
        # bob resubmitted: the LMS keeps both; the newer, fixed one is graded and the report says so.
        zf.writestr(zipfile.ZipInfo("bob_1_2_lesson.ipynb", date_time=(2026, 3, 1, 9, 0, 0)),
                    nbformat.writes(lesson(mul_body="return a + b")))
        zf.writestr(zipfile.ZipInfo("bob_1_3_lesson.ipynb", date_time=(2026, 3, 2, 9, 0, 0)), nbformat.writes(lesson()))
    out = tmp_path / "marks.csv"
    result = run_cli("grade", str(archive), "--assignment", "lesson", "--solutions", str(fixture_solutions),
                     "--workdir", str(tmp_path / "work"), "--out", str(out), "--timeout", "30")
    assert result.returncode == 0, result.stderr
    assert "rejected zip member '../../evil.ipynb': its path leaves the archive" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path.parent / "evil.ipynb").exists() and not (tmp_path / "evil.ipynb").exists()
    with open(out, newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert sorted(rows) == ["../../evil.ipynb", "alice", "bob"]
    assert (rows["alice"]["score"], rows["alice"]["status"]) == ("3", "graded")
    assert rows["bob"]["score"] == "3"
    assert rows["bob"]["status"] == ("graded; 2 notebooks handed in; graded the newest, bob_1_3_lesson.ipynb, "
                                     "set aside bob_1_2_lesson.ipynb")
    assert rows["../../evil.ipynb"]["status"] == "rejected zip member '../../evil.ipynb': its path leaves the archive"
    assert "2 of 3 submissions graded" in result.stdout


# The course's own lessons: the solution, the student notebook as handed out and a partial one of lesson 00
# are graded in lesson 00's batch of test_wrong_corpus.py (test_grader_takes_points_from_a_pack), every
# lesson's solution and student notebook in its own batch there.
