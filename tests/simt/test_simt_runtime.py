"""The CPU SIMT runtime itself: launching, arguments, and the checking modes.

Each checking mode is shown to fire on a wrong kernel, with the sentence a learner would read, and to
stay quiet on the right one. Front-end features (shuffles, WMMA, Metal's vectors...) are covered by
test_simt_cuda.py and test_simt_metal.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from course.simt import KernelCompileError, KernelLaunchError, RawKernel, RawModule
from course.simt import compiler

CHECKED = ("memcheck", "racecheck")

BASICS = r"""
__global__ void add_scalar(const float* a, float* b, int n, float x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] + x;
}

__global__ void copy_unguarded(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    b[i] = a[i];
}

__global__ void write_const(const float* a) {
    float* p = const_cast<float*>(a);
    p[threadIdx.x] = 1.0f;
}

__global__ void wild_pointer(float* a) {
    float* p = (float*)(size_t)(64 + threadIdx.x);
    a[0] = *p;
}

__global__ void divide(int* a, int by) { a[threadIdx.x] = a[threadIdx.x] / by; }

__global__ void endless(float* a) {
    for (int i = 0; i < 10; i += 0) a[0] += 1.0f;
}

__global__ void __launch_bounds__(128) bounded(float* a) { a[threadIdx.x] = 1.0f; }

__global__ void say(int* a) {
    if (threadIdx.x < 3) printf("thread %d of block %d sees %d\n", (int)threadIdx.x, (int)blockIdx.x, a[0]);
}
"""

BARRIERS = r"""
// Reverse each block's 64 values through shared memory.
__global__ void reverse(float* x) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    x[blockIdx.x * 64 + t] = tile[63 - t];
}

__global__ void reverse_no_barrier(float* x) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = x[blockIdx.x * 64 + t];
    x[blockIdx.x * 64 + t] = tile[63 - t];
}

// The same through dynamic shared memory, sized by the launch.
__global__ void reverse_dynamic(float* x, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x;
    buf[t] = x[blockIdx.x * n + t];
    __syncthreads();
    x[blockIdx.x * n + t] = buf[n - 1 - t];
}

__global__ void split_barrier(float* x) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}

// Threads past n return before the barrier: allowed (exited threads do not hold a barrier up).
__global__ void early_exit(float* x, int n) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    if (t >= n) return;
    tile[t] = x[t];
    __syncthreads();
    x[t] = tile[n - 1 - t];
}

// Half a warp shuffles while the other half waits at a barrier: nobody can go on.
__global__ void stuck(float* x) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
    else __syncthreads();
    x[threadIdx.x] = v;
}

// Thread 0 publishes a value that every thread reads, with no barrier: works only if thread 0 runs first.
__global__ void publish_no_barrier(float* x) {
    __shared__ float value;
    if (threadIdx.x == 0) value = x[0];
    x[1 + threadIdx.x] = value;
}

__global__ void count_plain(float* total) { total[0] += 1.0f; }
__global__ void count_atomic(float* total) { atomicAdd(total, 1.0f); }

// Lanes of a warp exchange through shared memory, ordered by __syncwarp.
__global__ void warp_rotate(float* x) {
    __shared__ float s[32];
    int lane = threadIdx.x;
    s[lane] = x[lane];
    __syncwarp();
    x[lane] = s[(lane + 1) % 32];
}
"""


@pytest.fixture(scope="module")
def basics():
    return RawModule(code=BASICS, name="basics.cu")


@pytest.fixture(scope="module")
def barriers():
    return RawModule(code=BARRIERS, name="barriers.cu")


def reversed_blocks(x: np.ndarray, n: int) -> np.ndarray:
    return x.reshape(-1, n)[:, ::-1].ravel().copy()


# -- launching and arguments -----------------------------------------------------------------

@pytest.mark.parametrize("check", [(), CHECKED])
def test_buffers_and_scalars_round_trip(basics, check):
    a = np.arange(100, dtype=np.float32)
    b = np.zeros_like(a)
    res = basics.get_function("add_scalar")((4,), (32,), (a, b, 100, 0.5), check=check)
    np.testing.assert_array_equal(b, a + 0.5)
    assert res.blocks == 4 and res.seconds > 0


def test_torch_tensors_are_written_back_in_place(basics):
    a = torch.arange(10, dtype=torch.float32)
    b = torch.zeros(10)
    basics.get_function("add_scalar")(1, 32, (a, b, np.int32(10), np.float32(2.0)))
    assert torch.equal(b, a + 2)


@pytest.mark.parametrize("args, words", [
    ((np.zeros(4, np.float64), np.zeros(4, np.float32), 4, 1.0), "`a` points to float but the array given holds float64"),
    ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4), "takes 4 arguments"),
    ((np.zeros(4, np.float32), np.zeros(4, np.float32), 4.5, 1.0), "`n` is int32: pass an int"),
    ((np.zeros(4, np.float32), np.zeros(4, np.float32), 2**40, 1.0), "does not fit"),
    ((np.zeros(4, np.float32), 3, 4, 1.0), "pointer parameter"),
    ((np.zeros(4, np.float32), np.zeros(8, np.float32)[::2], 4, 1.0), "not C-contiguous"),
])
def test_bad_arguments_are_refused_with_a_sentence(basics, args, words):
    with pytest.raises(KernelLaunchError, match=words.replace("(", r"\(")):
        basics.get_function("add_scalar")(1, 32, args)


def test_outputs_are_untouched_when_a_launch_fails(basics):
    a = np.arange(64, dtype=np.float32)
    b = np.full(64, 7.0, dtype=np.float32)
    with pytest.raises(KernelLaunchError):
        basics.get_function("copy_unguarded")((3,), (32,), (a, b, 64), check="memcheck")
    assert (b == 7.0).all()


def test_launch_bounds_and_block_limits(basics):
    with pytest.raises(KernelLaunchError, match="__launch_bounds__"):
        basics.get_function("bounded")(1, 256, (np.zeros(256, np.float32),))
    with pytest.raises(KernelLaunchError, match="1024"):
        basics.get_function("add_scalar")(1, (32, 33), (np.zeros(1, np.float32), np.zeros(1, np.float32), 1, 0.0))


def test_device_printf_is_captured(basics, capsys):
    res = basics.get_function("say")((2,), (8,), (np.array([42], np.int32),))
    lines = sorted(res.printf.splitlines())
    assert lines == sorted(f"thread {t} of block {b} sees 42" for t in range(3) for b in range(2))
    assert "sees 42" in capsys.readouterr().out


def test_compile_errors_point_at_the_learners_file_and_line(tmp_path):
    src = tmp_path / "mine.cu"
    src.write_text("__global__ void k(float* x) {\n    x[0] = 1.0f;\n    x[1] = undefined_name;\n}\n")
    with pytest.raises(KernelCompileError) as err:
        RawModule(path=src)
    assert f"{src.resolve()}:3:12: error" in str(err.value) and "undefined_name" in str(err.value)


def test_host_launch_syntax_and_missing_kernels_are_explained(tmp_path):
    with pytest.raises(KernelCompileError, match="launched from Python"):
        RawModule(code="__global__ void k() {}\nvoid host() { k<<<1, 1>>>(); }\n")
    with pytest.raises(KernelCompileError, match=r"no kernel named `nope`.*kernels found: k"):
        RawKernel("__global__ void k(float* x) {}", "nope")


def test_builds_are_cached_by_source(basics):
    again = RawModule(code=BASICS, name="basics.cu")
    assert again.compile() == basics.compile()
    changed = RawModule(code=BASICS + "\n// another revision\n", name="basics.cu")
    assert changed.compile() != basics.compile()


# -- crashes, hangs and isolation ------------------------------------------------------------

def test_fast_mode_guard_pages_name_the_buffer(basics):
    a, b = np.zeros(100, np.float32), np.zeros(100, np.float32)
    with pytest.raises(KernelLaunchError, match=r"read `a` out of bounds at line 9 of basics.cu"):
        basics.get_function("copy_unguarded")((40,), (32,), (a, b, 100))


def test_writing_through_a_const_pointer_is_reported(basics):
    for check in ((), ("memcheck",)):
        with pytest.raises(KernelLaunchError, match=r"(wrote|writes) to `a`.*declares const"):
            basics.get_function("write_const")(1, 4, (np.zeros(4, np.float32),), check=check)


def test_a_wild_pointer_and_a_division_by_zero_are_sentences(basics):
    with pytest.raises(KernelLaunchError, match="belongs to no buffer"):
        basics.get_function("wild_pointer")(1, 1, (np.zeros(1, np.float32),))
    with pytest.raises(KernelLaunchError, match="divided an integer by zero at line 22"):
        basics.get_function("divide")(1, 4, (np.ones(4, np.int32), 0))


def test_an_endless_kernel_is_stopped_and_the_caller_lives(basics):
    start = time.monotonic()
    with pytest.raises(KernelLaunchError, match=r"longer than the 1 s limit.*0 of 1 blocks"):
        basics.get_function("endless")(1, 1, (np.zeros(1, np.float32),), timeout=1.0)
    assert time.monotonic() - start < 120  # stopped by the limit, not left running (generous: a loaded machine)
    a = np.arange(4, dtype=np.float32)
    b = np.zeros(4, np.float32)
    basics.get_function("add_scalar")(1, 4, (a, b, 4, 1.0))  # the process is fine
    assert (b == a + 1).all()


# -- synccheck -------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["sequential", "random"])
def test_barriers_work(barriers, schedule):
    x = np.arange(256, dtype=np.float32)
    barriers.get_function("reverse")((4,), (64,), (x,), schedule=schedule, check=CHECKED)
    np.testing.assert_array_equal(x, reversed_blocks(np.arange(256, dtype=np.float32), 64))


def test_dynamic_shared_memory_is_sized_by_the_launch(barriers):
    x = np.arange(96, dtype=np.float32)
    barriers.get_function("reverse_dynamic")((2,), (48,), (x, 48), shared_mem=48 * 4, check=CHECKED)
    np.testing.assert_array_equal(x, reversed_blocks(np.arange(96, dtype=np.float32), 48))
    with pytest.raises(KernelLaunchError, match=r"shared memory `buf`.*byte 128, but the launch gave it 128 bytes"):
        barriers.get_function("reverse_dynamic")((2,), (48,), (np.zeros(96, np.float32), 48), shared_mem=128,
                                                 check="memcheck")


def test_threads_at_different_barriers_are_named(barriers):
    with pytest.raises(KernelLaunchError) as err:
        barriers.get_function("split_barrier")(1, 32, (np.zeros(32, np.float32),))
    msg = str(err.value)
    assert "threads 0-15 wait at __syncthreads() (line 29 of barriers.cu)" in msg
    assert "threads 16-31 at __syncthreads() (line 31 of barriers.cu)" in msg


def test_threads_that_returned_do_not_hold_a_barrier_up(barriers):
    x = np.arange(64, dtype=np.float32)
    barriers.get_function("early_exit")(1, 64, (x, 40), check=CHECKED, schedule="random")
    np.testing.assert_array_equal(x[:40], np.arange(40, dtype=np.float32)[::-1])


def test_a_deadlock_is_described(barriers):
    with pytest.raises(KernelLaunchError, match=r"can never continue: threads 0-15 wait at __shfl_xor_sync"
                                                r".*threads 16-31 wait at __syncthreads"):
        barriers.get_function("stuck")(1, 32, (np.zeros(32, np.float32),), timeout=20)


# -- memcheck --------------------------------------------------------------------------------

def test_memcheck_names_buffer_element_line_and_thread(basics):
    a, b = np.zeros(100, np.float32), np.zeros(100, np.float32)
    with pytest.raises(KernelLaunchError) as err:
        basics.get_function("copy_unguarded")((4,), (32,), (a, b, 100), check="memcheck")
    assert ("out-of-bounds read of `a` at line 9 of basics.cu by thread (4,0,0) of block (3,0,0): element 100"
            in str(err.value))
    assert "valid: 0 to 99" in str(err.value)


def test_memcheck_is_quiet_on_a_guarded_kernel(basics):
    a, b = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    basics.get_function("add_scalar")((4,), (32,), (a, b, 100, 1.0), check="memcheck", schedule="random")
    np.testing.assert_array_equal(b, a + 1)


# -- racecheck and schedules -----------------------------------------------------------------

def test_racecheck_finds_a_missing_barrier_with_both_lines(barriers):
    with pytest.raises(KernelLaunchError) as err:
        barriers.get_function("reverse_no_barrier")((1,), (64,), (np.zeros(64, np.float32),), check="racecheck")
    msg = str(err.value)
    assert "data race on shared memory" in msg and "with no barrier between" in msg
    assert "line 14 of barriers.cu" in msg and "line 15 of barriers.cu" in msg


def test_racecheck_finds_blocks_updating_one_address_without_atomics(barriers):
    with pytest.raises(KernelLaunchError, match=r"data race on `total` element 0.*make the update atomic"):
        barriers.get_function("count_plain")((4,), (1,), (np.zeros(1, np.float32),), check="racecheck")


@pytest.mark.parametrize("schedule", ["sequential", "random"])
def test_racecheck_is_quiet_on_atomics_and_warp_syncs(barriers, schedule):
    total = np.zeros(1, np.float32)
    barriers.get_function("count_atomic")((8,), (64,), (total,), check=CHECKED, schedule=schedule)
    assert total[0] == 512
    x = np.arange(32, dtype=np.float32)
    barriers.get_function("warp_rotate")(1, 32, (x,), check=CHECKED, schedule=schedule)
    np.testing.assert_array_equal(x, np.roll(np.arange(32, dtype=np.float32), -1))


def test_atomics_are_real_across_os_threads(barriers):
    total = np.zeros(1, np.float32)
    barriers.get_function("count_atomic")((64,), (128,), (total,), workers=2)
    assert total[0] == 64 * 128


def test_a_random_schedule_exposes_an_order_dependent_kernel(barriers):
    """In order, thread 0 always runs first and the kernel looks right; a random order shows the bug."""
    publish = barriers.get_function("publish_no_barrier")
    x = np.zeros(65, np.float32)
    x[0] = 5.0
    publish(1, 64, (x,))
    assert (x[1:] == 5.0).all()
    wrong = 0
    for seed in range(5):
        x = np.zeros(65, np.float32)
        x[0] = 5.0
        publish(1, 64, (x,), schedule="random", seed=seed)
        wrong += int((x[1:] != 5.0).any())
    assert wrong >= 3
    with pytest.raises(KernelLaunchError, match="data race on shared memory"):
        publish(1, 64, (x,), check="racecheck")


def test_random_schedules_are_reproducible_from_the_seed(barriers):
    runs = []
    for _ in range(2):
        x = np.zeros(65, np.float32)
        x[0] = 5.0
        barriers.get_function("publish_no_barrier")(1, 64, (x,), schedule="random", seed=3)
        runs.append(x)
    np.testing.assert_array_equal(runs[0], runs[1])


# -- both fiber implementations --------------------------------------------------------------

def test_ucontext_fibers_give_the_same_results(tmp_path):
    """The portable fiber switch (used off x86-64) runs the same kernels to the same results."""
    script = (
        "import numpy as np\n"
        "from course.simt import RawModule, KernelLaunchError\n"
        f"m = RawModule(code={BARRIERS!r}, name='barriers.cu')\n"
        "x = np.arange(256, dtype=np.float32)\n"
        "m.get_function('reverse')((4,), (64,), (x,), check=('memcheck', 'racecheck'), schedule='random')\n"
        "assert (x == np.arange(256, dtype=np.float32).reshape(4, 64)[:, ::-1].ravel()).all()\n"
        "try:\n"
        "    m.get_function('stuck')(1, 32, (np.zeros(32, np.float32),))\n"
        "    raise SystemExit('deadlock not found')\n"
        "except KernelLaunchError as e:\n"
        "    assert 'can never continue' in str(e)\n"
        "print('ok')\n")
    # A private, empty build cache: a kernel library cached by another checkout would skip the build and
    # prove nothing about which runtime it links.
    env = dict(os.environ, COURSE_SIMT_UCONTEXT="1", COURSE_SIMT_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert list((tmp_path / "cache").glob("cuda-*.so")), "the kernel was not built in the private cache"
    built = [*compiler.PREBUILT.glob("runtime-*.o"), *(tmp_path / "cache").glob("runtime-*.o")]
    assert any("ucontext" in p.name for p in built)  # the launch really used the ucontext build


def test_a_write_after_many_reads_names_another_thread_as_the_reader():
    """Threads 0-31 read s[0], then thread 31 overwrites it: the race is with one of threads 0-30."""
    src = r"""
__global__ void war(float* out) {
    __shared__ float s[32];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    float x = s[0];
    if (threadIdx.x == 31) s[0] = 2.0f;
    out[threadIdx.x] = x;
}
"""
    with pytest.raises(KernelLaunchError) as err:
        RawKernel(src, "war")(1, 32, (np.zeros(32, np.float32),), check="racecheck")
    msg = str(err.value)
    assert "then thread (31,0,0) of block (0,0,0) wrote it at line 7" in msg
    assert "thread (31,0,0) of block (0,0,0) read it" not in msg
    # The block is one warp here, so a __syncwarp() would hide the race only until the block grows: the barrier
    # that holds for any block size is asked for.
    assert "Put a __syncthreads()" in msg and "a __syncwarp() would hide the race" in msg


def test_a_race_between_lanes_of_one_warp_of_several_names_syncwarp():
    """Warp 1 of a 64-thread block reads s[32], then its lane 31 overwrites it: __syncwarp() is the cheaper fix."""
    src = r"""
__global__ void war(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    float x = threadIdx.x >= 32 ? s[32] : 0.0f;
    if (threadIdx.x == 63) s[32] = 2.0f;
    out[threadIdx.x] = x;
}
"""
    with pytest.raises(KernelLaunchError) as err:
        RawKernel(src, "war")(1, 64, (np.zeros(64, np.float32),), check="racecheck")
    msg = str(err.value)
    assert "then thread (63,0,0) of block (0,0,0) wrote it at line 7" in msg
    assert "Both are in warp 1: a __syncwarp()" in msg  # the cheaper fix, since both lanes share a warp


def test_memcheck_bounds_checks_static_shared_and_local_arrays():
    src = r"""
__global__ void tile_overrun(float* out, int extra_tile, int extra_local) {
    __shared__ float tile[32];
    float local[8];
    tile[threadIdx.x + extra_tile] = 1.0f;
    for (int i = 0; i < 8 + extra_local; ++i) local[i] = tile[threadIdx.x];
    out[threadIdx.x] = local[0];
}
"""
    kernel = RawKernel(src, "tile_overrun")
    out = np.zeros(32, np.float32)
    kernel(1, 32, (out, 0, 0), check="memcheck")
    assert (out == 1.0).all()
    with pytest.raises(KernelLaunchError, match=r"index 32 is outside an array of type 'float\[32\]' at line 5 "
                                                r"of kernel.cu \(thread \(31,0,0\)"):
        kernel(1, 32, (out, 1, 0), check="memcheck")
    with pytest.raises(KernelLaunchError, match=r"index 8 is outside an array of type 'float\[8\]' at line 6"):
        kernel(1, 32, (out, 0, 1), check="memcheck")


def test_racecheck_accepts_a_compare_and_swap_loop_but_not_a_plain_write_beside_atomics():
    src = r"""
__global__ void cas_add(float* total) {
    int* bits = (int*)total;
    float old = *total;  // a plain read racing an atomic update: re-checked by the CAS below
    int seen;
    while ((seen = atomicCAS(bits, __float_as_int(old), __float_as_int(old + 1.0f))) != __float_as_int(old))
        old = __int_as_float(seen);
}

__global__ void mixed(float* total) {
    if (blockIdx.x == 0) atomicAdd(total, 1.0f);
    else total[0] = 5.0f;
}
"""
    total = np.zeros(1, np.float32)
    RawKernel(src, "cas_add")((6,), (32,), (total,), check="racecheck", schedule="random", seed=2)
    assert total[0] == 6 * 32
    with pytest.raises(KernelLaunchError, match=r"data race on `total` element 0: .* updated atomically it"):
        RawKernel(src, "mixed")((2,), (1,), (np.zeros(1, np.float32),), check="racecheck")
