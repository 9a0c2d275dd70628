"""Counters mode counts the warp-level matrix products of a launch (``LaunchCounters.matrix_ops``): one per warp
per wmma::mma_sync or simdgroup_multiply[_accumulate], by shape and by the element type of each operand.

Lesson 05's check (course.grading.matrix_units.matrix_units_simt) reads these counts to tell a kernel whose two products
run on the matrix units from one that computes them with scalar loops and gets the same numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from course.simt import RawModule
from course.simt.launch_counters import MatrixOps

CUDA = r"""
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

// Every warp multiplies the same 16 x 16 tiles `reps` times into a float accumulator, then once more into a
// half accumulator; warp 0 of block 0 stores the float result.
__global__ void repeat_mma(const __half* a, const __half* b, float* out, int reps) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fragment<wmma::accumulator, 16, 16, 16, __half> low;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::fill_fragment(acc, 0.0f);
    wmma::fill_fragment(low, __float2half(0.0f));
    for (int r = 0; r < reps; ++r) wmma::mma_sync(acc, fa, fb, acc);  // repeated
    wmma::mma_sync(low, fa, fb, low);  // once
    if (blockIdx.x == 0 && threadIdx.x < 32) wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

// 20 call sites, more than the runtime's table has entries (16).
__global__ void many_sites(const __half* a, float* out) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, a, 16);
    wmma::fill_fragment(acc, 0.0f);
#define SITE wmma::mma_sync(acc, fa, fb, acc)
    SITE; SITE; SITE; SITE; SITE;
    SITE; SITE; SITE; SITE; SITE;
    SITE; SITE; SITE; SITE; SITE;
    SITE; SITE; SITE; SITE; SITE;
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}
"""

METAL = r"""
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

// `reps` half x half products accumulated in float, one float x float product without C.
kernel void repeat_mma(device const half* a [[buffer(0)]], device const float* f [[buffer(1)]],
                       device float* out [[buffer(2)]], constant int& reps [[buffer(3)]],
                       uint sg [[simdgroup_index_in_threadgroup]]) {
    simdgroup_half8x8 x, y;
    simdgroup_float8x8 u, acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_load(x, a, 8);
    simdgroup_load(y, a, 8);
    simdgroup_load(u, f, 8);
    for (int r = 0; r < reps; ++r) simdgroup_multiply_accumulate(acc, x, y, acc);
    simdgroup_multiply(u, u, u);
    if (sg == 0) simdgroup_store(acc, out, 8);
}
"""


def _line(source: str, marker: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if marker in text)


@pytest.fixture(scope="module")
def cuda():
    return RawModule(code=CUDA, name="matrix_ops.cu", compile_now="checked")


@pytest.fixture(scope="module")
def metal():
    return RawModule(code=METAL, language="metal", name="matrix_ops.metal", compile_now="checked")


def _cuda_launch(module, reps: int, blocks: int, warps: int, **options):
    a = (np.arange(256) % 7 / 8).astype(np.float16)
    b = (np.arange(256) % 5 / 4).astype(np.float16)
    out = np.zeros(256, np.float32)
    result = module.get_function("repeat_mma")((blocks,), (32 * warps,), (a, b, out, np.int32(reps)), **options)
    return result, a.astype(np.float32).reshape(16, 16) @ b.astype(np.float32).reshape(16, 16), out.reshape(16, 16)


@pytest.mark.parametrize("reps, blocks, warps", [(3, 1, 1), (5, 2, 3), (0, 1, 2)])
def test_every_warp_counts_each_mma_sync_it_makes(cuda, reps, blocks, warps):
    result, product, out = _cuda_launch(cuda, reps, blocks, warps, check="counters")
    c = result.counters
    warps_run = blocks * warps
    kinds = {(op.shape, op.a, op.b, op.c, op.d, op.line): op.count for op in c.matrix_ops}
    want = {("16×16×16", "fp16", "fp16", "fp16", "fp16", f"line {_line(CUDA, '// once')} of matrix_ops.cu"): warps_run}
    if reps:
        want[("16×16×16", "fp16", "fp16", "fp32", "fp32",
              f"line {_line(CUDA, '// repeated')} of matrix_ops.cu")] = reps * warps_run
    assert kinds == want
    assert c.events["matrix_ops"] == (reps + 1) * warps_run
    assert all(op.sixteen_bit for op in c.matrix_ops)
    np.testing.assert_allclose(out, reps * product, rtol=1e-6)  # the counted products are the ones computed


def test_launches_outside_counters_mode_count_nothing_and_counts_do_not_carry_over(cuda):
    result, _, _ = _cuda_launch(cuda, 2, 1, 1)
    assert result.counters is None
    first, _, _ = _cuda_launch(cuda, 4, 1, 1, check="counters")
    second, _, _ = _cuda_launch(cuda, 1, 1, 1, check="counters")
    assert first.counters.events["matrix_ops"] == 5 and second.counters.events["matrix_ops"] == 2


def test_metal_counts_simdgroup_products_with_their_operand_types(metal):
    a = (np.arange(64) % 3 / 2).astype(np.float16)
    f = np.eye(8, dtype=np.float32).ravel()
    out = np.zeros(64, np.float32)
    c = metal.get_function("repeat_mma")((2,), (64,), (a, f, out, np.int32(3)), check="counters").counters
    where = "line {} of matrix_ops.metal".format
    assert set(c.matrix_ops) == {
        MatrixOps(8, 8, 8, "fp16", "fp16", "fp32", "fp32", 3 * 4, where(_line(METAL, "simdgroup_multiply_accumulate"))),
        MatrixOps(8, 8, 8, "fp32", "fp32", "", "fp32", 4, where(_line(METAL, "simdgroup_multiply(u")))}
    assert [op.sixteen_bit for op in sorted(c.matrix_ops, key=lambda op: op.a)] == [True, False]
    x = a.astype(np.float32).reshape(8, 8)
    np.testing.assert_allclose(out.reshape(8, 8), 3 * x @ x, rtol=1e-6)


def test_more_call_sites_than_the_table_holds_still_count_every_operation(cuda):
    a, out = np.ones(256, np.float16), np.zeros(256, np.float32)
    c = cuda.get_function("many_sites")((1,), (64,), (a, out), check="counters").counters
    assert c.events["matrix_ops"] == sum(op.count for op in c.matrix_ops) == 2 * 20
    assert {(op.shape, op.a, op.b, op.c, op.d) for op in c.matrix_ops} == {("16×16×16", "fp16", "fp16", "fp32", "fp32")}
    assert all(op.line.endswith("of matrix_ops.cu") for op in c.matrix_ops)
    np.testing.assert_array_equal(out, np.full(256, 20 * 16, np.float32))
