"""Conformance of the CPU runtime's Metal front end (course/simt/include/metal/simt_metal.h).

Each kernel under tests/simt/kernels/metal/ exercises one group of MSL features and is checked
against numpy: exactly where the arithmetic is exact (integer-valued floats, bit patterns), with a
float tolerance otherwise. Kernels run in fast mode and, where checking has something to say, with
memcheck + racecheck on a random schedule. The error tests prove that each check fires on wrong code.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError, RawModule

KERNELS = Path(__file__).resolve().parent / "kernels" / "metal"
CHECKED = {"check": ("memcheck", "racecheck"), "schedule": "random", "seed": 3}
MODES = {"fast": {}, "checked": CHECKED}


@pytest.fixture(params=sorted(MODES), scope="module")
def mode(request):
    return MODES[request.param]


def module(name: str) -> RawModule:
    return RawModule(path=KERNELS / name)


def kernel_file_fixture(name: str):
    """A fixture holding kernel file ``name``, built once for this test module."""
    return pytest.fixture(scope="module", name=name.removesuffix(".metal"))(lambda: module(name))


basics = kernel_file_fixture("basics.metal")
vectors = kernel_file_fixture("vectors.metal")
simdgroup = kernel_file_fixture("simdgroup.metal")
atomics = kernel_file_fixture("atomics.metal")


def line_of(name: str, text: str, after: str = "") -> int:
    """The 1-based line of `text` in kernel file `name`, first after the line holding `after`."""
    lines = (KERNELS / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines[start:], start + 1) if text in line)


def ints(rng, shape, lo, hi, dtype=np.float32):
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Positions, threadgroup memory, buffer arguments


def test_every_position_attribute(basics, mode):
    grid, block = (2, 3, 2), (4, 2, 5)  # 40 threads per threadgroup: simdgroups of 32 and 8
    n = int(np.prod(grid) * np.prod(block))
    out = np.zeros(n * 24, np.uint32)
    basics.get_function("positions")(grid, block, (out,), **mode)
    got = out.reshape(n, 24)
    tpg = [g * b for g, b in zip(grid, block)]
    expect = np.zeros_like(got)
    for gz in range(tpg[2]):
        for gy in range(tpg[1]):
            for gx in range(tpg[0]):
                pos = (gx, gy, gz)
                tg = [p // b for p, b in zip(pos, block)]
                t = [p % b for p, b in zip(pos, block)]
                index = t[0] + block[0] * (t[1] + block[1] * t[2])
                row = [*pos, *tg, *t, index, *block, *grid, *tpg, index % 32, index // 32, 2, 32, 7]
                expect[(gz * tpg[1] + gy) * tpg[0] + gx] = row
    np.testing.assert_array_equal(got, expect)


def test_narrow_position_types(basics, mode):
    grid, block = (3, 2), (8, 6)  # 48 threads: lanes wrap at 32
    tpg = (24, 12)
    out = np.zeros(tpg[0] * tpg[1] * 8, np.uint32)
    basics.get_function("positions_narrow")(grid, block, (out,), **mode)
    got = out.reshape(tpg[1], tpg[0], 8)
    gy, gx = np.mgrid[0: tpg[1], 0: tpg[0]]
    tx, ty = gx % 8, gy % 6
    expect = np.stack([gx, gy, tx, ty, np.zeros_like(gx), (gx // 8) * 100 + gy // 6,
                       (tx + 8 * ty) % 32, np.full_like(gx, 806)], axis=-1)
    np.testing.assert_array_equal(got, expect)


def test_threadgroup_array_reverse(basics, mode):
    x = np.arange(3 * 64, dtype=np.float32) * 1.5
    out = np.zeros_like(x)
    basics.get_function("reverse_static")(3, 64, (x, out), **mode)
    np.testing.assert_array_equal(out, x.reshape(3, 64)[:, ::-1].ravel())


def test_threadgroup_vector_array(basics, mode):
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    out = np.zeros_like(x)
    basics.get_function("reverse_float4")(1, 16, (x, out), **mode)
    np.testing.assert_array_equal(out, x[::-1][:, [2, 3, 0, 1]])


def test_threadgroup_array_without_barrier_is_a_race(basics):
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(KernelLaunchError, match=r"data race on threadgroup memory: .* with no barrier between\. "
                                                r"Put a threadgroup_barrier\(mem_flags::mem_threadgroup\) between"):
        basics.get_function("reverse_no_barrier")(1, 64, (x, np.zeros_like(x)), check="racecheck")


# ---------------------------------------------------------------------------------------------
# Barrier flags: mem_none orders execution only; racecheck reports memory a barrier's flags do not name

barrier_flags = kernel_file_fixture("barrier_flags.metal")
REVERSED = np.arange(64, dtype=np.float32)[::-1]


@pytest.mark.parametrize("kernel", ["reverse_threadgroup", "reverse_threadgroup_texture"])
def test_a_barrier_naming_threadgroup_memory_orders_it(barrier_flags, mode, kernel):
    out = np.zeros(64, np.float32)
    barrier_flags.get_function(kernel)(1, 64, (np.arange(64, dtype=np.float32), out), **mode)
    np.testing.assert_array_equal(out, REVERSED)


@pytest.mark.parametrize("kernel,flags", [("reverse_none", "mem_none"), ("reverse_device", "mem_device"),
                                          ("reverse_texture", "mem_texture")])
def test_a_barrier_not_naming_threadgroup_memory_leaves_a_race(barrier_flags, kernel, flags):
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    barrier_flags.get_function(kernel)(1, 64, (x, out))  # the threads still wait for each other: on the CPU
    np.testing.assert_array_equal(out, REVERSED)         # the answer comes out right, by luck
    with pytest.raises(KernelLaunchError) as err:
        barrier_flags.get_function(kernel)(1, 64, (x, np.zeros_like(x)), **CHECKED)
    line = line_of("barrier_flags.metal", "// reverse-barrier")
    msg = str(err.value)
    assert f"{kernel}: data race on threadgroup memory: " in msg, msg
    assert (f"with only threadgroup_barrier at line {line} of barrier_flags.metal between them, which does not name "
            "mem_flags::mem_threadgroup: it makes the threads wait, but does not order their threadgroup memory. "
            "Use threadgroup_barrier(mem_flags::mem_threadgroup) there.") in msg, msg
    assert flags not in msg  # the sentence holds whatever the flags were


def test_mem_none_on_a_threadgroup_argument_is_a_race_too(barrier_flags):
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(KernelLaunchError, match=r"data race on threadgroup memory: .* with only threadgroup_barrier "
                                                rf"at line {line_of('barrier_flags.metal', '// argument-barrier')} "):
        barrier_flags.get_function("reverse_argument_none")(1, 64, (x, np.zeros_like(x)), threadgroup_memory=[256],
                                                            check="racecheck")


def test_mem_none_is_enough_where_no_thread_reads_another_threads_memory(barrier_flags, mode):
    out = np.zeros(64, np.float32)
    barrier_flags.get_function("own_slot_none")(1, 64, (np.arange(64, dtype=np.float32), out), **mode)
    np.testing.assert_array_equal(out, np.arange(64) * 2 + 1)


def test_device_memory_is_ordered_by_mem_device_only(barrier_flags, mode):
    out = np.zeros(128, np.float32)
    barrier_flags.get_function("exchange_device")(1, 64, (out,), **mode)
    np.testing.assert_array_equal(out[64:], REVERSED)
    with pytest.raises(KernelLaunchError) as err:
        barrier_flags.get_function("exchange_device_threadgroup_only")(1, 64, (np.zeros(128, np.float32),),
                                                                       check="racecheck")
    line = line_of("barrier_flags.metal", "// exchange-barrier")
    assert "data race on `out` element " in str(err.value)
    assert (f"with only threadgroup_barrier at line {line} of barrier_flags.metal between them, which does not name "
            "mem_flags::mem_device: it makes the threads wait, but does not order their device memory. "
            "Use threadgroup_barrier(mem_flags::mem_device) there.") in str(err.value)


def test_simdgroup_barrier_flags_order_threadgroup_memory_within_a_simdgroup(barrier_flags, mode):
    out = np.zeros(32, np.float32)
    barrier_flags.get_function("lanes_threadgroup")(1, 32, (out,), **mode)
    np.testing.assert_array_equal(out, np.arange(32)[::-1])
    with pytest.raises(KernelLaunchError) as err:
        barrier_flags.get_function("lanes_none")(1, 32, (np.zeros(32, np.float32),), check="racecheck")
    line = line_of("barrier_flags.metal", "// lanes-barrier")
    assert (f"data race on threadgroup memory: " in str(err.value)
            and f"with only simdgroup_barrier at line {line} of barrier_flags.metal between them, which does not name "
                "mem_flags::mem_threadgroup" in str(err.value)
            and "Use simdgroup_barrier(mem_flags::mem_threadgroup) there." in str(err.value)), str(err.value)


def test_threadgroup_argument_reverse(mode):
    kernel = module("threadgroup_argument.metal").get_function("reverse_dynamic")
    n, size = 100, 32
    x = np.arange(n, dtype=np.float32) + 0.25
    out = np.zeros_like(x)
    kernel(4, size, (x, out, np.uint32(n)), threadgroup_memory=[size * 4], **mode)
    padded = np.concatenate([x, np.full(4 * size - n, -1.0, np.float32)])
    np.testing.assert_array_equal(out, padded.reshape(4, size)[:, ::-1].ravel()[:n])


def test_threadgroup_argument_too_small_is_caught():
    kernel = module("threadgroup_argument.metal").get_function("reverse_dynamic")
    x = np.zeros(32, np.float32)
    with pytest.raises(KernelLaunchError, match=r"out-of-bounds .*\[\[threadgroup\(0\)\]\]"):
        kernel(1, 32, (x, np.zeros_like(x), 32), threadgroup_memory=[64], check="memcheck")


class Params(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("scale", ctypes.c_float), ("bias", ctypes.c_float),
                ("stride", ctypes.c_uint32)]


def test_constant_struct_and_scalar(basics, mode):
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(20, np.float32)
    basics.get_function("affine")(1, 16, (x, y, Params(10, 2.5, -1.0, 2), np.float32(0.25)), **mode)
    expect = np.zeros(20, np.float32)
    expect[::2] = 2.5 * x - 1.0 + 0.25
    np.testing.assert_array_equal(y, expect)


# ---------------------------------------------------------------------------------------------
# Vectors, half, math


def test_float4_arithmetic_swizzles_conversions(vectors, mode):
    rng = np.random.default_rng(1)
    n = 40
    a = rng.uniform(-4, 4, (n, 4)).astype(np.float32)
    b = rng.uniform(0.5, 4, (n, 4)).astype(np.float32)
    out = np.zeros((n, 12, 4), np.float32)
    vectors.get_function("float4_ops")(1, n, (a, b, out), **mode)
    x, y = a, b
    f = np.float32
    v = x.copy()
    v[:, 0:2] = y[:, 2:4]
    v[:, 3] += 1
    v *= 2
    w = x.copy()
    w[:, 2:4] *= np.array([10, 100], np.float32)
    expect = np.stack([
        x + y,
        x * y - y / f(2),
        f(3) * x - f(1),
        -x,
        np.concatenate([x[:, 2:4], y[:, 0:2]], axis=1),
        np.concatenate([x[:, 0:3], np.full((n, 1), 7, np.float32)], axis=1),
        v,
        x[:, ::-1],
        np.stack([x[:, 0], y[:, 1], np.full(n, 1.5, np.float32), np.full(n, 1.5, np.float32)], axis=1),
        np.trunc(x * f(10)),
        np.stack([(x * y).sum(1), (x[:, :2] * y[:, :2]).sum(1), np.full(n, 5, np.float32), x[:, 1] + y[:, 2]], 1),
        w,
    ], axis=1)
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6)


def test_int_vectors(vectors, mode):
    rng = np.random.default_rng(2)
    n = 33
    a = rng.integers(-50, 50, (n, 4)).astype(np.int32)
    b = rng.integers(1, 20, (n, 4)).astype(np.int32)
    out = np.zeros((n, 6, 4), np.int32)
    uout = np.zeros((n, 2), np.uint32)
    vectors.get_function("int_ops")(3, 11, (a, b, out, uout), **mode)
    expect = np.stack([np.fmod(a, b), (a & b) | (a ^ 3), a << 2, 2 * np.abs(a - b), np.maximum(a, b),
                       np.clip(a, -5, 5)], axis=1)
    np.testing.assert_array_equal(out, expect)
    u = (a[:, :2].astype(np.uint32) * np.uint32(3) + np.array([1, 2], np.uint32)) >> np.uint32(1)
    np.testing.assert_array_equal(uout, u)


def test_half_rounds_and_mixed_arithmetic_promotes(vectors, mode):
    rng = np.random.default_rng(3)
    n = 64
    h = rng.uniform(-4, 4, n).astype(np.float16)
    f = rng.uniform(-4, 4, n).astype(np.float32)
    hout = np.zeros((n, 4), np.float16)
    fout = np.zeros((n, 4), np.float32)
    h4 = np.zeros((n, 4), np.float16)
    f4 = np.zeros((n, 4), np.float32)
    vectors.get_function("half_ops")(1, n, (h, f, hout, fout, h4, f4), **mode)
    H = np.float16
    expect_h = np.stack([h * h + H(1), h / H(3), f.astype(H), h * H(2) - H(1)], axis=1)
    np.testing.assert_array_equal(hout, expect_h)
    expect_f = np.stack([h.astype(np.float32) * f, f + h.astype(np.float32), (h.astype(np.float32) < f),
                         np.full(n, np.float32(H(1) / H(3)))], axis=1).astype(np.float32)
    np.testing.assert_array_equal(fout, expect_f)
    assert fout[0, 3] != np.float32(1) / np.float32(3)  # the literal really is a half
    v = np.stack([h, h + H(1), f.astype(H), np.full(n, 2, H)], axis=1)
    np.testing.assert_array_equal(h4, v * H(2) + H(1) - f.astype(H)[:, None])
    np.testing.assert_array_equal(f4, v.astype(np.float32) + np.float32(0.25))


def test_math_functions(vectors, mode):
    x = np.concatenate([np.linspace(-3, 3, 47), [0.0]]).astype(np.float32)
    n = len(x)
    out = np.zeros((n, 16), np.float32)
    vout = np.zeros((n, 3, 4), np.float32)
    vectors.get_function("math_ops")(1, n, (x, out, vout), **mode)
    v = x.astype(np.float64)
    a = np.abs(v)
    expect = np.stack([
        np.exp(v), np.exp2(v), np.log(a + 1), 2 * np.exp(v) + np.exp2(v),
        np.maximum(v, 0.5) + np.minimum(v, -0.5), np.abs(v - 0.25), a + np.sqrt(a), 1 / np.sqrt(a + 1),
        v * 3 + 0.5, np.clip(v, -1, 1), np.where(v > 0, 2.0, 1.0), (v != 0).astype(float),
        (v == 0).astype(float), np.full(n, np.finfo(np.float32).max), -v, np.maximum(v, 1) + 1,
    ], axis=1)
    np.testing.assert_allclose(out, expect, rtol=2e-6, atol=1e-7)
    assert np.signbit(out[x == 0, 14]).all()  # as_type flipped the sign bit of +0
    w = np.stack([v, -v, 2 * v, np.full(n, 0.5)], axis=1)
    aw = np.abs(w)
    expect_v = np.stack([np.exp(w) + np.maximum(w, 0), np.clip(w, -1, 1) + aw + np.sqrt(aw),
                         2 * w + 1 + (w == 0)], axis=1)
    np.testing.assert_allclose(vout, expect_v, rtol=2e-6, atol=1e-7)


def test_aligned_vector_access_works(vectors, mode):
    x = np.arange(40, dtype=np.float32)
    out = np.zeros((8, 4), np.float32)
    vectors.get_function("float4_at")(1, 8, (x, out, np.uint32(4)), **mode)
    np.testing.assert_array_equal(out.ravel(), x[4:36])
    h = np.arange(40).astype(np.float16)
    hout = np.zeros((8, 4), np.float16)
    vectors.get_function("half4_at")(1, 8, (h, hout, np.uint32(4)), **mode)
    np.testing.assert_array_equal(hout.ravel(), h[4:36] * 2)


@pytest.mark.parametrize("kernel,offset,what,statement", [
    ("float4_at", 1, "float4 read", "out[i] = p[i];"),
    ("float4_at", 2, "float4 read", "out[i] = p[i];"),
    ("half4_at", 2, "half4 read", "out[i] = p[i] * 2.0h;"),
    ("float4_store_at", 2, "float4 write", "p[i] = in[i];"),
])
def test_misaligned_vector_access_fails(vectors, mode, kernel, offset, what, statement):
    if kernel == "float4_store_at":
        args = (np.ones((8, 4), np.float32), np.zeros(40, np.float32), np.uint32(offset))
    else:
        dtype = np.float16 if kernel == "half4_at" else np.float32
        args = (np.zeros(40, dtype), np.zeros((8, 4), dtype), np.uint32(offset))
    line = line_of("vectors.metal", statement, f"void {kernel}(")
    with pytest.raises(KernelLaunchError, match=f"misaligned {what}") as err:
        vectors.get_function(kernel)(1, 8, args, **mode)
    assert f"line {line} of vectors.metal" in str(err.value)


def test_vector_index_out_of_range_fails(vectors, mode):
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = np.zeros(8, np.float32)
    kernel = vectors.get_function("vector_index")
    kernel(1, 8, (x, out, np.uint32(3)), **mode)
    np.testing.assert_array_equal(out, x[:, 3])
    with pytest.raises(KernelLaunchError, match=r"index 4 out of range for a float4 \(valid: 0 to 3\)") as e:
        kernel(1, 8, (x, out, np.uint32(4)), **mode)
    assert f"line {line_of('vectors.metal', 'out[i] = v[k];')} of vectors.metal" in str(e.value)


# ---------------------------------------------------------------------------------------------
# SIMD-group functions


def per_simdgroup(x, fn):
    return np.concatenate([fn(w) for w in x.reshape(-1, 32)])


def test_simd_functions(simdgroup, mode):
    rng = np.random.default_rng(4)
    n = 128  # two threadgroups of two full simdgroups
    x = ints(rng, n, -15, 15)
    x[5] = 16.0  # only the first simdgroup has a value above 15.5
    k = rng.integers(-50, 50, n).astype(np.int32)
    out = np.zeros((n, 12), np.float32)
    iout = np.zeros((n, 4), np.int32)
    hout = np.zeros(n, np.float16)
    vout = np.zeros((n, 4), np.float32)
    simdgroup.get_function("simd_ops")(2, 64, (x, out, k, iout, hout, vout), **mode)
    lane = np.arange(32)
    down = np.where(lane + 3 < 32, lane + 3, lane)
    up = np.where(lane >= 4, lane - 4, lane)
    cols = [
        lambda w: np.full(32, w.sum()), lambda w: np.full(32, w.max()), lambda w: np.full(32, w.min()),
        lambda w: w[(lane * 7 + 3) % 32], lambda w: w[lane ^ 5], lambda w: w[down], lambda w: w[up],
        lambda w: np.full(32, w[9]), lambda w: np.cumsum(w) - w, lambda w: np.cumsum(w),
        lambda w: np.full(32, w[0]), lambda w: np.full(32, 1.0 + 2.0 * (w > 15.5).any()),
    ]
    expect = np.stack([per_simdgroup(x, c) for c in cols], axis=1)
    np.testing.assert_array_equal(out, expect)
    kdown = np.where(lane + 1 < 32, lane + 1, lane)
    icols = [lambda w: np.full(32, w.sum()), lambda w: np.full(32, w.max()), lambda w: np.full(32, w.min() + 100),
             lambda w: w[lane ^ 16] + w[kdown] * 1000]
    np.testing.assert_array_equal(iout, np.stack([per_simdgroup(k, c) for c in icols], axis=1))
    np.testing.assert_array_equal(hout, per_simdgroup(x, lambda w: np.full(32, w.sum())).astype(np.float16))
    sums = per_simdgroup(x, lambda w: np.full(32, w.sum()))
    np.testing.assert_array_equal(vout, np.stack([sums, np.full(n, 32), -sums, np.full(n, 496)], axis=1))


def test_simd_reductions_skip_returned_lanes(simdgroup, mode):
    rng = np.random.default_rng(5)
    x = ints(rng, 64, -20, 20)
    out = np.full(64, -1.0, np.float32)
    simdgroup.get_function("simd_sum_after_return")(1, 64, (x, out), **mode)
    lane = np.arange(64) % 32
    active = lane % 3 != 0
    expect = np.full(64, -1.0, np.float32)
    for w in range(2):
        idx = np.arange(w * 32, w * 32 + 32)[active[:32]]
        expect[idx] = x[idx].sum() + 1000.0 * np.arange(len(idx))
    np.testing.assert_array_equal(out, expect)


def test_shuffle_from_returned_lane_fails(simdgroup):
    with pytest.raises(KernelLaunchError, match=r"simd_shuffle .*lane 0 reads lane 16, which is not running") as e:
        simdgroup.get_function("simd_read_returned_lane")(1, 32, (np.zeros(32, np.float32),))
    assert f"line {line_of('simdgroup.metal', 'simd_shuffle(float(lane), lane + 16)')} of simdgroup.metal" in str(e.value)


def test_shuffle_past_a_partial_simdgroup_fails(simdgroup, mode):
    out = np.zeros(48, np.float32)
    with pytest.raises(KernelLaunchError, match=r"simd_shuffle_down .*simdgroup 1: lane 13 reads lane 16"):
        simdgroup.get_function("simd_shuffle_partial")(1, 48, (out,), **mode)
    simdgroup.get_function("simd_shuffle_partial")(1, 32, (out[:32],), **mode)  # a full simdgroup is fine
    np.testing.assert_array_equal(out[:32], np.where(np.arange(32) < 29, np.arange(32) + 3, np.arange(32)))


def test_simd_function_under_divergence_fails(simdgroup):
    with pytest.raises(KernelLaunchError, match="divergence.*simd_sum"):
        simdgroup.get_function("simd_divergent")(1, 32, (np.zeros(32, np.float32),))


# ---------------------------------------------------------------------------------------------
# SIMD-group matrices


def test_simdgroup_matrix_multiply(simdgroup, mode):
    rng = np.random.default_rng(6)
    a = ints(rng, (4, 8, 8), -4, 4)
    b = ints(rng, (4, 8, 8), -4, 4)
    c = np.zeros_like(a)
    d = np.zeros_like(a)
    simdgroup.get_function("matmul8")(2, 64, (a, b, c, d), **mode)
    np.testing.assert_array_equal(c, a @ b)
    np.testing.assert_array_equal(d, 2 * (a @ b))


def test_simdgroup_matrix_origin_transpose_diagonal(simdgroup, mode):
    rng = np.random.default_rng(7)
    m = ints(rng, (16, 24), -5, 5)
    out = np.zeros((8, 56), np.float32)
    simdgroup.get_function("matrix_blocks")(1, 32, (m, out), **mode)
    x = m[8:16, 16:24]
    expect = np.concatenate([x, x.T, x, x @ x.T, 2 * np.eye(8), np.full((8, 8), 3), 2 * x], axis=1)
    np.testing.assert_array_equal(out, expect)


def test_simdgroup_matrix_half(simdgroup, mode):
    rng = np.random.default_rng(8)
    a = ints(rng, (8, 8), -3, 3, np.float16)
    b = ints(rng, (8, 8), -3, 3, np.float16)
    c = rng.uniform(-1, 1, (8, 8)).astype(np.float32)
    d = np.zeros((8, 8), np.float16)
    e = np.zeros((8, 8), np.float32)
    simdgroup.get_function("matmul8_half")(1, 32, (a, b, c, d, e), **mode)
    product = a.astype(np.float32) @ b.astype(np.float32).T
    np.testing.assert_array_equal(d, product.astype(np.float16))
    np.testing.assert_allclose(e, product + c, rtol=1e-6, atol=1e-6)  # float accumulation, any order


def test_simdgroup_matrix_thread_elements_layout(simdgroup, mode):
    m = np.arange(64, dtype=np.float32).reshape(8, 8)
    held = np.zeros(64, np.float32)
    changed = np.zeros((8, 8), np.float32)
    simdgroup.get_function("matrix_elements")(1, 32, (m, held, changed), **mode)
    lane = np.arange(32)
    q = lane // 4
    row, col = (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2
    np.testing.assert_array_equal(held.reshape(32, 2), np.stack([m[row, col], m[row, col + 1]], axis=1))
    expect = m.copy()
    expect[row, col] += 1000.0 * (lane + 1)
    np.testing.assert_array_equal(changed, expect)


def test_simdgroup_matrix_needs_the_whole_simdgroup(simdgroup, mode):
    m, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelLaunchError, match="simdgroup_load .*has only 16 threads"):
        simdgroup.get_function("matrix_short_simdgroup")(1, 16, (m, out), **mode)
    with pytest.raises(KernelLaunchError, match="simdgroup_load .*lane 16 has already returned"):
        simdgroup.get_function("matrix_after_return")(1, 32, (m, out), **mode)


def test_simdgroup_matrix_store_race_and_bounds_are_checked(simdgroup):
    m, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    simdgroup.get_function("matrix_store_race")(1, 64, (m, out))  # fast mode: nothing checks
    with pytest.raises(KernelLaunchError, match="data race on `out`") as e:
        simdgroup.get_function("matrix_store_race")(1, 64, (m, out), check="racecheck")
    assert f"line {line_of('simdgroup.metal', 'simdgroup_store(M, out);', 'void matrix_store_race')}" in str(e.value)
    kernel = simdgroup.get_function("matrix_load_out_of_bounds")
    kernel(1, 32, (m, out, np.uint32(8)), check="memcheck")
    np.testing.assert_array_equal(out, m)
    with pytest.raises(KernelLaunchError, match="out-of-bounds read of `m`"):
        kernel(1, 32, (m, out, np.uint32(16)), check="memcheck")


# ---------------------------------------------------------------------------------------------
# Atomics


def test_atomic_sums_and_counters(atomics, mode):
    rng = np.random.default_rng(9)
    n = 4000  # 16 threadgroups of 250: in fast mode they run on several OS threads at once
    x = ints(rng, n, -100, 100)
    k = rng.integers(-5000, 5000, n).astype(np.int32)
    bits = np.zeros(1, np.uint32)
    fsum = np.zeros(2, np.float32)
    count = np.array([0, 10000], np.uint32)
    ext = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    ubits = np.zeros(3, np.uint32)
    atomics.get_function("atomic_sums")(16, 250, (x, bits, fsum, count, k, ext, ubits), **mode)
    total = x.sum(dtype=np.float64)
    assert bits.view(np.float32)[0] == total
    np.testing.assert_array_equal(fsum, [total, -total])
    np.testing.assert_array_equal(count, [n, 10000 - 2 * n])
    np.testing.assert_array_equal(ext, [k.max(), k.min()])
    np.testing.assert_array_equal(ubits, [0xFFFFFFFF, 0xFFFFFFFF, k.max() + 6000])


def test_threadgroup_atomics(atomics, mode):
    groups, size = 3, 96
    tickets = np.zeros(groups * size, np.uint32)
    swapped = np.zeros(groups * size, np.uint32)
    final = np.zeros(groups * 2, np.uint32)
    atomics.get_function("atomic_threadgroup")(groups, size, (tickets, swapped, final), **mode)
    for g in range(groups):
        part = slice(g * size, (g + 1) * size)
        np.testing.assert_array_equal(np.sort(tickets[part]), np.arange(size))
        chain = np.sort(np.concatenate([swapped[part], final[g * 2 + 1: g * 2 + 2]]))
        np.testing.assert_array_equal(chain, np.arange(size + 1))
        assert final[g * 2] == size


def test_plain_update_is_a_race(atomics):
    x = np.ones(64, np.float32)
    with pytest.raises(KernelLaunchError, match="data race on `sum`"):
        atomics.get_function("plain_sum")(1, 64, (x, np.zeros(1, np.float32)), check="racecheck")


def test_without_using_namespace_metal(mode):
    src = """
#include <metal_stdlib>
kernel void k(device const float4 *x [[buffer(0)]], device half *h [[buffer(1)]], device float *y [[buffer(2)]],
              uint i [[thread_position_in_grid]]) {
    const float4 v = x[i];
    h[i] = half(v.x) * 2.0h;
    y[i] = metal::max(v.y, 0.0f) + metal::dot(v, float4(1.0f)) + metal::simd_sum(v.w) + metal::fast::exp(0.0f);
}
"""
    kernel = RawModule(code=src, language="metal").get_function("k")
    x = np.arange(128, dtype=np.float32).reshape(32, 4) - 60
    h = np.zeros(32, np.float16)
    y = np.zeros(32, np.float32)
    kernel(1, 32, (x, h, y), **mode)
    np.testing.assert_array_equal(h, x[:, 0].astype(np.float16) * np.float16(2))
    np.testing.assert_array_equal(y, np.maximum(x[:, 1], 0) + x.sum(1) + x[:, 3].sum() + 1)


# ---------------------------------------------------------------------------------------------
# What MSL does not have is not there either


@pytest.mark.parametrize("body,message", [
    ("printf(\"%f\", x[0]);", "poisoned"),
    ("atomic_fetch_max_explicit((device atomic_float *)x, 1.0f, memory_order_relaxed);",
     "atomic_float supports add, sub, exchange, load and store"),
    ("float4 v = int4(1); x[0] = v.x;", "conversion from"),
])
def test_not_in_metal_does_not_compile(body, message):
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           f"kernel void k(device float *x [[buffer(0)]]) {{ {body} }}\n")
    with pytest.raises(KernelCompileError, match=re.escape(message)):
        RawModule(code=src, language="metal")
