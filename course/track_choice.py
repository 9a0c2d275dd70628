"""One lesson step, graded in the language the learner chose: the best track counts.

A lesson that offers a kernel in Triton, CUDA C and Metal asks for the idea once. The learner writes
the kernel in the language they study; the other tracks stay in the notebook as practice. The
graded test cell calls

    course.check_tracks("01.naive", triton=naive_attention, cuda=naive_cuda, metal=naive_metal)

which checks every track the learner touched and passes when at least one passes, saying which one
was graded and what the others (practice) did: a practice track that fails shows its whole failure,
as its own check would. A track still holding its stub is "not started",
never a failure.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any

from course.errors import CheckFailed
from course.exercises import EXERCISES, check
from course.grading import exercise as grading_run
from course.tracks import table
from course.tracks.table import TRACK_NAMES

__all__ = ["TRACK_NAMES", "STEPS", "TOUCHED", "exercise_for", "check_tracks"]


# Steps whose exercise ids do not follow "<step>_<track>" (a Triton file that holds more than one exercise names the
# graded one by its variant), as their rows declare them (across_tracks): step → track → exercise id.
STEPS: dict[str, dict[str, str]] = {
    step: {row.track: row.id for row in table.KERNEL_EXERCISES if row.across_tracks == step}
    for step in dict.fromkeys(row.across_tracks for row in table.KERNEL_EXERCISES if row.across_tracks)}


# What the learner's checks showed of the tracks they study, in this kernel: step → the tracks its last
# check_tracks call found touched (not as handed out), and "" → those of the latest call of any step.
# course.hint reads it to give a step's hints in the learner's track.
TOUCHED: dict[str, tuple[str, ...]] = {}


def exercise_for(step: str, track: str) -> str:
    """The exercise id that grades ``step`` in ``track`` (``01.naive`` + ``cuda`` → ``01.naive_cuda``)."""
    return STEPS.get(step, {}).get(track, f"{step}_{track}")


def _not_started(message: str) -> bool:
    return "not implemented yet" in message


def _indent(text: str, by: int = 4) -> str:
    return "\n".join(" " * by + line for line in text.splitlines())


def check_tracks(step: str, *, cases: Any = None, **answers: Any):
    """Check ``answers`` (track name → the learner's function or compiled cell) for lesson step ``step``.

    Passes (returns the graded track's Report) when at least one track passes; raises CheckFailed
    naming every track's problem when none does.
    """
    unknown = [t for t in answers if t not in TRACK_NAMES or exercise_for(step, t) not in EXERCISES]
    if not answers or unknown:
        offered = [t for t in TRACK_NAMES if exercise_for(step, t) in EXERCISES]
        raise CheckFailed(f"{step}: give the answer of each track by name ({', '.join(f'{t}=...' for t in offered)}); "
                          f"got {', '.join(unknown) or 'none'}")
    options = {} if cases is None else {"cases": cases}
    passed, outcomes = None, []
    for track, answer in answers.items():
        exercise = exercise_for(step, track)
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet):
                report = check(exercise, answer, **options)
        except CheckFailed as failure:
            message = str(failure)
            state = "not started" if _not_started(message) else "failed"
            outcomes.append((track, state, message))
            continue
        outcomes.append((track, "passed", str(report)))
        if passed is None:
            passed = (track, report)
        if grading_run.STOP_AT_FIRST_PASS:
            break
    touched = tuple(track for track, state, _ in outcomes if state != "not started")
    if touched:
        TOUCHED[step] = TOUCHED[""] = touched
    if passed is None:
        if all(state == "not started" for _, state, _ in outcomes):
            raise CheckFailed(f"{step}: not implemented yet in any track. Write the kernel in the language you "
                              f"study ({', '.join(TRACK_NAMES[t] for t in answers)}): one track is enough.")
        lines = [f"{step}: no track passes yet (one is enough: the language you study)."]
        for track, state, message in outcomes:
            lines.append(f"  {TRACK_NAMES[track]}: not started" if state == "not started"
                         else f"  {TRACK_NAMES[track]}:\n{_indent(message)}")
        raise CheckFailed("\n".join(lines))
    track, report = passed
    lines = [f"{report}", f"  graded: {TRACK_NAMES[track]}"]
    for other, state, message in outcomes:
        if other == track:
            continue
        if state == "failed":  # the whole failure: its first line often only says where (the race report follows)
            lines.append(f"  practice, not graded: {TRACK_NAMES[other]} fails:\n{_indent(message, 6)}")
        else:
            lines.append(f"  practice, not graded: {TRACK_NAMES[other]}: {state}")
    print("\n".join(lines))
    return report
