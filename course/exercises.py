"""Every graded exercise of the course, and ``check``, which grades one.

``course.check("01.attention_torch", attention_torch)`` looks the id up in :data:`EXERCISES`. Test cells in the
notebooks call the same function, sometimes with extra ``cases`` (the hidden tests do), so what a learner runs
and what the grader runs can never disagree.

Each lesson's exercises, their checks and their hints live in that lesson's module, ``course/lessons/lessonNN.py``
(a tuple ``EXERCISES`` of :class:`Exercise`), and so do the arguments a numeric exercise's hidden tests draw
(``DRAWS``), which of the course's model functions its answer may call (``MODEL_POLICY``) and the probes its checks
run. :func:`course.lessons.load` reads them all; the tables here (:data:`EXERCISES`, :data:`DRAWS`,
:data:`MODEL_POLICY`) are the checker's copies of what it read, in lesson order.
"""
from __future__ import annotations

import os
import random
import time
from typing import Any

from course import tiers
from course.errors import CheckFailed
from course.grading.answer_process import LiveAnswer
from course.lessons.lesson03 import check_measured
from course.grading.comparison import Report, quiet, untouched_stub
from course.grading.exercise import Draw, Exercise, ModelPolicy
from course.grading.isolation import run_isolated
from course.grading.recording import Recorder, Replay, autograding, call_key, emit
from course.lessons import load
from course.simt import RawModule
from course.tracks import table
from course.tracks.triton import autotune

__all__ = ["Exercise", "EXERCISES", "MODEL_POLICY", "ModelPolicy", "check", "DRAWS", "drawn_arguments"]


_LESSONS = load()

EXERCISES: dict[str, Exercise] = dict(_LESSONS.exercises)
"""Exercise id → its :class:`Exercise`, lesson by lesson (each lesson's own order within it)."""


# -- numeric exercises: arguments drawn when the grader checks -----------------------------------
# A lookup table of the visible arguments passes a visible check and nothing else: a hidden test adds
# ``drawn=N``, N argument sets drawn at random (os.urandom) within the lesson's valid range. Under the
# grader the seed goes into the recording, so the re-check, which replays the learner's answers, draws
# the very same sets (course.grading.recording).

DRAWS: dict[str, Draw] = dict(_LESSONS.draws)
"""Exercise id → one argument set drawn from a ``random.Random``, in the form its check takes (each lesson
module's ``DRAWS``)."""

_DRAWN_SEED = "drawn-seed:"  # recording key of a test's seed (beside the call digests, which are 32 hex digits)


def drawn_arguments(exercise: str, count: int, seed: int) -> list:
    """``count`` argument sets of ``exercise`` drawn with ``seed`` (the same seed, the same sets)."""
    if exercise not in DRAWS:
        raise CheckFailed(f"{exercise}: this exercise draws no arguments.")
    rng = random.Random(seed)
    return [DRAWS[exercise](rng) for _ in range(count)]


def _draw(exercise: str, count: Any, options: dict, candidate: Any) -> tuple[list, str, int]:
    """(the drawn sets, the recording key, the seed): a fresh seed, or the recorded one for a replayed recording."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CheckFailed(f"{exercise}: drawn= takes a number of argument sets to draw, at least 1; got {count!r}.")
    key = _DRAWN_SEED + call_key(exercise, (), {"arguments": options.get("arguments"), "drawn": count})
    if isinstance(candidate, Replay):
        seed = candidate.recordings.get(exercise, {}).get(key)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise CheckFailed(f"{exercise}: the notebook holds no drawn arguments for this test: the check that should "
                              "have recorded them did not run, or did not run as the course wrote it.")
    else:
        seed = int.from_bytes(os.urandom(8), "little")
    return drawn_arguments(exercise, count, seed), key, seed



# -- the course's own models as answers ---------------------------------------------------------------
# Which of the course's model functions an answer may call, and why not (course.grading.exercise.ModelPolicy).

MODEL_POLICY: dict[str, ModelPolicy] = dict(_LESSONS.model_policy)
"""Numeric exercise id → which of the course's model functions its answer may call, and which not (each lesson
module's ``MODEL_POLICY``)."""


def _refused_models(exercise: str, candidate: Any, graded: Any) -> Any:
    """``graded``, watched for calls of the exercise's refused model functions (course.grading.model_policy); or CheckFailed
    at once when the answer's text names one (the answer cell as handed in, under the re-check)."""
    policy = MODEL_POLICY.get(exercise)
    if policy is None or not policy.refused:
        return graded
    from course.grading.model_policy import function_source, model_references, refusing_model_calls  # here, not on top: +20 ms to `import course`
    if isinstance(candidate, (Replay, LiveAnswer)):
        source = getattr(candidate, "answer_source", None)  # set by course.grading.recheck from the notebook handed in
        named = model_references(source, policy.refused) if isinstance(source, str) else []
    else:
        found = function_source(candidate)
        named = model_references(found[0], policy.refused, line=found[1]) if found else []
    if named:
        raise CheckFailed(policy.sentence(exercise, named[0]))
    if isinstance(graded, LiveAnswer):
        # Where the grade is decided: the answer runs in a process where the refused functions are absent (their code
        # replaced and their files unreadable, course.grading.confine), so no name, loader or hook can reach them.
        return graded.without(policy.refused, policy.sentence(exercise, "{name}"))
    if isinstance(candidate, (Replay, LiveAnswer)):  # it runs elsewhere: its text is what can be read here
        return graded
    return refusing_model_calls(graded, policy.refused, lambda name: policy.sentence(exercise, name))


def check(exercise: str, candidate: Any, **options: Any) -> Report:
    """Check ``candidate`` for ``exercise`` (an id such as ``"01.attention_torch"``); print and return a Report.

    Raises CheckFailed (shown in Jupyter as a short diagnosis) when the answer is wrong. ``kernel=``, for a
    traffic-counting exercise (course.lessons.lesson03.MEASURED_EXERCISES), also runs that kernel (a %%cuda /
    %%metal module, or a function launching Triton kernels) in counters mode and requires the learner's
    formula to give the bytes it was measured to move.
    """
    measured_with = options.pop("kernel", None)
    drawn = options.pop("drawn", None)
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise CheckFailed(f"unknown exercise {exercise!r}; the exercises are: {known}")
    chosen = EXERCISES[exercise]
    from course.grading.answers import FailedCell  # here, not on top: +1 ms to `import course`
    if isinstance(candidate, FailedCell):
        raise CheckFailed(f"{exercise}: {candidate.message}")
    if chosen.takes == "kernel module":
        from course.simt.magic import CompileFailed  # here, not on top: +0.3 ms to `import course`
        if isinstance(candidate, CompileFailed):
            shown = f"\n{candidate.error}" if getattr(candidate, "error", "") else ""
            raise CheckFailed(f"{exercise}: your %%{candidate.language} {candidate.name} cell did not compile, so "
                              f"there is no kernel to check. Fix the error that cell shows and run it again.{shown}")
        if not isinstance(candidate, RawModule):
            raise CheckFailed(f"{exercise}: expected the kernels your %%cuda / %%metal cell compiled (the name after "
                              f"the magic), got {type(candidate).__name__}. Run that cell first.")
        if untouched_stub(exercise, candidate.code):
            cell = os.path.splitext(os.path.basename(candidate.display_path))[0]
            raise CheckFailed(f"{exercise}: not implemented yet: your %%{candidate.language} {cell} cell still holds the "
                              f"kernel as handed out (nothing is written where it says `// YOUR CODE HERE`).\n"
                              f"  hint: complete the region marked `// YOUR CODE HERE`, run the cell, then this check "
                              f"again.")
    elif not callable(candidate):
        raise CheckFailed(f"{exercise}: expected your function, got {type(candidate).__name__} {candidate!r}.")
    if isinstance(candidate, LiveAnswer) and chosen.probe is not None:
        # Where the grade is decided: the cell as handed in is read first, then the course's probe runs around the
        # learner's function inside the answer process, and only its data comes back (course.lessons.capstone).
        from course.lessons.capstone import refuse_reach  # here, not on top: +4 ms to `import course`
        refuse_reach(exercise, candidate.answer_source)
        candidate = candidate.around(chosen.probe)
    elif chosen.probe is not None and not isinstance(candidate, Replay):
        candidate = _LESSONS.probes()[chosen.probe](candidate)
    graded, learner, row = _triton_kernels(exercise, candidate)
    if learner is not None and _gate_wanted(row, learner):
        from course.tracks.triton_answer import gate  # here, not on top: +4 ms to `import course`
        gate(row, graded, learner)  # before anything runs: on the interpreter a kernel body is Python
    if isinstance(candidate, Replay):
        graded = candidate.for_exercise(exercise)
    graded = _refused_models(exercise, candidate, graded)
    draw = None
    if drawn is not None:  # checked on the given arguments (if any) and on sets drawn now
        draw = _draw(exercise, drawn, options, candidate)
        options["arguments"] = list(options.get("arguments") or []) + draw[0]
    recorder = None
    if ((row is None or row.learner_wrapper) and chosen.takes == "function" and not chosen.isolated and autograding()
            and not isinstance(candidate, Replay)):
        # Under the grader: the grade comes from replaying these answers elsewhere (course.grading.recording).
        recorder = graded = Recorder(exercise, graded, getattr(candidate, "__name__", exercise))
        if draw is not None:  # the re-check draws the same sets from the same seed
            recorder.calls[draw[1]] = draw[2]
    started = time.perf_counter()
    try:
        # A check grades correctness on each kernel's check config: it never autotunes (an autotuner times
        # configs, which is a benchmark's work, and its buffers would count as the learner's), even when
        # the caller is inside course.tracks.triton.autotune().
        with quiet(), autotune(False):  # and no library warning about a wrong answer lands above the diagnosis
            if chosen.isolated:
                report = run_isolated(lambda: chosen.run(graded, **options), exercise)
            else:
                report = chosen.run(graded, **options)
            if measured_with is not None:
                agreed = check_measured(exercise, graded, measured_with)
    finally:
        if recorder is not None:
            emit(recorder)
    if report.tier and not tiers.triton_interpreted() and isinstance(report, Report):
        report.seconds = time.perf_counter() - started  # on a GPU a check must answer in seconds: show it
    print(report)
    if chosen.takes == "kernel module":  # on a GPU machine, the same kernel on the GPU: a line, never points
        from course.grading.gpu_leg import gpu_note  # here, not on top: +10 ms to `import course`
        if note := gpu_note(exercise, candidate):
            print(note)
    if measured_with is not None:
        print(agreed)
    return report


def _triton_kernels(exercise: str, candidate: Any):
    """(what to run, the learner's kernels, the table row) for a Triton kernel exercise: the course's wrapper
    around the learner's @triton.jit functions (course.tracks.triton_answer). Other exercises run as given."""
    row = table.find(exercise)
    if row is None or row.track != "triton" or row.learner_wrapper:
        return candidate, None, row
    from course.tracks.triton_answer import graded_function, is_course_wrapped, learner_kernels  # here, not on top: +4 ms to `import course`
    if is_course_wrapped(candidate):
        return candidate, None, row
    learner = learner_kernels(candidate)
    if learner is None:
        raise CheckFailed(f"{exercise}: cannot read the source of {getattr(candidate, '__name__', candidate)!r}. Hand in "
                          f"the function your Triton cell defines; the course launches the kernels of that cell.")
    return graded_function(row, learner), learner, row


def _gate_wanted(row, learner) -> bool:
    """Compile with the real compiler, except the course's own files (the compile gate covers those) and the
    notebook run of the grader (its re-check compiles)."""
    if autograding():
        return False
    from course.kernels import kernel_path  # here, not on top: +0.7 ms to `import course`
    return learner.text != kernel_path(row.kernel_file).read_text(encoding="utf-8")
