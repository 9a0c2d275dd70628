"""The Triton track at a glance: which kernel file and function answers which exercise.

Lessons 01-08 each have one file in ``kernels/triton/``. This table is what the tests, the
benchmark and the wrong-solution corpus walk over, so a new step is added in one place.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

from .kernels import load_triton_module

__all__ = ["Step", "STEPS", "step", "solution"]


@dataclass(frozen=True)
class Step:
    exercise: str
    kernel: str
    """``triton/<file stem>``, as :func:`course.kernels.kernel_path` takes it."""
    function: str
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments bound to the function (e.g. which dQ strategy the backward uses)."""


STEPS: list[Step] = [
    Step("01.naive_triton", "triton/01_naive", "naive_attention"),
    Step("02.online_softmax", "triton/02_online_softmax", "online_softmax"),
    Step("02.merge_states", "triton/02_online_softmax", "merge"),
    Step("03.tiled_forward", "triton/03_tiled_forward", "tiled_attention"),
    Step("04.pipelined", "triton/04_pipelined", "pipelined_attention"),
    Step("05.tensor_cores", "triton/05_tensor_cores", "tensor_core_attention"),
    Step("06.causal", "triton/06_causal", "causal_attention"),
    Step("07.backward_atomic", "triton/07_backward", "attention_backward", {"dq_mode": "atomic"}),
    Step("07.backward_separate", "triton/07_backward", "attention_backward", {"dq_mode": "separate"}),
    Step("08.flash_attention", "triton/08_flash_attention", "flash_attention"),
]


def step(exercise: str) -> Step:
    for s in STEPS:
        if s.exercise == exercise:
            return s
    raise KeyError(exercise)


def solution(s: Step, kernel_file: str | None = None) -> Callable[..., Any]:
    """The course's own answer to ``s`` (or the same function from another copy of the file)."""
    fn = getattr(load_triton_module(kernel_file or s.kernel), s.function)
    return functools.partial(fn, **s.options) if s.options else fn
