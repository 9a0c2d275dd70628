"""Every graded exercise of the course: its id, its cases and its hints.

``course.check("01.attention_torch", attention_torch)`` looks the id up here. Test cells in the
notebooks call the same function, sometimes with extra ``cases`` (the hidden tests do), so what a
learner runs and what the grader runs can never disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from . import roofline, tiers
from .check import Report, check_attention, check_values
from .errors import CheckFailed
from .isolation import run_isolated
from .inputs import Case, standard_cases

__all__ = ["Exercise", "EXERCISES", "check"]


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    run: Callable[..., Report]
    isolated: bool = False
    """Run in a child process: for learner kernels, which can crash the process that runs them."""


def _ratio_hint(ratio: float, text: str):
    def hint(got: float, want: float, args: dict) -> str | None:
        return text if want and abs(got / want - ratio) < 1e-9 else None
    return hint


# -- lesson 00 ----------------------------------------------------------------------------------

_FLOP_ARGS = [dict(n_q=1, n_k=1, d=1), dict(n_q=128, n_k=128, d=64), dict(n_q=17, n_k=129, d=32),
              dict(n_q=4096, n_k=4096, d=128), dict(n_q=1000, n_k=10, d=16)]


def _attention_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("00.attention_flops", fn, lambda n_q, n_k, d: roofline.attention_flops(n_q, n_k, d),
                        arguments or _FLOP_ARGS, hints=[
                            _ratio_hint(0.5, "that is half: count both matmuls (Q·Kᵀ and P·V), each 2·Nq·Nk·D FLOPs."),
                            _ratio_hint(0.25, "a multiply-add is 2 FLOPs, and there are two matmuls."),
                            lambda got, want, a: ("the count should grow linearly in D, not as D²."
                                                  if a["d"] > 1 and abs(got / want - a["d"]) < 1e-9 else None),
                            lambda got, want, a: ("Nq and Nk are different here: S is Nq × Nk."
                                                  if a["n_q"] != a["n_k"] else None),
                        ])


def _intensity(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=128, d=64, bytes_per_element=2), dict(n=4096, d=128, bytes_per_element=2),
                         dict(n=1000, d=16, bytes_per_element=4), dict(n=1, d=32, bytes_per_element=4)]

    def expected(n: int, d: int, bytes_per_element: int) -> float:
        return roofline.arithmetic_intensity(roofline.attention_flops(n, n, d),
                                             roofline.flash_attention_bytes(n, n, d, bytes_per_element))
    return check_values("00.flash_intensity", fn, expected, args, rel=1e-6, hints=[
        lambda got, want, a: ("bytes should count Q, K, V read once and O written once, each N·D elements."
                              if abs(got / want - 4 / 3) < 1e-6 else None),
        lambda got, want, a: ("remember the bytes per element: multiply element counts by it."
                              if abs(got / want - a["bytes_per_element"]) < 1e-6 else None),
    ])


# -- lesson 01 ----------------------------------------------------------------------------------

def _lesson01_cases() -> list[Case]:
    return standard_cases(head_dims=(16, 64), lengths=(1, 17, 65), kinds=("normal", "peaky"))


def _attention_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _lesson01_cases() + [Case(33, 33, 32, kind="constant_rows", seed=7)]
    report = check_attention("01.attention_torch", fn, cases)
    # The same function must honour an explicit scale too.
    check_attention("01.attention_torch", fn, [Case(17, 20, 32, seed=11)], scale=0.5, pass_scale=True)
    return report


def _naive_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=1, d=16, dtype=torch.float32), dict(n=1024, d=64, dtype=torch.float16),
                         dict(n=17, d=128, dtype=torch.float32), dict(n=4096, d=128, dtype=torch.bfloat16)]

    def expected(n: int, d: int, dtype: torch.dtype) -> int:
        return roofline.naive_kernel_bytes_read(n, n, d, roofline.element_size(dtype))
    return check_values("01.naive_bytes_read", fn, expected, args, hints=[
        lambda got, want, a: ("elements, not bytes: multiply by the element size of the dtype."
                              if abs(got * roofline.element_size(a["dtype"]) / want - 1) < 1e-9 else None),
        lambda got, want, a: ("each program also reads its own query row (D elements)."
                              if got == want - a["n"] * a["d"] * roofline.element_size(a["dtype"]) else None),
        lambda got, want, a: ("every program reads all of K *and* all of V."
                              if got == want - a["n"] * a["n"] * a["d"] * roofline.element_size(a["dtype"]) else None),
        lambda got, want, a: ("K and V are read once per query row, not once in total: that is what makes the kernel naive."
                              if a["n"] > 1 and got < want / 2 else None),
    ])


def _naive_triton(fn, cases: Iterable[Case] | None = None) -> Report:
    if cases is None:
        # Kept small on purpose: the interpreter runs one program per row, one key per step
        # (about 1 ms per key on a laptop), so Σ Nq·Nk decides the run time.
        cases = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(17, 17, 64, seed=2),
                 Case(33, 33, 64, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(40, 6, 16, seed=6),
                 Case(24, 24, 32, dtype=torch.float16, seed=21)]
    where = dict(device=tiers.device(), tier=tiers.active_tier())
    report = check_attention("01.naive_triton", fn, cases, **where)
    check_attention("01.naive_triton", fn, [Case(9, 12, 16, seed=5)], scale=0.3, pass_scale=True, **where)
    return report


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.attention_flops", "FLOPs of the attention forward pass", _attention_flops),
    Exercise("00.flash_intensity", "Arithmetic intensity of a fused attention kernel", _intensity),
    Exercise("01.attention_torch", "Standard attention in PyTorch", _attention_torch),
    Exercise("01.naive_bytes_read", "Bytes read by the naive kernel", _naive_bytes),
    Exercise("01.naive_triton", "The naive attention kernel in Triton", _naive_triton, isolated=True),
]}


def check(exercise: str, candidate: Any, **options: Any) -> Report:
    """Check ``candidate`` for ``exercise`` (an id such as ``"01.attention_torch"``); print and return a Report.

    Raises CheckFailed (shown in Jupyter as a short diagnosis) when the answer is wrong.
    """
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise CheckFailed(f"unknown exercise {exercise!r}; the exercises are: {known}")
    if not callable(candidate):
        raise CheckFailed(f"{exercise}: expected your function, got {type(candidate).__name__} {candidate!r}.")
    chosen = EXERCISES[exercise]
    if chosen.isolated:
        report = run_isolated(lambda: chosen.run(candidate, **options), exercise)
    else:
        report = chosen.run(candidate, **options)
    print(report)
    return report
