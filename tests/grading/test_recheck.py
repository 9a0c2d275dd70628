"""The re-check's parts, each on its own (the cheating corpus grades them together through nbgrader).

``course.grading.recheck`` grades the instructor's tests again in a fresh process, where the learner's Python answer
cells run in an answer process of their own (``course.grading.answer_process``); ``course.grading.recording`` records what a
learner's function answered (the re-check grades none of it any more); ``autograder.preprocessors.recheck_tests`` builds
the re-check's input from the lesson and the graded notebook.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from autograder.preprocessors.recheck_tests import answer_cells, build_job, grades_through_course
from autograder.release.build import ReleaseError, check_test_cells, find_assignments
from course.exercises import EXERCISES
from course.grading.recheck import run_job
from course.lessons import load
from course.grading.recording import MIME, Recorder, Replay, decode, encode
from course.tracks import table

LESSON = "01_naive_attention"
BYTES_TEST = 'course.check("01.naive_bytes_read", naive_bytes_read)'


def _right_bytes(n, d, dtype):
    return n * (d + 3 * n * d) * torch.empty((), dtype=dtype).element_size()


def _recorded(fn) -> dict:
    """The recording the notebook's check of ``fn`` leaves (what a test cell's output holds)."""
    recorder = Recorder("01.naive_bytes_read", fn, "naive_bytes_read")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        EXERCISES["01.naive_bytes_read"].run(recorder)
    return {"01.naive_bytes_read": recorder.calls}


RIGHT_CELL = ("def naive_bytes_read(n, d, dtype):\n"
              "    return n * (d + 3 * n * d) * torch.empty((), dtype=dtype).element_size()\n")
STUB_CELL = "def naive_bytes_read(n, d, dtype):\n    raise NotImplementedError()\n"


def _job(recordings: dict, test: str = BYTES_TEST, source: str | None = RIGHT_CELL) -> dict:
    return {"setup": ["import course, torch"], "tests": [{"cell": "t", "source": test}], "recordings": recordings,
            "answers": [{"cell": "naive_bytes_read", "kind": "python", "names": ["naive_bytes_read"],
                         "source": source}]}


def test_encoded_values_come_back_exactly() -> None:
    values = [torch.arange(6, dtype=torch.float16).reshape(2, 3), torch.empty(0, 4), torch.float32, (1, 2.5, None),
              ["a", True]]
    for value in values:
        back = decode(json.loads(json.dumps(encode(value))))
        if isinstance(value, torch.Tensor):
            assert back.dtype == value.dtype and torch.equal(back, value)
        else:
            assert back == value
    with pytest.raises(ValueError):
        decode({"tensor": "", "dtype": "Tensor", "shape": [0]})  # a name in torch that is not a dtype


def test_the_answer_cell_runs_again_and_decides() -> None:
    """The re-check runs the answer cell as handed in (in its answer process) on the check's own arguments."""
    assert run_job(_job({}), load().cell_builders)["t"]["passed"]
    wrong = run_job(_job({}, source="def naive_bytes_read(n, d, dtype):\n    return 0\n"), load().cell_builders)["t"]
    assert not wrong["passed"] and "01.naive_bytes_read" in wrong["message"]
    missing = run_job(_job({}, source=None), load().cell_builders)["t"]
    assert not missing["passed"] and "is not in the notebook handed in" in missing["message"]
    broken = run_job(_job({}, source="def naive_bytes_read(n, d, dtype):\n    return n\nraise RuntimeError('no')\n"),
                     load().cell_builders)
    assert not broken["t"]["passed"] and "raised RuntimeError when it ran: no" in broken["t"]["message"]


def test_recordings_of_right_answers_do_not_pass_a_stub() -> None:
    """A cell that rebinds course.check can make the notebook record the oracle's answers for a stub: the re-check
    runs the stub, so those recordings earn nothing."""
    result = run_job(_job(_recorded(_right_bytes), source=STUB_CELL), load().cell_builders)["t"]
    assert not result["passed"] and "not implemented yet" in result["message"]


def test_a_replayed_recording_passes_only_where_its_answer_is_right() -> None:
    """A replayed recording is data: a forged one must be the right answer to the check's own inputs, call by
    call, to pass (the re-check no longer replays any; tests/grading/test_capstone_recheck.py shows why not)."""
    forged = _recorded(_right_bytes)
    assert EXERCISES["01.naive_bytes_read"].run(Replay("naive_bytes_read", forged, "01.naive_bytes_read")) is not None
    calls = forged["01.naive_bytes_read"]
    first = next(iter(calls))
    calls[first] = calls[first] + 2
    with pytest.raises(Exception, match="01.naive_bytes_read"), contextlib.redirect_stdout(io.StringIO()):
        EXERCISES["01.naive_bytes_read"].run(Replay("naive_bytes_read", forged, "01.naive_bytes_read"))


def test_a_test_that_calls_the_answer_itself_gets_what_the_cell_computes() -> None:
    direct = "assert naive_bytes_read(1, 16, torch.float32) == 256"
    assert run_job(_job({}, direct), load().cell_builders)["t"]["passed"]
    wrong = _job({}, direct, source="def naive_bytes_read(n, d, dtype):\n    return 0\n")
    assert not run_job(wrong, load().cell_builders)["t"]["passed"]


def test_only_tests_that_call_the_course_are_rechecked() -> None:
    assert grades_through_course(BYTES_TEST)
    assert grades_through_course("import course\n### BEGIN HIDDEN TESTS\ncourse.check_tracks('x', triton=f)\n")
    assert not grades_through_course("assert add(1, 2) == 3")
    assert not grades_through_course("check = course\nprint(check)")  # naming the module grades nothing
    assert not grades_through_course("course.check(")  # a syntax error cannot pass anyway


def test_the_course_releases_no_test_the_recheck_cannot_judge(tmp_path: Path) -> None:
    solutions = Path(__file__).resolve().parents[2] / "solutions"
    check_test_cells(solutions, find_assignments(solutions))
    lesson = json.loads((solutions / LESSON / f"{LESSON}.ipynb").read_text(encoding="utf-8"))
    for cell in lesson["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "test_naive_bytes_read":
            cell["source"] = "assert naive_bytes_read(1, 16, torch.float32) == 196"
    (tmp_path / LESSON).mkdir()
    (tmp_path / LESSON / f"{LESSON}.ipynb").write_text(json.dumps(lesson), encoding="utf-8")
    with pytest.raises(ReleaseError, match=r"01_naive_attention.ipynb cell \d+ \('test_naive_bytes_read'\)"):
        check_test_cells(tmp_path, [LESSON])


@pytest.mark.parametrize("assignment", find_assignments(Path(__file__).resolve().parents[2] / "solutions"))
def test_every_triton_answer_cell_names_a_kernel_file_of_the_table(repo: Path, assignment: str) -> None:
    """The re-check launches a Triton cell's kernels with the wrapper of the file the cell mirrors."""
    notebook = json.loads((repo / "solutions" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    files = {row.kernel_file for row in table.exercises(track="triton")}
    for answer in answer_cells(notebook):
        if answer["kind"] == "triton":
            assert answer["kernel_file"] in files, answer


def test_the_job_takes_answers_from_the_handed_in_notebook_and_recordings_from_test_outputs(repo: Path) -> None:
    source = json.loads((repo / "solutions" / LESSON / f"{LESSON}.ipynb").read_text(encoding="utf-8"))
    graded = json.loads(json.dumps(source))
    bundle = {"exercise": "01.naive_bytes_read", "calls": {"k": 1}}
    for cell in graded["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id == "naive_bytes_read":
            cell["source"] = "def naive_bytes_read(n, d, dtype):\n    return 0\n"
        if grade_id in ("test_naive_bytes_read", "naive_triton"):  # only a test cell's recording counts
            cell["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {MIME: json.dumps(bundle)}}]
    job = build_job(source, graded)
    answers = {a["cell"]: a for a in job["answers"]}
    assert answers["naive_bytes_read"]["source"].endswith("return 0\n")
    assert job["recordings"] == {"01.naive_bytes_read": {"k": 1}}
    assert job["kept"] == [] and {t["cell"] for t in job["tests"]} >= {"test_naive_bytes_read", "test_naive_kernel_hidden"}
    assert any("BEGIN HIDDEN TESTS" in t["source"] for t in job["tests"])  # the grader's copy, hidden tests in


def test_a_replay_outside_any_check_refuses() -> None:
    with pytest.raises(Exception, match="rather than through course.check"):
        Replay("f", {})(1)


def test_every_test_through_the_course_is_judged_whatever_the_notebook_shows(repo: Path) -> None:
    """The job holds every test that grades through the course: an error, or a pass, in the notebook's copy of the cell
    (the notebook's run does not run it; anything there came from elsewhere) changes nothing."""
    source = json.loads((repo / "solutions" / LESSON / f"{LESSON}.ipynb").read_text(encoding="utf-8"))
    graded = json.loads(json.dumps(source))
    for cell in graded["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "test_naive_kernel":
            cell["outputs"] = [{"output_type": "error", "ename": "CheckFailed", "evalue": "", "traceback": []}]
    job = build_job(source, graded)
    tests = [c["metadata"]["nbgrader"]["grade_id"] for c in source["cells"]
             if c["metadata"].get("nbgrader", {}).get("grade") and not c["metadata"]["nbgrader"].get("solution")]
    assert [t["cell"] for t in job["tests"]] == tests and "test_naive_kernel" in tests