"""Every exercise a lesson grades has a hint ladder and a reveal; hints climb, reveals say what they are."""
from __future__ import annotations

import json

import pytest

import course
from course.errors import CourseError
from course.hint_ladder import LADDERS, solution_text
from course.track_choice import exercise_for
from course.paths import SOLUTIONS


def _graded_exercises() -> set[str]:
    """The exercise ids the lessons' test cells check (course.check / course.check_tracks calls)."""
    import re
    found = set()
    for path in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            found.update(re.findall(r'course\.check\("([\w.]+)"', source))
            for step, tracks in re.findall(r'course\.check_tracks\("([\w.]+)",([^)]*)', source):
                found.update(exercise_for(step, t) for t in re.findall(r"\b(triton|cuda|metal)=", tracks))
    return found


def test_every_graded_exercise_has_a_ladder_of_at_least_three_rungs():
    graded = _graded_exercises()
    assert graded, "no graded exercises found in solutions/"
    missing = sorted(graded - set(LADDERS))
    assert not missing, f"exercises without hints: {missing}"
    assert all(len(ladder.rungs) >= 3 for ladder in LADDERS.values())
    assert all(ladder.exercise in course.EXERCISES for ladder in LADDERS.values())


@pytest.mark.parametrize("exercise", sorted(LADDERS))
def test_every_reveal_shows_a_nonempty_solution(exercise):
    where, text = solution_text(exercise)
    assert text.strip() and "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, where


def _printed(capsys, call) -> str:
    assert call() is None  # printed, not returned: a cell's last line shows it once
    return capsys.readouterr().out


def test_hints_climb_one_rung_per_call_and_stop_at_the_top(capsys):
    from course import hint_ladder
    hint_ladder._climbed.pop("02.merge_torch", None)
    rungs = LADDERS["02.merge_torch"].rungs
    shown = [_printed(capsys, lambda: course.hint("02.merge_torch")) for _ in range(len(rungs) + 1)]
    assert [s.split(":", 1)[0] for s in shown] == [f"hint {i} of {len(rungs)} for 02.merge_torch"
                                                    for i in [*range(1, len(rungs) + 1), len(rungs)]]
    assert "course.reveal('02.merge_torch')" in shown[-1]
    assert _printed(capsys, lambda: course.hint("02.merge_torch", 1)).startswith("hint 1 of")
    with pytest.raises(CourseError, match="has hints 1 to"):
        course.hint("02.merge_torch", 99)
    with pytest.raises(CourseError, match="no hints for"):
        course.hint("99.nothing")


def test_reveal_says_it_is_revealing(capsys):
    shown = _printed(capsys, lambda: course.reveal("01.attention_torch"))
    assert shown.startswith("REVEALING the reference solution of 01.attention_torch")
    assert "s.amax(dim=-1, keepdim=True)" in shown


def test_a_cell_ending_in_hint_or_reveal_shows_the_text_once(capsys):
    """As lesson 00 uses them: the last line of a cell. IPython shows a cell's last value too; there is none."""
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    try:
        for line, marker in (('course.hint("02.merge_torch", 2)', "hint 2 of"),
                             ('course.reveal("01.attention_torch")', "REVEALING")):
            shell.run_cell(f"import course\n{line}", store_history=False)
            out = capsys.readouterr().out
            assert out.count(marker) == 1 and "Out[" not in out and "\\n" not in out, out
    finally:
        InteractiveShell.clear_instance()
