"""The CUDA C forward ladder (kernels/cuda/02-06), graded on the CPU SIMT runtime.

Every step matches the float64 oracle within the error budget (O, and LSE where the step writes it)
on lengths that are no multiple of any tile, head dims from 16 to 128, Nq != Nk both ways, causal and
not for step 06: under memcheck + racecheck with a random schedule (small cases, small tiles) and in
plain launches (larger cases, default and other tiles). The launcher refuses what a kernel cannot do
with a sentence, a launch that disagrees with the kernel about shared memory is caught, and every
wrong kernel of the corpus fails for its own reason.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch

import course
from autograder.corpora.wrong import hint_problem
from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
from course import Case
from course.tracks import cuda as cuda_track
from course.grading import kernel_steps
from course.grading.compare_attention import check_attention
from course.errors import CheckFailed, CourseError
from course.kernels import read_region, read_source
from course.simt import RawModule
from course.tools.bench_cuda import validation_cases
from course.tracks.cuda import STEPS, Tiles

LADDER = ["02.online_softmax_cuda", "03.tiled_cuda", "04.double_buffer_cuda", "05.mma_cuda", "06.causal_cuda"]


@pytest.fixture(scope="module")
def modules():
    """``modules(exercise)``: each step's module, built on first use and shared by this file's tests."""
    return functools.cache(cuda_track.module_for)


def options(exercise: str) -> dict:
    step = STEPS[exercise]
    return dict(with_lse=step.writes_lse, pass_causal=step.causal)


# ------------------------------------------------------------------------------------------------
# Every step against the oracle
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise", LADDER)
def test_step_passes_the_grading_check(exercise, modules):
    """Checked launches (memcheck + racecheck, random schedule) on small cases, plain ones on larger."""
    report = kernel_steps.check_step(exercise, modules(exercise))
    checked, plain = kernel_steps.grading_cases(exercise)
    assert report.cases == len(checked) + len(plain) and report.worst_ratio < 1
    lengths = {n for c in checked + plain for n in (c.n_q, c.n_k)}
    assert {1, 17, 65, 129} <= lengths
    assert {16, 32, 64, 128} <= {c.d for c in checked + plain}
    assert any(c.d & (c.d - 1) for c in checked + plain), "a head dim that is not a power of two"
    assert any(c.n_q > c.n_k for c in checked) and any(c.n_q < c.n_k for c in checked)
    if STEPS[exercise].causal:
        assert any(c.causal and c.n_q > c.n_k for c in checked), "rows that see no key (LSE = -inf)"


# Tile sizes other than the defaults and the grading ones: every tile-size-dependent index is exercised.
OTHER_TILES = {
    "02.online_softmax_cuda": [Tiles(1), Tiles(8)],
    "03.tiled_cuda": [Tiles(1, 64), Tiles(8, 96)],
    "04.double_buffer_cuda": [Tiles(2, 64), Tiles(8, 96)],
    "05.mma_cuda": [Tiles(16, 32), Tiles(48, 48)],
    "06.causal_cuda": [Tiles(16, 48), Tiles(64, 16)],
}


@pytest.mark.parametrize("exercise", LADDER)
def test_step_passes_with_other_tile_sizes(exercise, modules):
    # 100 keys or queries span two tiles of 96 (the last one partial); 65 spans two of 64.
    cases = validation_cases(exercise, lengths=((65, 100), (100, 65)), seed=11)
    for tiles in OTHER_TILES[exercise]:
        fn = cuda_track.attention_function(modules(exercise), exercise, tiles)
        report = check_attention(exercise, fn, cases, **options(exercise))
        assert report.worst_ratio < 1, tiles


@pytest.mark.parametrize("exercise", ["03.tiled_cuda", "06.causal_cuda"])
def test_heads_run_in_grid_y_and_an_explicit_scale_is_used(exercise, modules):
    step = STEPS[exercise]
    dt = torch.float16 if step.half_inputs else torch.float32
    cases = [Case(19, 37, 32, dtype=dt, batch=(2, 3), seed=13, causal=step.causal)]
    fn = cuda_track.attention_function(modules(exercise), exercise)
    check_attention(exercise, fn, cases, scale=0.3, pass_scale=True, **options(exercise))


def test_outputs_come_back_in_the_inputs_dtype(modules):
    q, k, v = course.make_qkv(20, 32, n_k=24, seed=14)
    o, lse = cuda_track.forward("05.mma_cuda", modules("05.mma_cuda"), q.half(), k.half(), v.half())
    assert o.dtype == torch.float16 and lse.dtype == torch.float32 and lse.shape == (20,)
    o32, _ = cuda_track.forward("05.mma_cuda", modules("05.mma_cuda"), q, k, v)  # converted to half inside
    assert o32.dtype == torch.float32 and torch.allclose(o32, o.float(), atol=2e-3)
    assert cuda_track.forward("02.online_softmax_cuda", modules("02.online_softmax_cuda"), q.double(), k, v).dtype == torch.float64


def test_the_step_is_found_from_the_kernel_name(modules):
    for exercise in LADDER:
        assert cuda_track.step_for_module(modules(exercise)) == exercise
    q, k, v = course.make_qkv(5, 16, seed=15)
    assert isinstance(cuda_track.attention_function(modules("02.online_softmax_cuda"))(q, k, v), torch.Tensor)
    o, lse = cuda_track.attention_function(modules("03.tiled_cuda"))(q, k, v)
    assert o.shape == (5, 16) and lse.shape == (5,)
    other = RawModule(code='extern "C" __global__ void mystery(float *x) { x[0] = 1.0f; }')
    with pytest.raises(CourseError, match="cannot tell which step"):
        cuda_track.step_for_module(other)
    with pytest.raises(CourseError, match="no kernel named `naive_attention`"):  # lesson 01's launcher, as before
        cuda_track.attention_function(other)(q, k, v)


def test_causal_zero_is_step_05(modules):
    q, k, v = course.make_qkv(40, 32, n_k=70, seed=16, dtype=torch.float16)
    o5, lse5 = cuda_track.forward("05.mma_cuda", modules("05.mma_cuda"), q, k, v)
    o6, lse6 = cuda_track.forward("06.causal_cuda", modules("06.causal_cuda"), q, k, v, causal=False)
    assert torch.equal(o5, o6) and torch.equal(lse5, lse6)


# ------------------------------------------------------------------------------------------------
# The launcher: refusals with a sentence, and one place for the geometry
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise, d, words", [
    ("02.online_softmax_cuda", 160, "D = 160 is too large"),
    ("04.double_buffer_cuda", 18, "multiple of 4, because it moves rows as float4"),
    ("05.mma_cuda", 24, "multiple of 16, because tensor cores multiply 16 x 16 x 16 tiles"),
    ("06.causal_cuda", 8, "multiple of 16"),
])
def test_head_dims_a_kernel_cannot_take_are_refused(exercise, d, words, modules):
    q, k, v = course.make_qkv(4, d, seed=0)
    with pytest.raises(CourseError, match=re.escape(words)):
        cuda_track.forward(exercise, modules(exercise), q, k, v)


@pytest.mark.parametrize("exercise, tiles, words", [
    ("03.tiled_cuda", Tiles(16, 512), "needs 534,528 bytes of shared memory per block, more than the 232,448 bytes"),
    ("04.double_buffer_cuda", Tiles(8, 128), "more than the 232,448 bytes (227 KiB) a block may have: use smaller"),
    ("05.mma_cuda", Tiles(512, 128), "more than the 232,448 bytes"),
    ("02.online_softmax_cuda", Tiles(33), "1 to 32 rows per block"),
    ("03.tiled_cuda", Tiles(4, 48), "positive multiple of 32"),
    ("05.mma_cuda", Tiles(24, 16), "multiple of 16 from 16 to 512"),
    ("06.causal_cuda", Tiles(16, 40), "block_n must be a positive multiple of 16"),
])
def test_tiles_a_block_cannot_have_are_refused(exercise, tiles, words):
    with pytest.raises(CourseError, match=re.escape(words)):
        cuda_track.forward_config(exercise, 128, 128, 128, tiles=tiles)


def test_the_shared_memory_limit_is_the_devices():
    assert cuda_track.SHARED_MEMORY_LIMIT == course.simt.kernel.MAX_DYNAMIC_SHARED["cuda"] == 227 * 1024
    cfg = cuda_track.forward_config("03.tiled_cuda", 100, 50, 64, heads=3, tiles=Tiles(16, 64))
    assert cfg.grid == (7, 3) and cfg.block == (512,)
    assert cfg.shared_mem == 4 * (16 * 64 + 64 * 65 + 64 * 64)
    assert cuda_track.check_shared_memory(1000, "x") == 1000
    with pytest.raises(CourseError, match="x needs 300,000 bytes"):
        cuda_track.check_shared_memory(300_000, "x")


def test_causal_is_refused_by_a_step_without_a_mask(modules):
    q, k, v = course.make_qkv(4, 16, seed=0)
    with pytest.raises(CourseError, match="has no causal mask"):
        cuda_track.forward("03.tiled_cuda", modules("03.tiled_cuda"), q, k, v, causal=True)


@pytest.mark.parametrize("exercise", ["03.tiled_cuda", "05.mma_cuda"])
def test_a_launch_with_too_little_shared_memory_is_caught(exercise, modules):
    """The kernel carves shared memory from the tile sizes; a launch sized for other tiles overruns it."""
    module = modules(exercise)
    q, k, v = course.make_qkv(17, 32, n_k=40, seed=17)

    def short_by_one_row(name, grid, block, args, shared_mem):
        module.get_function(name)(grid, block, args, shared_mem=shared_mem - 64, check="memcheck")

    with pytest.raises(CourseError, match="out-of-bounds (read|write) of shared memory `smem`"):
        cuda_track.forward(exercise, None, q, k, v, tiles=kernel_steps.GRADING_TILES[exercise],
                           runner=short_by_one_row)


def test_a_wmma_block_of_partial_warps_is_caught(modules):
    module = modules("05.mma_cuda")
    q, k, v = course.make_qkv(16, 16, seed=18)

    def ragged_block(name, grid, block, args, shared_mem):
        module.get_function(name)(grid, (block[0] - 8,), args, shared_mem=shared_mem)

    with pytest.raises(CourseError, match="need all 32 lanes"):
        cuda_track.forward("05.mma_cuda", None, q, k, v, tiles=Tiles(32, 16), runner=ragged_block)


# ------------------------------------------------------------------------------------------------
# The kernel files and the wrong-kernel corpus
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise", LADDER)
def test_kernel_files_teach_and_mark_the_solution(exercise):
    path = STEPS[exercise].kernel_file
    text = read_source(path)
    number = exercise[:2]
    assert text.startswith(f"// Step {number} · ") and f"What changed from {int(number) - 1:02d}" in text
    assert text.count("// BEGIN SOLUTION") == text.count("// END SOLUTION") >= 1
    regions = re.findall(r"// region: (\w+)", text)
    assert regions and all(read_region(path, name).strip() for name in regions)


def test_the_corpus_covers_every_step_and_every_kind_of_mistake():
    by_step = {e: [w for w in WRONG_CUDA_KERNELS if w.exercise == e] for e in LADDER}
    assert all(len(entries) >= 3 for entries in by_step.values()), {e: len(w) for e, w in by_step.items()}
    expects = " ".join(w.expect for w in WRONG_CUDA_KERNELS)
    for kind in ("data race", "misaligned", "out-of-bounds", "NaN", "wrong LSE"):
        assert kind in expects
    assert len({w.id for w in WRONG_CUDA_KERNELS}) == len(WRONG_CUDA_KERNELS)


@pytest.mark.parametrize("wrong", WRONG_CUDA_KERNELS, ids=lambda w: w.id)
def test_every_wrong_kernel_fails_for_its_reason(wrong):
    with pytest.raises(CheckFailed) as failure:
        wrong.grade()
    assert re.search(wrong.expect, str(failure.value)), str(failure.value)
    problem = hint_problem(wrong.hint, str(failure.value))  # its hint line as declared (None: no hint line)
    assert problem is None, problem


# ------------------------------------------------------------------------------------------------
# The benchmark without a GPU
# ------------------------------------------------------------------------------------------------

def test_the_benchmark_validates_on_the_cpu_and_says_there_is_no_gpu(monkeypatch, capsys):
    from course.tools import bench_cuda as cuda_bench

    monkeypatch.setattr(cuda_bench, "gpu_status", lambda: (False, "no CUDA GPU in this test"))
    assert cuda_bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    sentence = [line for line in out.splitlines() if "no CUDA GPU in this test" in line]
    assert len(sentence) == 1 and sentence[0].count(". ") == 0
    for exercise in LADDER:
        assert re.search(rf"✓ {re.escape(exercise)} .*block_m", out), exercise


def test_the_benchmark_reports_a_step_that_fails_validation_and_goes_on(monkeypatch, capsys, tmp_path):
    from course.tools import bench_cuda as cuda_bench

    wrong = next(w for w in WRONG_CUDA_KERNELS if w.id == "03.tiled_cuda:missing-rescale")
    broken = RawModule(code=wrong.source(), name="03_tiled.cu")
    real = cuda_bench.module_for
    monkeypatch.setattr(cuda_bench, "module_for", lambda ex: broken if ex == "03.tiled_cuda" else real(ex))
    monkeypatch.setattr(cuda_bench, "gpu_status", lambda: (True, "pretend"))
    on_gpu, timed = [], {}
    monkeypatch.setattr(cuda_bench, "validate_gpu", lambda steps, **kw: on_gpu.extend(steps) or {
        "04.double_buffer_cuda": "failed on the GPU: pretend"})
    monkeypatch.setattr(cuda_bench, "time_gpu", lambda shapes, quick, reps, **kw: timed.update(kw) or [])
    monkeypatch.setattr(cuda_bench.torch.cuda, "get_device_name", lambda *a: "pretend GPU")
    steps = "02.online_softmax_cuda,03.tiled_cuda,04.double_buffer_cuda"
    assert cuda_bench.main(["--quick", "--steps", steps, "--out", str(tmp_path / "table.md")]) == 1
    out = capsys.readouterr().out
    assert "✗ 03.tiled_cuda block_m=16 block_n=32 on the CPU runtime" in out and "wrong answer" in out
    assert "✓ 02.online_softmax_cuda" in out and "✓ 04.double_buffer_cuda" in out   # the step after it still runs
    assert on_gpu == steps.split(",")                                                 # every step goes to the GPU
    assert timed["untimed"] == {"04.double_buffer_cuda": "failed on the GPU: pretend"}  # not timed, said why
    assert list(timed["notes"]) == ["03.tiled_cuda"]                                   # timed, with a note
    assert "Failed validation on the CPU runtime: 03.tiled_cuda." in out
