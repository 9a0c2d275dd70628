"""The Metal track (kernels/metal/03-07), graded on the CPU SIMT runtime (lessons 01 and 02, one thread
per row, launch like CUDA's lesson 01: tests/tracks/test_simt_lesson01.py and test_lesson02_online_attention.py).

Every step matches the float64 oracle within the error budget (O and LSE forward; dQ, dK, dV backward)
on lengths that are multiples of no tile, head dims from 16 to 128, Nq != Nk both ways, causal (bottom-
right aligned, including rows that see no key) and not: under memcheck + racecheck with a random schedule
on small cases and small tiles, in plain launches on larger ones. The GPU path is handed exactly the launch
the CPU runtime gets (a recording stand-in for course.simt.gpu.launch_metal shows it); a real Apple GPU
launch is skipped here with the reason metal_available() gives. Each refusal is one sentence, and every
wrong kernel of autograder/corpora/wrong/metal.py fails for its own reason.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch

import course
from autograder.corpora.wrong import hint_problem
from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
from course.tracks import metal as metal_track
from course.grading import kernel_steps
from course.errors import CheckFailed, CourseError
from course.kernels import read_region, read_source
from course.tracks.metal import BACKWARD, FORWARD, STEPS, THREADGROUP_MEMORY_LIMIT, Launch
from course.reference import attention, attention_backward
from course.simt import RawKernel, RawModule
from course.simt import gpu
from course.simt.gpu import GpuUnavailable, metal_available
from course.tracks.cuda import Tiles
from course.tracks import table
from track_support import backward_inputs

ALL = list(STEPS)
METAL_OK, METAL_WHY = metal_available()


@pytest.fixture(scope="module")
def modules():
    """``modules(exercise)``: each step's module, built on first use and shared by this file's tests."""
    return functools.cache(metal_track.module_for)


# ------------------------------------------------------------------------------------------------
# Every step against the oracle
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise", ALL)
def test_step_passes_its_check_checked_and_fast(exercise, modules):
    """Small cases under GRADING_LAUNCH (memcheck + racecheck, random schedule), larger ones in fast mode."""
    report = kernel_steps.check_step(exercise, modules(exercise))
    checked, plain = kernel_steps.grading_cases(exercise)
    two_groups = 1 if exercise in kernel_steps.TWO_GROUP_TILES else 0  # the case of two simdgroups per threadgroup
    assert report.cases == len(checked) + two_groups + len(plain) and report.worst_ratio < 1
    cases = checked + plain
    assert {1, 17, 65} <= {n for c in cases for n in (c.n_q, c.n_k)}
    assert min(c.d for c in cases) == 16 and max(c.d for c in cases) >= 64
    assert any(c.causal and c.n_q > c.n_k for c in checked), "rows that see no key, under the checked launch"
    assert any(c.n_q < c.n_k for c in checked)
    if exercise in FORWARD:
        assert max(c.d for c in cases) == 128 and any(c.d % 16 for c in cases), "D up to 128, one not a power of 2"


def test_forward_steps_agree_with_each_other_and_take_any_scale(modules):
    q, k, v = course.make_qkv(23, 32, n_k=41, seed=11)
    want = attention(q, k, v, True, scale=0.3)
    for exercise, fn in FORWARD.items():
        o, lse = fn(modules(exercise), q, k, v, causal=True, scale=0.3)
        tol = 2e-3 if STEPS[exercise].half_inputs else 1e-5
        assert torch.allclose(o.double(), want.o, atol=tol), exercise
        assert torch.allclose(lse.double(), want.lse, atol=tol), exercise
    plain = attention(q, k, v, True)  # so the scale really mattered
    assert not torch.allclose(plain.o, want.o, atol=1e-2)


@pytest.mark.parametrize("exercise", list(BACKWARD))
def test_backward_takes_any_scale(exercise, modules):
    q, k, v, o, lse, do = backward_inputs(9, 40, 32, causal=True, seed=7, scale=0.3)
    got = BACKWARD[exercise](modules(exercise), q, k, v, o, lse, do, causal=True, scale=0.3)
    want = attention_backward(q, k, v, do, True, scale=0.3)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.allclose(g.double(), w, rtol=1e-4, atol=1e-5), name


def test_only_the_split_backward_repeats_its_bits(modules):
    """The atomic dQ sums each element's shares in the order the threadgroups run; the split one has one owner.

    schedule="random" shuffles the threadgroup order with `seed` (a GPU changes it by itself). Nk = 64 is
    four key blocks of 16, so every dQ element gets four shares: float addition is not associative, so
    some orders differ in the last bits. dK and dV (one owner each) and the split dQ never do.
    """
    args = backward_inputs(33, 64, 32, seed=3)
    runs = {kind: [BACKWARD[kind](modules(kind), *args, schedule="random", seed=s) for s in range(4)]
            for kind in BACKWARD}
    atomic = runs["07.backward_atomic_metal"]
    assert len({run[0].numpy().tobytes() for run in atomic}) >= 2, "four threadgroup orders gave identical dQ bits"
    spread = max(float((run[0] - atomic[0][0]).abs().max()) for run in atomic)
    assert spread <= 1e-5 * float(atomic[0][0].abs().max())  # rounding in the last bits, not a wrong answer
    for run in atomic + runs["07.backward_split_metal"]:
        assert torch.equal(run[1], atomic[0][1]) and torch.equal(run[2], atomic[0][2])
    split = runs["07.backward_split_metal"]
    for run in split[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, split[0]))


# ------------------------------------------------------------------------------------------------
# One description, two launchers
# ------------------------------------------------------------------------------------------------

def _snapshot(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return (type(value).__name__, value.item() if isinstance(value, np.generic) else value)


def _call(exercise, module, device, **options):
    if exercise in FORWARD:
        q, k, v = course.make_qkv(19, 16, n_k=27, seed=5, batch=(2,))
        return FORWARD[exercise](module, q, k, v, causal=True, device=device, tiles=kernel_steps.GRADING_TILES[exercise],
                                 **options)
    return BACKWARD[exercise](module, *backward_inputs(19, 27, 16, causal=True, seed=5), causal=True, device=device,
                              **options)


@pytest.mark.parametrize("exercise", ALL)
def test_gpu_path_gets_exactly_the_launch_the_cpu_runtime_gets(exercise, modules, monkeypatch):
    """A stand-in with launch_metal's signature records what the GPU would receive, then runs it on the
    CPU runtime; a recorder around RawKernel.__call__ records the CPU path. Same kernels, buffers (by
    dtype, shape and contents at launch time), scalars, grid, threadgroup and threadgroup memory."""
    module = modules(exercise)
    cpu_calls, gpu_calls = [], []
    original = RawKernel.__call__

    def recording(self, grid, block, args, shared_mem=0, *, threadgroup_memory=(), **options):
        cpu_calls.append((self.name, tuple(grid), tuple(block), [_snapshot(a) for a in args], tuple(threadgroup_memory)))
        return original(self, grid, block, args, shared_mem, threadgroup_memory=threadgroup_memory, **options)

    def stand_in(source, name, grid, threadgroup, args, threadgroup_memory=(), *, path=None):
        assert source == module.code and path == module.display_path
        # launch_metal's own argument handling (everything it does before it needs a GPU) accepts them all.
        text, shown = gpu._source(source, path, "kernel.metal")
        plan = gpu._plan(gpu._kernel(text, shown, name, "metal"), "metal", args, allow_device_tensors=False)
        assert [a.param.index for a in plan] == list(range(len(args)))
        gpu_calls.append((name, tuple(grid), tuple(threadgroup), [_snapshot(a) for a in args], tuple(threadgroup_memory)))
        kernel = RawModule(code=source, language="metal", name=path).get_function(name)
        original(kernel, grid, threadgroup, args, threadgroup_memory=threadgroup_memory, workers=1)

    monkeypatch.setattr(RawKernel, "__call__", recording)
    on_cpu = _call(exercise, module, "cpu", workers=1)
    monkeypatch.setattr(RawKernel, "__call__", original)
    on_gpu = _call(exercise, module, "gpu", gpu_launcher=stand_in)

    assert [c[0] for c in cpu_calls] == list(STEPS[exercise].kernels)
    assert gpu_calls == cpu_calls
    for name, _, block, _, memory in cpu_calls:
        assert block[0] <= 1024 and sum(memory) <= THREADGROUP_MEMORY_LIMIT and all(n % 16 == 0 for n in memory)
        assert len(memory) == len([p for p in module.kernels[name].params if p.kind == 12])  # [[threadgroup(n)]]
    for a, b in zip(on_cpu, on_gpu):
        assert torch.equal(a, b)


@pytest.mark.skipif(not METAL_OK, reason=f"no Apple GPU here: {METAL_WHY}")
@pytest.mark.parametrize("exercise", ALL)
def test_on_an_apple_gpu(exercise, modules):  # pragma: no cover - needs a Mac with Apple silicon
    report = kernel_steps.check_step(exercise, modules(exercise), device="gpu")
    assert report.worst_ratio < 1
    on_gpu = _call(exercise, modules(exercise), "gpu")
    on_cpu = _call(exercise, modules(exercise), "cpu")
    for a, b in zip(on_cpu, on_gpu):
        assert torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-3)


def test_without_an_apple_gpu_the_gpu_path_says_why(modules):
    if METAL_OK:
        pytest.skip("this machine has an Apple GPU")
    with pytest.raises(GpuUnavailable) as error:
        _call("03.tiled_metal", modules("03.tiled_metal"), "gpu")
    assert METAL_WHY in str(error.value)


def test_default_tiles_fit_every_head_dim_the_steps_allow(modules):
    for exercise in FORWARD:
        step, module = STEPS[exercise], modules(exercise)
        for d in range(step.d_multiple, 129, step.d_multiple):
            q = np.zeros((1, 5, d), np.float16 if step.half_inputs else np.float32)
            item = metal_track.forward_launch(exercise, module, q, q, q, np.zeros((1, 5, d), np.float32),
                                              np.zeros((1, 5), np.float32), 1.0, False)
            assert isinstance(item, Launch) and sum(item.threadgroup_bytes) <= THREADGROUP_MEMORY_LIMIT, (exercise, d)
            assert item.grid[0] == 1 and item.threads <= 1024
    for exercise in BACKWARD:
        a = np.zeros((5, 128), np.float32)
        r = np.zeros(5, np.float32)
        for item in metal_track.backward_launches(exercise, modules(exercise), a, a, a, a, r, a, a, a, a, r, 1.0, True):
            assert sum(item.threadgroup_bytes) <= THREADGROUP_MEMORY_LIMIT, (exercise, item.kernel)


# ------------------------------------------------------------------------------------------------
# Refusals: one sentence each
# ------------------------------------------------------------------------------------------------

def _qkv(n, d, n_k=None):
    return course.make_qkv(n, d, n_k=n_k, seed=0)


@pytest.mark.parametrize("exercise, d, message", [
    ("04.double_buffer_metal", 18, r"moves rows as float4 vectors of 4 floats, so D must be a multiple of 4; D = 18 is not\."),
    ("05.mma_metal", 20, r"multiplies 8 x 8 simdgroup matrices, so D must be a multiple of 8; D = 20 is not\."),
    ("03.tiled_metal", 160, r"MAX_HEAD_DIM = 128 floats; D = 160 is too large\."),
])
def test_head_dims_a_kernel_cannot_take_are_refused(exercise, d, message, modules):
    with pytest.raises(CourseError, match=message):
        FORWARD[exercise](modules(exercise), *_qkv(3, d))


@pytest.mark.parametrize("exercise, tiles, message", [
    ("05.mma_metal", Tiles(32, 32), r"needs 47,104 bytes of threadgroup memory per threadgroup, more than the "
                                          r"32,768 bytes \(32 KiB\) an Apple GPU gives one threadgroup"),
    ("03.tiled_metal", Tiles(64, 32), r"needs 65,536 bytes of threadgroup memory"),
    ("04.double_buffer_metal", Tiles(32, 16), r"needs 49,152 bytes of threadgroup memory"),
    ("03.tiled_metal", Tiles(2048, 1), r"2048 threads per threadgroup; a Metal threadgroup has 1 to 1024"),
    ("03.tiled_metal", Tiles(32, 64), r"block_n = 64: .* MAX_BLOCK_N = 32, so 1 <= block_n <= 32\."),
    ("05.mma_metal", Tiles(12, 16), r"block_m = 12: each simdgroup owns 8 query rows"),
    ("05.mma_metal", Tiles(16, 12), r"block_n = 12: keys are multiplied 8 at a time"),
])
def test_tiles_a_gpu_would_refuse_are_refused(exercise, tiles, message, modules):
    with pytest.raises(CourseError, match=message):
        FORWARD[exercise](modules(exercise), *_qkv(3, 128), tiles=tiles)


def test_other_refusals(modules):
    tiled, split = modules("03.tiled_metal"), modules("07.backward_split_metal")
    q, k, v = _qkv(3, 16)
    with pytest.raises(CourseError, match=r"options of the CPU runtime; a GPU launch takes none"):
        metal_track.tiled_forward(tiled, q, k, v, device="gpu", check="memcheck")
    with pytest.raises(CourseError, match=r"device must be 'cpu'"):
        metal_track.tiled_forward(tiled, q, k, v, device="metal")
    with pytest.raises(CourseError, match=r"zero keys"):
        metal_track.tiled_forward(tiled, q, k[:0], v[:0])
    with pytest.raises(CourseError, match=r"same leading dims"):
        metal_track.tiled_forward(tiled, q, k[:, :8], v)
    q2, k2, v2, o, lse, do = backward_inputs(4, 4, 16)
    with pytest.raises(CourseError, match=r"take one head"):
        metal_track.backward_split(split, q2[None], k2[None], v2[None], o[None], lse[None], do[None])
    with pytest.raises(CourseError, match=r"LSE \(Nq,\) of matching sizes"):
        metal_track.backward_atomic(modules("07.backward_atomic_metal"), q2, k2, v2, o, lse[:3], do)
    big = torch.zeros(4, 160)
    with pytest.raises(CourseError, match=r"D <= MAX_HEAD_DIM = 128; D = 160 is too large"):
        metal_track.backward_split(split, big, big, big, big, lse, big)
    with pytest.raises(CourseError, match=r"expected a compiled kernel module"):
        metal_track.tiled_forward("kernels/metal/03_tiled.metal", q, k, v)


def test_a_kernel_whose_parameters_differ_from_the_description_is_refused(modules):
    """The launch description is checked against the kernel's own parameter list before any launch."""
    text = modules("03.tiled_metal").code
    q, k, v = _qkv(3, 16)
    swapped = text.replace("device float* o [[buffer(3)]]", "device float* o [[buffer(4)]]").replace(
        "device float* lse [[buffer(4)]]", "device float* lse [[buffer(3)]]")
    with pytest.raises(CourseError, match=r"declares its \[\[buffer\(n\)\]\] parameters as \(q, k, v, lse, o,"):
        metal_track.tiled_forward(RawModule(code=swapped, language="metal", compile_now=None), q, k, v)
    renamed = text.replace("k_tile [[threadgroup(1)]]", "kv_tile [[threadgroup(1)]]").replace("k_tile[", "kv_tile[")
    with pytest.raises(CourseError, match=r"declares its \[\[threadgroup\(n\)\]\] buffers as \(q_tile, kv_tile, v_tile\)"):
        metal_track.tiled_forward(RawModule(code=renamed, language="metal", compile_now=None), q, k, v)
    undefined = text.replace("#define MAX_BLOCK_N 32", "#define MAX_KEYS 32").replace("MAX_BLOCK_N]", "MAX_KEYS]")
    with pytest.raises(CourseError, match=r"has no `#define MAX_BLOCK_N <number>`"):
        metal_track.tiled_forward(RawModule(code=undefined, language="metal", compile_now=None), q, k, v)
    with pytest.raises(CourseError, match=r"has no kernel `tiled_attention`"):
        metal_track.tiled_forward(modules("04.double_buffer_metal"), q, k, v)


# ------------------------------------------------------------------------------------------------
# The kernel files
# ------------------------------------------------------------------------------------------------

REGIONS = {
    "03.tiled_metal": ("tile_range", "tile_loop", "epilogue"),
    "04.double_buffer_metal": ("float4_loads", "ping_pong", "epilogue"),
    "05.mma_metal": ("causal_block_skip", "scores", "softmax_and_rescale", "pv_product", "epilogue"),
    "07.backward_atomic_metal": ("preprocess_delta", "float_atomic_add", "recompute_p", "dkdv_accumulate",
                                 "dq_atomic_add"),
    "07.backward_split_metal": ("dkdv_tile", "dq_split_kernel"),
}


@pytest.mark.parametrize("exercise", ALL)
def test_kernel_files_teach_and_carry_the_course_markers(exercise):
    path = STEPS[exercise].kernel_file
    text = read_source(path)
    header = text.split("#include")[0]
    assert header.startswith("// ") and header.count("\n") >= 15, "a header comment that teaches"
    assert text.count("// BEGIN SOLUTION") == text.count("// END SOLUTION") >= 1
    for name in REGIONS[exercise]:
        assert read_region(path, name).strip(), name
    assert not re.search(r"\b[Ll]ines? \d+", text), "slides quote named regions, never line numbers"
    assert "atomic" not in re.sub(r"//[^\n]*", "", text) or exercise == "07.backward_atomic_metal"


@pytest.mark.parametrize("exercise", ALL)
def test_the_learners_starting_point_compiles_and_fails_the_check(exercise):
    """What a notebook hands out: the file with each solution region replaced by the stub comment."""
    path = STEPS[exercise].kernel_file
    stub = re.sub(r"// BEGIN SOLUTION\n.*?// END SOLUTION\n", "// YOUR CODE HERE\n", read_source(path), flags=re.S)
    assert "YOUR CODE HERE" in stub and "BEGIN SOLUTION" not in stub
    module = RawModule(code=stub, language="metal", name=path.rsplit("/", 1)[1])
    small, _ = kernel_steps.grading_cases(exercise)
    with pytest.raises(CheckFailed, match=r"wrong|NaN|Inf"):
        kernel_steps.check_step(exercise, module, checked_cases=(), plain_cases=small[:3],
                                tiles=kernel_steps.GRADING_TILES.get(exercise))


def test_the_atomic_file_emulates_float_atomics_with_compare_and_swap():
    code = re.sub(r"//[^\n]*", "", read_source(STEPS["07.backward_atomic_metal"].kernel_file))
    assert "atomic_compare_exchange_weak_explicit" in code and "as_type<uint>" in code
    assert "atomic_float" not in code and "atomic_fetch_add" not in code
    assert "atomic_add_float" in read_region(STEPS["07.backward_atomic_metal"].kernel_file, "dq_atomic_add")


# ------------------------------------------------------------------------------------------------
# The wrong-kernel corpus
# ------------------------------------------------------------------------------------------------

def test_the_corpus_covers_every_file_and_the_mistakes_that_matter():
    for exercise in ALL + ["01.naive_metal", "02.online_softmax_metal"]:
        assert sum(w.exercise == exercise for w in WRONG_METAL_KERNELS) >= 3, exercise
    assert len({w.id for w in WRONG_METAL_KERNELS}) == len(WRONG_METAL_KERNELS)
    names = {w.id for w in WRONG_METAL_KERNELS}
    assert {"03.tiled_metal:no-barrier-after-load", "04.double_buffer_metal:no-barrier",
            "07.backward_atomic_metal:non-atomic-dq", "05.mma_metal:mask-off-by-one",
            "05.mma_metal:accumulator-not-rescaled"} <= names
    for wrong in WRONG_METAL_KERNELS:
        text = read_source(table.exercise(wrong.exercise).kernel_file)
        for old, _ in wrong.edits:
            assert old in text, (wrong.id, old)
        assert wrong.checked == (wrong.expect.startswith(r"data race") or "out-of-bounds" in wrong.expect), wrong.id


@pytest.mark.parametrize("wrong", WRONG_METAL_KERNELS, ids=lambda w: w.id)
def test_every_wrong_kernel_fails_its_check(wrong):
    with pytest.raises(CheckFailed) as failure:
        wrong.grade()
    message = str(failure.value)
    assert re.search(wrong.expect, message), message
    problem = hint_problem(wrong.hint, message)  # its hint line as declared (None: no hint line)
    assert problem is None, problem
    if wrong.expect.startswith(r"data race"):
        assert f"of {table.exercise(wrong.exercise).kernel_file.rsplit('/', 1)[1]}" in message  # names the learner's line
