"""Kernels may use device code only (course/simt/device_code.py).

A kernel here is C++ compiled by g++, so a call to the host's C library, a system call in inline
assembly or a host header would otherwise compile and run in the learner's process. Each is refused
at compile time with a sentence naming the call and its line, quoted, as a KernelCompileError (what a
%%cuda cell shows as a failed compile). Every course kernel still compiles: tests/tracks walk them all.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from course.simt import KernelCompileError, RawModule
from course.simt.device_code import ALLOWED, INCLUDES, qualified_name

HOST_CALL = "device code cannot call it (nvcc rejects host calls in __global__ and __device__ functions)"

REFUSED_CUDA = {
    "fopen": (r"""
__global__ void peek(float* x) {
    FILE* f = fopen("/etc/hostname", "r");
    x[0] = f != nullptr;
}""", 3, "calls `fopen`, a host C library function: " + HOST_CALL),
    "system": (r"""
__global__ void run(float* x) {
    x[threadIdx.x] = 0.0f;
    if (threadIdx.x == 0) x[0] = system("true");
}""", 4, "calls `system`, a host C library function"),
    "getenv": (r"""
__global__ void home(float* x) {
    const char* home = getenv("HOME");
    x[0] = home != nullptr;
}""", 3, "calls `getenv`, a host C library function"),
    "dlsym": (r"""
extern "C" void* dlsym(void* handle, const char* name);
__global__ void indirect(float* x) {
    int (*call)(const char*) = (int (*)(const char*))dlsym((void*)0, "system");
    x[0] = call("true");
}""", 4, "calls `dlsym`, a host C library function"),
    "syscall-asm": (r"""
__global__ void pid(long* x) {
    long r;
    asm volatile("syscall" : "=a"(r) : "a"(39));
    x[0] = r;
}""", 4, "uses inline assembly (`asm`), which kernels may not here"),
    "unistd": (r"""#include <cuda_runtime.h>
#include <unistd.h>
__global__ void pid(long* x) { x[0] = getpid(); }""", 2, "includes <unistd.h>, which is not a header for CUDA device code"),
    "fstream": (r"""
#include <fstream>
__global__ void save(float* x) { std::ofstream("/tmp/out") << x[0]; }""", 2, "includes <fstream>"),
    "cstdio": (r"""#include <cstdio>
__global__ void say(float* x) { printf("%f\n", x[0]); }""", 1, "Device printf needs no #include (as with nvcc)"),
    "snprintf": (r"""
__global__ void format(char* out) {
    snprintf(out, 8, "%d", (int)threadIdx.x);
}""", 3, "calls `snprintf`, a host C library function"),
}


@pytest.mark.parametrize("name", REFUSED_CUDA)
@pytest.mark.parametrize("build", ["fast", "checked"])
def test_host_code_in_a_cuda_kernel_is_refused_naming_the_line(name, build):
    source, line, words = REFUSED_CUDA[name]
    with pytest.raises(KernelCompileError) as err:
        RawModule(code=source, name="host.cu", compile_now=build)
    msg = str(err.value)
    assert msg.startswith("host.cu did not compile:\n"), msg
    assert f"line {line} of host.cu " in msg and words in msg, msg
    assert re.search(rf"\n +{line} \| {re.escape(source.splitlines()[line - 1])}$", msg, re.M)  # the line, quoted


def test_a_refused_kernel_is_refused_again_not_taken_from_the_cache():
    source = REFUSED_CUDA["getenv"][0]
    for _ in range(2):
        with pytest.raises(KernelCompileError, match="calls `getenv`"):
            RawModule(code=source, name="host.cu")


def test_a_notebook_cell_is_refused_with_its_own_line_numbers():
    with pytest.raises(KernelCompileError) as err:  # as %%cuda compiles a cell: the magic is line 1
        RawModule(code=REFUSED_CUDA["fopen"][0], name="peek.cu", first_line=2, compile_now="checked")
    assert "line 4 of peek.cu calls `fopen`" in str(err.value)


def test_host_code_in_a_metal_kernel_is_refused():
    source = r"""#include <metal_stdlib>
using namespace metal;
kernel void home(device float* x [[buffer(0)]]) {
    x[0] = getenv("HOME") != nullptr;
}"""
    with pytest.raises(KernelCompileError) as err:
        RawModule(code=source, language="metal", name="host.metal")
    assert "line 4 of host.metal calls `getenv`, a C library function: Metal has no C or C++ library" in str(err.value)
    for header, line in (("#include <metal_stdlib>\n#include <stdio.h>\n", 2), ("#include <cmath>\n", 1)):
        with pytest.raises(KernelCompileError, match=rf"line {line} of host.metal includes <(stdio.h|cmath)>, "
                                                     r"which is not a header for Metal kernels"):
            RawModule(code=header + "kernel void k(device float* x [[buffer(0)]]) { x[0] = 1.0f; }",
                      language="metal", name="host.metal")
    with pytest.raises(KernelCompileError, match="line 2 of host.metal calls `operator new\\[\\]`"):
        RawModule(code="#include <metal_stdlib>\nkernel void k(device float* x [[buffer(0)]]) "
                       "{ float* p = new float[4]; x[0] = p[0]; }", language="metal", name="host.metal")


def test_device_functions_and_the_course_headers_are_allowed():
    source = r"""#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <cfloat>
#include <cassert>
#include <cstdint>
__global__ void fine(float* x) {
    float* scratch = (float*)malloc(4 * sizeof(float));
    memset(scratch, 0, 4 * sizeof(float));
    assert(scratch != nullptr);
    x[0] = expf(x[0]) + sinhf(x[1]) + tgammaf(x[2]) + fminf(FLT_MAX, CUDART_INF_F) * 0.0f + scratch[0];
    free(scratch);
    if (threadIdx.x == 0) printf("%f\n", x[0]);
}"""
    x = np.array([0.0, 0.0, 1.0], np.float32)
    mod = RawModule(code=source, name="fine.cu", compile_now="checked")
    mod.get_function("fine")(1, 1, (x,), quiet=True)
    assert x[0] == pytest.approx(2.0)


def test_what_g_plus_plus_emits_for_legal_device_code_is_allowed():
    """libgcc helpers (__popcll without POPCNT, 128-bit division), virtual functions, a __shared__ object
    with a destructor: none of them is a call the kernel makes, and none may be refused."""
    source = r"""
struct Base { __device__ virtual float f(float x) const { return x; } __device__ virtual ~Base() {} };
struct Twice : Base { __device__ float f(float x) const override { return 2 * x; } };
struct Thrice : Base { __device__ float f(float x) const override { return 3 * x; } };
struct Acc { float v; __device__ ~Acc() { v = 0; } };
__device__ float apply(const Base* b, float x) { return b->f(x); }
__global__ void legal(float* x, long long* n, int which) {
    __shared__ Acc acc[1];
    Twice two;
    Thrice three;
    acc[0].v = apply(which ? (const Base*)&two : (const Base*)&three, x[0]);
    __int128 wide = n[0];
    n[1] = (long long)(wide * n[0] / n[2]) + __popcll((unsigned long long)n[3]);
    x[0] = acc[0].v;
}"""
    for build in ("fast", "checked"):
        RawModule(code=source, name="legal.cu", compile_now=build)


def test_symbols_are_named_without_templates_parameters_or_inline_namespaces():
    assert qualified_name("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"
                          "::_M_create(unsigned long&, unsigned long)") == "std::basic_string::_M_create"
    assert qualified_name("operator delete(void*, unsigned long)") == "operator delete"
    assert qualified_name("operator new[](unsigned long)") == "operator new[]"
    assert qualified_name("std::basic_ostream<char>& std::operator<< <std::char_traits<char> >"
                          "(std::basic_ostream<char>&, char const*)") == "std::operator<<"
    assert qualified_name("void simt::helper<int>(int)") == "simt::helper"
    assert qualified_name("vtable for __cxxabiv1::__si_class_type_info") == "vtable for __cxxabiv1::__si_class_type_info"
    assert qualified_name("fopen") == "fopen"


def test_the_lists_are_explicit():
    """Names, not patterns: the C math library, what g++ and the headers need, nothing that opens a file."""
    assert {"expf", "exp", "fmaxf", "tanhf", "memcpy", "__tls_get_addr", "snprintf"} <= set(ALLOWED)
    assert not {"fopen", "system", "getenv", "dlsym", "syscall", "printf", "fork", "open"} & set(ALLOWED)
    assert "cstdio" not in INCLUDES["cuda"] and {"cuda_runtime.h", "mma.h", "cmath"} <= set(INCLUDES["cuda"])
    assert set(INCLUDES["metal"]) == {"metal_stdlib", "metal_math", "metal_atomic", "metal_simdgroup_matrix"}
