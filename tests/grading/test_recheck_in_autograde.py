"""The re-check is part of nbgrader's autograde pass (autograder.preprocessors.recheck_tests.RecheckTests), and the only
judge of a test that grades through the course.

Run in a course directory with the course's settings, ``nbgrader autograde`` itself (as the formgrader's Autograde
button runs it) writes the gradebook. The notebook's sandboxed run does not run such a test cell, so an answer cell
that forges the learner's process (it rebinds ``course.check``, which makes the test pass when the notebook runs in one
process, as the control shows) earns nothing, with the reason in the autograded notebook's test cell and at the top of
the feedback page. An honest answer keeps its points, with the check's own line, and a wrong one loses them with the
check's reason. Without the re-check nothing earns a point: each judged test cell still says it awaits the grader.
A re-check that cannot run fails closed.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.coursedir import COURSE_ID, CourseDir
from autograder.grade.bundle import GradingSettings
from autograder.grade.stages import nbgrader_in_process
from autograder.nbgrader_config import course_config
from autograder.preprocessors.recheck_tests import JUDGED, RECHECK_ERROR, RECHECK_RECORD, RecheckTests
from autograder.preprocessors.sandboxed_execute import AWAITING_RECHECK, METADATA_KEY
from autograder.sandbox.bubblewrap import SandboxSettings
from grading_support import processes_left_behind, put
from notebook_factory import cell, notebook

ASSIGNMENT = "forge"
RIGHT = "return n * (d + 3 * n * d) * torch.empty((), dtype=dtype).element_size()"
WRONG = "return 0"
FORGERY = "\nimport course\ncourse.check = lambda *a, **k: None"


def lesson(body: str = RIGHT, after: str = "") -> nbformat.NotebookNode:
    return notebook([
        cell("import torch\n\nimport course", grade_id="setup", locked=True),
        cell(f"def naive_bytes_read(n, d, dtype):\n    ### BEGIN SOLUTION\n    {body}\n    ### END SOLUTION{after}",
             grade_id="naive_bytes_read", solution=True),
        cell('course.check("01.naive_bytes_read", naive_bytes_read)', grade_id="test_naive_bytes_read", grade=True,
             locked=True, points=2),
    ])


def _course(root: Path) -> tuple[CourseDir, GradingSettings]:
    settings = GradingSettings(ASSIGNMENT, f"{ASSIGNMENT}.ipynb", timeout=120, wall_limit=600, sandbox=SandboxSettings())
    course = CourseDir.create(root, settings.timeout, settings.sandbox)
    put(course.source(ASSIGNMENT) / settings.notebook_name, lesson())
    assert nbgrader_in_process(course.root, settings, "generate_assignment", ASSIGNMENT) is None
    for student, nb in {"honest": lesson(), "forger": lesson(WRONG, FORGERY), "wrong": lesson(WRONG)}.items():
        put(course.submitted(student, ASSIGNMENT) / settings.notebook_name, nb)
        (course.submitted(student, ASSIGNMENT) / "timestamp.txt").write_text("2026-11-01 10:00:00 UTC")
    return course, settings


def _autograde(course: CourseDir) -> dict[str, float]:
    run = course.run("autograde", ASSIGNMENT, "--force", timeout=900)
    assert run.ok, run.log[-3000:]
    with Gradebook(course.db_url, COURSE_ID) as gb:
        return {s: gb.find_submission(ASSIGNMENT, s).score for s in ("honest", "forger", "wrong")}


def _test_cell(course: CourseDir, student: str) -> tuple[dict, dict]:
    path = course.autograded(student, ASSIGNMENT) / f"{ASSIGNMENT}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    test = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_naive_bytes_read")
    return test, nb["metadata"][METADATA_KEY].get(RECHECK_RECORD)


def test_control_the_forgery_passes_when_the_notebook_runs_its_own_tests(tmp_path: Path) -> None:
    """Run top to bottom in one process, as nbgrader's own Execute would, the forged notebook's test passes."""
    from nbclient import NotebookClient
    nb = lesson(WRONG, FORGERY)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_naive_bytes_read")
    assert not [o for o in test.outputs if o.output_type == "error"], test.outputs


@pytest.mark.slow
def test_autograde_takes_the_points_of_a_forged_run(tmp_path: Path) -> None:
    with processes_left_behind() as left:
        course, settings = _course(tmp_path / "course")
        scores = _autograde(course)
        assert scores == {"honest": 2.0, "forger": 0.0, "wrong": 0.0}, scores

        for student in ("forger", "wrong"):
            test, record = _test_cell(course, student)
            assert [o["output_type"] for o in test["outputs"]] == ["error"], test["outputs"]
            error = test["outputs"][0]
            assert error["ename"] == "CheckFailed" and JUDGED in error["evalue"], error
            assert "01.naive_bytes_read: naive_bytes_read(n=1, d=16, dtype=torch.float32) returned 0" in error["evalue"]
            assert [line.split(":")[0] for line in record["changes"]] == ["test_naive_bytes_read"], record
            assert record["problem"] == "" and record["seconds"] > 0
        test, record = _test_cell(course, "honest")
        assert record["changes"] == [] and [o["output_type"] for o in test["outputs"]] == ["stream"], test["outputs"]
        assert "01.naive_bytes_read: 4 cases passed" in "".join(test["outputs"][0]["text"]), "the check's own line, from the re-check"
        assert (course.root / "logs" / "recheck-forger.log").is_file()

        assert nbgrader_in_process(course.root, settings, "generate_feedback", ASSIGNMENT, "forger") is None
        page = (course.feedback("forger", ASSIGNMENT) / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
        assert 'id="course-recheck"' in page and JUDGED in page, "the box and the cell say why"

        # Control: the same notebooks autograded without the re-check. No test earns a point: each awaits the grader.
        config = course.root / "nbgrader_config.py"
        config.write_text(config.read_text() + (
            "from autograder.preprocessors.recheck_tests import RecheckTests\n"
            "c.Autograde.autograde_preprocessors = [p for p in c.Autograde.autograde_preprocessors "
            "if p is not RecheckTests]\n"))
        assert _autograde(course) == {"honest": 0.0, "forger": 0.0, "wrong": 0.0}
        test, _ = _test_cell(course, "honest")
        assert [o["ename"] for o in test["outputs"]] == [AWAITING_RECHECK], test["outputs"]
    assert not left, f"processes of the autograde run outlived it: {left}"


def test_a_recheck_that_cannot_run_fails_closed(tmp_path: Path) -> None:
    """No instructor's notebook where the course directory keeps it: every test cell the re-check should have judged
    earns nothing, and says why; a test that does not grade through the course is kept."""
    nb = lesson()
    nb.cells.append(cell("assert naive_bytes_read(1, 1, torch.float32) > 0", grade_id="test_plain", grade=True,
                         locked=True, points=1))
    step = RecheckTests(config=course_config(tmp_path / "course"))  # its source/ folder does not exist
    nb, _ = step.preprocess(nb, {"nbgrader": {"assignment": ASSIGNMENT, "notebook": ASSIGNMENT, "student": "s"}})
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    [error] = cells["test_naive_bytes_read"].outputs
    assert error.ename == RECHECK_ERROR and "could not read the instructor's notebook" in error.evalue, error
    assert cells["test_plain"].outputs == []
    record = nb.metadata[METADATA_KEY][RECHECK_RECORD]
    assert record["kept"] == ["test_plain"] and "could not read" in record["problem"]
    assert [line.split(":")[0] for line in record["changes"]] == ["test_naive_bytes_read"]
