"""A lesson is its module: what course.exercises reads for a lesson (its draws, its model-function policy, what the
grader runs for it) is declared in ``course/lessons/lessonNN.py`` and found there, never listed centrally;
``course.lessons.load`` reads all of it, once."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from course import exercises, hint_ladder
from course.errors import CheckFailed, CourseError
from course.grading.exercise import Exercise, ladder
import course.lessons as lessons_package
from course.lessons import Lessons, assemble, capstone, gathered, lesson_modules, lesson08, lesson09, load


@pytest.mark.parametrize("name", ["DRAWS", "MODEL_POLICY"])
def test_each_lesson_declares_only_its_own_exercises(name):
    assembled = getattr(exercises, name)
    seen = {}
    for module in lesson_modules():
        own = {e.id for e in module.EXERCISES}
        for exercise in getattr(module, name, {}):
            assert exercise in own, f"{module.__name__}.{name} declares {exercise}, an exercise of another lesson"
            seen[exercise] = module
    assert set(assembled) == set(seen), set(assembled) ^ set(seen)
    assert all(assembled[e] is getattr(m, name)[e] for e, m in seen.items())


def test_a_key_two_lessons_declare_is_refused():
    first = types.ModuleType("course.lessons.lesson98")
    second = types.ModuleType("course.lessons.lesson99")
    first.DRAWS = {"98.same": 1}
    second.DRAWS = {"98.same": 2}
    assert gathered("DRAWS", [first]) == {"98.same": 1}
    assert gathered("DRAWS", [first, types.ModuleType("course.lessons.lesson97")]) == {"98.same": 1}
    with pytest.raises(CourseError, match=r"lesson99\.DRAWS declares '98\.same', which an earlier lesson module"):
        gathered("DRAWS", [first, second])


def test_the_loader_reads_every_lessons_declarations():
    """load() holds each lesson module's exercises, draws, policies, probes and kinds of answer cell, in lesson
    order, and nothing else; it reads them once, and what it hands out cannot be changed by whoever holds it."""
    lessons = load()
    assert isinstance(lessons, Lessons) and load() is lessons
    modules = lesson_modules()
    # every lessonNN.py of the package, in lesson order: the course's ten and any lesson added beside them
    on_disk = sorted(path.stem for path in Path(lessons_package.__file__).parent.glob("lesson[0-9][0-9].py"))
    assert [m.__name__.rpartition(".")[2] for m in modules] == on_disk
    assert on_disk[:10] == [f"lesson{n:02d}" for n in range(10)]
    assert list(lessons.exercises) == [e.id for m in modules for e in m.EXERCISES]
    assert all(lessons.exercises[e.id] is e for m in modules for e in m.EXERCISES)
    assert list(lessons.ladders) == [rungs.exercise for m in modules for rungs in m.LADDERS]
    assert hint_ladder.LADDERS == dict(lessons.ladders)
    for field, name in (("draws", "DRAWS"), ("model_policy", "MODEL_POLICY"), ("cell_builders", "CELL_BUILDERS")):
        declared = {key: value for m in modules for key, value in getattr(m, name, {}).items()}
        assert dict(getattr(lessons, field)) == declared, field
    assert lessons.probe_sources == (lesson08.probes,)
    assert dict(lessons.cell_builders) == lesson09.CELL_BUILDERS
    # the checker's tables are copies of what it read
    assert exercises.EXERCISES == dict(lessons.exercises) and exercises.DRAWS == dict(lessons.draws)
    assert exercises.MODEL_POLICY == dict(lessons.model_policy)
    with pytest.raises(TypeError):
        lessons.draws["99.new"] = lambda rng: ()


def test_the_loader_refuses_an_exercise_two_lessons_hold():
    first, second = types.ModuleType("course.lessons.lesson98"), types.ModuleType("course.lessons.lesson99")
    first.EXERCISES = (Exercise("98.same", "one", lambda answer: None),)
    second.EXERCISES = (Exercise("98.same", "two", lambda answer: None),)
    assert list(assemble([first]).exercises) == ["98.same"]
    with pytest.raises(CourseError, match=r"lesson99\.EXERCISES holds '98\.same' twice, or an earlier lesson module"):
        assemble([first, second])
    first.LADDERS, second.LADDERS = (ladder("98.same", "one rung"),), (ladder("98.same", "another rung"),)
    second.EXERCISES = ()
    with pytest.raises(CourseError, match=r"lesson99\.LADDERS holds a ladder for '98\.same' twice"):
        assemble([first, second])


def test_what_the_grader_runs_for_a_lesson_is_the_lessons_own():
    """The answer process and the re-check sit below the lessons: their entry points hand them lesson 08's probes and
    lesson 09's TT-Lang cells as read by the loader, and every probe an exercise names is there."""
    lessons = load()
    assert lessons.probes() == capstone.PROBES
    named = {e.probe for e in exercises.EXERCISES.values() if e.probe is not None}
    assert named and named <= set(lessons.probes())
    # The builder is the lesson's gate and build: a cell outside TT-Lang is refused, one inside it is built.
    built = lessons.cell_builders["tt"]("def f(x):\n    return math.sqrt(x)\n", "your cell", "09.x", {}, {})
    assert built["f"](4.0) == 2.0
    with pytest.raises(CheckFailed, match=r"09\.x: your cell, line 1: `import os` imports os"):
        lessons.cell_builders["tt"]("import os\nos.getcwd()\n", "your cell", "09.x", {}, {})
