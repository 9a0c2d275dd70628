"""Lesson 01's checks: standard attention in PyTorch, the naive kernel's reads, and the naive kernel itself
(Triton, CUDA C and Metal).
"""
from __future__ import annotations

from typing import Iterable

import torch

from course.grading.checks import check_explicit_scale, naive_simt, row_kernel
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.inputs import Case, standard_cases
from course.models import roofline

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _lesson01_cases() -> list[Case]:
    return standard_cases(head_dims=(16, 64), lengths=(1, 17, 65), kinds=("normal", "peaky"))


def _attention_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _lesson01_cases() + [Case(33, 33, 32, kind="constant_rows", seed=7)]
    # One matrix of scores, no blocks of keys: a NaN output gets no hint about a running sum l.
    report = check_attention("01.attention_torch", fn, cases, key_blocks=False)
    # The same function must honour an explicit scale too.
    check_explicit_scale("01.attention_torch", fn, Case(17, 20, 32, seed=11), 0.5, key_blocks=False)
    return report


def _naive_bytes_mistakes() -> list[Mistake]:
    """Wrong counts of the naive kernel's reads, built from the right one: b·N·(D + r·N·D), where r is how
    many N × D tensors of K and V each program reads (roofline.naive_kernel_bytes_read says)."""
    r = roofline.naive_kernel_bytes_read(1, 1, 1, 1) - 1
    size = roofline.element_size

    def reads(n, d, dtype, programs=None, q_row=1, kv=r, per_element=True) -> int:
        return (size(dtype) if per_element else 1) * (n if programs is None else programs) * (q_row * d + kv * n * d)
    kv_text = ("all of K twice (once for the max, once for the sums) and all of V once" if r == 3
               else "all of K and all of V" if r == 2 else f"{r}·N·D elements of K and V")
    return [
        Mistake("elements, not bytes: multiply by the element size of the dtype.",
                lambda n, d, dtype: reads(n, d, dtype, per_element=False)),
        Mistake("each program also reads its own query row (D elements).", lambda n, d, dtype: reads(n, d, dtype, q_row=0)),
        Mistake(f"every program reads {kv_text}, plus its query row.",
                lambda n, d, dtype: reads(n, d, dtype, kv=r - 1)),
        Mistake("K and V are read by every query row's program, not once in total: that is what makes the kernel naive.",
                lambda n, d, dtype: size(dtype) * (n * d + r * n * d)),
        Mistake("that is what one program reads; there are N programs, one per query row.",
                lambda n, d, dtype: reads(n, d, dtype, programs=1)),
        Mistake("this counts bytes read only; O is written, not read.", lambda n, d, dtype: reads(n, d, dtype, q_row=2)),
    ]


def _naive_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=1, d=16, dtype=torch.float32), dict(n=1024, d=64, dtype=torch.float16),
                         dict(n=17, d=128, dtype=torch.float32), dict(n=4096, d=128, dtype=torch.bfloat16)]

    def expected(n: int, d: int, dtype: torch.dtype) -> int:
        return roofline.naive_kernel_bytes_read(n, n, d, roofline.element_size(dtype))
    return check_values("01.naive_bytes_read", fn, expected, args, _naive_bytes_mistakes())


EXERCISES = (
    Exercise("01.attention_torch", "Standard attention in PyTorch", _attention_torch),
    Exercise("01.naive_bytes_read", "Bytes read by the naive kernel", _naive_bytes),
    # The naive kernel in every track its rows declare (course/tracks/table.py): ids such as 01.naive_cuda.
    *step_exercises("01", "naive", "The naive attention kernel",
                    {"triton": row_kernel, "cuda": naive_simt, "metal": naive_simt}),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "01.naive_bytes_read": lambda r: dict(n=draw_size(r), d=r.choice(HEAD_DIMS),
                                          dtype=r.choice((torch.float32, torch.float16, torch.bfloat16))),
}

MODEL_POLICY = {
    "01.naive_bytes_read": ModelPolicy(("course.models.roofline.naive_kernel_bytes_read",),
                                       "it is the course's own count, and the exercise is to count the naive kernel's "
                                       "reads yourself"),
}


_TWO_PASS = (
    "Two sweeps over the keys of your row. What does the first sweep need to find before any exp() is safe?",
    "Sweep 1: m = max over every key j of s_j = scale · (q · k_j). Start m at -inf, not 0: scores can all be negative.",
    "Sweep 2, with m fixed: p_j = exp(s_j - m); add p_j to l and p_j · v_j to acc. No rescale is needed, because m "
    "no longer changes. Finally O = acc / l.",
)

LADDERS = (
    ladder("01.attention_torch",
           "Follow the formula: scores, softmax over each row, then the weighted sum of V.",
           "`s = (q @ k.transpose(-1, -2)) * scale`, with scale = 1/sqrt(D) when none is given.",
           "Subtract each row's max before exp (`s.amax(dim=-1, keepdim=True)`), divide by the row sum, then multiply "
           "by v.",
           cell="01_naive_attention/attention_torch"),
    ladder("01.naive_bytes_read",
           "Count per program (one query row), then multiply by the number of programs.",
           "One program reads its own q row once, then sweeps over every key twice (for the max, then for the sums).",
           "Per program: D + 2·Nk·D (K twice) + Nk·D (V once) elements; times N programs; times the element size.",
           cell="01_naive_attention/naive_bytes_read"),
    *step_ladders("01", "naive", _TWO_PASS, {
        "triton": "In Triton a block of keys is one tile: `k = tl.load(k_ptr + keys[:, None] * stride_k + cols[None, :], "
                  "mask=...)`, `scores = tl.sum(q[None, :] * k, axis=1) * scale`; mask keys past `n_keys` with -inf.",
        "cuda": "In CUDA C each thread loops over keys with a plain for loop; acc is a float array of MAX_HEAD_DIM in the "
                "thread. Keep the `if (row >= n_q) return;` guard first.",
        "metal": "In Metal the thread's row is the `[[thread_position_in_grid]]` parameter; use exp and max (Metal's "
                 "names), and return early for rows past n_q."}),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "score-matrix", "widget": "course.widgets.costs:score_matrix_explorer"},)}
