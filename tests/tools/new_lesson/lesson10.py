"""Lesson 10's checks: how many programs a one-row kernel launches, and the one-row kernel itself (Triton, CUDA C and
Metal). The smallest lesson the course can have; tests/tools/test_new_lesson.py adds it to a copy of the course to
show that a lesson is its own files.
"""
from __future__ import annotations

from typing import Iterable

from course.grading.checks import naive_simt, row_kernel
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, ModelPolicy, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY", "KERNEL_ROWS", "SLIDES"]

# The step's rows of the kernel table, read from this text by course.tracks.table (literals only).
KERNEL_ROWS = (
    {"track": "triton", "step": "one_row", "entry": "naive_attention", "key_blocks": False, "answer_gate_dtype": "fp32",
     "smoke_case": {"n_q": 9, "n_k": 9, "d": 16}, "gate_cases": "forward",
     "gate_calls": (("naive_attention", "row row row"),)},
    {"track": "cuda", "step": "one_row", "entry": "naive_attention", "layout": "naive", "key_blocks": False},
    {"track": "metal", "step": "one_row", "entry": "naive_attention", "layout": "naive", "key_blocks": False},
)

_PROGRAM_ARGS = [dict(batch=1, heads=1, n_q=1), dict(batch=2, heads=8, n_q=17), dict(batch=4, heads=3, n_q=1024)]

_PROGRAM_MISTAKES = [
    Mistake("every head of every sequence in the batch has its own query rows: multiply by the heads too.",
            lambda batch, heads, n_q: batch * n_q),
    Mistake("every sequence of the batch has its own query rows: multiply by the batch too.",
            lambda batch, heads, n_q: heads * n_q),
]


def _programs(fn, arguments: Iterable[dict] | None = None):
    return check_values("10.programs", fn, lambda batch, heads, n_q: batch * heads * n_q,
                        arguments or _PROGRAM_ARGS, _PROGRAM_MISTAKES)


EXERCISES = (
    Exercise("10.programs", "Programs a one-row kernel launches", _programs),
    *step_exercises("10", "one_row", "The one-row kernel", {"triton": row_kernel, "cuda": naive_simt,
                                                             "metal": naive_simt}),
)

DRAWS = {"10.programs": lambda r: dict(batch=r.randint(1, 8), heads=r.randint(1, 32), n_q=draw_size(r))}

MODEL_POLICY = {"10.programs": ModelPolicy(why="the count is the exercise")}

_ONE_ROW = (
    "One program owns one query row; it sweeps the keys twice.",
    "Sweep 1 finds the row max m; sweep 2 adds exp(s - m) to l and exp(s - m) · v to acc; then O = acc / l.",
)

LADDERS = (
    ladder("10.programs", "One program per query row: how many query rows are there?",
           "Every head of every sequence in the batch has its own Nq query rows.",
           "`return batch * heads * n_q`.", cell="10_one_row/programs"),
    *step_ladders("10", "one_row", _ONE_ROW, {"triton": "Mask the keys past n_keys with -inf.",
                                              "cuda": "Return early for rows past n_q.",
                                              "metal": "Return early for rows past n_q."}),
)

# The deck's pictures (course.slides.decks): the score matrix the one-row kernel never stores.
SLIDES = {"pictures": ({"name": "score-matrix-10", "widget": "course.widgets.costs:score_matrix_explorer"},)}
