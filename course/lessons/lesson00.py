"""Lesson 00's checks: the FLOPs of attention and the arithmetic intensity of a fused kernel.
"""
from __future__ import annotations

from typing import Iterable

from course.grading.comparison import Report
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.models import roofline

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


_FLOP_ARGS = [dict(n_q=1, n_k=1, d=1), dict(n_q=128, n_k=128, d=64), dict(n_q=17, n_k=129, d=32),
              dict(n_q=4096, n_k=4096, d=128), dict(n_q=1000, n_k=10, d=16)]


def _flops(factor: int, lengths: str = "qk", d_power: int = 1):
    """The FLOP count a learner writes: factor · (two lengths) · D^d_power, "qq" / "kk" using one length twice."""
    def count(n_q: int, n_k: int, d: int) -> int:
        a, b = {"qk": (n_q, n_k), "qq": (n_q, n_q), "kk": (n_k, n_k)}[lengths]
        return factor * a * b * d ** d_power
    return count


# Each mistake is the formula a learner with it would write; check_values shows a hint only when one
# of them gives every value the learner's function returned.
_FLOP_MISTAKES = [
    # One matmul at 2 FLOPs per multiply-add, or both at 1: the same number, so one text for both.
    Mistake("that is half: there are two matmuls (Q·Kᵀ and P·V) of Nq·Nk·D multiply-adds each, and a multiply-add "
            "is 2 FLOPs; either a matmul is missing or a multiply-add was counted as 1 FLOP.", _flops(2)),
    Mistake("that is the multiply-adds of one matmul: a multiply-add is 2 FLOPs, and there are two matmuls "
            "(Q·Kᵀ and P·V).", _flops(1)),
    Mistake("the count grows as D²: each of the Nq·Nk scores is one dot product of length D, so the FLOPs grow "
            "linearly in D.", _flops(4, d_power=2)),
    Mistake("D is missing: each of the Nq·Nk scores is a dot product of length D, and P·V does Nq·Nk·D "
            "multiply-adds too.",
            _flops(4, d_power=0)),
    Mistake("Nq is used for both lengths: S is Nq × Nk.", _flops(4, "qq")),
    Mistake("Nk is used for both lengths: S is Nq × Nk.", _flops(4, "kk")),
]


def _attention_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("00.attention_flops", fn, lambda n_q, n_k, d: roofline.attention_flops(n_q, n_k, d),
                        arguments or _FLOP_ARGS, _FLOP_MISTAKES)


def _intensity_with(flops=None, elements=None, per_element: bool = True, inverted: bool = False):
    """The intensity a learner computes with other FLOPs or another element count than the right ones."""
    def intensity(n: int, d: int, bytes_per_element: int) -> float:
        f = (flops or roofline.attention_flops)(n, n, d)
        moved = (elements(n, d) if elements else 4 * n * d) * (bytes_per_element if per_element else 1)
        return moved / f if inverted else f / moved
    return intensity


_INTENSITY_MISTAKES = [
    Mistake("remember the bytes per element: bytes = elements × bytes_per_element.",
            _intensity_with(per_element=False)),
    Mistake("Q is read and O is written too: a fused kernel moves four N × D tensors (Q, K, V and O), not only K and V.",
            _intensity_with(elements=lambda n, d: 2 * n * d)),
    Mistake("O is written once too: a fused kernel reads Q, K, V and writes O, four N × D tensors.",
            _intensity_with(elements=lambda n, d: 3 * n * d)),
    Mistake("S never reaches global memory in a fused kernel: count Q, K, V and O only (4·N·D elements).",
            _intensity_with(elements=lambda n, d: 4 * n * d + n * n)),
    Mistake("that is the traffic of unfused attention (S and P written and read back); a fused kernel moves only "
            "Q, K, V and O.", lambda n, d, bytes_per_element: roofline.attention_flops(n, n, d)
            / roofline.standard_attention_bytes(n, n, d, bytes_per_element)),
    Mistake("the FLOPs are half the right count: attention_flops(N, N, D) counts both matmuls.",
            _intensity_with(flops=lambda n_q, n_k, d: 2 * n_q * n_k * d)),
    Mistake("intensity is FLOPs per byte: divide the FLOPs by the bytes, not the bytes by the FLOPs.",
            _intensity_with(inverted=True)),
]


def _intensity(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=128, d=64, bytes_per_element=2), dict(n=4096, d=128, bytes_per_element=2),
                         dict(n=1000, d=16, bytes_per_element=4), dict(n=1, d=32, bytes_per_element=4)]

    def expected(n: int, d: int, bytes_per_element: int) -> float:
        return roofline.arithmetic_intensity(roofline.attention_flops(n, n, d),
                                             roofline.flash_attention_bytes(n, n, d, bytes_per_element))
    return check_values("00.flash_intensity", fn, expected, args, _INTENSITY_MISTAKES, rel=1e-6)


EXERCISES = (
    Exercise("00.attention_flops", "FLOPs of the attention forward pass", _attention_flops),
    Exercise("00.flash_intensity", "Arithmetic intensity of a fused attention kernel", _intensity),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "00.attention_flops": lambda r: dict(n_q=draw_size(r), n_k=draw_size(r), d=r.choice(HEAD_DIMS)),
    "00.flash_intensity": lambda r: dict(n=draw_size(r), d=r.choice(HEAD_DIMS), bytes_per_element=r.choice((2, 4))),
}

MODEL_POLICY = {
    "00.attention_flops": ModelPolicy(("course.models.roofline.attention_flops",),
                                      "it is the course's own count, and the exercise is to count the FLOPs of the two "
                                      "matmuls yourself"),
    "00.flash_intensity": ModelPolicy(("course.models.roofline.flash_attention_bytes",),
                                      "it is the course's own count of the fused kernel's bytes, which the exercise asks "
                                      "you to count (the FLOPs may come from course.models.roofline.attention_flops)",
                                      allowed=("course.models.roofline.attention_flops", "course.models.roofline.arithmetic_intensity")),
}

LADDERS = (
    ladder("00.attention_flops",
           "Attention has two matrix products. Which, and what are their shapes?",
           "Q·Kᵀ is Nq × Nk dot products of length D; P·V is Nq × D dot products of length Nk.",
           "Each dot product of length n is n multiply-adds, and a multiply-add is 2 FLOPs: 2·(2·Nq·Nk·D) in all.",
           cell="00_orientation/attention_flops"),
    ladder("00.flash_intensity",
           "Intensity is FLOPs divided by bytes. You have the FLOPs already; which tensors must a fused kernel move?",
           "A fused kernel reads Q, K and V once and writes O once: four N × D tensors.",
           "Bytes over four N × D tensors, then FLOPs over bytes:\n"
           "    moved = 4 * n * d * bytes_per_element\n"
           "    return attention_flops(n, n, d) / moved",
           cell="00_orientation/flash_intensity"),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order, and the ladder of every lesson's kernels (this lesson has none of its own).
SLIDES = {"ladder": True,
          "pictures": ({"name": "roofline", "widget": "course.widgets.costs:roofline_explorer"},)}
