"""Counters mode (check="counters"): global requests and sectors, shared wavefronts and bank conflicts,
barriers, atomics and vector widths, pinned on kernels whose counts are known by hand, and the course's
own ladder (CUDA steps 01, 03, 04) against each lesson's traffic formula.

Every expectation is written as a function that returns what is wrong (empty when nothing is), and each
is shown to fail on a kernel that should not satisfy it: the strided load is not coalesced, the scalar copy
is not a float4 copy, the unpadded column walk is not conflict-free, a tile loop that reads K twice does
not match the lesson's formula.
"""
from __future__ import annotations

import numpy as np
import pytest

import course
from course.models import roofline
from course.inputs import make_qkv
from course.kernels import kernel_path
from course.simt import KernelLaunchError, RawModule
from course.simt import kernel as simt_kernel
from course.simt.kernel import collect_counters
from course.tracks import cuda

SMALL = r"""
__global__ void copy(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}

__global__ void strided(const float* a, float* b, int n, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[(size_t)i * stride];
}

__global__ void copy4(const float4* a, float4* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}

// One warp: fill a 32 x 32 tile row by row (coalesced, conflict-free), then lane t walks row t.
__global__ void column_walk(const float* a, float* out, int pad) {
    __shared__ float tile[32 * 33];
    const int t = threadIdx.x, ld = 32 + pad;
    for (int r = 0; r < 32; ++r) tile[r * ld + t] = a[r * 32 + t];
    __syncthreads();
    float s = 0.0f;
    for (int c = 0; c < 32; ++c) s += tile[t * ld + c];
    out[t] = s;
}

// Every lane reads the same word: a broadcast.
__global__ void broadcast(const float* a, float* out) {
    __shared__ float tile[32];
    tile[threadIdx.x] = a[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = tile[7];
}

__global__ void atomic_loop(float* acc, int reps) {
    for (int r = 0; r < reps; ++r) atomicAdd(&acc[threadIdx.x % 4], 1.0f);
}
"""

METAL = r"""
#include <metal_stdlib>
using namespace metal;

kernel void copy4(device const float4* a [[buffer(0)]], device float4* b [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    b[i] = a[i];
}

kernel void column_walk(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                        uint t [[thread_index_in_threadgroup]]) {
    threadgroup float tile[32 * 32];
    for (int r = 0; r < 32; ++r) tile[r * 32 + t] = a[r * 32 + t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0.0f;
    for (int c = 0; c < 32; ++c) s += tile[t * 32 + c];
    out[t] = s;
}
"""


@pytest.fixture(scope="module")
def small():
    return RawModule(code=SMALL, name="counters.cu", compile_now="checked")


def measure(module, name, grid, block, args, **options):
    return module.get_function(name)(grid, block, args, check=("counters",), **options).counters


def nonzero(counters) -> dict:
    return {k: v for k, v in counters.metrics.items() if v}


# -- expectations: each returns what is wrong -------------------------------------------------------

def coalesced_loads(c, warps: int, floats_per_lane: int = 1) -> list[str]:
    """Every warp load is one request for 32 consecutive elements: 4 sectors per 128 bytes, all used."""
    m, wrong = c.metrics, []
    sectors = warps * 4 * floats_per_lane
    if m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] != warps:
        wrong.append(f"requests {m['l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum']} != {warps}")
    if m["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] != sectors:
        wrong.append(f"sectors {m['l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum']} != {sectors}")
    if m["course__global_ld_efficiency_pct"] != 100.0:
        wrong.append(f"efficiency {m['course__global_ld_efficiency_pct']}%")
    return wrong


def conflict_free(c) -> list[str]:
    m = c.metrics
    bad = m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] + \
        m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]
    return [f"{bad} bank conflicts"] if bad else []


def tiled_traffic(c, n_q: int, n_k: int, d: int, block_m: int) -> list[str]:
    """The lesson-03 formula, tensor by tensor: Q once, K and V once per program, O and LSE once."""
    programs = -(-n_q // block_m)
    want = {"q": (4 * n_q * d, 0), "k": (4 * programs * n_k * d, 0), "v": (4 * programs * n_k * d, 0),
            "o": (0, 4 * n_q * d), "lse": (0, 4 * n_q)}
    got = {name: (t["load_bytes"], t["store_bytes"]) for name, t in c.by_tensor.items()}
    wrong = [f"{name}: measured {got.get(name)}, formula {w}" for name, w in want.items() if got.get(name) != w]
    total = c.metrics["course__global_ld_thread_bytes"] + c.metrics["course__global_st_thread_bytes"]
    if total != roofline.tiled_kernel_bytes(n_q, n_k, d, block_m, 4):
        wrong.append(f"total {total} != {roofline.tiled_kernel_bytes(n_q, n_k, d, block_m, 4)}")
    return wrong


# -- small kernels, counted by hand ---------------------------------------------------------------

def test_a_coalesced_load_is_one_request_of_four_sectors_per_warp(small):
    n = 256  # 8 warps of 32 consecutive floats
    a, b = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    c = measure(small, "copy", (4,), (64,), (a, b, n))
    assert coalesced_loads(c, warps=8) == []
    assert c.metrics["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"] == 8
    assert c.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] == 32
    assert c.metrics["course__global_ld_thread_bytes"] == 4 * n
    assert c.by_tensor["a"]["load_bytes"] == 4 * n and c.by_tensor["b"]["store_bytes"] == 4 * n
    assert np.array_equal(b, a)  # counters mode runs the kernel for real
    # Nothing but the kernel's own data is counted (not threadIdx's reads of the runtime, nor its arguments).
    assert {r["memory"] for r in c.rows} == {"global"}


def test_a_strided_load_moves_a_sector_per_lane_and_fails_the_coalesced_expectations(small):
    n = 256
    a, b = np.arange(n * 8, dtype=np.float32), np.zeros(n, np.float32)
    c = measure(small, "strided", (4,), (64,), (a, b, n, 8))  # lanes 32 bytes apart
    m = c.metrics
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 8
    assert m["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 8 * 32
    assert m["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"] == 32.0
    assert m["course__global_ld_efficiency_pct"] == 12.5
    assert m["course__global_ld_bytes_requested"] == 4 * n  # the same bytes asked for as the coalesced copy
    assert len(coalesced_loads(c, warps=8)) == 2  # sectors and efficiency are wrong; requests are not
    assert np.array_equal(b, a[::8])


def test_a_float4_load_is_one_16_byte_instruction_where_scalar_loads_need_four(small):
    n = 256  # float4s: 8 warps x 32 lanes x 16 bytes
    a, b = np.arange(4 * n, dtype=np.float32).reshape(n, 4), np.zeros((n, 4), np.float32)
    vec = measure(small, "copy4", (4,), (64,), (a, b, n))
    assert coalesced_loads(vec, warps=8, floats_per_lane=4) == []
    assert vec.widths == {("global", "load", 16): 8, ("global", "store", 16): 8}
    assert np.array_equal(b, a)
    flat, out = a.ravel().copy(), np.zeros(4 * n, np.float32)
    scalar = measure(small, "copy", (16,), (64,), (flat, out, 4 * n))  # the same bytes, a float per lane
    assert scalar.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == \
        vec.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]
    assert coalesced_loads(scalar, warps=8, floats_per_lane=4) == ["requests 32 != 8"]
    assert scalar.widths == {("global", "load", 4): 32, ("global", "store", 4): 32}


@pytest.mark.parametrize("pad, ways", [(0, 32), (1, 1)])
def test_a_column_walk_conflicts_32_ways_unless_the_rows_are_padded(small, pad, ways):
    a, out = np.arange(32 * 32, dtype=np.float32), np.zeros(32, np.float32)
    c = measure(small, "column_walk", (1,), (32,), (a, out, pad))
    m = c.metrics
    walk = [r for r in c.rows if r["memory"] == "shared" and r["op"] == "load"]
    assert len(walk) == 1 and walk[0]["instructions"] == 32 and walk[0]["max_ways"] == ways
    assert m["smsp__sass_inst_executed_op_shared_ld.sum"] == 32
    assert m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 32 * ways
    assert m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 32 * (ways - 1)
    assert m["smsp__sass_inst_executed_op_shared_st.sum"] == 32  # the fill: 32 rows, conflict-free
    assert m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"] == 32
    assert m["course__barriers"] == 1
    assert (conflict_free(c) == []) == (pad == 1)
    assert np.allclose(out, a.reshape(32, 32).sum(axis=1))


def test_a_broadcast_read_costs_one_wavefront(small):
    a, out = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    c = measure(small, "broadcast", (1,), (32,), (a, out))
    read = [r for r in c.rows if r["memory"] == "shared" and r["op"] == "load"]
    assert [(r["instructions"], r["wavefronts"], r["bank_conflicts"]) for r in read] == [(1, 1, 0)]
    assert conflict_free(c) == [] and np.all(out == 7.0)


def test_an_atomic_loop_is_one_request_per_warp_and_iteration(small):
    acc = np.zeros(4, np.float32)
    c = measure(small, "atomic_loop", (2,), (64,), (acc, 3))  # 4 warps x 3 iterations; 4 floats: 1 sector
    m = c.metrics
    assert m["course__global_atom_requests"] == 12 and m["course__global_atom_sectors"] == 12
    assert m["course__global_atom_thread_bytes"] == 2 * 64 * 3 * 4
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 0  # an atomic is not also a load
    assert c.by_tensor["acc"]["atomic_bytes"] == 2 * 64 * 3 * 4
    assert np.all(acc == 96.0)
    fewer = measure(small, "atomic_loop", (2,), (64,), (np.zeros(4, np.float32), 2))
    assert fewer.metrics["course__global_atom_requests"] == 8  # the count follows the loop, not a constant


def test_metal_vectors_and_threadgroup_memory_are_counted_too():
    module = RawModule(code=METAL, language="metal", name="counters.metal", compile_now="checked")
    n = 64
    a, b = np.arange(4 * n, dtype=np.float32).reshape(n, 4), np.zeros((n, 4), np.float32)
    c = module.get_function("copy4")((2,), (32,), (a, b), check="counters").counters
    assert coalesced_loads(c, warps=2, floats_per_lane=4) == []
    assert c.widths == {("global", "load", 16): 2, ("global", "store", 16): 2}
    a, out = np.arange(32 * 32, dtype=np.float32), np.zeros(32, np.float32)
    c = module.get_function("column_walk")((1,), (32,), (a, out), check="counters").counters
    assert c.metrics["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 32 * 31
    assert c.metrics["course__barriers"] == 1


def test_too_many_access_patterns_is_a_sentence(small, monkeypatch):
    monkeypatch.setattr(simt_kernel, "COUNTER_PATTERNS", 8)  # the padded walk starts each row 4 bytes further on
    with pytest.raises(KernelLaunchError, match=r"more than 8 different warp access patterns.*smaller launch"):
        measure(small, "column_walk", (1,), (32,), (np.zeros(32 * 32, np.float32), np.zeros(32, np.float32), 1))


# -- the course's ladder against the lessons' formulas ----------------------------------------------

N_Q, N_K, D = 40, 72, 32  # neither a multiple of the tiles: partial query and key tiles are counted
TILES = cuda.Tiles(block_m=4, block_n=32)


@pytest.fixture(scope="module")
def qkv():
    return make_qkv(N_Q, D, n_k=N_K, seed=1)


def ladder(exercise: str, qkv, module=None, **launch):
    # Only the checked build is needed: no fast build is compiled (compiles dominate these tests' time).
    module = module or RawModule(path=kernel_path(cuda.STEPS[exercise].kernel_file), compile_now=None)
    with collect_counters() as launches:
        cuda.attention_function(module, exercise, None if exercise == "01.naive_cuda" else TILES, **launch)(*qkv)
    assert len(launches) == 1
    return launches[0]


def test_step_01_reads_k_twice_and_v_once_per_row_as_the_formula_says_and_q_once_per_key(qkv):
    c = ladder("01.naive_cuda", qkv)
    t = c.by_tensor
    assert t["k"]["load_bytes"] == 4 * N_Q * 2 * N_K * D  # both sweeps
    assert t["v"]["load_bytes"] == 4 * N_Q * N_K * D
    assert t["o"]["store_bytes"] == 4 * N_Q * D
    # Lesson 01 counts D + 3·Nk·D elements per row; the kernel also re-reads its q row from global memory
    # for every key of both sweeps (2·Nk·D where the formula has D: an L1 hit on a GPU, not counted here).
    assert t["q"]["load_bytes"] == 4 * N_Q * 2 * N_K * D
    formula = roofline.naive_kernel_bytes_read(N_Q, N_K, D, 4)
    assert c.metrics["course__global_ld_thread_bytes"] == formula + 4 * N_Q * (2 * N_K * D - D)
    # One thread per row: every lane reads the same k_j (a broadcast: 1 sector per request), and its own q row,
    # 128 bytes from its neighbour's (a sector per lane: 32 for the full warp, 8 for the one with rows 32-39).
    assert t["k"]["sectors"] == t["k"]["requests"] == 2 * 2 * N_K * D
    assert t["q"]["requests"] == 2 * 2 * N_K * D and t["q"]["sectors"] == (32 + 8) * 2 * N_K * D


def test_step_03_moves_exactly_the_lesson_formula_without_bank_conflicts(qkv):
    c = ladder("03.tiled_cuda", qkv)
    assert tiled_traffic(c, N_Q, N_K, D, TILES.block_m) == []
    assert conflict_free(c) == []
    assert c.metrics["course__global_ld_efficiency_pct"] == 100.0
    blocks, tiles = -(-N_Q // TILES.block_m), -(-N_K // TILES.block_n)
    assert c.metrics["course__barriers"] == blocks * 2 * tiles  # two barriers per tile
    assert c.widths[("global", "load", 4)] == c.metrics["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]


def test_step_04_moves_the_same_bytes_in_a_quarter_of_the_instructions(qkv):
    c04, c03 = ladder("04.double_buffer_cuda", qkv), ladder("03.tiled_cuda", qkv)
    assert tiled_traffic(c04, N_Q, N_K, D, TILES.block_m) == []
    assert conflict_free(c04) == []
    for s in ("ld", "st"):  # the same sectors; loads in float4s, a quarter of the requests
        assert c04[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{s}.sum"] == c03[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{s}.sum"]
    assert c04["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] * 4 == c03["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]
    assert set(w for (memory, op, w) in c04.widths if memory == "global" and op == "load") == {16}
    blocks, tiles = -(-N_Q // TILES.block_m), -(-N_K // TILES.block_n)
    assert c04.metrics["course__barriers"] == blocks * (1 + tiles)  # one per tile, one before the loop


def test_the_conflict_check_fails_on_step_03_without_its_padding(qkv):
    source = kernel_path("kernels/cuda/03_tiled.cu").read_text()
    # No padding: lane j reads K's row j, 32 floats apart: every lane in one bank.
    unpadded = RawModule(code=source.replace("#define K_PAD 1 ", "#define K_PAD 0 "), name="unpadded.cu",
                         compile_now=None)
    c = ladder("03.tiled_cuda", qkv, unpadded)
    assert tiled_traffic(c, N_Q, N_K, D, TILES.block_m) == []
    assert conflict_free(c) != []
    assert max(r["max_ways"] for r in c.rows if r["memory"] == "shared") == 32


def test_the_traffic_check_fails_on_step_03_reading_k_twice(qkv):
    source = kernel_path("kernels/cuda/03_tiled.cu").read_text()
    # K read twice per tile: the traffic no longer matches the formula, and the check says which tensor. (The
    # second read is of another column of the same row: one of the same element, through a __restrict__
    # pointer, a compiler may merge with the first, as clang 14 does.)
    twice = source.replace("v_tile[r * d + c] = in ? v[(size_t)key * d + c] : 0.0f;",
                           "v_tile[r * d + c] = in ? v[(size_t)key * d + c] + 0.0f * k[(size_t)key * d + d - 1 - c] "
                           ": 0.0f;")
    assert twice != source
    c = ladder("03.tiled_cuda", qkv, RawModule(code=twice, name="twice.cu", compile_now=None))
    assert [w.split(":")[0].split()[0] for w in tiled_traffic(c, N_Q, N_K, D, TILES.block_m)] == ["k", "total"]


def test_counts_do_not_depend_on_the_order_threads_run_in(qkv):
    sequential = ladder("04.double_buffer_cuda", qkv)
    shuffled = ladder("04.double_buffer_cuda", qkv, schedule="random", seed=3)
    assert shuffled.metrics == sequential.metrics
    checked = ladder("04.double_buffer_cuda", qkv, check=("memcheck", "racecheck"))  # counters combine with checks
    assert checked.metrics == sequential.metrics


# -- the API ----------------------------------------------------------------------------------------

def test_course_counters_gives_a_table_rows_and_nsight_names(qkv):
    module = RawModule(path=kernel_path(cuda.STEPS["03.tiled_cuda"].kernel_file), compile_now=None)
    c = course.grading.counters(module, *qkv, tiles=TILES)
    assert isinstance(c, course.grading.counters.Counters) and len(c.launches) == 1
    text = str(c)
    for words in ("tiled_attention (cuda)", "sectors (32 B)", "bank conflicts", "by tensor:", "by source line"):
        assert words in text
    assert "<table" in c._repr_html_() and "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in c._repr_html_()
    assert all({"kernel", "line", "memory", "tensor", "op", "width", "instructions"} <= set(r) for r in c.rows)
    assert c["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == c.launches[0].metrics[
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]
    assert "Nsight Compute's" in c.describe("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
    assert "course's own" in c.describe("course__global_ld_bytes_requested")


def test_the_command_line_prints_a_steps_counters(capsys):
    """``python -m course.tools.nsight_compare 03``: what docs/counters.md compares with Nsight Compute."""
    from course.tools.nsight_compare import main
    assert main(["03", "--n", "16", "--d", "16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiled_attention (cuda): grid (1, 1, 1)") and "by source line" in out
    with pytest.raises(SystemExit):
        main(["00"])  # lesson 00 has no CUDA step
    assert "invalid choice: '00'" in capsys.readouterr().err


def test_what_cannot_be_measured_is_a_sentence():
    with pytest.raises(course.CourseError, match="launched no kernel that could be measured"):
        course.grading.counters(lambda: None)
    with pytest.raises(course.CourseError, match="measures a kernel"):
        course.grading.counters(42)


def _as_handed_out(code: str) -> str:
    """A kernel file as the release gives it to learners: every solution region emptied."""
    import re
    return re.sub(r"(// BEGIN SOLUTION[^\n]*\n).*?(\s*// END SOLUTION)", r"\1    // YOUR CODE HERE\n\2", code, flags=re.S)


def test_an_unfinished_kernel_is_a_sentence_and_the_first_finished_track_is_measured(qkv):
    """A stub would run and load no K or V: a measurement of nothing, so the counters refuse it in a sentence;
    ``first_finished`` passes over it to a finished track, and says so when none is."""
    from course.grading.answers import NotFinished
    from course.grading.counters import first_finished
    path = kernel_path(cuda.STEPS["03.tiled_cuda"].kernel_file)
    stub = RawModule(code=_as_handed_out(path.read_text()), language="cuda", compile_now=None)
    assert "YOUR CODE HERE" in stub.code
    with pytest.raises(NotFinished, match="not finished yet"):
        course.grading.counters(stub, *qkv)
    finished = RawModule(path=path, compile_now=None)
    track, c = first_finished(*qkv, metal=stub, cuda=finished)
    assert track == "cuda" and c.by_tensor["k"]["load_bytes"] > 0
    with pytest.raises(NotFinished, match="not finished yet in any track"):
        first_finished(*qkv, cuda=stub)


# -- against Nsight Compute ------------------------------------------------------------------------
#
# What Nsight Compute measured on Hopper, pinned here so the model cannot drift from it (docs/counters.md).

def _lanes(offset, active=lambda t: True):
    return tuple((t, offset(t)) for t in range(32) if active(t))


# One warp, one shared load per kernel of tests/simt/kernels/cuda/shared_loads.cu: (bytes per lane, wavefronts,
# bank conflicts) as Nsight Compute reported them on an H200 (l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,
# l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum; one LDS, LDS.64 or LDS.128 per kernel in the SASS).
MEASURED_SHARED_LOADS = {
    "v4_same": (16, 2, 0), "v4_lane": (16, 4, 0), "v4_lane_first8": (16, 1, 0), "v4_first16": (16, 2, 0),
    "v4_odd_quarters": (16, 2, 0), "v4_half_bcast": (16, 2, 0), "v4_quarter_bcast": (16, 2, 0),
    "v4_q0q2_same": (16, 2, 0), "v4_pairs": (16, 2, 0), "v4_mod8": (16, 4, 0), "v4_mod16": (16, 4, 0),
    "v4_row36": (16, 4, 0), "v4_stride2": (16, 8, 4), "v4_stride8": (16, 32, 28),
    "v2_same": (8, 1, 0), "v2_lane": (8, 2, 0), "v2_first16": (8, 1, 0), "v2_half_bcast": (8, 1, 0),
    "v2_mod16": (8, 2, 0), "v2_pairs": (8, 1, 0), "v2_stride2": (8, 4, 2), "v2_stride16": (8, 32, 30),
    "v1_same": (4, 1, 0), "v1_lane": (4, 1, 0), "v1_stride32": (4, 32, 31),
}


@pytest.fixture(scope="module")
def shared_loads():
    from pathlib import Path
    return RawModule(path=Path(__file__).parent / "kernels" / "cuda" / "shared_loads.cu", compile_now="checked")


def test_every_measured_pattern_has_its_kernel(shared_loads):
    assert sorted(shared_loads.kernels) == sorted(MEASURED_SHARED_LOADS)


@pytest.mark.parametrize("kernel", list(MEASURED_SHARED_LOADS))
def test_shared_load_wavefronts_are_what_nsight_compute_measured(shared_loads, kernel):
    width, wavefronts, conflicts = MEASURED_SHARED_LOADS[kernel]
    c = measure(shared_loads, kernel, 1, 32, (np.zeros(32, np.float32),))
    loads = [r for r in c.rows if r["memory"] == "shared" and r["op"] == "load"]
    assert [(r["width"], r["instructions"], r["wavefronts"], r["bank_conflicts"]) for r in loads] == [
        (width, 1, wavefronts, conflicts)]


def test_phases_pair_only_for_loads_and_only_when_the_pair_fits_one_wavefront():
    from course.models.traffic import pattern_cost
    same = _lanes(lambda t: 0)
    # The phase rule alone (what stores still get: only loads were measured) serves every quarter-warp apart.
    assert pattern_cost("shared", 16, same, "store")["wavefronts"] == 4
    assert pattern_cost("shared", 16, same, "load")["wavefronts"] == 2
    # Quarter-warps 0 and 1 each read 4 float4s (64 bytes): in different banks they share one wavefront
    # (measured above), in the same banks (different words) they cannot.
    other_banks = _lanes(lambda t: 16 * (t // 2))
    same_banks = _lanes(lambda t: 16 * (t % 8 // 2) + 128 * (t // 8))
    assert pattern_cost("shared", 16, other_banks, "load")["wavefronts"] == 2
    assert pattern_cost("shared", 16, same_banks, "load")["wavefronts"] == 4


# The CPU runtime's counters of steps 01, 03 and 04 at N = 64, D = 32, each launched as its lesson launches it
# (course.grading.counters, the default tiles), beside what Nsight Compute measured for the same launch on an H100
# (ncu: the metrics of docs/counters.md). Every value agreed but step 04's shared-load wavefronts, which the
# model gave as 12,288 before its 16-byte loads paired their quarter-warps; Nsight Compute measured 10,240.
NSIGHT_METRICS = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                  "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                  "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                  "course__global_atom_requests", "smsp__inst_executed_op_shared_atom.sum")
NSIGHT_H100 = {
    "01.naive_cuda": (20_480, 274_432, 64, 2_048, 0, 0, 0, 0, 0, 0, 0, 0),
    "03.tiled_cuda": (576, 2_304, 128, 320, 12_288, 576, 12_288, 576, 0, 0, 0, 0),
    "04.double_buffer_cuda": (144, 2_304, 128, 320, 6_144, 144, 10_240, 576, 0, 0, 0, 0),
}


@pytest.mark.parametrize("exercise", list(NSIGHT_H100))
def test_the_ladder_at_n64_d32_counts_what_nsight_compute_measured(exercise):
    q, k, v = make_qkv(64, 32, seed=0)
    module = RawModule(path=kernel_path(cuda.STEPS[exercise].kernel_file), compile_now=None)
    c = course.grading.counters(module, q, k, v)
    assert dict(zip(NSIGHT_METRICS, (int(c[name]) for name in NSIGHT_METRICS))) == dict(
        zip(NSIGHT_METRICS, NSIGHT_H100[exercise]))
