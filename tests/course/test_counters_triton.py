"""course.grading.counters on Triton's interpreter: bytes loaded and stored per program and per tensor, counting only
the elements a mask lets through; and course.check("03.tiled_bytes", ..., kernel=...), which grades the traffic
formula against what the learner's own kernel was measured to move (Triton, CUDA C and Metal)."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import triton
import triton.language as tl

import course
from course.models import roofline
from course.lessons.lesson03 import MEASURED_SIZE, check_measured
from course.errors import CheckFailed
from course.kernels import kernel_path
from course.simt import RawModule
from course.tracks import cuda

pytestmark = pytest.mark.skipif(not course.tiers.triton_interpreted(),
                                reason="Triton's counters watch its interpreter")


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, 2 * x, mask=offs < n)


@triton.jit
def sum_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(total_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 32),)](x, out, x.numel(), BLOCK=32)
    return out


def total(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(1, dtype=x.dtype)
    sum_kernel[(triton.cdiv(x.numel(), 32),)](x, out, x.numel(), BLOCK=32)
    return out


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, kernel_path(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiled():
    return _load("counters_tiled_triton", "kernels/triton/03_tiled.py").tiled_attention


def right_formula(n_q, n_k, d, block_m, bytes_per_element):  # written out: an answer may not use the course's count
    return bytes_per_element * (2 * n_q * d + -(-n_q // block_m) * 2 * n_k * d) + 4 * n_q


def test_only_elements_a_mask_lets_through_are_counted_per_program_and_tensor():
    x = torch.arange(70, dtype=torch.float32)
    c = course.grading.counters(scale, x)
    (launch,) = c.launches
    assert launch.grid == (3, 1, 1) and c.metrics["course__programs"] == 3
    assert c.by_tensor["x_ptr"]["load_bytes"] == 4 * 70  # not 3 x 32 x 4: the last program's 26 masked lanes
    assert c.by_tensor["out_ptr"]["store_bytes"] == 4 * 70
    assert {p: t["x_ptr"]["load_bytes"] for p, t in launch.per_program.items()} == \
        {(0, 0, 0): 128, (1, 0, 0): 128, (2, 0, 0): 4 * 6}
    assert c.metrics["course__global_ld_thread_bytes"] == 280 and c.metrics["course__global_st_thread_bytes"] == 280
    assert "bytes (only elements a mask lets through)" in str(c) and "<table" in c._repr_html_()


def test_atomics_are_counted_apart_from_loads_and_stores():
    x = torch.ones(70)
    c = course.grading.counters(total, x)
    assert c.by_tensor["total_ptr"] == {**c.by_tensor["total_ptr"], "atomic_bytes": 3 * 4, "store_bytes": 0}
    assert c.metrics["course__global_atom_thread_bytes"] == 12 and c.metrics["course__global_ld_thread_bytes"] == 280


def test_the_tiled_kernel_moves_exactly_the_lesson_formula(tiled):
    n_q, n_k, d = MEASURED_SIZE["n_q"], MEASURED_SIZE["n_k"], MEASURED_SIZE["d"]
    q, k, v = course.make_qkv(n_q, d, n_k=n_k, seed=3)
    c = course.grading.counters(tiled, q, k, v)
    (launch,) = c.launches
    block_m = launch.constants["BLOCK_M"]
    programs = -(-n_q // block_m)
    assert {name: (t["load_bytes"], t["store_bytes"]) for name, t in c.by_tensor.items()} == {
        "q_ptr": (4 * n_q * d, 0), "k_ptr": (4 * programs * n_k * d, 0), "v_ptr": (4 * programs * n_k * d, 0),
        "o_ptr": (0, 4 * n_q * d), "lse_ptr": (0, 4 * n_q)}
    moved = c.metrics["course__global_ld_thread_bytes"] + c.metrics["course__global_st_thread_bytes"]
    assert moved == roofline.tiled_kernel_bytes(n_q, n_k, d, block_m, 4)
    # The Q tile has BLOCK_M = 64 rows, 40 of them real: a count of whole tiles would be off.
    assert block_m > n_q and c.by_tensor["q_ptr"]["load_bytes"] != 4 * programs * block_m * launch.constants["BLOCK_D"]


def test_check_grades_the_formula_against_the_learners_own_kernels(tiled, capsys):
    steps = [RawModule(path=kernel_path(cuda.STEPS[step].kernel_file), compile_now=None)
             for step in ("03.tiled_cuda", "04.double_buffer_cuda")]
    for kernel in (tiled, *steps):
        course.check("03.tiled_bytes", right_formula, kernel=kernel)
        assert "your formula agrees with your kernel's measured traffic" in capsys.readouterr().out


def test_the_measured_check_fails_when_formula_or_kernel_is_off(tiled):
    # A formula right on the check's own arguments but off at the measured size is caught by the measurement.
    def off_at_that_size(n_q, n_k, d, block_m, bytes_per_element):
        return right_formula(n_q, n_k, d, block_m, bytes_per_element) + (1 if n_k == MEASURED_SIZE["n_k"] else 0)
    with pytest.raises(CheckFailed, match=r"your formula gives .* but your kernel was measured to move"):
        check_measured("03.tiled_bytes", off_at_that_size, tiled)
    # A kernel reading K twice per tile does not move what the lesson counts, whatever the formula says.
    source = kernel_path("kernels/cuda/03_tiled.cu").read_text()
    twice = source.replace("v_tile[r * d + c] = in ? v[(size_t)key * d + c] : 0.0f;",
                           "v_tile[r * d + c] = in ? v[(size_t)key * d + c] + 0.0f * k[(size_t)key * d + c] : 0.0f;")
    assert twice != source
    with pytest.raises(CheckFailed, match=r"your kernel moved .* k 2\d,\d{3} B read.*lesson's count"):
        check_measured("03.tiled_bytes", right_formula, RawModule(code=twice, name="twice.cu", compile_now=None))
    with pytest.raises(CheckFailed, match="exists for 03.tiled_bytes only"):
        check_measured("01.naive_bytes_read", right_formula, tiled)
