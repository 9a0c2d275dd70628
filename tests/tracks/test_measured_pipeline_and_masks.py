"""Lesson 04's Triton pipeline, read off the compiled kernel, and lesson 06's "mask only the diagonal tiles",
measured on the interpreter (Triton) and on the CPU runtime (CUDA C) (course.grading.pipelining, course.grading.causal_masks).

The course's kernels pass; a kernel whose loop the compiler cannot pipeline, and one that runs every visited key
tile through the mask, have right numbers and fail with the sentence the learner reads. The wrong-answer corpora
(autograder/corpora/wrong/triton.py: single-stage, pointer-tile-loads, masks-every-tile; cuda.py:
masks-every-tile) hold more of them.
"""
from __future__ import annotations

import pytest

from autograder.corpora.wrong import apply_edits
from course import Case
from course.grading import causal_masks, causal_tiles, measuring, pipelining
from course.errors import CheckFailed
from course.kernels import kernel_path
from course.tracks import triton as triton_track

pytestmark = pytest.mark.cpu_tier("the mask measurement runs on the interpreter, which sees each select")


def _triton(exercise: str, tmp_path, edits=()):
    row = triton_track.step(exercise)
    if not edits:
        return triton_track.solution(row)
    path = tmp_path / kernel_path(row.kernel_file).name
    path.write_text(apply_edits(kernel_path(row.kernel_file).read_text(), edits, exercise))
    return triton_track.solution(row, str(path))


_WHILE = (("    for start_n in tl.range(0, N_CTX_K, BLOCK_N):\n",
           "    start_n = 0\n    while start_n < N_CTX_K:\n"),
          ("        m = m_new\n        # endregion: online_softmax_update\n",
           "        m = m_new\n        start_n += BLOCK_N\n        # endregion: online_softmax_update\n"))


def test_the_course_kernel_pipelines_and_a_while_loop_does_not(tmp_path):
    """Compiled for sm_90: the course's loop copies K and V with the TMA unit, ahead of their use (a prologue
    before the loop); the same body in a while loop loads and waits inside each iteration."""
    row = triton_track.step("04.double_buffer_triton")
    honest = pipelining._compiled_loops(str(kernel_path(row.kernel_file)), "04_double_buffer")
    (kernel,) = honest["kernels"]
    (loop,) = kernel["loops"]
    assert loop["kind"] == "scf.for" and len(loop["loads"]) == 2
    assert all(load["pipelined"] and load["op"] == "ttng.async_tma_copy_global_to_local" for load in loop["loads"])
    pipelining.pipelining_triton("04.double_buffer_triton", _triton("04.double_buffer_triton", None))

    lazy = _triton("04.double_buffer_triton", tmp_path, _WHILE)
    with pytest.raises(CheckFailed) as info:
        pipelining.pipelining_triton("04.double_buffer_triton", lazy)
    message = str(info.value)
    assert message.startswith(
        "04.double_buffer_triton: compiled for sm_90 (an H100) as a check launches it (float16, D = 64, 64 × 32 "
        "tiles, 4 warps, num_stages = 2), your kernel's key loop loads its tiles at line ")
    assert "(`k = k_desc.load([start_n, 0]).to(tl.float32)`)" in message
    assert "the loads were not software-pipelined" in message and "a while loop is never pipelined" in message
    assert message.endswith("hint: write the loop as `for start_n in tl.range(0, N_CTX_K, BLOCK_N):`.")


_MASK_EVERY_TILE = (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = 0"),)


def test_the_masked_tiles_of_each_program_are_read_off_its_selects(tmp_path):
    """Nq = Nk = 150, 64 × 32 tiles: the course's kernel masks only the tiles the diagonal crosses; the one with
    lo = 0 masks every tile it visits."""
    q, k, v = Case(150, 150, 16, causal=True, seed=61).tensors()
    found = {}
    for name, fn in (("course", _triton("06.causal_triton", None)),
                     ("lazy", _triton("06.causal_triton", tmp_path, _MASK_EVERY_TILE))):
        launches, fault = measuring.run_recorded(fn, (q, k, v), dict(causal=True), selects=True)
        assert fault is None
        found[name] = {program[0]: tiles for program, tiles in causal_masks.masked_tiles(launches[0]).items()}
    assert found["course"] == {0: {0, 1}, 1: {2, 3}, 2: {4}}
    assert found["lazy"] == {0: {0, 1}, 1: {0, 1, 2, 3}, 2: {0, 1, 2, 3, 4}}


def test_a_kernel_that_masks_every_visited_tile_is_told_which_tiles_needed_no_mask(tmp_path):
    causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", None))
    with pytest.raises(CheckFailed) as info:
        causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", tmp_path, _MASK_EVERY_TILE))
    assert str(info.value) == (
        "06.causal_triton: on Nq=150, Nk=150, D=16 (normal, causal, float32, seed=61), with 64 × 32 tiles, the "
        "program for query tile 1 (rows 64–127) masked 4 key tiles, of which only 2 cross the diagonal: key tiles "
        "0–1 (keys 0–63) are seen whole by every one of its rows (query i sees keys j <= i), yet went through the "
        "element-wise mask. The numbers are right, but on a GPU the mask costs BLOCK_M × BLOCK_N compares and "
        "selects per tile, between the two matrix products, on tiles that need none.\n"
        "  hint: split the key axis in two stages: [0, lo) unmasked (MASKED=False), [lo, hi) masked, with lo the "
        "first key the block's first row cannot see (start_m + Nk − Nq + 1), rounded down to a multiple of BLOCK_N.")


def test_the_lazy_triton_kernels_have_right_numbers_and_fail_only_their_measurement(tmp_path, monkeypatch):
    """With the measurements switched off, the exercises' own checks pass both lazy kernels: only the measurement
    can tell them from the honest ones."""
    import course
    (tmp_path / "04").mkdir()
    single_stage = _triton("04.double_buffer_triton", tmp_path / "04",
                           (("for start_n in tl.range(0, N_CTX_K, BLOCK_N):",
                             "for start_n in tl.range(0, N_CTX_K, BLOCK_N, num_stages=1):"),))
    masks_every_tile = _triton("06.causal_triton", tmp_path, _MASK_EVERY_TILE)
    with pytest.raises(CheckFailed, match="not software-pipelined"):
        course.check("04.double_buffer_triton", single_stage)
    with pytest.raises(CheckFailed, match="of which only 2 cross the diagonal"):
        course.check("06.causal_triton", masks_every_tile)
    monkeypatch.setattr(pipelining, "pipelining_triton", lambda exercise, fn: None)
    monkeypatch.setattr(causal_masks, "mask_problem", lambda exercise, case, launch, wrong_rows=(): None)
    course.check("04.double_buffer_triton", single_stage)
    course.check("06.causal_triton", masks_every_tile)


def test_a_cuda_kernel_that_masks_every_visited_tile_has_right_numbers_and_fails_its_measurement():
    from dataclasses import replace

    from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
    from course.simt import RawModule
    causal_masks.diagonal_masks_simt("06.causal_cuda", RawModule(path=kernel_path("kernels/cuda/06_causal.cu")))
    assert causal_masks.masked_tiles_simt("06.causal_cuda", RawModule(path=kernel_path("kernels/cuda/06_causal.cu"))) == {
        0: {0, 1}, 1: {2, 3}}
    wrong = next(w for w in WRONG_CUDA_KERNELS if w.id == "06.causal_cuda:masks-every-tile")
    replace(wrong, measured=False).grade()  # right numbers, no race, nothing out of bounds
    assert causal_masks.masked_tiles_simt("06.causal_cuda", wrong.module()) == {0: {0, 1}, 1: {0, 1, 2, 3}}
    with pytest.raises(CheckFailed) as info:
        causal_masks.diagonal_masks_simt("06.causal_cuda", wrong.module())
    assert str(info.value) == (
        "06.causal_cuda: on Nq=64, Nk=64, D=16 (causal, float16; Q = K = 0 and V marking each key's tile), with "
        "32 × 16 tiles, the block for query rows 32–63 masked 4 key tiles, of which only 2 cross the diagonal: key "
        "tiles 0–1 (keys 0–31) are seen whole by every one of its rows (query i sees keys j <= i), yet went through "
        "the element-wise mask. The numbers are right, but every row pays for the mask on tiles that need none "
        "(measured by running your softmax with the mask's offset moved a million keys back after the given "
        "`diagonal` flag: a masked tile then keeps no key).\n"
        "  hint: apply `j <= i + offset` only when `diagonal` is true: on the other tiles every column c < keys is "
        "visible.")
