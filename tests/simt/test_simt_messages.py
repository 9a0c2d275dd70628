"""Every message of the CPU runtime that names a line of the learner's kernel quotes that line.

A notebook shows no line numbers, so "line 4 of oob.cu" alone sends the learner counting lines; the quote
under the message shows the line itself, numbered as the message numbers it (a %%cuda cell's first line is
the magic, so its kernel starts at line 2).
"""
from __future__ import annotations

import numpy as np
import pytest

from course.simt import KernelCompileError, KernelLaunchError, RawModule
from course.simt.diagnostics import quote_diagnostics, quote_lines

OUT_OF_BOUNDS = """extern "C" __global__ void shift(const float* q, float* o, int n) {
    int i = threadIdx.x;
    float x = q[i + 5];
    o[i] = x;
}
"""

RACE = """extern "C" __global__ void rotate(const float* q, float* o, int n) {
    __shared__ float t[8];
    t[threadIdx.x] = q[threadIdx.x];
    o[threadIdx.x] = t[(threadIdx.x + 1) % 8];
}
"""

METAL_OUT_OF_BOUNDS = """#include <metal_stdlib>
using namespace metal;
kernel void shift(device const float* q [[buffer(0)]], device float* o [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    o[i] = q[i + 5];
}
"""


def launch_error(module: RawModule, name: str, check: str, args) -> str:
    with pytest.raises(KernelLaunchError) as info:
        module.get_function(name)((1,), (8,), args, check=check)
    return str(info.value)


def test_an_out_of_bounds_read_quotes_the_line_as_a_cell_numbers_it():
    module = RawModule(code=OUT_OF_BOUNDS, name="shift_cuda.cu", first_line=2)  # as %%cuda shift_cuda compiles it
    message = launch_error(module, "shift", "memcheck", (np.zeros(8, np.float32), np.zeros(8, np.float32), np.int32(8)))
    assert "out-of-bounds read of `q` at line 4 of shift_cuda.cu" in message
    assert message.endswith("\n    4 |     float x = q[i + 5];"), message


def test_a_race_quotes_both_lines_in_the_order_the_message_names_them():
    module = RawModule(code=RACE, name="rotate.cu")
    message = launch_error(module, "rotate", "racecheck", (np.zeros(8, np.float32), np.zeros(8, np.float32), np.int32(8)))
    assert "data race on shared memory" in message
    named = [int(n) for n in __import__("re").findall(r"at line (\d+) of rotate\.cu", message)]
    assert sorted(named) == [3, 4]
    lines = {3: "t[threadIdx.x] = q[threadIdx.x];", 4: "o[threadIdx.x] = t[(threadIdx.x + 1) % 8];"}
    quoted = message.split("\n")[1:]
    assert quoted == [f"    {n} |     {lines[n]}" for n in named], message


def test_a_metal_kernel_is_quoted_the_same_way():
    module = RawModule(code=METAL_OUT_OF_BOUNDS, language="metal", name="shift_metal.metal", first_line=2)
    with pytest.raises(KernelLaunchError) as info:
        module.get_function("shift")((8,), (8,), (np.zeros(8, np.float32), np.zeros(8, np.float32)), check="memcheck")
    assert str(info.value).endswith("\n    6 |     o[i] = q[i + 5];"), str(info.value)


def test_a_compile_error_quotes_the_line_with_a_caret_under_the_column():
    with pytest.raises(KernelCompileError) as info:
        RawModule(code=RACE.replace("t[threadIdx.x] = q", "t[threadIdx.x] = y q"), name="rotate.cu", first_line=2)
    message = str(info.value)
    at = message.index("rotate.cu:4:22: error:")
    following = message[at:].split("\n")[1:3]
    assert following == ["    4 |     t[threadIdx.x] = y q[threadIdx.x];", "      |                      ^"], message


def test_quoting_leaves_other_files_and_lines_past_the_end_alone():
    code = "a();\nb();\n"
    assert quote_lines("at line 2 of k.cu and line 9 of k.cu and line 1 of other.cu", code, "dir/k.cu") == (
        "at line 2 of k.cu and line 9 of k.cu and line 1 of other.cu\n    2 | b();")
    assert quote_lines("nothing here", code, "k.cu") == "nothing here"
    text = "k.cu:1: error: expected ';'\nsimt_cuda.h:3:1: note: elsewhere"
    assert quote_diagnostics(text, code, "k.cu") == "k.cu:1: error: expected ';'\n    1 | a();\nsimt_cuda.h:3:1: note: elsewhere"
