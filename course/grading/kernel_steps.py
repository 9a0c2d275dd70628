"""Grading a step of the CUDA C or Metal track on the CPU SIMT runtime: its cases and its check.

    report = check_step("03.tiled_cuda", module)        # raises CheckFailed on a wrong kernel
    checked, plain = grading_cases("05.mma_metal")      # the cases that check uses

:func:`check_step` runs a step's small cases under ``GRADING_LAUNCH`` (memcheck + racecheck, a random
schedule) with the small tiles of :data:`GRADING_TILES`, then its larger cases in a plain launch with the
step's default tiles, and compares O (and LSE where the step writes it), or dQ, dK and dV for Metal's
backward steps, with the float64 oracle within the error budget. The launches themselves are the
tracks' (``course.tracks.cuda.attention_function``, ``course.tracks.metal.forward_function`` and
``backward_function``); the cases of both languages come from one builder, :func:`step_cases`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import torch

from course.errors import CourseError
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention, check_backward
from course.inputs import Case
from course.simt import RawModule
from course.tracks import cuda, metal, table
from course.tracks.common import GRADING_LAUNCH, Tiles, need

__all__ = ["CHECKED_TIER", "GRADING_TILES", "ODD_HEAD_DIMS", "step_cases", "grading_cases", "check_step"]

CHECKED_TIER = "CPU SIMT runtime (memcheck + racecheck, random schedule)"

# Tiles for the checked launches: small, so that small cases (fast under memcheck + racecheck) still cross
# several blocks (threadgroups), several K/V tiles, a ragged last tile and, causal, a diagonal that spans
# tiles: each step's row declares them (``grading_tiles``). The one-thread-per-row steps have none.
GRADING_TILES: dict[str, Tiles] = {row.id: Tiles(*row.grading_tiles) for row in table.KERNEL_EXERCISES
                                   if row.grading_tiles}

# One more checked case for the steps that declare ``two_group_tiles``: 40 query rows in a threadgroup of 64 rows,
# so rows of both simdgroups (warps) load and read the shared K/V tiles; a barrier that makes only one simdgroup meet
# is a race there, which the grading tiles (one simdgroup per threadgroup) cannot show.
TWO_GROUP_TILES: dict[str, Tiles] = {row.id: Tiles(*row.two_group_tiles) for row in table.KERNEL_EXERCISES
                                     if row.two_group_tiles}
TWO_GROUP_CASE = Case(40, 20, 16, seed=50)

# Per language, by the multiple of which a step needs D: a head dim that is not a power of two and that the
# step accepts (Metal's step 03 gets an odd one).
ODD_HEAD_DIMS = {"cuda": {1: 40, 4: 20, 16: 48}, "metal": {1: 33, 4: 20, 8: 24}}

CAUSAL_MODES = ("none", "twins", "mixed")


def step_cases(*, odd_d: int = 40, dtype: torch.dtype = torch.float32, causal: str = "none", batched: bool = False,
               tall_d: int = 32, backward: bool = False) -> tuple[list[Case], list[Case]]:
    """(small cases for the checked launch, larger cases for a plain launch) of a kernel step.

    Why each case is there (a forward step):

    - lengths 1, 17, 33, 65 and 129 are multiples of no tile: launches have a ragged last block and a
      ragged last K/V tile, which a kernel that forgets a bounds check reads or writes past;
    - Nq = Nk = 1, D = 16: the smallest problem, one block with a single key;
    - ``kind="peaky"`` (17 x 17 and 129 x 129): scores in the hundreds, so a softmax that does not subtract
      the running max overflows exp();
    - Nq > Nk (33 x 20, 129 x 65) and Nq < Nk (20 x 40, 17 x 129): a kernel that mixes up the query and
      key lengths goes wrong both ways;
    - ``kind="constant_rows"``: every score of a row equal, a tie at the max everywhere;
    - head dims 16 to 128 (the largest a row of O in registers holds), and ``odd_d``, one the step accepts
      that is not a power of two, for a loop over D that assumes one;
    - the larger cases span several default tiles (64 x 64 and up), which the small grading tiles do not
      show: the plain launch runs the step's own tile sizes;
    - ``dtype``: float16 inputs for the steps whose kernels read float16 (tensor cores, simdgroup matrices).

    ``causal``: "none" for a kernel without a causal mask; "twins" (CUDA's step 06, whose mask is its
    lesson) adds a causal copy of every case, seed + 20; "mixed" (the Metal kernels all take a causal
    flag) makes about half of the cases causal and adds Nq > Nk causal (65 x 17), where some query rows
    see no key at all (O = 0, LSE = -inf). ``batched`` adds 2 x 3 heads (one per column of blocks), for a
    kernel that forgets a head's offset. ``tall_d`` is the head dim of the 129 x 65 case.

    ``backward=True``: the cases of a backward step instead (float32; the other options do not apply):
    causal and not, Nq != Nk both ways with some rows that see no key, a non-power-of-two head dim (24, 40),
    D = 128, the largest the kernels' per-thread columns hold, and peaky rows.

    Seeds count up from 1 over the checked cases, then the plain ones.
    """
    need(causal in CAUSAL_MODES, f"causal must be one of {', '.join(CAUSAL_MODES)}; got {causal!r}")
    if backward:
        checked = [Case(17, 40, 16, causal=True), Case(1, 1, 16), Case(65, 17, 24, causal=True),
                   Case(33, 20, 128, kind="peaky")]
        plain = [Case(65, 129, 64, causal=True), Case(129, 65, 40)]
    else:
        mixed = causal == "mixed"
        checked = [Case(1, 1, 16), Case(17, 17, 32, kind="peaky", causal=mixed), Case(33, 20, odd_d),
                   Case(20, 40, 16, kind="constant_rows", causal=mixed)]
        if mixed:
            checked.append(Case(65, 17, 16, causal=True))
        plain = [Case(65, 65, 64, causal=mixed), Case(129, 129, 128, kind="peaky"), Case(17, 129, odd_d, causal=mixed),
                 Case(129, 65, tall_d)]
        if batched:
            plain.append(Case(33, 17, 32, causal=mixed, batch=(2, 3)))
    numbered = [replace(c, dtype=dtype, seed=seed) for seed, c in enumerate(checked + plain, 1)]
    checked, plain = numbered[:len(checked)], numbered[len(checked):]
    if causal == "twins":
        checked += [replace(c, causal=True, seed=c.seed + 20) for c in checked]
        plain += [replace(c, causal=True, seed=c.seed + 20) for c in plain]
    return checked, plain


def _known(exercise: str) -> None:
    need(exercise in cuda.STEPS or exercise in metal.STEPS,
         f"{exercise!r} is not a step of the CUDA C or Metal track graded on the CPU SIMT runtime")


def grading_cases(exercise: str) -> tuple[list[Case], list[Case]]:
    """(cases for the checked launch with GRADING_TILES, larger cases for a plain launch with the default tiles)
    of a CUDA C or Metal step: :func:`step_cases` with the step's head dims, input dtype and causal flag."""
    _known(exercise)
    if exercise in metal.BACKWARD:
        return step_cases(backward=True)
    if exercise in cuda.STEPS:  # CUDA's steps, and Metal's one-thread-per-row ones (they launch like CUDA's 01)
        step = cuda.STEPS[exercise]
        return step_cases(odd_d=ODD_HEAD_DIMS["cuda"][step.d_multiple],
                          dtype=torch.float16 if step.half_inputs else torch.float32,
                          causal="twins" if step.causal else "none")
    metal_step = metal.STEPS[exercise]
    return step_cases(odd_d=ODD_HEAD_DIMS["metal"][metal_step.d_multiple],
                      dtype=torch.float16 if metal_step.half_inputs else torch.float32,
                      causal="mixed", batched=True, tall_d=40)


def _check(exercise: str, module: RawModule, cases: list[Case], tiles: Tiles | None, device: str,
           launch: dict[str, Any], tier: str) -> Report:
    if exercise in metal.BACKWARD:
        return check_backward(exercise, metal.backward_function(exercise, module, device=device, **launch), cases,
                              tier=tier)
    if exercise in metal.FORWARD:
        fn = metal.forward_function(exercise, module, tiles, device=device, **launch)
        return check_attention(exercise, fn, cases, with_lse=True, pass_causal=True, tier=tier)
    step = cuda.STEPS[exercise]
    fn = cuda.attention_function(module, exercise, tiles, **launch)
    return check_attention(exercise, fn, cases, with_lse=step.writes_lse, pass_causal=step.causal, tier=tier)


def check_step(exercise: str, module: RawModule, *, checked_cases: Sequence[Case] | None = None,
               plain_cases: Sequence[Case] | None = None, tiles: Tiles | None = None, device: str = "cpu") -> Report:
    """Grade ``module`` as step ``exercise`` against the float64 oracle within the error budget: the small cases
    under GRADING_LAUNCH (memcheck + racecheck, random schedule) with GRADING_TILES (and, for a step that declares
    two_group_tiles, TWO_GROUP_CASE with those tiles), then the larger ones in a plain launch with the step's default
    tiles (``tiles``, when given, in both). ``device="gpu"`` runs the plain cases of a Metal step on a Mac's GPU instead (the checking modes exist only on the CPU runtime). Returns the
    report; raises CheckFailed."""
    _known(exercise)
    default_checked, default_plain = grading_cases(exercise)
    # The case of two simdgroups per threadgroup comes with the default checked cases and the default tiles.
    two_groups = [replace(TWO_GROUP_CASE, dtype=default_checked[0].dtype)] \
        if checked_cases is None and tiles is None and exercise in TWO_GROUP_TILES else []
    checked_cases = default_checked if checked_cases is None else list(checked_cases)
    plain_cases = default_plain if plain_cases is None else list(plain_cases)
    if device == "gpu":
        need(exercise in metal.STEPS, f"device='gpu' runs a Metal step on a Mac's GPU; {exercise} is not one")
        runs = [(plain_cases, {}, tiles, "Apple GPU")]
    else:
        need(device == "cpu", f"device must be 'cpu' (the CPU runtime) or 'gpu' (a Mac's GPU), got {device!r}")
        runs = [(checked_cases, GRADING_LAUNCH, tiles or GRADING_TILES.get(exercise), CHECKED_TIER),
                (plain_cases, {}, tiles, "CPU SIMT runtime")]
        if two_groups:
            runs.insert(1, (two_groups, GRADING_LAUNCH, TWO_GROUP_TILES[exercise], CHECKED_TIER))
    report = None
    for cases, launch, run_tiles, tier in runs:
        if not cases:
            continue
        part = _check(exercise, module, cases, run_tiles, device, launch, tier)
        if report is None:
            report = part
        else:
            report.cases += part.cases
            report.worst_ratio = max(report.worst_ratio, part.worst_ratio)
    if report is None:
        raise CourseError(f"{exercise}: no cases to check")
    return report
