"""Conformance of the CUDA C front end of the CPU runtime (course/simt/include/cuda/).

Each kernel file under tests/simt/kernels/cuda/ is valid CUDA (nvcc compiles it, when nvcc is
installed) and runs unmodified here through RawKernel; results are checked against numpy, exactly
where the arithmetic is exact. Kernels run in the fast build and, where the feature touches memory
or ordering, under memcheck + racecheck and a random schedule too. The rules a GPU enforces by
faulting (alignment, shuffles reading lanes that do not take part, whole-warp wmma) must stop the
launch with a sentence that names the kernel's line.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError, RawModule

KERNELS = Path(__file__).resolve().parent / "kernels" / "cuda"
FILES = ("basics.cu", "warp.cu", "half.cu", "wmma.cu")
CHECKED = ("memcheck", "racecheck")
RNG = np.random.default_rng(20240611)


@pytest.fixture(scope="module")
def mods() -> dict[str, RawModule]:
    """Every kernel file, both builds compiled at once (g++ runs in subprocesses)."""
    first = RawModule(path=KERNELS / FILES[0])  # alone: it may have to build the runtime object too

    def build(name: str) -> tuple[str, RawModule]:
        mod = first if name == FILES[0] else RawModule(path=KERNELS / name)
        mod.compile(checked=True)
        return name, mod
    with ThreadPoolExecutor(max_workers=len(FILES)) as pool:
        return dict(pool.map(build, FILES))


def line_of(name: str, marker: str) -> int:
    """The line of KERNELS/name holding the comment `// @marker`."""
    for number, text in enumerate((KERNELS / name).read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"// @{marker}"):
            return number
    raise AssertionError(f"no // @{marker} in {name}")


def launch_error(kernel, *call, **kw) -> str:
    with pytest.raises(KernelLaunchError) as info:
        kernel(*call, **kw)
    return str(info.value)


MODE_ARGS = {"fast": {}, "checked": {"check": CHECKED},
             "checked-random": {"check": CHECKED, "schedule": "random", "seed": 3}}
MODES = [pytest.param(kw, id=name) for name, kw in MODE_ARGS.items()]


# --- the kernel files are CUDA ---

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", FILES)
def test_kernel_files_compile_with_nvcc(name, tmp_path):
    res = subprocess.run(["nvcc", "-arch=sm_80", "-ptx", str(KERNELS / name), "-o", str(tmp_path / "k.ptx")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


NOT_CUDA = """\
__global__ void k(float4 *p, float *q) {
    float4 s = p[0] + p[1];
    float4 t = 1.0f;
    half h;
    q[0] = s.x + t.x;
}
"""


def test_what_nvcc_rejects_is_rejected(tmp_path):
    # float4 has no arithmetic, no conversion from a scalar, and half needs <cuda_fp16.h>.
    with pytest.raises(KernelCompileError) as info:
        RawModule(code=NOT_CUDA, name="not_cuda.cu")
    lines = {int(m) for m in re.findall(r"not_cuda\.cu:(\d+):\d+: error", str(info.value))}
    assert {2, 3, 4} <= lines, str(info.value)
    if shutil.which("nvcc"):
        src = tmp_path / "not_cuda.cu"
        src.write_text(NOT_CUDA)
        res = subprocess.run(["nvcc", "-arch=sm_80", "-ptx", str(src), "-o", str(tmp_path / "k.ptx")],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode != 0
        assert {2, 3, 4} <= {int(m) for m in re.findall(r"not_cuda\.cu\((\d+)\): error", res.stderr)}, res.stderr


# --- indexing ---

@pytest.mark.parametrize("mode", MODES[:2])
def test_indexing_3d(mods, mode):
    grid, block = (2, 3, 2), (4, 2, 3)
    W, H, D = (g * b for g, b in zip(grid, block))
    out = np.full(8 * W * H * D, -1, np.int32)
    mods["basics.cu"].get_function("indexing")(grid, block, (out,), **mode)
    got = out.reshape(D, H, W, 8)
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    np.testing.assert_array_equal(got[..., 0], x)
    np.testing.assert_array_equal(got[..., 1], y)
    np.testing.assert_array_equal(got[..., 2], z)
    assert (got[..., 3:6] == block).all()
    assert (got[..., 6] == 232).all() and (got[..., 7] == 32).all()


# --- shared memory and __syncthreads ---

@pytest.mark.parametrize("mode", MODES)
def test_block_reverse_through_static_shared_memory(mods, mode):
    x = RNG.standard_normal(3 * 256).astype(np.float32)
    out = np.zeros_like(x)
    mods["basics.cu"].get_function("reverse_static")(3, 256, (x, out), **mode)
    np.testing.assert_array_equal(out, x.reshape(3, 256)[:, ::-1].ravel())


@pytest.mark.parametrize("mode", MODES)
def test_block_reverse_through_dynamic_shared_memory(mods, mode):
    n = 96
    x = np.arange(4 * n, dtype=np.float32) % 97
    out = np.zeros_like(x)
    mods["basics.cu"].get_function("reverse_dynamic")(4, n, (x, out), shared_mem=n * 4, **mode)
    blocks = x.reshape(4, n)
    np.testing.assert_array_equal(out, (blocks[:, ::-1] + 1000 * blocks).ravel())


def test_dynamic_shared_memory_is_bounded_by_the_launch(mods):
    # 64 threads touch 64 floats, but the launch gives only 32: memcheck names the overrun.
    x = np.zeros(64, np.float32)
    msg = launch_error(mods["basics.cu"].get_function("reverse_dynamic"), 1, 64, (x, x.copy()),
                       shared_mem=32 * 4, check=CHECKED)
    assert "out-of-bounds" in msg and "buf" in msg


# --- atomics ---

@pytest.mark.parametrize("mode", [*MODES, pytest.param({"workers": 4}, id="fast-4-threads")])
def test_atomics(mods, mode):
    n = 1000
    vals = RNG.integers(0, 16, n).astype(np.int32)
    x = RNG.integers(-500, 500, n).astype(np.float32) / 4  # exact sums in any order
    hist = np.zeros(17, np.int32)
    total = np.zeros(1, np.float32)
    fmax = np.full(1, -np.inf, np.float32)
    imax = np.full(1, np.iinfo(np.int32).min, np.int32)
    umin = np.full(1, 1000, np.uint32)
    count = np.zeros(1, np.uint64)
    claimed = np.zeros(1, np.int32)
    down = np.full(1, 5000, np.int32)
    tickets = np.full(n, -1, np.int32)
    mods["basics.cu"].get_function("atomics")(
        8, 128, (vals, x, np.int32(n), hist, total, fmax, imax, umin, count, claimed, down, tickets), **mode)
    np.testing.assert_array_equal(hist[:16], np.bincount(vals, minlength=16))
    assert hist[16] == n
    assert total[0] == x.sum(dtype=np.float64)
    assert fmax[0] == x.max()
    assert imax[0] == vals.max() * 7 - 20
    assert umin[0] == vals.min() + 5
    assert count[0] == 3 * n
    assert claimed[0] - 1 in np.flatnonzero(vals == 2)
    assert down[0] == 5000 - 2 * n
    np.testing.assert_array_equal(np.sort(tickets), np.arange(n))  # atomicAdd returned n distinct old values


def test_atomics_take_part_in_racecheck(mods):
    p = np.zeros(1, np.int32)
    kernel = mods["basics.cu"].get_function("atomic_race")
    kernel(1, 1, (p,), check=CHECKED)  # alone: no race
    msg = launch_error(kernel, 1, 64, (p,), check=CHECKED)
    assert "data race" in msg and f"line {line_of('basics.cu', 'atomic-race')} of basics.cu" in msg


def test_atomics_are_bounds_checked(mods):
    hist = np.zeros(16, np.int32)
    kernel = mods["basics.cu"].get_function("atomic_at")
    kernel(1, 4, (hist, np.int32(15)), check=CHECKED)
    assert hist[15] == 4
    msg = launch_error(kernel, 1, 4, (hist, np.int32(16)), check=CHECKED)
    assert "out-of-bounds atomic of `hist`" in msg
    assert f"line {line_of('basics.cu', 'atomic-oob')} of basics.cu" in msg


def test_misaligned_atomic_fails(mods):
    raw = np.zeros(16, np.int8)
    kernel = mods["basics.cu"].get_function("atomic_misaligned")
    kernel(1, 3, (raw, np.int32(4)))
    assert raw.view(np.int32)[1] == 3
    msg = launch_error(kernel, 1, 3, (raw, np.int32(2)))
    assert "misaligned atomicAdd" in msg and f"line {line_of('basics.cu', 'atomic-misaligned')} of basics.cu" in msg


# --- vector types and their alignment ---

@pytest.mark.parametrize("mode", MODES[:2])
def test_float4_copies(mods, mode):
    x = RNG.standard_normal(4 * 100 + 8).astype(np.float32)
    out = np.zeros_like(x)
    mods["basics.cu"].get_function("copy_float4")(4, 32, (x, out, np.int32(4), np.int32(8), np.int32(100)), **mode)
    want = x[4:404].reshape(100, 4).copy()
    want[:, 0] *= 2
    np.testing.assert_array_equal(out[8:408].reshape(100, 4), want)
    assert not out[:8].any()


@pytest.mark.parametrize("mode", MODES[:2])
@pytest.mark.parametrize("off_in, off_out, what", [(1, 0, "load"), (0, 2, "store"), (6, 0, "load")])
def test_misaligned_float4_fails(mods, mode, off_in, off_out, what):
    x = np.zeros(64, np.float32)
    msg = launch_error(mods["basics.cu"].get_function("copy_float4"), 1, 8,
                       (x, x.copy(), np.int32(off_in), np.int32(off_out), np.int32(8)), **mode)
    assert f"misaligned float4 {what}" in msg
    assert f"line {line_of('basics.cu', 'float4-' + what)} of basics.cu" in msg


def test_float4_reads_are_bounds_checked(mods):
    x = np.zeros(4 * 8, np.float32)
    msg = launch_error(mods["basics.cu"].get_function("copy_float4"), 1, 9,
                       (x, np.zeros(4 * 9, np.float32), np.int32(0), np.int32(0), np.int32(9)), check=CHECKED)
    assert "out-of-bounds read of `in`" in msg
    assert f"line {line_of('basics.cu', 'float4-load')} of basics.cu" in msg


@pytest.mark.parametrize("mode", MODES[:2])
def test_float2_int4_int2_and_initialisers(mods, mode):
    n = 8
    x = RNG.standard_normal(2 * n + 2).astype(np.float32)
    q = RNG.integers(-100, 100, 4 * n).astype(np.int32)
    out = np.zeros(4 * n, np.float32)
    iout = np.zeros(6 * n, np.int32)
    kernel = mods["basics.cu"].get_function("copy_vectors")
    kernel(1, n, (x, out, q, iout, np.int32(2)), **mode)
    a = x[2:].reshape(n, 2)
    np.testing.assert_array_equal(out.reshape(n, 4), np.column_stack([a, np.full(n, 7), np.ones(n)]))
    q4 = q.reshape(n, 4)
    np.testing.assert_array_equal(iout[:4 * n].reshape(n, 4), q4[:, ::-1])
    np.testing.assert_array_equal(iout[4 * n:].reshape(n, 2),
                                  np.column_stack([q4[:, 0] + q4[:, 1], q4[:, 2] - q4[:, 3]]))
    msg = launch_error(kernel, 1, n, (x, out, q, iout, np.int32(1)), **mode)
    assert "misaligned float2 load" in msg and f"line {line_of('basics.cu', 'float2-load')} " in msg


# --- printf ---

def test_printf_is_captured(mods, capsys):
    res = mods["basics.cu"].get_function("hello")(2, 4, (np.int32(3),))
    lines = sorted(res.printf.splitlines())
    assert lines == sorted(f"block {b} thread {t} of 4 says {0.5 * t:.2f}" for b in range(2) for t in range(3))
    assert "block 1 thread 2 of 4 says 1.00" in capsys.readouterr().out
    assert "assert" in launch_error(mods["basics.cu"].get_function("hello"), 1, 4, (np.int32(-1),))


# --- math ---

def test_math_functions(mods):
    n = 200
    x = np.concatenate([RNG.uniform(-6, 6, n - 8), [0.0, -0.0, 0.5, -0.5, 1.25, -2.75, 3.0, 1e-3]]).astype(np.float32)
    out = np.zeros(32 * n, np.float32)
    iout = np.zeros(4 * n, np.int32)
    mods["basics.cu"].get_function("math")(2, 128, (x, out, iout, np.int32(n)))
    o = out.reshape(n, 32)
    v = x.astype(np.float64)
    a = np.abs(v)
    a1 = (np.abs(x) + np.float32(1)).astype(np.float64)  # the kernel's a + 1.0f, rounded to float
    with np.errstate(divide="ignore"):
        close = {0: np.exp(v), 1: np.exp(v), 2: np.exp2(v), 3: np.log(a1), 4: np.log(a1), 5: np.log2(a1),
                 9: np.sqrt(a), 10: 1 / np.sqrt(a1), 11: v / 3, 19: np.tanh(v), 25: 1 / v, 26: a ** 1.5,
                 31: np.sin(v)}
        for k, want in close.items():
            np.testing.assert_allclose(o[:, k], want, rtol=2e-6, atol=1e-30, err_msg=f"result {k}")
    exact = {6: np.maximum(x, 0.25), 7: np.minimum(x, 0.25), 8: np.abs(x), 12: (v * 3 + 1).astype(np.float32),
             13: np.ceil(x), 14: np.floor(x), 15: np.ceil(x), 16: np.floor(x),
             17: np.maximum(x, 0.5), 18: np.minimum(x, 0.5), 20: -x, 21: np.abs(x), 22: np.ones(n),
             23: np.full(n, np.inf), 24: np.full(n, -np.finfo(np.float32).max), 27: (x < 0).astype(np.float32),
             28: np.clip(x, 0, 1), 29: np.rint(x * np.float32(10)), 30: np.full(n, np.float32(np.pi))}
    for k, want in exact.items():
        np.testing.assert_array_equal(o[:, k], np.asarray(want, np.float32), err_msg=f"result {k}")
    k = np.trunc(x * np.float32(100)).astype(np.int32)
    q = iout.reshape(n, 4)
    np.testing.assert_array_equal(q[:, 0], np.maximum(k, -50))
    np.testing.assert_array_equal(q[:, 1], np.minimum(k, 30))
    np.testing.assert_array_equal(q[:, 2], np.maximum(k + 1000, 1000))
    np.testing.assert_array_equal(q[:, 3], x.view(np.int32))


# --- shuffles and votes ---

def shuffle_source(mode: str, lane: np.ndarray, b: int, width: int) -> np.ndarray:
    """The lane each lane reads, from CUDA's documentation of the four shuffles."""
    start = lane // width * width
    if mode == "idx":
        return start + b % width
    if mode == "up":
        return np.where(lane - b >= start, lane - b, lane)  # the lowest `b` lanes of a segment keep their own
    if mode == "down":
        return np.where(lane + b < start + width, lane + b, lane)
    src = lane ^ b  # xor: a later segment is out of reach (own value), an earlier one is not
    return np.where(src < start + width, src, lane)


@pytest.mark.parametrize("b, width", [(1, 32), (3, 32), (16, 32), (31, 32), (5, 8), (2, 16), (7, 16), (8, 8),
                                      (12, 16), (1, 2), (11, 8)])
def test_shuffles(mods, b, width):
    values = RNG.permutation(np.arange(1, 65)).astype(np.int32)
    out = np.zeros(12 * 64, np.int32)
    mods["warp.cu"].get_function("shuffles")(1, 64, (values, out, np.int32(b), np.int32(width)))
    check_shuffles(out, values, b, width)


def check_shuffles(out: np.ndarray, values: np.ndarray, b: int, width: int) -> None:
    """warp.cu's `shuffles` results: per type and variant, the value of the lane CUDA documents."""
    lanes = len(values)
    got = out.reshape(lanes, 12)
    t = np.arange(lanes)
    lane, warp_base = t % 32, t - t % 32
    want = {m: values[warp_base + shuffle_source(m, lane, b, width)] for m in ("idx", "up", "down", "xor")}
    for col, m in enumerate(["idx", "up", "down", "xor", "down", "xor", "up", "idx", "down", "xor"]):
        np.testing.assert_array_equal(got[:, col], want[m], err_msg=f"column {col} ({m})")
    np.testing.assert_array_equal(got[:, 10], -want["xor"])
    np.testing.assert_array_equal(got[:, 11], want["idx"])
    assert (got[:, :4] != values[:, None]).any()  # the test can tell a shuffle from no shuffle


def test_shuffle_width_must_be_a_power_of_two(mods):
    msg = launch_error(mods["warp.cu"].get_function("shuffles"), 1, 32,
                       (np.zeros(32, np.int32), np.zeros(12 * 32, np.int32), np.int32(1), np.int32(12)))
    assert "__shfl_sync(): width 12 is not a power of 2 from 1 to 32" in msg


def test_shuffles_checked_and_random(mods):
    values = RNG.permutation(np.arange(1, 65)).astype(np.int32)
    out = np.zeros(12 * 64, np.int32)
    mods["warp.cu"].get_function("shuffles")(1, 64, (values, out, np.int32(3), np.int32(16)),
                                             check=CHECKED, schedule="random", seed=7)
    check_shuffles(out, values, 3, 16)


@pytest.mark.parametrize("mode", MODES)
def test_warp_reduction(mods, mode):
    x = RNG.integers(-50, 50, 4 * 64).astype(np.float32)
    out = np.zeros(8, np.float32)
    mods["warp.cu"].get_function("warp_sum")(4, 64, (x, out), **mode)
    np.testing.assert_array_equal(out, x.reshape(8, 32).sum(axis=1))


@pytest.mark.parametrize("mode", MODES[:2])
def test_votes(mods, mode):
    threads = 112  # the fourth warp has only 16 lanes
    pred = np.zeros(threads, np.int32)
    pred[:32] = RNG.integers(0, 2, 32) * RNG.integers(1, 9, 32)  # mixed, non-zero values count as true
    pred[32:64] = 1
    pred[64:96] = 0
    pred[96:] = RNG.integers(1, 5, 16) * RNG.choice([-1, 1], 16)
    ballot = np.zeros(threads, np.uint32)
    any_, all_ = np.zeros(threads, np.int32), np.zeros(threads, np.int32)
    half_ballot = np.zeros(threads, np.uint32)
    mods["warp.cu"].get_function("votes")(1, threads, (pred, ballot, any_, all_, half_ballot), **mode)
    for w, lanes in enumerate([32, 32, 32, 16]):
        p = pred[32 * w: 32 * w + lanes] != 0
        bits = int(sum(1 << i for i in np.flatnonzero(p)))
        assert (ballot[32 * w: 32 * w + lanes] == bits).all()
        assert (any_[32 * w: 32 * w + lanes] == int(p.any())).all()
        assert (all_[32 * w: 32 * w + lanes] == int(p.all())).all()
        assert (half_ballot[32 * w: 32 * w + 16] == bits & 0xFFFF).all()
    assert all_[0] == 0 and any_[0] == 1 and all_[32] == 1 and any_[64] == 0 and all_[96] == 1


def test_shuffle_reading_an_exited_lane_fails(mods):
    kernel = mods["warp.cu"].get_function("shuffle_after_exit")
    out = np.zeros(32, np.int32)
    kernel(1, 32, (out, np.int32(32), np.uint32(0xFFFFFFFF)))
    np.testing.assert_array_equal(out, np.append(np.arange(1, 32), 31) * 10)
    for mode in MODE_ARGS.values():
        msg = launch_error(kernel, 1, 32, (out, np.int32(20), np.uint32(0xFFFFFFFF)), **mode)
        assert "lane 19 reads lane 20, which has already returned" in msg
        assert f"line {line_of('warp.cu', 'shuffle-exited')} of warp.cu" in msg


def test_shuffle_reading_a_lane_outside_its_mask_fails(mods):
    kernel = mods["warp.cu"].get_function("shuffle_after_exit")
    out = np.zeros(32, np.int32)
    msg = launch_error(kernel, 1, 32, (out, np.int32(20), np.uint32(0xFFFFF)))
    assert "lane 19 reads lane 20, which is not in the mask 0x000fffff" in msg
    # lanes 0-15 pass a mask that leaves them out
    for mode in MODE_ARGS.values():
        msg = launch_error(kernel, 1, 32, (out, np.int32(32), np.uint32(0xFFFF0000)), **mode)
        lane = re.search(r"\(lane (\d+)\) calls it with mask 0xffff0000, which does not include its own lane", msg)
        assert lane and int(lane.group(1)) < 16, msg


def test_shuffle_reading_beyond_a_partial_warp_fails(mods):
    kernel = mods["warp.cu"].get_function("shuffle_after_exit")
    out = np.zeros(48, np.int32)
    msg = launch_error(kernel, 1, 48, (out, np.int32(48), np.uint32(0xFFFFFFFF)))
    assert "lane 15 reads lane 16" in msg and "only 16 lanes" in msg


def test_syncwarp_orders_shared_memory(mods):
    kernel = mods["warp.cu"].get_function("warp_exchange")
    out = np.zeros(64, np.int32)
    t = np.arange(64)
    want = (t - t % 32 + (t % 32 + 1) % 32) * 3
    for mode in MODE_ARGS.values():
        kernel(1, 64, (out, np.int32(1)), **mode)
        np.testing.assert_array_equal(out, want)
    kernel(1, 64, (out, np.int32(0)))  # without it, lane 0 reads before lane 1 has written
    assert (out != want).any()
    msg = launch_error(kernel, 1, 64, (out, np.int32(0)), check=CHECKED)
    assert "data race" in msg and f"line {line_of('warp.cu', 'exchange-read')} of warp.cu" in msg


# --- half precision ---

def run_half_ops(mods, a, b, c, d, k, normal_only=False):
    """half.cu's 24 results for each element, checked against numpy's float16."""
    n = len(a)
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    d, k = np.asarray(d, np.float64), np.asarray(k, np.int32)
    out = np.zeros(24 * n, np.float32)
    mods["half.cu"].get_function("half_ops")(max(1, (n + 127) // 128), 128, (a, b, c, d, k, out, np.int32(n)))
    o = out.reshape(n, 24)
    f64 = lambda h: h.astype(np.float64)  # noqa: E731
    with np.errstate(all="ignore"):
        ha, hb, hc = a.astype(np.float16), b.astype(np.float16), c.astype(np.float16)
        want = {0: ha, 1: ha + hb, 2: ha - hb, 3: ha * hb, 4: ha / hb,
                5: (f64(ha) * f64(hb) + f64(hc)).astype(np.float16),  # one rounding
                6: np.fmax(ha, hb), 7: np.fmin(ha, hb), 8: np.abs(ha), 10: -ha, 11: ha * hb + hc,
                12: k.astype(np.float16), 13: d.astype(np.float16), 14: ha, 15: hb, 16: hb, 17: hc,
                18: ha + hb, 19: hb + hc, 20: (f64(ha) * f64(hb) + f64(ha)).astype(np.float16),
                21: (f64(hb) * f64(hc) + f64(hb)).astype(np.float16),
                22: (ha < hb).astype(np.float16), 23: np.isnan(ha).astype(np.float16)}
        for col, w in want.items():
            np.testing.assert_array_equal(o[:, col], w.astype(np.float32), err_msg=f"result {col}")
        # hexp: the GPU's is an approximation; here within half an ulp of the true value, or inf
        e = np.exp(f64(ha))
        fits = (e < 60000) & (e >= 2**-14 if normal_only else True)
        np.testing.assert_allclose(o[fits, 9], e[fits], rtol=2**-11, atol=2**-24)
        assert np.isinf(o[e > 70000, 9]).all()
    return o


def test_half_conversions_and_arithmetic(mods):
    special = [(1 + 2**-10, (1 - 2**-10) * 2**-11, 1 + 2**-10),  # a*b+c one ulp below a tie in float
               (np.nan, 1.0, 2.0), (3.0, np.nan, 0.0), (70000.0, 2.0, 1.0), (-0.0, 0.0, -0.0)]
    n = 300
    a = np.concatenate([RNG.standard_normal(n - len(special)) * 8, [s[0] for s in special]])
    b = np.concatenate([RNG.standard_normal(n - len(special)) * 8, [s[1] for s in special]])
    c = np.concatenate([RNG.standard_normal(n - len(special)), [s[2] for s in special]])
    d = np.concatenate([RNG.standard_normal(n - 2) * 100, [1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40)]])
    k = RNG.integers(-70000, 70000, n)
    o = run_half_ops(mods, a, b, c, d, k, normal_only=True)  # hexp's subnormal results: below
    # the cases that tell one rounding from two
    fma_row = n - len(special)
    assert o[fma_row, 5] == 1 + 2**-10 and o[fma_row, 11] == 1 + 2**-9
    assert o[n - 2, 13] == 1 + 2**-10 and o[n - 1, 13] == -(1 + 2**-10)
    assert np.isinf(o[n - 2, 0]) and o[n - 4, 23] == 1  # 70000 overflows; NaN is seen


def test_half_subnormals(mods):
    a = [1e-7, 6e-5, 2**-15, 5e-6, 1.5 * 2**-24, -3e-6, 2**-20, 1e-4, -12.0, -15.5]
    b = [3e-8, 2e-5, 2**-16, 1e-2, 1.0, 7e-7, 2**-20, 1e-3, 1.0, 1.0]
    c = [0.0, -6e-5, 0.0, 1e-6, 0.0, 0.0, 2**-22, 0.0, 0.0, 0.0]
    run_half_ops(mods, a, b, c, [1e-7, 3e-6, -5e-8] + [0] * 7, [0] * 10)


@pytest.mark.parametrize("mode", MODES[:2])
def test_half_atomics(mods, mode):
    x = RNG.integers(-4, 5, 300).astype(np.float32)  # integer sums stay exact in half
    total = np.zeros(1, np.float16)
    pair = np.zeros(2, np.float16)
    mods["half.cu"].get_function("half_atomics")(3, 128, (x, total, pair, np.int32(len(x))), **mode)
    assert total[0] == x.sum() and pair[0] == x.sum() and pair[1] == -2 * x.sum()


@pytest.mark.parametrize("mode", [MODES[0], pytest.param(MODE_ARGS["checked"], id="checked")])
def test_shared_memory_of_class_types(mods, mode):
    """__shared__ arrays of float4, half and half2 are constant-initialised (no hidden guard variable that
    every thread would touch, which racecheck would report as a race)."""
    x = RNG.integers(-64, 64, 2 * 64).astype(np.float32)  # exact in half
    out = np.zeros_like(x)
    mods["half.cu"].get_function("shared_class_types")(2, 64, (x, out), **mode)
    np.testing.assert_array_equal(out, 3 * x.reshape(2, 64)[:, ::-1].ravel())


# --- wmma ---

def matmul_inputs(k_total: int, warps: int):
    a = RNG.integers(-8, 8, (16, k_total)).astype(np.float16) / 4
    b = RNG.integers(-8, 8, (k_total, 16 * warps)).astype(np.float16) / 8
    c = RNG.standard_normal((16, 16 * warps)).astype(np.float32)
    return a, b, c


@pytest.mark.parametrize("mode", MODES)
def test_wmma_row_major(mods, mode):
    a, b, c = matmul_inputs(32, 2)
    d = np.zeros_like(c)
    mods["wmma.cu"].get_function("mma_rr")(1, 64, (a, b, c, d, np.int32(32), np.int32(32)), **mode)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d, want, rtol=1e-6, atol=1e-6)
    assert np.abs(d - c).max() > 1  # the product is there


@pytest.mark.parametrize("mode", MODES[:2])
def test_wmma_col_major_b_and_accumulator(mods, mode):
    a, b, c = matmul_inputs(16, 3)
    d = np.zeros(c.size, np.float32)
    # B, C and D in column-major order: the transposes, row-major
    mods["wmma.cu"].get_function("mma_rc")(1, 96, (a, np.ascontiguousarray(b.T), np.ascontiguousarray(c.T), d,
                                                   np.int32(16), np.int32(48)), **mode)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d.reshape(48, 16).T, want, rtol=1e-6, atol=1e-6)


def test_wmma_col_major_a(mods):
    a, b, c = matmul_inputs(16, 1)
    d = np.zeros(c.size, np.float32)
    mods["wmma.cu"].get_function("mma_cr")(1, 32, (np.ascontiguousarray(a.T), b, c, d, np.int32(16), np.int32(16)))
    np.testing.assert_allclose(d.reshape(16, 16).T, a.astype(np.float64) @ b.astype(np.float64) + c, rtol=1e-6)


def test_wmma_half_accumulator(mods):
    a = RNG.standard_normal((16, 16)).astype(np.float16)
    b = RNG.standard_normal((16, 16)).astype(np.float16)
    h = np.zeros((16, 16), np.float16)
    f = np.zeros((16, 16), np.float32)
    mods["wmma.cu"].get_function("mma_half")(1, 32, (a, np.ascontiguousarray(b.T), h, f, np.float32(0.5)))
    ab = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(h, ab * 0.5, rtol=2**-9, atol=2**-12)
    np.testing.assert_allclose(f, ab + h.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES[:2])
def test_wmma_misaligned_pointer_fails(mods, mode):
    a = np.ones((32, 16), np.float16)
    d = np.zeros((16, 16), np.float32)
    kernel = mods["wmma.cu"].get_function("mma_load_at")
    kernel(1, 32, (a, d, np.int32(16), np.int32(16)), **mode)  # 32 bytes in: aligned
    assert (d == 16).all()
    msg = launch_error(kernel, 1, 32, (a, d, np.int32(8), np.int32(16)), **mode)
    assert "misaligned pointer" in msg and "32-byte" in msg
    assert f"line {line_of('wmma.cu', 'load-at')} of wmma.cu" in msg
    msg = launch_error(kernel, 1, 32, (a, d, np.int32(0), np.int32(12)), **mode)
    assert "ldm = 12 is not a multiple of 8" in msg


def test_wmma_misaligned_store_fails(mods):
    d = np.zeros(16 * 16 + 8, np.float32)
    kernel = mods["wmma.cu"].get_function("store_at")
    kernel(1, 32, (d, np.int32(8)))
    assert (d[8:] == 2.5).all() and not d[:8].any()
    msg = launch_error(kernel, 1, 32, (d, np.int32(4)))
    assert "misaligned pointer" in msg and f"line {line_of('wmma.cu', 'store-at')} of wmma.cu" in msg


def test_wmma_needs_the_whole_warp(mods):
    msg = launch_error(mods["wmma.cu"].get_function("wmma_after_exit"), 1, 32, (np.zeros(256, np.float32),))
    assert "all 32 lanes" in msg and "16-31 have already returned" in msg
    assert f"line {line_of('wmma.cu', 'store-exited')} of wmma.cu" in msg
    a, b, c = matmul_inputs(16, 2)
    msg = launch_error(mods["wmma.cu"].get_function("mma_rr"), 1, 48,
                       (a, b, c, np.zeros_like(c), np.int32(16), np.int32(32)))
    assert "all 32 lanes" in msg and "only 16" in msg


def test_wmma_accesses_are_checked(mods):
    a, b, c = matmul_inputs(32, 1)
    msg = launch_error(mods["wmma.cu"].get_function("mma_rr"), 1, 32,
                       (np.ascontiguousarray(a[:, :16]), b, c, np.zeros_like(c), np.int32(32), np.int32(16)),
                       check=CHECKED)
    assert "out-of-bounds read of `a`" in msg and f"line {line_of('wmma.cu', 'load-a')} of wmma.cu" in msg
    d = np.zeros((16, 16), np.float32)
    kernel = mods["wmma.cu"].get_function("store_same_tile")
    kernel(1, 32, (d,), check=CHECKED)
    msg = launch_error(kernel, 1, 64, (d,), check=CHECKED)
    assert "data race on `d`" in msg and f"line {line_of('wmma.cu', 'store-same')} of wmma.cu" in msg
