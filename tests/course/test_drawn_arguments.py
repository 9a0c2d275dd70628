"""Numeric exercises are graded on arguments drawn when the grader runs: a table of the visible ones fails.

The rule, for every numeric exercise (a check that takes ``arguments``), present and future:
- it has a drawer (course.exercises.DRAWS) whose sets the right answer accepts, or a reason it needs none;
- its hidden test checks ``drawn=`` sets beside its boundary cases, so a lookup table keyed on the visible
  arguments, right on every one of them, loses the hidden test's points;
- under the grader the seed is recorded, and the re-check (which replays the learner's answers) draws the
  same sets, while a recording without the seed fails.
"""
from __future__ import annotations

import inspect
import json
import re

import pytest
import torch

import course
from course.errors import CheckFailed
from course.exercises import DRAWS, EXERCISES, drawn_arguments
from course.paths import SOLUTIONS
from course.grading.recording import Replay

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)
# Numeric exercises whose lesson's hidden tests do not draw yet; the list may only shrink.
NOT_DRAWN_YET: set[str] = set()


def _numeric() -> set[str]:
    return {e for e, ex in EXERCISES.items() if "arguments" in inspect.signature(ex.run).parameters}


def _notebook(lesson: str) -> list[dict]:
    return json.loads((SOLUTIONS / lesson / f"{lesson}.ipynb").read_text())["cells"]


def _grade_id(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _test_cells() -> dict[str, list[tuple[str, str]]]:
    """Exercise id → (lesson, source) of each test cell that checks it."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if _grade_id(cell).startswith("test_"):
                source = "".join(cell["source"])
                for exercise in set(re.findall(r'course\.check\("([\w.]+)"', source)):
                    found.setdefault(exercise, []).append((path.parent.name, source))
    return found


def _honest(lesson: str, exercise: str):
    """The instructor's answer to ``exercise``: the setup cell, the solution cells before it (for the names
    it uses) and its own, run as Python; the name its test cell hands to the check."""
    cells = _notebook(lesson)
    source = next(s for lsn, s in _test_cells()[exercise] if lsn == lesson)
    name = re.search(rf'course\.check\("{re.escape(exercise)}", (\w+)', source).group(1)
    namespace: dict = {}
    for cell in cells:
        text = "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or text.startswith("%%") or not (meta.get("solution") or _grade_id(cell) == "setup"):
            continue
        try:
            exec(compile(text, f"<{lesson} {_grade_id(cell)}>", "exec"), namespace)
        except Exception:  # noqa: BLE001 - a kernel cell this exercise does not need
            continue
        if name in namespace:
            return namespace[name]
    raise AssertionError(f"{lesson} defines no {name}")


def _lookup_table(exercise: str, honest):
    """What a learner who only memorised the visible check's answers hands in."""
    table = {}

    def remember(*args, **kwargs):
        table[repr((args, sorted(kwargs.items())))] = result = honest(*args, **kwargs)
        return result
    remember.__name__ = getattr(honest, "__name__", "answer")
    course.check(exercise, remember)

    def lookup(*args, **kwargs):
        return table.get(repr((args, sorted(kwargs.items()))), 0)
    lookup.__name__ = remember.__name__
    return lookup


def test_every_numeric_exercise_draws():
    numeric = _numeric()
    assert {"04.warp_sectors", "09.grid_assignment", "05.fragment_lane"} <= numeric
    assert numeric == set(DRAWS), numeric ^ set(DRAWS)


def test_the_same_seed_draws_the_same_sets_and_another_seed_others():
    for exercise in DRAWS:
        assert drawn_arguments(exercise, 6, 1234) == drawn_arguments(exercise, 6, 1234)
        assert drawn_arguments(exercise, 6, 1234) != drawn_arguments(exercise, 6, 4321), exercise


def test_every_hidden_test_of_a_numeric_exercise_draws():
    cells = _test_cells()
    drawing = {e for e in DRAWS for _, source in cells.get(e, [])
               if any("drawn=" in hidden for hidden in HIDDEN.findall(source))}
    assert drawing == set(DRAWS) - NOT_DRAWN_YET, drawing ^ (set(DRAWS) - NOT_DRAWN_YET)


@pytest.mark.parametrize("exercise", sorted(set(DRAWS) - NOT_DRAWN_YET))
def test_the_right_answer_passes_the_draws_and_a_table_of_the_visible_arguments_fails(exercise, capsys):
    lesson = next(lesson for lesson, _ in _test_cells()[exercise])
    honest = _honest(lesson, exercise)
    course.check(exercise, honest, drawn=60)  # every drawn set lies in the exercise's valid range
    lookup = _lookup_table(exercise, honest)
    course.check(exercise, lookup)  # the table passes the visible check
    hidden = "\n".join(HIDDEN.findall(next(s for lsn, s in _test_cells()[exercise] if lsn == lesson)))
    name = re.search(rf'course\.check\("{re.escape(exercise)}", (\w+)', hidden).group(1)
    with pytest.raises(CheckFailed):
        exec(compile(hidden, "<hidden test>", "exec"), {"course": course, "torch": torch, name: lookup})
    with pytest.raises(CheckFailed):  # and on draws alone, so it is not the boundary cases that catch it
        course.check(exercise, lookup, drawn=12)


def test_the_re_check_replays_the_recorded_draws(monkeypatch, capsys):
    """Under the grader: the notebook's check records the seed beside the answers; the re-check, which never
    runs the learner's code, draws the same sets and finds every answer. Without the seed it fails."""
    from course import exercises
    bundles = []
    monkeypatch.setattr(exercises, "emit", lambda recorder: bundles.append(recorder.bundle()))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    given = [dict(offset_bytes=8, stride_bytes=16, access_bytes=16)]
    honest = _honest("04_double_buffering", "04.warp_sectors")
    course.check("04.warp_sectors", honest, arguments=given, drawn=10)
    monkeypatch.delenv("NBGRADER_EXECUTION")
    (bundle,) = bundles
    seeds = [k for k in bundle["calls"] if k.startswith("drawn-seed:")]
    assert len(seeds) == 1 and len(bundle["calls"]) >= 11
    recordings = {"04.warp_sectors": bundle["calls"]}
    report = course.check("04.warp_sectors", Replay("warp_sectors", recordings), arguments=given, drawn=10)
    assert report.cases == 11
    without = {"04.warp_sectors": {k: v for k, v in bundle["calls"].items() if k not in seeds}}
    with pytest.raises(CheckFailed, match="holds no drawn arguments"):
        course.check("04.warp_sectors", Replay("warp_sectors", without), arguments=given, drawn=10)
    with pytest.raises(CheckFailed, match="draws no arguments"):
        course.check("01.attention_torch", honest, drawn=3)
