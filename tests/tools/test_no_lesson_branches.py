"""Shared code reads what a lesson declares and never branches on which lesson it is.

A lesson's steps declare their settings where the lesson lives: on their rows of ``course/tracks/table.py`` (how the
compile gate calls a Triton file, the grader's tiles, the CUDA ladder's tiles, a technique probe, whether a step
walks the keys in blocks) or in ``course/lessons/lessonNN.py``. Every other module of ``course/`` and ``autograder/``
reads those declarations; none of them compares, tests membership of, slices out or keys a dict by a lesson
number (``"07"``), a kernel file's stem (``"06_causal"``) or an exercise id (``"05.mma_triton"``). A new lesson
then needs no edit in shared code.

Some modules are not there yet: ``NOT_YET_DECLARED`` names them with how many such places each still has. The count
can only go down (the test fails when a module gains one), and a module leaves the list when it has none.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("course", "autograder")
# Where lessons live and may name themselves: the lessons' own modules, and the wrong-answer and hostile corpora,
# which are per-lesson data.
LESSON_HOMES = ("course/lessons/", "autograder/corpora/")

# Modules that still name lessons, with the number of places and what moves them to declarations.
NOT_YET_DECLARED = {
}

_LESSON_NUMBER = re.compile(r"\d\d")
_STEM = re.compile(r"\d\d_[a-z][a-z0-9_]*")
_EXERCISE_ID = re.compile(r"\d\d\.[a-z][a-z0-9_]*")
_SLICED_NAMES = re.compile(r"exercise|lesson|stem|ident|^id$|name")


def _lesson_numbers() -> set[str]:
    return {path.stem[-2:] for path in (REPO / "course" / "lessons").glob("lesson[0-9][0-9].py")}


def names_a_lesson(value: object, numbers: set[str]) -> bool:
    """A string that is a lesson number, a kernel file's stem or an exercise id."""
    if not isinstance(value, str):
        return False
    if _LESSON_NUMBER.fullmatch(value):
        return value in numbers
    return bool(_STEM.fullmatch(value) or _EXERCISE_ID.fullmatch(value))


def _constants(node: ast.AST) -> list[object]:
    """The constant, or the constants of a tuple, list or set display."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def _identifier(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _lesson_slice(node: ast.AST) -> bool:
    """``exercise[:2]``, ``row.stem[0:2]``: the two digits cut out of an id or a stem (reading the number off a folder
    name to list it is no branch; comparing it is)."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.step is None
            and isinstance(node.slice.upper, ast.Constant) and node.slice.upper.value == 2
            and (node.slice.lower is None or isinstance(node.slice.lower, ast.Constant) and node.slice.lower.value == 0)
            and bool(_SLICED_NAMES.search(_identifier(node.value))))


def lesson_branches(source: str, numbers: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every place ``source`` compares, tests membership of, slices out or keys a dict by a
    lesson: ``x == "07"``, ``"01" < row.lesson < "07"``, ``lesson in ("06_causal", ...)``, ``exercise[:2]``,
    ``{"03.tiled_cuda": ...}``, ``STEPS["01.naive_cuda"]``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                named = [c for c in _constants(operand) if names_a_lesson(c, numbers)]
                if named:
                    found.append((node.lineno, f"compares with {named[0]!r}"))
                    break
                if _lesson_slice(operand):
                    found.append((node.lineno, f"compares the lesson number sliced out of {_identifier(operand.value)}"))
                    break
        elif isinstance(node, ast.Dict):
            named = [k.value for k in node.keys if isinstance(k, ast.Constant) and names_a_lesson(k.value, numbers)]
            if named:
                found.append((node.lineno, f"a dict keyed by {named[0]!r}"))
        elif isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Constant) and names_a_lesson(index.value, numbers):
                found.append((node.lineno, f"looks up {index.value!r}"))
    return sorted(found)


def shared_modules() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith(LESSON_HOMES):
                files.append(path)
    return files


def _scan() -> dict[str, list[tuple[int, str]]]:
    numbers = _lesson_numbers()
    found = {}
    for path in shared_modules():
        hits = lesson_branches(path.read_text(encoding="utf-8"), numbers)
        if hits:
            found[path.relative_to(REPO).as_posix()] = hits
    return found


def test_shared_code_never_branches_on_a_lesson():
    found = _scan()
    problems = []
    for module, hits in found.items():
        allowed = NOT_YET_DECLARED.get(module, (0, ""))[0]
        if len(hits) > allowed:
            lines = "\n".join(f"    {module}:{line}: {what}" for line, what in hits)
            problems.append(f"{module} names a lesson in {len(hits)} places (allowed: {allowed}); declare the setting "
                            f"on the step's row (course/tracks/table.py) or in course/lessons/lessonNN.py:\n{lines}")
    assert not problems, "\n".join(problems)


def test_the_list_of_modules_not_yet_moved_is_up_to_date():
    """A module that no longer names a lesson, or names fewer than recorded, lowers its entry (or leaves)."""
    found = _scan()
    stale = {module: (len(found.get(module, [])), allowed) for module, (allowed, _) in NOT_YET_DECLARED.items()
             if len(found.get(module, [])) != allowed}
    assert not stale, f"(found, recorded) per module; update NOT_YET_DECLARED: {stale}"


def test_the_modules_that_now_read_declarations_stay_clean():
    """The compile gates, the grader's tiles, the CUDA ladder, the launchers' steps, the technique probes of the
    Triton checks, the Triton benchmark's calls and smoke cases and the NaN hint: moved to declarations."""
    found = _scan()
    for module in ("course/tracks/triton_compile.py", "course/tracks/fake_launches.py", "course/tracks/triton_build.py",
                   "course/tracks/compile_server.py", "course/grading/kernel_steps.py", "course/tools/bench_cuda.py",
                   "course/grading/compare_attention.py", "course/grading/checks.py", "course/tracks/cuda.py",
                   "course/tracks/metal.py", "course/tracks/triton_answer.py", "course/grading/counters.py",
                   "course/tools/bench_triton.py", "course/tools/bench_grid.py",
                   "course/tools/bench_report.py", "course/track_choice.py", "course/slides/decks.py",
                   "course/tools/bench_simt.py", "course/tools/sweep_backward.py", "course/grading/techniques.py",
                   "course/grading/measuring.py", "course/grading/causal_tiles.py", "course/grading/causal_masks.py",
                   "course/grading/matrix_units.py", "course/grading/pipelining.py"):
        assert module not in found, found[module]
        assert module not in NOT_YET_DECLARED


@pytest.mark.parametrize("branch, what", [
    ('if lesson == "06_causal":\n    pass', "compares with '06_causal'"),
    ('LADDER = [r.id for r in rows if "01" < r.lesson < "07"]', "compares with '01'"),
    ('STEPS = {r.id: r for r in rows if r.lesson != "07"}', "compares with '07'"),
    ('ok = lesson in ("06_causal", "07_backward")', "compares with '06_causal'"),
    ('blocked = exercise[:2] >= x', "compares the lesson number sliced out of exercise"),
    ('late = row.stem[0:2] > first', "compares the lesson number sliced out of stem"),
    ('TILES = {"03.tiled_cuda": (4, 32)}', "a dict keyed by '03.tiled_cuda'"),
    ('tiles = STEPS["05.mma_cuda"].tiles', "looks up '05.mma_cuda'"),
])
def test_the_scan_sees_each_kind_of_branch(branch, what):
    assert [w for _, w in lesson_branches(branch, {"01", "03", "06", "07"})] == [what]


@pytest.mark.parametrize("clean", [
    'STEPS = {r.id: r for r in rows if not r.backward}',
    'targets = (80, 90)\nif target == "90":\n    pass',  # a GPU target, not a lesson: "90" is no lesson number here
    'doc = "lesson 07 walks the keys"',
    'tiles = GRADING_TILES.get(exercise)',
    'lessons = sorted({p.name[:2] for p in files})',  # reading numbers off folder names to list them
])
def test_the_scan_passes_code_that_reads_declarations(clean):
    assert lesson_branches(clean, {"01", "03", "06", "07"}) == []


def test_a_branch_put_back_into_the_compile_gate_fails():
    """The if/elif on lesson stems the gate had, put back into the real module's source, is found."""
    path = REPO / "course" / "tracks" / "triton_compile.py"
    source = path.read_text(encoding="utf-8") + (
        '\n\ndef _old_call(module, lesson, q):\n    if lesson == "03_tiled":\n        module.tiled_attention(q, q, q)\n'
        '    elif lesson == "04_double_buffer":\n        module.pipelined_attention(q, q, q)\n')
    hits = lesson_branches(source, _lesson_numbers())
    assert [what for _, what in hits] == ["compares with '03_tiled'", "compares with '04_double_buffer'"]
