"""The interpreter's memcheck (course.grading.racecheck): accesses outside every tensor argument stop before they run,
masked-off lanes and descriptor padding raise nothing, and an output with elements no store reached is named.

Out-of-bounds accesses go to views of a larger buffer, so that with the check switched off they land in memory
this test owns instead of corrupting the heap."""
from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

import course
from course import Case
from course.grading.compare_attention import check_attention
from course.errors import CheckFailed
from course.grading.racecheck import OutOfBounds, Unwritten, Written, interpreter_checks

pytestmark = pytest.mark.skipif(not course.tiers.triton_interpreted(),
                                reason="the memcheck watches Triton's interpreter")


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) + SHIFT
    if MASKED:
        x = tl.load(x_ptr + offs, mask=(offs >= 0) & (offs < n), other=0.0)
    else:
        x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs - SHIFT, x, mask=offs - SHIFT < n)


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], 1.0, tl.float32))


@triton.jit
def count_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs, tl.full([BLOCK], 1.0, tl.float32))


@triton.jit
def rows_kernel(x_ptr, out_ptr, n_cols, LAST_COL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols - 1 if LAST_COL == 0 else cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * 2.0, mask=keep)


@triton.jit
def descriptor_kernel(x_ptr, out_ptr, n_rows, BLOCK_M: tl.constexpr, D: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[n_rows, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    start = tl.program_id(0) * BLOCK_M
    o_desc.store([start, 0], x_desc.load([start, 0]) + 1.0)


def _views(n: int = 10, room: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (n elements) and out (n zeros), each a view of its own larger buffer; and out's buffer."""
    x = torch.arange(room, dtype=torch.float32)
    out = torch.zeros(room)
    return x[room // 2: room // 2 + n], out[room // 2: room // 2 + n], out


def test_an_unmasked_tail_load_stops_before_it_reads():
    x, out, _ = _views()
    with pytest.raises(OutOfBounds) as info, interpreter_checks():
        copy_kernel[(1,)](x, out, 10, SHIFT=0, MASKED=False, BLOCK=16)
    message = str(info.value)
    assert info.value.access == "load"
    assert "out-of-bounds load in copy_kernel, program (0, 0, 0)" in message
    assert "`x = tl.load(x_ptr + offs)`" in message
    assert "it reads element 10 of `x_ptr`, past its end: `x_ptr` has 10 elements (shape 10)" in message
    assert "6 of the 16 addresses it reads lie outside it" in message and "mask=offs < n" in message
    assert not out.any(), "the check stops the launch before the store"


def test_a_negative_offset_is_before_the_start():
    x, out, _ = _views()
    with pytest.raises(OutOfBounds, match=r"it reads element -3 of `x_ptr`, before its start"), interpreter_checks():
        copy_kernel[(1,)](x, out, 10, SHIFT=-3, MASKED=False, BLOCK=16)


def test_masked_loads_with_other_pass_on_the_same_sizes():
    for shift in (0, -3):
        x, out, _ = _views()
        with interpreter_checks():
            copy_kernel[(1,)](x, out, 10, SHIFT=shift, MASKED=True, BLOCK=16)
        want = torch.where((torch.arange(10) + shift >= 0), x[(torch.arange(10) + shift).clamp(min=0)], 0.0)
        assert torch.equal(out, want)


def test_a_store_past_the_end_is_named():
    _, out, buffer = _views()
    with pytest.raises(OutOfBounds) as info, interpreter_checks():
        fill_kernel[(1,)](out, 10, BLOCK=16)
    message = str(info.value)
    assert info.value.access == "store" and "out-of-bounds store in fill_kernel" in message
    assert "`tl.store(out_ptr + offs, tl.full([BLOCK], 1.0, tl.float32))`" in message
    assert "it writes element 10 of `out_ptr`, past its end" in message and "Mask the store" in message
    assert not buffer.any(), "nothing was written, inside the view or past it"


def test_an_atomic_past_the_end_is_named():
    _, out, buffer = _views()
    with pytest.raises(OutOfBounds, match=r"out-of-bounds atomic in count_kernel(.|\n)*tl.atomic_add\(out_ptr"
                       r"(.|\n)*it updates element 10 of `out_ptr`, past its end") as info, interpreter_checks():
        count_kernel[(1,)](out, 10, BLOCK=16)
    assert info.value.access == "atomic" and not buffer.any()


def test_descriptor_loads_and_stores_pad_instead_of_raising():
    x = torch.randn(10, 16)
    out = torch.zeros(10, 16)
    written = Written()
    with interpreter_checks(written):
        descriptor_kernel[(2,)](x, out, 10, BLOCK_M=8, D=16)
    assert torch.equal(out, x + 1.0)
    written.require({"out": out})


def test_an_element_no_store_reached_is_named():
    x = torch.randn(4, 10)
    for grid, last_col, missing in (((4,), 0, "element [0, 9] of the output `out` (4 of 40 elements)"),
                                    ((3,), 1, "element [3, 0] of the output `out` (10 of 40 elements)")):
        out = torch.zeros(4, 10)
        written = Written()
        with interpreter_checks(written):
            rows_kernel[grid](x, out, 10, LAST_COL=last_col, BLOCK=16)
        with pytest.raises(Unwritten, match="your kernel never wrote " + re.escape(missing)):
            written.require({"out": out})
        written.require({"out": out.clone()})  # a tensor PyTorch made after the launch is not the kernel's to fill

    out = torch.zeros(4, 10)
    written = Written()
    with interpreter_checks(written):
        rows_kernel[(4,)](x, out, 10, LAST_COL=1, BLOCK=16)
    written.require({"out": out, "out_rows": out[1:], "out_t": out.t()})


def _lesson_01(tmp_path, *edits: tuple[str, str]):
    """The lesson-01 kernel with the edits made, as the corpus of wrong kernels builds its entries."""
    from autograder.corpora.wrong import apply_edits
    from course.kernels import kernel_path, load_triton_module
    path = tmp_path / "naive.py"
    path.write_text(apply_edits(kernel_path("triton/01_naive").read_text(), edits, "test"))
    return load_triton_module(str(path)).naive_attention


def test_lesson_01_without_key_masks_fails_on_every_case_with_a_tail(tmp_path):
    unmasked = _lesson_01(tmp_path, ("mask=key_ok[:, None] & in_row[None, :], other=0.0)", ")"),
                          ("mask=tile, other=0.0)", ")"))  # pass 1's k load, pass 2's k and v loads
    for case in (Case(1, 1, 16), Case(17, 40, 32, seed=1), Case(5, 33, 64, kind="peaky", seed=2)):
        with pytest.raises(CheckFailed) as info:
            course.check("01.naive_triton", unmasked, cases=[case])
        message = str(info.value)
        assert f"01.naive_triton: an out-of-bounds load on {case.describe()}:" in message, message
        assert "in naive_attention_kernel" in message and "`k = tl.load(k_ptr + keys[:, None] * stride_k" in message
        assert f"element {case.n_k * case.d} of `k_ptr`, past its end" in message, message
    # A whole number of key blocks leaves nothing past the end to read: the unmasked loads are then fine.
    check_attention("01.naive_triton", unmasked, [Case(3, 64, 32, seed=3)], race=True)


def test_lesson_01_with_a_program_missing_fails_on_the_unwritten_row(tmp_path):
    short = _lesson_01(tmp_path, ("naive_attention_kernel[(n_q,)](", "naive_attention_kernel[(max(n_q - 1, 1),)]("))
    with pytest.raises(CheckFailed, match=r"01.naive_triton: part of the output is never written on Nq=17, Nk=20(.|\n)*"
                       r"never wrote element \[16, 0\] of the output `o` \(16 of 272 elements\)"):
        check_attention("01.naive_triton", short, [Case(17, 20, 16, seed=4)], race=True)


def test_a_tail_that_runs_into_the_next_argument_is_out_of_bounds():
    buffer = torch.arange(32, dtype=torch.float32)
    x, out = buffer[:10], buffer[10:20]  # out starts where x ends: the tail of x's load would read out
    with pytest.raises(OutOfBounds, match=r"it reads element 10 of `x_ptr`, past its end: `x_ptr` has 10 elements "
                       r"\(shape 10\) \(that address is element 0 of `out_ptr`, another argument\); 6 of the 16"), \
            interpreter_checks():
        copy_kernel[(1,)](x, out, 10, SHIFT=0, MASKED=False, BLOCK=16)
