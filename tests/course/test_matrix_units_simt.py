"""Lesson 05's technique on the CUDA C and Metal tracks, measured (course.grading.matrix_units.matrix_units_simt): both
products of every key tile go through matrix operations, on 16-bit operands.

The CPU runtime's counters mode counts every wmma::mma_sync and simdgroup_multiply_accumulate a launch
completes; a kernel that computes P V with a loop of multiply-adds gets the right numbers and half the
operations the two products need, and fails with a sentence that says so.
"""
from __future__ import annotations

import re

import pytest
import torch

import course
from autograder.corpora.wrong import apply_edits
from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
from course.grading import matrix_units, measuring
from course.errors import CheckFailed
from course.kernels import kernel_path, read_source
from course.simt import RawModule

pytestmark = pytest.mark.cpu_tier("the CPU runtime's counters mode counts the matrix operations")

# Q's fragments kept in float: S = Q Kᵀ multiplies fp32 by fp16 matrices, which the matrix units do not run at
# their 16-bit rate (the values stay right: Q was half to begin with).
Q_IN_FLOAT = (
    ("    simdgroup_half8x8 q_frag[MAX_HEAD_DIM / 8];\n",
     "    simdgroup_float8x8 q_frag[MAX_HEAD_DIM / 8];\n"
     "    for (uint c = lane; c < 8 * d; c += 32) o_strip[c] = float(q_tile[sg * 8 * d + c]);\n"
     "    simdgroup_barrier(mem_flags::mem_threadgroup);\n"),
    ("        simdgroup_load(q_frag[b], q_tile + sg * 8 * d + b * 8, d);\n",
     "        simdgroup_load(q_frag[b], o_strip + b * 8, d);\n"),
)


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_the_course_kernels_run_exactly_what_the_two_products_need():
    for exercise, path in (("05.mma_cuda", "kernels/cuda/05_mma.cu"), ("05.mma_metal", "kernels/metal/05_mma.metal")):
        module = RawModule(path=kernel_path(path))
        matrix_units.matrix_units_simt(exercise, module)
        probe = measuring.step_probe(exercise, "matrix_units")
        ops = matrix_units._matrix_ops(measuring.simt_forward(exercise, module, probe.block_m, probe.block_n), probe.case)
        m, n, k = matrix_units._MATRIX_UNITS[module.language].shape
        case = probe.case
        assert {(op.m, op.n, op.k, op.a, op.b, op.d) for op in ops} == {(m, n, k, "fp16", "fp16", "fp32")}
        assert len(ops) == 2, ops  # one call site per product
        assert sum(op.count for op in ops) == 2 * case.n_q * case.n_k * case.d // (m * n * k)


def test_a_scalar_p_v_loop_gets_the_right_numbers_and_fails_the_count():
    wrong = next(w for w in WRONG_CUDA_KERNELS if w.id == "05.mma_cuda:pv-scalar-loop")
    module = wrong.module()
    with pytest.raises(CheckFailed) as info:
        matrix_units.matrix_units_simt("05.mma_cuda", module)
    line = _line(wrong.source(), "wmma::mma_sync(s, a, b, s);")
    assert str(info.value) == (
        f"05.mma_cuda: on Nq=64, Nk=48, D=16 (normal, float16, seed=57), with 32 × 16 tiles, your kernel ran 12 "
        f"matrix operations (wmma::mma_sync, all at line {line} of 05_mma.cu) where the two products of the 6 key "
        f"tiles its blocks visit need at least 24 (12 for S = Q Kᵀ, 12 for O += P V, 16 × 16 × 16 each): one "
        f"product's worth, so the other went through ordinary arithmetic (a loop of multiply-adds, say), which a "
        f"GPU runs on its FMA units, not its tensor cores. Both products of every tile go through wmma::mma_sync: "
        f"S = Q Kᵀ from the Q strip's and the K tile's fragments, O += P V from the P strip's and the V tile's, "
        f"16 × 16 × 16 at a time.")
    # course.check grades the values first (they are right), then the count.
    with pytest.raises(CheckFailed, match="one product's worth"):
        course.check("05.mma_cuda", module, cases=[course.Case(17, 20, 16, dtype=torch.float16, seed=3)])


def test_float_operands_are_counted_and_named():
    source = apply_edits(read_source("kernels/metal/05_mma.metal"), Q_IN_FLOAT, "q-in-float")
    module = RawModule(code=source, language="metal", name="05_mma.metal")
    with pytest.raises(CheckFailed) as info:
        matrix_units.matrix_units_simt("05.mma_metal", module)
    line = _line(source, "simdgroup_multiply_accumulate(s, q_frag[b], k_t, s);")
    assert re.search(rf"ran 96 matrix operations, but only 48 on 16-bit operands where the two products of the 6 key "
                     rf"tiles its blocks visit need at least 96 .*: 48 multiplied fp32 by fp16 matrices, all at line "
                     rf"{line} of 05_mma.metal, although the inputs are float16\.", str(info.value)), str(info.value)


def test_what_the_tiles_need_follows_the_shape_and_the_instruction():
    # 64 x 48 keys in 32 x 16 tiles: 2 blocks x 3 key tiles, 32 * 16 * 16 multiply-adds a product per tile.
    assert matrix_units._needed(64, 48, 16, 32, 16, 16 * 16 * 16) == (6, 12)
    assert matrix_units._needed(64, 48, 16, 32, 16, 8 * 8 * 8) == (6, 96)
    # Ragged edges count only the rows and keys that exist: 17 rows see keys 0-15 (17 * 16 * 16 multiply-adds,
    # more than one instruction's 4,096) and keys 16-19 (one instruction).
    assert matrix_units._needed(17, 20, 16, 32, 16, 16 * 16 * 16) == (2, 3)
