"""The cheating corpus's later-lesson entries, checked directly (no nbgrader): each fools the notebook's own run
and loses exactly its test cell where the grade is decided, with the reason in the message.

- ``records-oracle-for-stub-NN`` (autograder.corpora.cheating.oracle_rebind_cheats), one per lesson 03-07 and 09:
  the stub handed in, and course.check rebound so that the notebook grades the course's own model in its place.
  The notebook's run passes it; the re-check, which runs the stub in the answer process, says it is not
  implemented yet, and every other Python test of the lesson keeps its points.
- ``cuda-kernel-reaches-libc-by-offset`` (native_escape_cheats): lesson 03's CUDA C kernel calls fopen through
  malloc's address plus an offset; the check fails it with the CPU runtime's sentence.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import sys

import pytest

import course
from autograder.corpora.cheating import ORACLE_REBINDS, as_submission, native_escape_cheats, oracle_rebind_cheats
from autograder.corpora.hostile import make_submission
from autograder.preprocessors.recheck_tests import build_job
from course import exercises
from course.errors import CheckFailed

# The lesson's other Python tests graded by return value: the entry must leave them their points.
OTHER_TESTS = {"03_tiling": ["test_shared_bytes"], "04_double_buffering": ["test_bank_ways"], "05_matrix_units": [],
               "06_causal_masking": ["test_causal_mask"], "07_backward_pass": ["test_differing_elements"],
               "09_dataflow": []}


def _handed_in(repo, cheat) -> tuple[dict, dict]:
    source = repo / "solutions" / cheat.assignment / f"{cheat.assignment}.ipynb"
    notebook = make_submission(source, as_submission(cheat, repo))  # the entry applies to the lesson as it is
    return json.loads(source.read_text(encoding="utf-8")), json.loads(json.dumps(notebook))


@pytest.mark.parametrize("lesson", sorted(ORACLE_REBINDS))
def test_the_rebind_fools_the_notebooks_own_run(repo, lesson, monkeypatch):
    cheat = next(c for c in oracle_rebind_cheats(repo) if c.assignment == lesson)
    cell, exercise, _ = ORACLE_REBINDS[lesson]
    source, graded = _handed_in(repo, cheat)
    job = build_job(source, graded)
    monkeypatch.setattr(course, "check", course.check)  # the cell rebinds both: put them back afterwards
    monkeypatch.setattr(exercises, "MODEL_POLICY", dict(exercises.MODEL_POLICY))
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for setup in job["setup"]:
            exec(compile(setup, "<setup>", "exec"), namespace)
        real = course.check
        answer = next(a for a in job["answers"] if a["cell"] == cell)
        exec(compile(answer["source"], f"<{cell}>", "exec"), namespace)
        with pytest.raises(CheckFailed, match=rf"^{re.escape(exercise)}: not implemented yet"):
            real(exercise, namespace[cell])  # what the cell hands in is the stub
        test = next(t for t in job["tests"] if t["cell"] == f"test_{cell}")
        exec(compile(test["source"], "<test>", "exec"), namespace)  # and yet the notebook's test passes, hidden ones too


def test_the_recheck_takes_exactly_the_stubs_tests(repo, monkeypatch):
    """All six lessons in one re-check (one answer process): each stub's test fails with its reason, the lessons'
    other Python tests pass."""
    from course.grading import exercise as grading_run
    from course.grading.recheck import run_job
    from course.lessons import load
    monkeypatch.setattr(grading_run, "STOP_AT_FIRST_PASS", grading_run.STOP_AT_FIRST_PASS)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # run_job takes it away; monkeypatch puts it back
    merged: dict = {"setup": [], "answers": [], "tests": [], "recordings": {}}
    expected: dict[str, str | None] = {}
    for cheat in oracle_rebind_cheats(repo):
        cell, exercise, _ = ORACLE_REBINDS[cheat.assignment]
        source, graded = _handed_in(repo, cheat)
        job = build_job(source, graded)
        merged["setup"] += [s for s in job["setup"] if s not in merged["setup"]]
        wanted = {f"test_{cell}", *OTHER_TESTS[cheat.assignment]}
        merged["tests"] += [t for t in job["tests"] if t["cell"] in wanted]
        merged["answers"] += [a for a in job["answers"] if a["kind"] == "python" and f"test_{a['cell']}" in wanted]
        expected.update({t: None for t in OTHER_TESTS[cheat.assignment]})
        expected[f"test_{cell}"] = cheat.feedback.split(r"[\s\S]*", 1)[1]
    results = run_job(merged, load().cell_builders)
    assert set(results) == set(expected)
    for test, reason in expected.items():
        outcome = results[test]
        if reason is None:
            assert outcome["passed"], (test, outcome)
        else:
            assert not outcome["passed"] and re.match(reason, outcome["message"]), (test, outcome)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the system-call filter is Linux's seccomp")
def test_a_cuda_kernel_reaching_libc_by_offset_loses_its_kernel_tests(repo, capsys):
    from course.simt import RawModule
    [cheat] = native_escape_cheats(repo)
    _, graded = _handed_in(repo, cheat)
    text = next("".join(c["source"]) for c in graded["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == "tiled_kernel_cuda")
    _, _, body = text.partition("\n")  # the %%cuda line
    assert "&malloc" in body and "fopen" not in body.replace("// fopen", "")  # no name a compiler check could see
    module = RawModule(code=body, language="cuda", name="tiled_cuda.cu", first_line=2, compile_now="checked")
    with pytest.raises(CheckFailed) as refused:
        course.check("03.tiled_cuda", module)
    assert re.search(cheat.feedback, str(refused.value)), str(refused.value)
    assert cheat.loses == ("test_tiled_kernel", "test_tiled_kernel_hidden")
