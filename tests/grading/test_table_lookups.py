"""The cheating corpus's table lookups, checked directly (no nbgrader), beside the instructor's answer.

``table-lookup-NN`` (autograder.corpora.cheating.table_lookup_cheats), for 05.fragment_lane and
07.differing_elements, the two exercises whose visible check once asked every question there was: the answer cell
pastes the answers to every question the visible check asks and looks them up. It earns exactly what it solved:
the visible check passes it, the hidden test's drawn arguments lie outside the table, and the test cell loses its
points with the check's sentence saying which question the table missed; the instructor's answer keeps them.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from autograder.corpora.cheating import TABLE_LOOKUPS, as_submission, table_lookup_cheats
from autograder.corpora.hostile import make_submission
from autograder.preprocessors.recheck_tests import build_job
from course.errors import CheckFailed

HIDDEN_START = "### BEGIN HIDDEN TESTS"
# The lesson's other Python tests graded by return value: the entry must leave them their points.
OTHER_TESTS = {"05_matrix_units": [], "07_backward_pass": ["test_backward_flops"]}


def _job(repo, cheat=None, lesson: str = "") -> dict:
    """The re-check's job for the lesson handed in with ``cheat`` (or, without one, the instructor's answers)."""
    lesson = cheat.assignment if cheat else lesson
    source = repo / "solutions" / lesson / f"{lesson}.ipynb"
    handed_in = make_submission(source, as_submission(cheat, repo)) if cheat else json.loads(source.read_text())
    return build_job(json.loads(source.read_text(encoding="utf-8")), json.loads(json.dumps(handed_in)))


def _answer(job: dict, cell: str) -> dict:
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for setup in job["setup"]:
            exec(compile(setup, "<setup>", "exec"), namespace)
        answer = next(a for a in job["answers"] if a["cell"] == cell)
        exec(compile(answer["source"], f"<{cell}>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("lesson", sorted(TABLE_LOOKUPS))
def test_the_table_passes_the_visible_check_and_fails_the_hidden_test(repo, lesson, capsys):
    cheat = next(c for c in table_lookup_cheats() if c.assignment == lesson)
    cell, exercise, feedback = TABLE_LOOKUPS[lesson]
    job = _job(repo, cheat)
    test = next(t for t in job["tests"] if t["cell"] == f"test_{cell}")["source"]
    visible, hidden = test.split(HIDDEN_START, 1)
    assert "drawn=" in hidden
    namespace = _answer(job, cell)
    exec(compile(visible, "<visible test>", "exec"), namespace)  # the table answers every visible question
    with pytest.raises(CheckFailed) as missed:
        exec(compile(HIDDEN_START + hidden, "<hidden test>", "exec"), namespace)
    assert re.match(feedback, str(missed.value)), str(missed.value)
    honest = _answer(_job(repo, lesson=lesson), cell)  # the instructor's answer passes both
    exec(compile(test, "<test>", "exec"), honest)


def test_the_recheck_takes_exactly_the_tables_tests_and_the_honest_answers_keep_theirs(repo, monkeypatch):
    """Both lessons in one re-check (one answer process) per submission: each table's test cell fails with its
    sentence and the lessons' other Python tests pass; the instructor's notebooks pass every one of them."""
    from course.grading import exercise as grading_run
    from course.grading.recheck import run_job
    from course.lessons import load
    monkeypatch.setattr(grading_run, "STOP_AT_FIRST_PASS", grading_run.STOP_AT_FIRST_PASS)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # run_job takes it away; monkeypatch puts it back
    merged = {which: {"setup": [], "answers": [], "tests": [], "recordings": {}} for which in ("tables", "honest")}
    expected: dict[str, str | None] = {}
    for cheat in table_lookup_cheats():
        cell, _, feedback = TABLE_LOOKUPS[cheat.assignment]
        wanted = {f"test_{cell}", *OTHER_TESTS[cheat.assignment]}
        for which, job in (("tables", _job(repo, cheat)), ("honest", _job(repo, lesson=cheat.assignment))):
            merged[which]["setup"] += [s for s in job["setup"] if s not in merged[which]["setup"]]
            merged[which]["tests"] += [t for t in job["tests"] if t["cell"] in wanted]
            merged[which]["answers"] += [a for a in job["answers"]
                                         if a["kind"] == "python" and f"test_{a['cell']}" in wanted]
        expected.update({test: None for test in OTHER_TESTS[cheat.assignment]})
        expected[f"test_{cell}"] = feedback
    tables, honest = run_job(merged["tables"], load().cell_builders), run_job(merged["honest"], load().cell_builders)
    assert set(tables) == set(honest) == set(expected)
    for test, reason in expected.items():
        assert honest[test]["passed"], (test, honest[test])
        if reason is None:
            assert tables[test]["passed"], (test, tables[test])
        else:
            assert not tables[test]["passed"] and re.match(reason, tables[test]["message"]), (test, tables[test])
