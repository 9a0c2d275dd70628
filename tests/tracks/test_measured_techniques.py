"""Techniques graded by measurement (course.grading.techniques): a right answer that skips the lesson's technique fails.

The course's own kernels pass every measurement; kernels with the right numbers and the technique missing
(a causal loop over every key tile, a product off tl.dot, atomics in the split backward) fail with a
sentence that names what was measured. The wrong-answer corpora hold more of them; these tests pin the
measurements themselves: what they read off a launch, the GPU tier's interpreted copy, the messages.
"""
from __future__ import annotations

import pickle
import re

import pytest
import torch

from autograder.corpora.wrong import apply_edits
from course import Case
from course.grading import causal_tiles, matrix_units, measuring, pipelining, techniques
from course.errors import CheckFailed, CourseError
from course.kernels import kernel_path
from course.grading.racecheck import OutOfBounds, interpreter_checks
from course.simt import RawModule
from course.tracks import table
from course.tracks import triton as triton_track

pytestmark = pytest.mark.cpu_tier("measurements run on the interpreter and the CPU runtime, which see single loads")


def _triton(exercise: str, tmp_path, edits=()):
    """The course's answer to ``exercise``, from its kernel file with ``edits`` made (in tmp_path)."""
    row = triton_track.step(exercise)
    if not edits:
        return triton_track.solution(row)
    source = kernel_path(row.kernel_file).read_text()
    path = tmp_path / kernel_path(row.kernel_file).name
    path.write_text(apply_edits(source, edits, exercise))
    return triton_track.solution(row, str(path))


LAZY_06 = (("hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)", "hi = n_k"),
           ("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = 0"))


def test_the_course_kernels_pass_every_measurement():
    causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", None))
    matrix_units.matrix_units_triton("05.mma_triton", _triton("05.mma_triton", None))
    causal_tiles.backward_tiles_triton("07.backward_atomic_triton", _triton("07.backward_atomic_triton", None), split=False)
    causal_tiles.backward_tiles_triton("07.backward_split_triton", _triton("07.backward_split_triton", None), split=True)
    causal_tiles.causal_tiles_simt("06.causal_cuda", RawModule(path=kernel_path("kernels/cuda/06_causal.cu")))
    causal_tiles.causal_tiles_simt("05.mma_metal", RawModule(path=kernel_path("kernels/metal/05_mma.metal")))
    causal_tiles.causal_tiles_simt("07.backward_split_cuda", RawModule(path=kernel_path("kernels/cuda/07_backward_split.cu")))
    causal_tiles.causal_tiles_simt("07.backward_split_metal",
                               RawModule(path=kernel_path("kernels/metal/07_backward_split.metal")))


def test_a_kernel_that_visits_every_tile_is_told_which_tiles_it_should_have_skipped(tmp_path):
    with pytest.raises(CheckFailed) as info:
        causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", tmp_path, LAZY_06))
    assert str(info.value) == (
        "06.causal_triton: on Nq=150, Nk=150, D=16 (normal, causal, float32, seed=61), with 64 × 32 tiles, the "
        "program for query rows 0–63 loaded key tiles 2–4 (keys 64–149), which lie wholly in the future: none of "
        "its rows sees any of their keys (query i sees keys j <= i). The loop's upper bound should stop at the "
        "diagonal, after key 63, the last one its last row sees.")


def test_the_measurement_reads_the_tiles_each_program_loaded(tmp_path):
    """What the sentence is built from: per program, the key rows its loads read (here every program reads
    every key, so every row of K shows up in every program)."""
    fn = _triton("06.causal_triton", tmp_path, LAZY_06)
    q, k, v = Case(100, 70, 16, causal=True).tensors()
    launches: list = []
    with interpreter_checks(launches=launches):
        fn(q, k, v, causal=True)
    (launch,) = launches
    rows = measuring.rows_loaded(launch, "k_ptr")
    assert sorted(rows) == [(0, 0, 0), (1, 0, 0)] and all(found == set(range(70)) for found in rows.values())
    visits = causal_tiles._visits(launch, "query", "k_ptr")
    assert (visits.block_m, visits.block_n) == (64, 32) and visits.loaded == {0: {0, 1, 2}, 1: {0, 1, 2}}
    # The honest kernel: program 0 (rows 0-63 see keys up to 33) stops after tile 1.
    launches.clear()
    with interpreter_checks(launches=launches):
        _triton("06.causal_triton", None)(q, k, v, causal=True)
    assert causal_tiles._visits(launches[0], "query", "k_ptr").loaded == {0: {0, 1}, 1: {0, 1, 2}}


def test_on_the_gpu_tier_the_measurement_runs_an_interpreted_copy(tmp_path, monkeypatch):
    """A GPU machine compiles kernels for the GPU; the measurement loads the module again for the interpreter."""
    from course import tiers
    lazy = _triton("06.causal_triton", tmp_path, LAZY_06)
    monkeypatch.setattr(tiers, "triton_interpreted", lambda: False)
    copy = measuring.interpreted(lazy)
    assert copy is not lazy and copy.__module__.startswith("course_interpreted.")
    with pytest.raises(CheckFailed, match="wholly in the future"):
        causal_tiles.causal_tiles_triton("06.causal_triton", lazy)
    causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", None))


def test_a_bound_past_the_end_is_a_loop_bound_not_a_missing_mask(tmp_path):
    edits = (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = hi"),)
    with pytest.raises(CheckFailed) as info:
        causal_tiles.causal_tiles_triton("06.causal_triton", _triton("06.causal_triton", tmp_path, edits))
    message = str(info.value)
    assert "the program for query rows 128–149 loaded keys 150–159 of K, past its end (Nk = 150)" in message
    assert "Masking that load is not the fix" in message and "Mask the load" not in message


def test_out_of_bounds_says_where_it_went_and_survives_a_child_process(tmp_path):
    fn = _triton("06.causal_triton", tmp_path, (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N",
                                                 "lo = hi"),))
    q, k, v = Case(150, 150, 16, causal=True).tensors()
    with pytest.raises(OutOfBounds) as info, interpreter_checks():
        fn(q, k, v, causal=True)
    copy = pickle.loads(pickle.dumps(info.value))
    for exc in (info.value, copy):
        assert (exc.access, exc.argument, exc.program[0], exc.shape) == ("load", "k_ptr", 2, (1, 1, 150, 16))
        assert min(exc.elements) // 16 == 150 and "tl.load" in exc.source and str(exc) == str(info.value)


def test_a_product_off_tl_dot_is_caught_where_it_compiles(tmp_path):
    """S as a broadcast product and a sum: it only compiles for small tiles (the compile gate refuses it at the
    check's 128 × 64 × 64), so the measurement is asked directly, on the interpreter."""
    fn = _triton("05.mma_triton", tmp_path, (("s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale",
                                              "s = tl.sum(q[:, :, None] * kT[None, :, :], axis=1) * qk_scale"),))
    with pytest.raises(CheckFailed) as info:
        matrix_units.matrix_units_triton("05.mma_triton", fn)
    assert re.search(r"query rows 0–39 loaded 2 key tiles but made 0 tl\.dot calls for S = Q Kᵀ", str(info.value))


def test_the_interpreter_records_every_tl_dot():
    fn = _triton("05.mma_triton", None)
    q, k, v = Case(40, 72, 16, dtype=torch.float16).tensors()
    launches: list = []
    with interpreter_checks(launches=launches):
        fn(q, k, v)
    shapes = sorted({(a, b, da, db) for _, _, a, b, da, db in launches[0].dots})
    assert shapes == [((128, 16), (16, 64), "fp16", "fp16"), ((128, 64), (64, 16), "fp16", "fp16")]
    assert len(launches[0].dots) == 4  # two key tiles, two products each


def test_a_cuda_kernel_that_loads_future_tiles_is_named_by_its_bytes():
    source = kernel_path("kernels/cuda/06_causal.cu").read_text()
    lazy = source.replace("    if (causal) kv_end = max(0, min(n_k, row0 + block_m + offset));\n", "")
    assert lazy != source
    with pytest.raises(CheckFailed) as info:
        causal_tiles.causal_tiles_simt("06.causal_cuda", RawModule(code=lazy, name="06_causal.cu"))
    assert "loaded 4,096 bytes of K where the key tiles its blocks see hold 3,072: the block for query rows 0–31 " \
           "loaded key tiles 2–3 (keys 32–63)" in str(info.value)


def _pipeline_entries():
    from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
    from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
    return [w for w in WRONG_CUDA_KERNELS + WRONG_METAL_KERNELS if w.exercise in measuring.step_probes("double_buffer") and w.measured]


def test_the_course_double_buffer_kernels_pass_the_pipeline_measurement():
    for exercise, path in (("04.double_buffer_cuda", "kernels/cuda/04_double_buffer.cu"),
                           ("04.double_buffer_metal", "kernels/metal/04_double_buffer.metal")):
        pipelining.double_buffer_simt(exercise, RawModule(path=kernel_path(path)))


@pytest.mark.parametrize("wrong", _pipeline_entries(), ids=lambda w: w.id)
def test_a_single_buffered_or_scalar_load_kernel_has_right_numbers_and_fails_only_its_measurement(wrong):
    """Lesson 04's lazy kernels (one buffer and two barriers a tile; K and V read a float at a time) pass the step's
    value, race and bounds checks, so only the measurement of barriers and load widths can catch them."""
    from dataclasses import replace
    replace(wrong, measured=False).grade()  # right numbers, no race, nothing out of bounds
    with pytest.raises(CheckFailed, match=wrong.expect):
        pipelining.double_buffer_simt(wrong.exercise, wrong.module())


def test_simt_probes_tell_the_schedules_apart():
    """Every forward probe has one block with tiles to skip; no probe's unbounded loop loads as many bytes as the
    right one, and a top-left bound differs on at least one probe of each exercise."""
    for exercise, probe in measuring.step_probes("causal_tiles").items():
        top_left_seen = False
        for case in probe.cases:
            schedules = causal_tiles._schedules(case.n_q, case.n_k, probe.block_m, probe.block_n)
            right = schedules["bottom_right"]
            skipping = sum(len(t) < -(-case.n_k // probe.block_n) for t in right.values())
            assert skipping == 1 if not probe.kernel else skipping >= 1, (exercise, case)
            sizes = {name: sum(len(t) for t in s.values()) for name, s in schedules.items()}
            assert sizes["every"] != sizes["bottom_right"]
            top_left_seen |= schedules["top_left"] != right
        assert top_left_seen, exercise


def test_a_dtype_mismatch_in_tl_dot_is_explained_as_one(tmp_path):
    import course
    fn = _triton("05.mma_triton", tmp_path, (("acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)",
                                              "acc = tl.dot(p, v, acc, input_precision=DOT_PRECISION)"),))
    with pytest.raises(CheckFailed) as info:
        course.check("05.mma_triton", fn)
    message = str(info.value)
    assert "rejects your kernel" in message and "they are fp32 and fp16" in message and "p.to(v.dtype)" in message
    assert "PyTorch" not in message


def test_the_measurement_runs_under_the_gpus_device_rules(tmp_path):
    """The tests emulate a GPU machine's device rules on the CPU tier; a measurement's own tensors follow them, so
    it still measures there (a launch refused for a CPU tensor would leave the lazy kernel unmeasured)."""
    from course.device_guard import gpu_device_rules
    lazy = _triton("06.causal_triton", tmp_path, LAZY_06)
    with gpu_device_rules(), pytest.raises(CheckFailed, match="wholly in the future"):
        causal_tiles.causal_tiles_triton("06.causal_triton", lazy)
    split_to_the_end = _triton("07.backward_split_triton", tmp_path, (
        ("end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)", "end_n = n_k"),))
    with gpu_device_rules(), pytest.raises(CheckFailed, match="wholly in the future"):
        causal_tiles.backward_tiles_triton("07.backward_split_triton", split_to_the_end, split=True)


def test_every_declared_probe_names_a_measurement_of_its_track():
    """The steps declare their probes on their rows (simt_probes, technique_probe); each names a measurement that
    exists, for a track that has it, and a name that is none is a sentence."""
    declared = 0
    for row in table.KERNEL_EXERCISES:
        for probe in row.simt_probes:
            assert row.track in ("cuda", "metal"), row.id
            assert techniques.simt_probe(probe.technique) is not None
            assert measuring.step_probe(row.id, probe.technique).cases, row.id
            declared += 1
        if row.technique_probe:
            assert row.track == "triton", row.id
            assert techniques.triton_probe(row.technique_probe) is not None
    assert declared == 9
    with pytest.raises(CourseError, match="no technique 'tiles'"):
        techniques.simt_probe("tiles")
    with pytest.raises(CourseError, match="03.tiled_cuda declares no causal_tiles probe"):
        measuring.step_probe("03.tiled_cuda", "causal_tiles")
