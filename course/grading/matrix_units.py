"""Matrix units, measured (lesson 05): both products of every key tile, on 16-bit operands for 16-bit inputs.

A "tensor-core" kernel whose products are broadcasts and sums gives the same O as one built on ``tl.dot``, so:

- Triton: every ``tl.dot`` the interpreter ran, with its operands' shapes and dtypes, per program and key tile it
  loaded (:func:`matrix_units_triton`);
- CUDA C and Metal: the warp-level matrix operations (``wmma::mma_sync``, ``simdgroup_multiply_accumulate``) the
  CPU runtime counts in counters mode, by shape and operand types, against what the two products of the tiles
  visited need (:func:`matrix_units_simt`; the tiles and case are declared on the step's row).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from course.errors import CheckFailed
from course.grading.measuring import interpreted, rows_loaded, run_recorded, simt_forward, step_probe, tier_device
from course.grading.racecheck import launch_source
from course.inputs import Case
from course.simt.kernel import collect_counters

__all__ = ["matrix_units_triton", "matrix_units_simt"]


_SIXTEEN_BIT = ("fp16", "bf16")


def matrix_units_triton(exercise: str, fn: Callable[..., Any],
                        case: Case = Case(40, 72, 16, dtype=torch.float16, seed=51)) -> None:
    """Lesson 05 (Triton): per key tile a program loads, one tl.dot for S = Q Kᵀ and one for P V, each on
    16-bit operands when the inputs are 16-bit (what makes tl.dot a tensor-core instruction on a GPU)."""
    run = interpreted(fn)
    q, k, v = case.tensors(tier_device())
    launches, _ = run_recorded(run, (q, k, v), {})
    if not launches:
        return
    for launch in launches:
        constants = launch.constants
        block_n, block_d = constants.get("BLOCK_N"), constants.get("BLOCK_D")
        rows = rows_loaded(launch, "k_ptr")
        if rows is None or not isinstance(block_n, int) or not isinstance(block_d, int):
            continue
        dots: dict[tuple[int, int, int], list] = defaultdict(list)
        for dot in launch.dots:
            dots[dot[0]].append(dot)
        block_m = constants.get("BLOCK_M")
        for program in sorted(rows):
            tiles = len({r // block_n for r in rows[program]})
            mine = dots.get(program, [])
            scores = [d for d in mine if len(d[2]) == 2 and d[2][1] == block_d and d[3][1] == block_n]
            values = [d for d in mine if len(d[2]) == 2 and d[2][1] == block_n and d[3][1] == block_d]
            who = f"program {program}"
            if isinstance(block_m, int):
                r0 = program[0] * block_m
                who = f"the program for query rows {r0}–{min(case.n_q, r0 + block_m) - 1}"
            where = (f"{exercise}: on {case.describe()}, {who} loaded {tiles} key "
                     f"tile{'s' if tiles != 1 else ''}")
            for name, found, how in (("S = Q Kᵀ", scores, "s = tl.dot(q, kT)"),
                                     ("O += P V", values, "acc = tl.dot(p.to(v.dtype), v, acc)")):
                if len(found) < tiles:
                    raise CheckFailed(
                        f"{where} but made {len(found)} tl.dot call{'s' if len(found) != 1 else ''} for {name}: that product was computed "
                        f"another way (a broadcast product summed with tl.sum, say), which a GPU runs on its "
                        f"ordinary FMA units, not its tensor cores. Both products of every tile go through tl.dot: "
                        f"{how}.")
            wide = [d for d in scores + values if d[4] not in _SIXTEEN_BIT or d[5] not in _SIXTEEN_BIT]
            if case.dtype in (torch.float16, torch.bfloat16) and wide:
                d = wide[0]
                raise CheckFailed(
                    f"{where}; its tl.dot at {launch_source(launch, d[1])} multiplied {d[4]} by {d[5]} tiles although the "
                    f"inputs are "
                    f"{str(case.dtype).replace('torch.', '')}. Tensor cores multiply 16-bit operands (fp16 in, fp32 "
                    f"accumulate); with a float32 operand the product runs at a fraction of their speed, or on the "
                    f"FMA units. Keep the Q, K and V tiles as loaded, and cast P right before P·V: p.to(v.dtype).")


@dataclass(frozen=True)
class _MatrixUnit:
    """A track's matrix instruction: its (M, N, K), named when the kernel ran none, and how the two products use it."""
    shape: tuple[int, int, int]
    instruction: str
    units: str
    fix: str


_MATRIX_UNITS = {
    "cuda": _MatrixUnit(
        (16, 16, 16), "wmma::mma_sync", "tensor cores",
        "S = Q Kᵀ from the Q strip's and the K tile's fragments, O += P V from the P strip's and the V tile's, "
        "16 × 16 × 16 at a time"),
    "metal": _MatrixUnit(
        (8, 8, 8), "simdgroup_multiply_accumulate", "simdgroup matrix units",
        "S = Q Kᵀ from the Q strip's and the K tile's simdgroup_half8x8 matrices, O += P V from the P strip's and "
        "the V tile's, 8 × 8 × 8 at a time"),
}


def _matrix_ops(fn: Callable[..., Any], case: Case) -> list | None:
    """The matrix operations (course.simt.launch_counters.MatrixOps) of the launches of ``fn`` on ``case``, or None when
    it did not run to the end."""
    q, k, v = case.tensors()
    try:
        with collect_counters() as launches:
            fn(q, k, v)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return None
    return [op for launch in launches for op in launch.matrix_ops]


def _needed(n_q: int, n_k: int, d: int, bm: int, bn: int, volume: int) -> tuple[int, int]:
    """(key tiles the blocks visit, matrix operations of ``volume`` multiply-adds each that one product of those
    tiles needs at least): per block and key tile, rows × keys × d multiply-adds, non-causal."""
    tiles = products = 0
    for b in range(-(-n_q // bm)):
        rows = min(n_q, (b + 1) * bm) - b * bm
        for t in range(-(-n_k // bn)):
            keys = min(n_k, (t + 1) * bn) - t * bn
            tiles += 1
            products += -(-rows * keys * d // volume)
    return tiles, products


def _sites(ops: list) -> str:
    """``at line 131 of 05_mma.cu``: where the counted operations were made."""
    lines = sorted({op.line for op in ops if op.line}, key=lambda text: (len(text), text))
    if not lines:
        return ""
    if len(lines) == 1:
        return f", all at {lines[0]}"
    return ", at " + ", ".join(lines[:-1]) + " and " + lines[-1]


def matrix_units_simt(exercise: str, module) -> None:
    """Lesson 05 (CUDA C, Metal): both products of every key tile a block visits go through matrix instructions
    (``wmma::mma_sync``, ``simdgroup_multiply_accumulate``), on 16-bit operands for 16-bit inputs.

    Counters mode counts every warp-level matrix operation of the launch with its shape and operand types. One
    product of a block's key tile is block_m × block_n × d multiply-adds, so it needs at least that many over
    M·N·K-sized matrix operations; a kernel that computes one of the two products with a scalar loop runs half the
    operations the two need, and one with no matrix operation at all runs none. The sentence says how many ran,
    how many the tiles need, and where the operations that ran were made."""
    probe, unit = step_probe(exercise, "matrix_units"), _MATRIX_UNITS[module.language]
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    ops = _matrix_ops(simt_forward(exercise, module, bm, bn), case)
    if ops is None:
        return
    ran = sum(op.count for op in ops)
    common = max(ops, key=lambda op: op.count) if ops else None
    m, n, k = (common.m, common.n, common.k) if common else unit.shape
    volume = m * n * k
    tiles, one = _needed(case.n_q, case.n_k, case.d, bm, bn, volume)
    done = sum(op.count * op.m * op.n * op.k for op in ops) / volume  # in operations of the common shape
    where = f"{exercise}: on {case.describe()}, with {bm} × {bn} tiles"
    need = (f"the two products of the {tiles} key tiles its blocks visit need at least {2 * one:,} ({one:,} for "
            f"S = Q Kᵀ, {one:,} for O += P V, {m} × {n} × {k} each)")
    if done < 2 * one:
        if ran == 0:
            missing = "so both products went through ordinary arithmetic (loops of multiply-adds, say)"
        elif done >= one:
            missing = ("one product's worth, so the other went through ordinary arithmetic (a loop of "
                       "multiply-adds, say)")
        else:
            missing = ("fewer than even one product needs, so some of the tiles' products went through ordinary "
                       "arithmetic")
        raise CheckFailed(
            f"{where}, your kernel ran {ran:,} matrix operation{'s' if ran != 1 else ''} ({unit.instruction}"
            f"{_sites(ops)}) where {need}: {missing}, which a GPU runs on its FMA units, not its {unit.units}. "
            f"Both products of every tile go through {unit.instruction}: {unit.fix}.")
    if case.dtype in (torch.float16, torch.bfloat16):
        sixteen = sum(op.count * op.m * op.n * op.k for op in ops if op.sixteen_bit) / volume
        wide = [op for op in ops if not op.sixteen_bit]
        if sixteen < 2 * one and wide:
            w = max(wide, key=lambda op: op.count)
            dtype = str(case.dtype).replace("torch.", "")
            raise CheckFailed(
                f"{where}, your kernel ran {ran:,} matrix operations, but only {round(sixteen):,} on 16-bit "
                f"operands where {need}: {sum(op.count for op in wide):,} multiplied {w.a} by {w.b} matrices"
                f"{_sites(wide)}, although the inputs are {dtype}. The {unit.units} multiply 16-bit operands "
                f"(fp16 in, fp32 accumulate); a float32 operand runs at a fraction of their speed. Keep the Q, K "
                f"and V tiles as loaded, in half, and store P as half before P V.")
