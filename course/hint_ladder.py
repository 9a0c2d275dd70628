"""Getting unstuck on purpose: a ladder of hints per exercise, and a reveal that says it is revealing.

    course.hint("01.naive_triton")          # the first hint; call again for the next, more specific one
    course.hint("01.naive_triton", 3)       # a given rung
    course.reveal("01.naive_triton")        # the reference solution, under a banner that says so
    course.hint("04.double_buffer")         # a step, as its check cell names it: the hints of your track

A failing check tells the learner what is wrong; the ladder is for when they still do not see how
to fix it. Rungs go from a question that points at the idea to the line that does it, so a learner
can stop climbing as soon as they can go on alone. ``reveal`` shows the solution region of the
kernel file (kernel exercises) or the solution cell of the instructor notebook (Python exercises),
read from the repository, never from the folder the learner's lab serves.

A step offered in several tracks (``04.double_buffer``, the name its check cell shows) has a ladder per
track. ``hint`` and ``reveal`` take the step's name too and answer for the learner's track: the one the
lesson's ``course.check_tracks`` calls found written (:data:`course.track_choice.TOUCHED`), or the track
of the hints climbed so far. When that names no single track, ``hint`` says in one sentence which names
to ask for.

Hints are tested like answers (tests/course/test_hint_ladder.py). Code in a rung is marked, so the
tests can find it: inline code in backticks, and a block the learner can type as lines indented by
four spaces below the rung's sentence. Formulas (m' = max(m, rowmax S)) stay unmarked, as maths.

- Marked code names only what the learner has (the stub, the notebook's earlier names, the kernel
  file) or writes (names the ladder's own code assigns); language words are allowed.
- The code blocks of a ladder, typed in order in place of the stub (a notebook cell's
  ``raise NotImplementedError()``; in a kernel file, its solution regions, one block a region in file
  order), are an answer: at the last rung with a block the exercise's check passes, and at every
  earlier one the answer still builds.
- Text outside the marks holds no code (a dotted call, a keyword argument, a subscript): whatever
  a learner may type exactly is marked, and so tested.
"""
from __future__ import annotations

import ast
import json
import re
import textwrap

from course.errors import CourseError
from course.grading.exercise import Ladder
from course.lessons import load
from course.paths import REPO, SOLUTIONS
from course.solution_regions import PYTHON_STUB_LINE, SOLUTION_REGION
from course.track_choice import TOUCHED, exercise_for
from course.tracks import table

__all__ = ["LADDERS", "Ladder", "hint", "reveal", "solution_text", "code_spans", "code_blocks", "prose_of",
           "typed_answer"]


_BLOCK = re.compile(r"(?:^|\n)((?: {4}.*(?:\n|$))+)")
_SPAN = re.compile(r"`([^`\n]+)`")


def code_blocks(rung: str) -> list[str]:
    """The blocks of code in ``rung`` (runs of lines indented by four spaces), dedented."""
    return [textwrap.dedent(block).rstrip("\n") for block in _BLOCK.findall(rung)]


def typed_answer(ladder: Ladder, up_to: int, handed_out: str) -> str:
    """The handed-out cell with the code blocks of rungs 1..up_to typed in place of its stub line, as a learner who
    follows the ladder would type them (the tests hold each ladder to passing this way)."""
    blocks = [block for rung in ladder.rungs[:up_to] for block in code_blocks(rung)]
    match = PYTHON_STUB_LINE.search(handed_out)
    if match is None:
        raise CourseError(f"{ladder.cell}: the handed-out cell has no `raise NotImplementedError()` line to replace")
    return handed_out[:match.start()] + textwrap.indent("\n".join(blocks), match.group(1)) + handed_out[match.end():]


def code_spans(rung: str) -> list[str]:
    """The inline code of ``rung`` (text in backticks), outside its blocks."""
    return _SPAN.findall(_BLOCK.sub("\n", rung))


def prose_of(rung: str) -> str:
    """``rung`` without its marked code."""
    return _SPAN.sub(" ", _BLOCK.sub("\n", rung))


LADDERS: dict[str, Ladder] = dict(load().ladders)
"""Exercise id → its ladder, from every lesson module (``course/lessons/lessonNN.py``, a tuple ``LADDERS``)."""

# How often each exercise's ladder has been climbed in this kernel (a fresh kernel starts again).
_climbed: dict[str, int] = {}


def _known(exercise: str) -> Ladder:
    try:
        return LADDERS[exercise]
    except KeyError:
        raise CourseError(f"no hints for {exercise!r}; exercises with hints: {', '.join(sorted(LADDERS))}") from None


def step_ladders(step: str) -> dict[str, str]:
    """Track → the exercise id with a ladder, for a step offered in several tracks (``04.double_buffer``); empty
    for any other name."""
    return {track: exercise_for(step, track) for track in table.TRACKS if exercise_for(step, track) in LADDERS}


def _studied(candidates: dict[str, str], step: str) -> tuple[list[str], str]:
    """The tracks among ``candidates`` the learner studies, as far as this kernel has seen, and how it was told:
    those the step's last check found written (or, before it, the latest check of any step: "written"), else those
    whose hints were climbed ("hints")."""
    for touched in (TOUCHED.get(step), TOUCHED.get("")):
        if touched:
            return [t for t in candidates if t in touched], "written"
    return [t for t in candidates if any(e.endswith(f"_{t}") for e in _climbed)], "hints"


def _choices(step: str, candidates: dict[str, str], studied: list[str], call: str, how: str = "written") -> str:
    """One sentence: the step is in several tracks, why the learner's is not known, and the name of each."""
    shown = {track: exercise for track, exercise in candidates.items() if not studied or track in studied}
    names = [f"course.{call}({exercise!r}) for {table.TRACK_NAMES[track]}" for track, exercise in shown.items()]
    listed = ", ".join(names[:-1]) + f" or {names[-1]}"
    if not studied:
        why = "this notebook has not yet seen which one you study (its check cell has not run on your code)"
    elif how == "written":
        why = "you have written it in more than one"
    else:
        why = ("this notebook has not yet seen your code for it, and you have asked for hints in more than one "
               "track")
    return f"{step} is a step of {len(candidates)} tracks and {why}: ask for yours, {listed}."


def _resolve(name: str, call: str) -> tuple[str | None, str]:
    """(exercise id, how it was chosen) for ``name``, an exercise id or a step; (None, the sentence that names the
    candidates) when a step's track cannot be told."""
    if name in LADDERS:
        return name, ""
    candidates = step_ladders(name)
    if not candidates:
        _known(name)  # raises: no hints, and the names that have some
    if len(candidates) == 1:
        (track, exercise), = candidates.items()
        return exercise, f" (the {table.TRACK_NAMES[track]} track's, the only one with this step)"
    studied, how = _studied(candidates, name)
    if len(studied) == 1:
        return candidates[studied[0]], f" (your track, {table.TRACK_NAMES[studied[0]]})"
    return None, _choices(name, candidates, studied, call, how)


def hint(exercise: str, rung: int | None = None) -> None:
    """Print the next hint for ``exercise``, or hint number ``rung`` (1 is the gentlest).

    ``exercise`` may be a step offered in several tracks (``04.double_buffer``): the hints are then those of the
    learner's track, or, when it cannot be told, one sentence names the exercise of each track.
    It prints and returns nothing, so a cell that ends with ``course.hint(...)`` shows the hint once."""
    resolved, how = _resolve(exercise, "hint")
    if resolved is None:
        print(how)
        return
    exercise = resolved
    ladder = _known(exercise)
    top = len(ladder.rungs)
    if rung is None:
        rung = min(_climbed.get(exercise, 0) + 1, top)
    if not 1 <= rung <= top:
        raise CourseError(f"{exercise} has hints 1 to {top}; asked for {rung}")
    _climbed[exercise] = max(_climbed.get(exercise, 0), rung)
    more = (f"(call course.hint({exercise!r}) again for hint {rung + 1})" if rung < top
            else f"(that was the last hint; course.reveal({exercise!r}) shows the solution)")
    print(f"hint {rung} of {top} for {exercise}{how}: {ladder.rungs[rung - 1]}\n{more}")


def _kernel_file(exercise: str) -> str:
    return table.exercise(exercise).kernel_file


def solution_text(exercise: str) -> tuple[str, str]:
    """(where it comes from, the solution text) for ``exercise`` (a step: the learner's track's, as :func:`hint`)."""
    resolved, why = _resolve(exercise, "reveal")
    if resolved is None:
        raise CourseError(why)
    exercise = resolved
    ladder = _known(exercise)
    if ladder.cell:
        lesson, grade_id = ladder.cell.split("/")
        path = SOLUTIONS / lesson / f"{lesson}.ipynb"
        if not path.is_file():
            raise CourseError(f"the solutions are not in this copy of the course ({path.relative_to(REPO)} is missing), "
                              "so there is nothing to reveal")
        cells = [c for c in json.loads(path.read_text())["cells"]
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
        if not cells:
            raise CourseError(f"no solution cell {grade_id!r} in {path.relative_to(REPO)}")
        source = "".join(cells[0]["source"])
        regions = SOLUTION_REGION.findall(source)
        return f"{path.relative_to(REPO)}, cell {grade_id}", "\n".join(r.rstrip("\n") for r in regions) or source
    kernel_file = _kernel_file(exercise)
    path = REPO / kernel_file
    text = path.read_text() if path.is_file() else ""
    if text and ladder.functions:  # only the regions of the exercise's own functions
        lines = text.splitlines(keepends=True)
        text = "".join("".join(lines[node.lineno - 1:node.end_lineno]) for node in ast.parse(text).body
                       if isinstance(node, ast.FunctionDef) and node.name in ladder.functions)
    regions = SOLUTION_REGION.findall(text)
    if not regions:
        raise CourseError(f"{kernel_file} has no solution region in this copy of the course, so there is nothing to reveal")
    return kernel_file, "\n    ...\n".join(r.rstrip("\n") for r in regions)


def reveal(exercise: str) -> None:
    """Print the reference solution of ``exercise``, under a banner that says what it is (and return nothing,
    so a cell that ends with ``course.reveal(...)`` shows it once)."""
    resolved, why = _resolve(exercise, "reveal")
    if resolved is None:
        raise CourseError(why)
    where, text = solution_text(resolved)
    banner = (f"REVEALING the reference solution of {resolved} (from {where}).\n"
              "Type it in yourself rather than pasting it, and run the check again: the point is the idea, not the points.")
    rule = "-" * 80
    print(f"{banner}\n{rule}\n{text}\n{rule}")
