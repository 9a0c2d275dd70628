"""Kernels compile, run and are judged the same under every compiler the CPU runtime supports.

The runtime compiles kernels with $CXX (course/simt/compiler.py). Each leg here sets it to one compiler:

- ``g++``: the one installed;
- ``hardened g++``: g++ with Ubuntu's default hardening (_FORTIFY_SOURCE=3, -fstack-protector-strong,
  -fstack-clash-protection, -fcf-protection), given before the course's own flags as Ubuntu's driver does;
- ``hardening last``: the same hardening given after the course's flags, so that it wins over the flags
  that turn it off, and what the compiler then adds (``__snprintf_chk``, ``__stack_chk_fail``) must be
  told apart from what the learner wrote by device_code.py alone;
- ``clang++``: when installed (``scripts/setup.sh --test`` installs Debian's clang; without it the leg is
  skipped and says so).

Under each: every kernel file of kernels/cuda and kernels/metal compiles in the fast and the checked build,
and its library loads with an entry point per kernel; one forward step per language passes its grading
check (checked and plain launches); racecheck, memcheck, the time limit and the counters behave the same;
and a learner's own host call is refused with the same sentence. The plain g++ builds share the cache
with the other tests; the wrappers live at fixed paths, so a warm cache holds their builds too.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
from pathlib import Path

import numpy as np
import pytest

from course import Case
from course.simt import KernelCompileError, KernelLaunchError, RawModule
from course.simt.compiler import cache_dir, neutral_flags
from course.simt.device_code import called_name

REPO = Path(__file__).resolve().parents[2]
KERNEL_FILES = sorted((REPO / "kernels" / "cuda").glob("*.cu")) + sorted((REPO / "kernels" / "metal").glob("*.metal"))

HARDENING = "-D_FORTIFY_SOURCE=3 -fstack-protector-strong -fstack-clash-protection" + (
    " -fcf-protection" if platform.machine() in ("x86_64", "AMD64") else "")
WRAPPERS = {
    "hardened g++": f'#!/bin/sh\nexec g++ {HARDENING} "$@"\n',
    "hardening last": f'#!/bin/sh\nexec g++ "$@" {HARDENING}\n',
}
LEGS = ["g++", "hardened g++", "hardening last", "clang++"]
FULL_LEGS = ["g++", "hardened g++", "clang++"]  # every kernel file; "hardening last" compiles one of them


def compiler_for(leg: str) -> str:
    """The program CXX names for ``leg`` (a wrapper script, written once at a fixed path)."""
    if leg in WRAPPERS:
        if not shutil.which("g++"):
            pytest.skip("g++ is not installed")
        text = WRAPPERS[leg]
        path = cache_dir() / "compilers" / f"{leg.replace(' ', '-')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            tmp.replace(path)
        return str(path)
    found = shutil.which(leg)
    if not found:
        pytest.skip(f"{leg} is not installed, so the {leg} leg did not run (`scripts/setup.sh --test` installs "
                    f"Debian's {'clang' if leg == 'clang++' else leg})")
    return found


@pytest.fixture(params=LEGS)
def leg(request, monkeypatch):
    monkeypatch.setenv("CXX", compiler_for(request.param))
    return request.param


@pytest.fixture(params=FULL_LEGS)
def full_leg(request, monkeypatch):
    monkeypatch.setenv("CXX", compiler_for(request.param))
    return request.param


# ------------------------------------------------------------------------------------------------
# Every kernel file, both builds


def loads_every_kernel(module: RawModule, checked: bool) -> None:
    library = ctypes.CDLL(str(module.compile(checked)))  # every symbol resolves, or this raises
    for name in module.kernels:
        assert getattr(library, f"__simt_entry_{name}") is not None


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: f"{p.parent.name}:{p.stem}")
def test_every_kernel_file_compiles_in_both_builds(full_leg, path):
    module = RawModule(path=path, compile_now=None)
    assert module.kernels, path
    for checked in (False, True):
        loads_every_kernel(module, checked)


def test_hardening_that_wins_over_the_course_flags_is_not_the_learners(monkeypatch):
    monkeypatch.setenv("CXX", compiler_for("hardening last"))
    module = RawModule(path=REPO / "kernels" / "cuda" / "03_tiled.cu", compile_now=None)
    for checked in (False, True):
        loads_every_kernel(module, checked)


# ------------------------------------------------------------------------------------------------
# One grading check per language: checked launches (memcheck + racecheck, random schedule), plain ones


def test_a_cuda_and_a_metal_step_pass_their_grading_check(full_leg):
    from course.grading.kernel_steps import check_step
    from course.tracks import cuda as cuda_track
    from course.tracks import metal as metal_track

    for track, exercise in ((cuda_track, "03.tiled_cuda"), (metal_track, "03.tiled_metal")):
        report = check_step(exercise, track.module_for(exercise), checked_cases=[Case(17, 20, 32, seed=2)],
                            plain_cases=[Case(65, 33, 40, kind="peaky", seed=5)])
        assert report.cases == 2 and report.worst_ratio < 1, (exercise, report)


# ------------------------------------------------------------------------------------------------
# The checks behave the same: what a compiler could optimise away or turn into library calls

CUDA = r"""
__global__ void endless(float* a) {
    for (int i = 0; i < 10; i += 0) a[0] += 1.0f;
}
__global__ void misaligned(const float* in, float* out) {
    float4 v = *reinterpret_cast<const float4*>(in + 1);
    out[threadIdx.x] = v.x;
}
__global__ void atomic_loop(float* acc, int reps) {
    for (int r = 0; r < reps; ++r) atomicAdd(&acc[threadIdx.x % 4], 1.0f);
}
"""

METAL = r"""#include <metal_stdlib>
using namespace metal;
kernel void reverse_float4(device const float4 *in [[buffer(0)]], device float4 *out [[buffer(1)]],
                           uint t [[thread_position_in_threadgroup]]) {
    threadgroup float4 tile[64];
    tile[t] = in[t];
    out[t] = tile[63 - t];
}
kernel void misaligned(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                       uint t [[thread_position_in_grid]]) {
    float4 v = *(device const float4 *)(in + 1);
    out[t] = v.x;
}
"""


def test_racecheck_memcheck_the_time_limit_and_counters_agree(full_leg):
    cuda = RawModule(code=CUDA, name="checks.cu", compile_now="checked")
    with pytest.raises(KernelLaunchError, match="longer than the 1 s limit"):  # not deleted as a loop with no I/O
        cuda.get_function("endless")(1, 1, (np.zeros(1, np.float32),), timeout=1.0)
    x = np.zeros(64, np.float32)
    with pytest.raises(KernelLaunchError, match=r"misaligned float4 load .*\(at line 6 of checks\.cu\)"):
        cuda.get_function("misaligned")(1, 1, (x, x.copy()))  # the alignment check is not folded away
    counters = cuda.get_function("atomic_loop")((2,), (64,), (np.zeros(4, np.float32), 3), check="counters").counters
    assert counters.metrics["course__global_atom_requests"] == 4 * 3  # once per warp and iteration, not twice

    metal = RawModule(code=METAL, language="metal", name="checks.metal", compile_now="checked")
    x = np.arange(256, dtype=np.float32).reshape(64, 4)
    with pytest.raises(KernelLaunchError, match="data race on threadgroup memory"):  # vector copies are seen
        metal.get_function("reverse_float4")(1, 64, (x, np.zeros_like(x)), check="racecheck")
    with pytest.raises(KernelLaunchError, match=r"misaligned .*float4"):
        metal.get_function("misaligned")(1, 1, (x.ravel(), x.ravel().copy()))


# ------------------------------------------------------------------------------------------------
# A learner's host call: refused under every compiler, with the same sentence

HOST = "a host C library function: device code cannot call it (nvcc rejects host calls in __global__ and " \
       "__device__ functions)"
REFUSED = {
    "fopen": ("cuda", """__global__ void peek(float* x) {
    FILE* f = fopen("/etc/hostname", "r");
    x[0] = f != nullptr;
}""", f"line 2 of host.cu calls `fopen`, {HOST}"),
    "snprintf": ("cuda", """__global__ void format(char* out, float* x) {
    x[threadIdx.x] = 1.0f;
    snprintf(out, 8, "%d", (int)threadIdx.x);
}""", f"line 3 of host.cu calls `snprintf`, {HOST}"),
    "sscanf": ("cuda", """__global__ void parse(const char* in, int* out) {
    sscanf(in, "%d", out);
}""", f"line 2 of host.cu calls `sscanf`, {HOST}"),
    "getenv": ("metal", """#include <metal_stdlib>
kernel void home(device float* x [[buffer(0)]]) {
    x[0] = getenv("HOME") != nullptr;
}""", "line 3 of host.metal calls `getenv`, a C library function: Metal has no C or C++ library"),
    "new": ("metal", """#include <metal_stdlib>
kernel void heap(device float* x [[buffer(0)]]) {
    float* p = new float[4];
    p[0] = x[0];
    x[1] = p[0];
    delete[] p;
}""", "line 3 of host.metal calls `operator new[]`, a C++ library function: Metal has no C or C++ library"),
}


@pytest.mark.parametrize("build", ["fast", "checked"])
@pytest.mark.parametrize("call", REFUSED)
def test_a_learner_host_call_is_refused_with_the_same_sentence(leg, call, build):
    language, source, sentence = REFUSED[call]
    with pytest.raises(KernelCompileError) as err:
        RawModule(code=source, language=language, name=f"host.{'cu' if language == 'cuda' else 'metal'}",
                  compile_now=build)
    assert sentence in str(err.value), str(err.value)


def test_c_library_spellings_are_named_as_the_call_they_stand_for():
    assert [called_name(s) for s in ("__snprintf_chk", "__memcpy_chk", "__isoc99_sscanf", "__isoc23_strtol",
                                     "__expf_finite", "__stack_chk_fail", "fopen", "__tsan_read4")] == [
        "snprintf", "memcpy", "sscanf", "strtol", "expf", "__stack_chk_fail", "fopen", "__tsan_read4"]


def test_the_hardening_flags_are_turned_off_where_the_compiler_takes_them(monkeypatch):
    monkeypatch.setenv("CXX", compiler_for("g++"))
    flags = neutral_flags()
    assert "-U_FORTIFY_SOURCE" in flags and "-D_FORTIFY_SOURCE=0" in flags and "-fno-stack-protector" in flags


def test_a_cxx_that_does_not_exist_is_a_sentence(monkeypatch):
    monkeypatch.setenv("CXX", "/nowhere/g++")
    with pytest.raises(KernelCompileError, match=r"CXX is set to '/nowhere/g\+\+', which is no program this "
                                                 r"machine can run"):
        RawModule(code="__global__ void k(float* x) { x[0] = 1.0f; }", name="k.cu")
