"""Lesson 02's checks: the softmax passes' traffic, the online softmax and the merge of two partial states, and
one sweep over the keys (Triton, CUDA C with warp shuffles, Metal).
"""
from __future__ import annotations

from typing import Iterable

from course.grading.checks import F16, kernel_options, naive_simt, row_kernel, track_step
from course.grading.comparison import Report
from course.grading.compare_values import Mistake, check_merge_states, check_softmax, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.inputs import Case
from course.models import roofline

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _online_softmax(exercise: str):
    """The check of the row softmax kernel (its id comes from its row)."""
    def run(fn, cases: Iterable[Case] | None = None) -> Report:
        cases = cases or [Case(1, 1, 16), Case(17, 300, 16, kind="peaky", seed=1), Case(5, 129, 32, seed=2),
                          Case(9, 33, 16, dtype=F16, seed=3), Case(4, 70, 16, kind="constant_rows", seed=4)]
        return check_softmax(exercise, fn, cases, **kernel_options())
    return run


def _softmax_mistake(text: str, online_passes: int, safe_passes: int, write: int = 1, per_element: bool = True
                     ) -> Mistake:
    """A byte count with the given numbers of passes over the matrix (and writes of the result)."""
    def count(rows: int, cols: int, bytes_per_element: int, online: bool) -> int:
        passes = online_passes if online else safe_passes
        return (passes + write) * rows * cols * (bytes_per_element if per_element else 1)
    return Mistake(text, count)


_SOFTMAX_MISTAKES = [
    _softmax_mistake("elements, not bytes: multiply by bytes_per_element.", 2, 3, per_element=False),
    # No write of the result, or one read too few in both versions: the same numbers, so one text for both.
    _softmax_mistake("one sweep of the matrix short in both versions: the safe softmax reads it 3 times and the online "
                     "one 2 times, and each writes the result once.", 2, 3, write=0),
    _softmax_mistake("the online softmax reads the matrix twice, not three times: m and l come from one sweep, then "
                     "one sweep normalises.", 3, 3),
    _softmax_mistake("the online softmax still reads the matrix twice: one sweep finds m and l together, a second one "
                     "normalises (and the write of the result comes on top).", 1, 3),
    _softmax_mistake("the safe softmax reads the matrix three times: once for the max, once for the sum, once to "
                     "normalise.", 2, 2),
    _softmax_mistake("the two are swapped: the safe softmax reads the matrix three times, the online one twice.",
                     3, 2),
]


def _softmax_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(rows=1, cols=1, bytes_per_element=4, online=False),
                         dict(rows=4096, cols=4096, bytes_per_element=2, online=True),
                         dict(rows=17, cols=300, bytes_per_element=4, online=False),
                         dict(rows=1024, cols=129, bytes_per_element=2, online=True)]
    return check_values("02.softmax_bytes", fn, roofline.softmax_bytes, args, _SOFTMAX_MISTAKES)


def _merge_states(exercise: str, kernel: bool):
    """The check of a merge of two partial states: the PyTorch version runs in-process, the Triton kernel (``kernel``)
    with the tier's options."""
    def run(fn, cases: Iterable[Case] | None = None) -> Report:
        cases = cases or [Case(7, 40, 16), Case(5, 129, 16, kind="peaky", seed=1)]
        return check_merge_states(exercise, fn, cases, **(kernel_options() if kernel else {}))
    return run


EXERCISES = (
    # The step's kernels, from its rows (course/tracks/table.py): ids such as 02.online_softmax_cuda. Its Triton file
    # holds three exercises, the row softmax and the variants merge and attention.
    *step_exercises("02", "online_softmax", {"triton": "A row softmax with the online normalizer",
                                             "cuda": "One warp per query row with warp shuffles (CUDA C)",
                                             "metal": "One sweep over the keys with the online softmax (Metal)"},
                    {"triton": _online_softmax, "cuda": track_step, "metal": naive_simt}),
    Exercise("02.softmax_bytes", "Memory traffic of the safe and the online softmax", _softmax_bytes),
    Exercise("02.merge_torch", "Merging two partial softmax states in PyTorch", _merge_states("02.merge_torch", False)),
    *step_exercises("02", "online_softmax", {"triton": "Merging two partial softmax states in a Triton kernel"},
                    {"triton": lambda exercise: _merge_states(exercise, True)}, variant="merge"),
    *step_exercises("02", "online_softmax", {"triton": "One sweep over the keys with the online softmax (Triton)"},
                    {"triton": lambda exercise: row_kernel(exercise, (Case(6, 129, 16, kind="peaky", seed=8),))},
                    variant="attention"),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "02.softmax_bytes": lambda r: dict(rows=draw_size(r), cols=draw_size(r), bytes_per_element=r.choice((2, 4)),
                                       online=r.random() < 0.5),
}

MODEL_POLICY = {
    "02.softmax_bytes": ModelPolicy(("course.models.roofline.softmax_bytes",),
                                    "it is the course's own count, and the exercise is to count the passes' bytes "
                                    "yourself"),
}


_ONE_PASS = (
    "One sweep: keep m, l and acc for the keys seen so far. What happens to l and acc when a larger score arrives?",
    "Everything in l and acc was measured against the old max. Against the new one, each term is smaller by the same "
    "factor c = exp(m_old - m_new).",
    "Per step: m_new = max(m, new scores); c = exp(m - m_new); l = l·c + Σ exp(s - m_new); acc = acc·c + Σ exp(s - m_new)·v; "
    "m = m_new. At the end O = acc / l.",
)

LADDERS = (
    ladder("02.softmax_bytes",
           "Each pass reads the whole matrix once; the result is written once at the end. How many passes does each "
           "softmax make?",
           "The safe softmax reads three times: once for the max, once for the sum, once to normalise.",
           "The online softmax finds m and l together, so it reads twice. Bytes = (passes + 1) · rows · cols · bytes.",
           cell="02_online_softmax/softmax_bytes"),
    ladder("02.merge_torch",
           "A state (m, l) stands for l·exp(m). Merging two must stand for the sum of the two numbers.",
           "Write both against the larger max m = max(m_a, m_b): l = l_a·exp(m_a - m) + l_b·exp(m_b - m).",
           "Two empty states have m = -inf; exp(-inf - (-inf)) is NaN. Subtract 0 instead of m when m is -inf "
           "(`torch.where`), so l stays 0.",
           cell="02_online_softmax/merge_torch"),
    *step_ladders("02", "online_softmax", (), {"triton": (
        "It is the merge you wrote in PyTorch, with `tl.maximum`, `tl.where` and `tl.exp`.",
        "`m = tl.maximum(m_a, m_b)`; `m_safe = tl.where(m == float('-inf'), 0.0, m)`.",
        "`l = l_a * tl.exp(m_a - m_safe) + l_b * tl.exp(m_b - m_safe)`.")}, variant="merge"),
    *step_ladders("02", "online_softmax", (), {
        "triton": (
            "stream_state reads BLOCK columns at a time; each block is one online update of (m, l).",
            "Pad the tail of the row with -inf, not 0: exp(-inf) = 0 adds nothing to l.",
            "Per block: `m_new = tl.maximum(m, tl.max(x))`; `l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new))`; "
            "`m = m_new`. The second pass writes exp(x - m) / l."),
        "cuda": (
            *_ONE_PASS,
            "In the warp kernel each chunk of 32 keys is one online step: the chunk's max and sum come from the "
            "butterfly reductions, and every lane rescales its own accumulator columns by the same factor."),
        "metal": _ONE_PASS,
    }),
    *step_ladders("02", "online_softmax", _ONE_PASS, variant="attention"),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "online-softmax", "widget": "course.widgets.online_softmax:online_softmax_explorer",
                        "controls": (("blocks read", 5),)},)}
