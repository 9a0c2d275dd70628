"""Every numeric exercise draws hidden arguments that no table of its visible answers holds.

The rule, for every exercise the registry grades by the values an answer returns, present and future:

- which exercises it covers is decided by the registry, not by the form of a check's parameters: every exercise
  with a ``MODEL_POLICY`` (the course declares one for each numeric answer) and every check that takes
  ``arguments``;
- each has a drawer in ``DRAWS`` and its check takes ``arguments`` (where ``drawn=`` puts the drawn sets);
- no exercise is excused: there is no declaration of a reason not to draw, for a visible check that asks every
  question there is is exactly the one a pasted table passes;
- every drawn set asks the answer something the visible check never asks.

:func:`holes` states the rule; the tests below hold the registry to it and show that it sees an exercise whose
drawer is taken away. tests/course/test_drawn_arguments.py checks that the hidden tests call the drawers, that the
right answer passes the draws and that a table of the visible arguments fails them.
"""
from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import torch

import course
from course.exercises import DRAWS, EXERCISES, MODEL_POLICY, drawn_arguments
from test_drawn_arguments import HIDDEN, _honest, _test_cells

SEEDS = (11, 2026)
PER_SEED = 20


def numeric_exercises() -> set[str]:
    return set(MODEL_POLICY) | {e for e, ex in EXERCISES.items() if "arguments" in inspect.signature(ex.run).parameters}


def holes(draws: dict) -> list[str]:
    """What breaks the rule, one line each (empty when nothing does)."""
    found = [f"{e}: its hidden test has nothing to draw (no entry in DRAWS)" for e in sorted(numeric_exercises())
             if e not in draws]
    found += [f"{e}: its check takes no arguments, so drawn= cannot reach it" for e in sorted(numeric_exercises())
              if "arguments" not in inspect.signature(EXERCISES[e].run).parameters]
    return found


def test_every_numeric_exercise_draws():
    assert {"05.fragment_lane", "07.differing_elements", "07.backward_flops"} <= numeric_exercises()
    assert holes(DRAWS) == []


@pytest.mark.parametrize("removed", ["05.fragment_lane", "07.differing_elements", "04.warp_sectors"])
def test_the_rule_sees_an_exercise_whose_drawer_is_taken_away(removed):
    without = {e: draw for e, draw in DRAWS.items() if e != removed}
    assert holes(without) == [f"{removed}: its hidden test has nothing to draw (no entry in DRAWS)"]


def _key(value: Any) -> Any:
    """A comparable form of what an answer was handed: tensors by dtype, shape and bits."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.detach().cpu().contiguous().numpy().tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v)) for k, v in value.items())))
    return repr(value)


def _calls(exercise: str, honest, **options) -> list:
    """What the check hands the answer, call by call."""
    seen = []

    def answer(*args, **kwargs):
        seen.append(_key((args, kwargs)))
        return honest(*args, **kwargs)
    answer.__name__ = getattr(honest, "__name__", "answer")
    course.check(exercise, answer, **options)
    return seen


@pytest.mark.parametrize("exercise", sorted(numeric_exercises()))
def test_drawn_sets_ask_what_the_visible_check_never_asks(exercise, capsys):
    """A drawn set may repeat a visible question by chance where the domain is small (a bank-conflict walk of 33
    floats, a 5 × 1 mask), but at most one in ten does, and the hidden test draws at least 8: a table of the visible
    answers passes it with a chance under one in 10⁸. Seeds are fixed, so the count is the same on every run."""
    lesson = next(lesson for lesson, _ in _test_cells()[exercise])
    honest = _honest(lesson, exercise)
    visible = set(_calls(exercise, honest))
    repeats = [drawn for seed in SEEDS for drawn in drawn_arguments(exercise, PER_SEED, seed)
               if all(call in visible for call in _calls(exercise, honest, arguments=[drawn]))]
    assert len(repeats) * 10 <= len(SEEDS) * PER_SEED, f"{exercise}: these drawn sets ask only visible questions: {repeats}"
    hidden = " ".join(HIDDEN.findall(" ".join(source for _, source in _test_cells()[exercise])))
    counts = [int(n) for n in re.findall(r"drawn=(\d+)", hidden)]
    assert counts and min(counts) >= 8, f"{exercise}: its hidden tests draw {counts} sets; at least 8 each"
