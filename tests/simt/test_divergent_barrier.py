"""synccheck's divergent-barrier rule (docs/simt.md, "Exited threads and barriers").

A thread that leaves the kernel by a `return` above a barrier is excused from it (the early-exit
guard); a thread that leaves at or below the barrier's line while the others of its block wait there
passed the barrier without waiting, and the launch stops naming both lines, in CUDA and in Metal.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError, RawModule
from course.simt.compiler import find_kernels, translation_unit

CHECKED = ("memcheck", "racecheck")
MODES = [dict(), dict(check=CHECKED, schedule="random", seed=3)]

CUDA = r"""
// Only the first half of the block takes the branch that holds the barrier.
__global__ void barrier_in_branch(float* x) {
    __shared__ float s[32];
    int t = threadIdx.x;
    s[t] = x[t];
    if (t < 16) {
        __syncthreads();
        x[t] = s[31 - t];
    }
}

// Threads past n return below the barrier after one iteration; the others wait at it again.
__global__ void return_in_loop(float* x, int n) {
    for (int i = 0; i < 3; ++i) {
        __syncthreads();
        if (threadIdx.x >= n) return;
        x[threadIdx.x] += 1.0f;
    }
}

// The guard every course kernel uses: threads past n leave before the first barrier.
__global__ void guard_before_barrier(float* x, int n) {
    __shared__ float s[32];
    int t = threadIdx.x;
    if (t >= n) return;
    s[t] = x[t];
    __syncthreads();
    x[t] = s[n - 1 - t];
}

// Leaving after the last barrier is fine too.
__global__ void return_after_last_barrier(float* x, int n) {
    __shared__ float s[32];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t >= n) return;
    x[t] = s[31 - t];
}

// Two different barriers: the existing mismatch report, both lines named.
__global__ void two_barriers(float* x) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}

__device__ void sync_block() { __syncthreads(); }

// A barrier in a device function, called by half the block: the other half runs off the end.
__global__ void device_barrier_in_branch(float* x) {
    if (threadIdx.x < 16) sync_block();
    x[threadIdx.x] = 1.0f;
}

// The same function behind the early-exit guard: fine.
__global__ void device_barrier_after_guard(float* x, int n) {
    if (threadIdx.x >= n) return;
    sync_block();
    x[threadIdx.x] = 1.0f;
}

// A lambda's `return;` is not the kernel's: the threads go on to the barrier.
__global__ void lambda_return(float* x) {
    auto clamp_first = [&](int t) { if (t > 0) return; x[0] = 0.0f; };
    clamp_first(threadIdx.x);
    __syncthreads();
    x[threadIdx.x] += 1.0f;
}
"""

METAL = r"""#include <metal_stdlib>
using namespace metal;

kernel void barrier_in_branch(device float* x [[buffer(0)]],
                              uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[32];
    s[t] = x[t];
    if (t < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        x[t] = s[31 - t];
    }
}

kernel void guard_before_barrier(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]],
                                 uint t [[thread_index_in_threadgroup]]) {
    threadgroup float s[32];
    if (t >= n) return;  // the dispatch is rounded up to whole threadgroups
    s[t] = x[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[t] = s[n - 1 - t];
}
"""


@pytest.fixture(scope="module")
def cuda():
    return RawModule(code=CUDA, name="divergent.cu")


@pytest.fixture(scope="module")
def metal():
    return RawModule(code=METAL, language="metal", name="divergent.metal")


def line_of(source: str, text: str, after: str = "") -> int:
    """The line of ``source`` (numbered from 1) that holds ``text``, the first one after ``after``."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def quotes(msg: str, line: int, text: str) -> bool:
    """Whether ``msg`` quotes source line ``line`` as the runtime's messages do ("    12 | text")."""
    return re.search(rf"\n +{line} \| {re.escape(text)}(\n|$)", msg) is not None


def failure(kernel, *args, **launch) -> str:
    with pytest.raises(KernelLaunchError) as err:
        kernel(*args, **launch)
    return str(err.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_barrier_in_a_branch_names_both_lines(cuda, mode):
    msg = failure(cuda.get_function("barrier_in_branch"), 1, 32, (np.zeros(32, np.float32),), **mode)
    barrier = line_of(CUDA, "__syncthreads();", after="barrier_in_branch")
    end = line_of(CUDA, "}", after="x[t] = s[31 - t];") + 1
    assert msg.startswith("barrier_in_branch: divergent barrier in block (0,0,0) of barrier_in_branch: "), msg
    assert (f"threads 0-15 wait at __syncthreads() (line {barrier} of divergent.cu), but threads 16-31 passed "
            f"it without waiting and left the kernel at line {end} of divergent.cu (its closing brace)") in msg
    assert "An early `return` above the first barrier is fine." in msg
    assert quotes(msg, barrier, "        __syncthreads();") and quotes(msg, end, "}")  # both lines, quoted


def test_a_return_below_the_barrier_in_a_loop_is_named(cuda):
    msg = failure(cuda.get_function("return_in_loop"), 1, 32, (np.zeros(32, np.float32), 20))
    barrier = line_of(CUDA, "__syncthreads();", after="return_in_loop")
    ret = line_of(CUDA, "return;", after="return_in_loop")
    assert (f"threads 0-19 wait at __syncthreads() (line {barrier} of divergent.cu), but threads 20-31 passed it "
            f"without waiting and left the kernel at line {ret} of divergent.cu (a `return`)") in msg
    assert quotes(msg, barrier, "        __syncthreads();") and quotes(msg, ret, "        if (threadIdx.x >= n) return;")


@pytest.mark.parametrize("mode", MODES)
def test_an_early_return_before_the_barrier_is_fine(cuda, mode):
    x = np.arange(32, dtype=np.float32)
    cuda.get_function("guard_before_barrier")(1, 32, (x, 20), **mode)
    np.testing.assert_array_equal(x[:20], np.arange(20, dtype=np.float32)[::-1])
    np.testing.assert_array_equal(x[20:], np.arange(20, 32, dtype=np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_a_return_after_the_last_barrier_is_fine(cuda, mode):
    x = np.arange(32, dtype=np.float32)
    cuda.get_function("return_after_last_barrier")(1, 32, (x, 20), **mode)
    np.testing.assert_array_equal(x[:20], np.arange(31, 11, -1, dtype=np.float32))


def test_threads_at_two_different_barriers_are_still_a_mismatch(cuda):
    msg = failure(cuda.get_function("two_barriers"), 1, 32, (np.zeros(32, np.float32),))
    first = line_of(CUDA, "__syncthreads();", after="two_barriers")
    second = line_of(CUDA, "__syncthreads();", after="} else {")
    assert "barrier mismatch in block (0,0,0) of two_barriers" in msg
    assert f"threads 0-15 wait at __syncthreads() (line {first} of divergent.cu)" in msg
    assert f"threads 16-31 at __syncthreads() (line {second} of divergent.cu)" in msg


def test_a_barrier_in_a_device_function_counts_threads_that_ran_off_the_end(cuda):
    msg = failure(cuda.get_function("device_barrier_in_branch"), 1, 32, (np.zeros(32, np.float32),))
    assert "threads 0-15 wait at __syncthreads()" in msg and "threads 16-31 passed it without waiting" in msg
    x = np.zeros(32, np.float32)
    cuda.get_function("device_barrier_after_guard")(1, 32, (x, 20), check=CHECKED)
    assert x[:20].tolist() == [1.0] * 20 and not x[20:].any()


def test_a_lambdas_return_is_not_the_kernels(cuda):
    x = np.zeros(32, np.float32)
    cuda.get_function("lambda_return")(1, 32, (x,))
    assert x.tolist() == [1.0] * 32
    tu = translation_unit(CUDA, "divergent.cu", "cuda", find_kernels(CUDA, "cuda"))
    assert "[&](int t) { if (t > 0) return; x[0] = 0.0f; };" in tu
    assert "if (t >= n) return ::simt::kernel_return(__LINE__);" in tu


def test_rewriting_returns_keeps_every_line_number():
    source = CUDA + "\n__global__ void broken(float* x) {\n    if (x[0] > 0) return;\n    undeclared = 1;\n}\n"
    tu = translation_unit(source, "divergent.cu", "cuda", find_kernels(source, "cuda"))
    body = tu.split('#line 1 "divergent.cu"\n', 1)[1].splitlines()[: source.count("\n")]
    rewritten = [i for i, (a, b) in enumerate(zip(body, source.splitlines())) if a != b]
    assert [source.splitlines()[i].strip() for i in rewritten] == [
        "if (threadIdx.x >= n) return;", "if (t >= n) return;", "if (t >= n) return;",
        "if (threadIdx.x >= n) return;", "if (x[0] > 0) return;"]
    with pytest.raises(KernelCompileError, match=rf"divergent.cu:{line_of(source, 'undeclared')}:5: error: "
                                                 r"(.undeclared. was not declared|use of undeclared identifier .undeclared.)"):  # g++ | clang++
        RawModule(code=source, name="divergent.cu")


@pytest.mark.parametrize("mode", MODES)
def test_metal_a_barrier_in_a_branch_names_both_lines(metal, mode):
    msg = failure(metal.get_function("barrier_in_branch"), 1, 32, (np.zeros(32, np.float32),), **mode)
    barrier = line_of(METAL, "threadgroup_barrier", after="barrier_in_branch")
    end = line_of(METAL, "}", after="x[t] = s[31 - t];") + 1
    assert (f"threads 0-15 wait at threadgroup_barrier (line {barrier} of divergent.metal), but threads 16-31 "
            f"passed it without waiting and left the kernel at line {end} of divergent.metal (its closing brace)") in msg
    assert quotes(msg, barrier, "        threadgroup_barrier(mem_flags::mem_threadgroup);") and quotes(msg, end, "}")


@pytest.mark.parametrize("mode", MODES)
def test_metal_an_early_return_before_the_barrier_is_fine(metal, mode):
    x = np.arange(32, dtype=np.float32)
    metal.get_function("guard_before_barrier")(1, 32, (x, np.uint32(20)), **mode)
    np.testing.assert_array_equal(x[:20], np.arange(20, dtype=np.float32)[::-1])
