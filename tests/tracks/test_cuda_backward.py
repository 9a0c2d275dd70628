"""Lesson 07 in CUDA C: the backward pass, dQ by atomicAdd (07_backward_atomic.cu) and atomic-free (07_backward_split.cu).

Both kernel files are graded like a learner's: course.check.check_backward against the float64 oracle with
the error budget, launched with memcheck + racecheck + a random schedule (GRADING_LAUNCH) on small odd
shapes, causal (bottom-right aligned) and not. Every wrong kernel of autograder/corpora/wrong/cuda_backward.py fails
that check for its own reason. The determinism test shows which of the two designs repeats its bits. (nvcc
compiles both files in tests/tools/test_nvcc_gate.py, which gates every kernels/cuda/*.cu.)
"""
from __future__ import annotations

import functools
import re
from types import SimpleNamespace

import pytest
import torch

from autograder.corpora.wrong import hint_problem
from autograder.corpora.wrong.cuda_backward import WRONG_KERNELS
from course import Case
from course.tracks import cuda as cuda_track
from course.grading.compare_attention import check_backward
from course.errors import CheckFailed, CourseError
from course.kernels import read_region, read_source
from course.lessons.lesson07 import explain_split_dq
from course.reference import attention_backward
from course.simt import RawModule
from course.tracks.cuda import GRADING_LAUNCH
from track_support import backward_inputs

KINDS = ("atomic", "split")
BACKWARD = {"atomic": cuda_track.backward_atomic, "split": cuda_track.backward_split}
EXERCISE = {"atomic": "07.backward_atomic_cuda", "split": "07.backward_split_cuda"}

# Checked launches cost a runtime call per memory access: small shapes, but each one odd and each a
# different corner. Nk = 40 is three key blocks of 16 (the last one partial), so every dQ row gets
# three shares; Nq = 65 > Nk = 17 causal leaves 48 rows that see no key (LSE = -inf, gradients 0).
CHECKED_CASES = [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16), Case(65, 17, 32, causal=True, seed=2),
                 Case(33, 20, 128, kind="peaky", seed=3)]
# The fast build (no checks): larger shapes, the blocks spread over OS threads, an fp16 input.
FAST_CASES = [Case(65, 129, 64, causal=True, seed=4), Case(129, 65, 32, seed=5),
              Case(40, 40, 16, dtype=torch.float16, causal=True, seed=6)]
# Grading the wrong kernels (and the learner's stub): three key blocks (so dQ rows get shares from
# several blocks), two query tiles and a causal diagonal, which every mistake in the corpus trips over.
WRONG_CASES = [Case(17, 40, 16, causal=True, seed=1)]


@pytest.fixture(scope="module")
def modules() -> dict[str, RawModule]:
    return {kind: cuda_track.backward_module_for(kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_kernel_passes_the_gradient_check_under_grading_launch(modules, kind):
    fn = functools.partial(BACKWARD[kind], modules[kind], **GRADING_LAUNCH)
    report = check_backward(EXERCISE[kind], fn, CHECKED_CASES)
    assert report.cases == len(CHECKED_CASES) and report.worst_ratio < 1


@pytest.mark.parametrize("kind", KINDS)
def test_kernel_passes_on_larger_shapes_in_the_fast_build(modules, kind):
    fn = functools.partial(BACKWARD[kind], modules[kind], workers=2)
    assert check_backward(EXERCISE[kind], fn, FAST_CASES).worst_ratio < 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_scale_other_than_one_over_sqrt_d(modules, kind):
    q, k, v, o, lse, do = backward_inputs(9, 40, 32, causal=True, seed=7, scale=0.3)
    got = BACKWARD[kind](modules[kind], q, k, v, o, lse, do, causal=True, scale=0.3)
    want = attention_backward(q, k, v, do, True, scale=0.3)
    wrong_scale = attention_backward(q, k, v, do, True)
    for name, g, w, other in zip(("dq", "dk", "dv"), got, want, wrong_scale):
        assert torch.allclose(g.double(), w, rtol=1e-4, atol=1e-5), name
        assert not torch.allclose(other, w, rtol=1e-2, atol=1e-3), name  # so the scale really mattered


def test_which_design_is_bitwise_deterministic(modules):
    """The atomic dQ depends on the order the blocks' atomicAdds arrive in; the split dQ does not.

    A GPU runs blocks concurrently, so that order changes from run to run by itself. The CPU runtime
    runs blocks one after another (one OS thread in any checked or random-schedule launch), so here the
    order is changed on purpose: schedule="random" shuffles the block order with `seed`. Each block adds
    one share per dQ element, so element (i, c) ends up as ((0 + a) + b) + c in the order the blocks
    ran, and rounding makes that differ in the last bits between orders.

    It takes three shares: with two, 0 + a + b and 0 + b + a are the same float (addition is
    commutative, only not associative), which is why Nk = 32 (two key blocks) repeats its bits under
    every seed and Nk = 64 (four) does not. dK and dV are owned by one block each and never change.
    """
    args = backward_inputs(33, 64, 32, seed=3)
    runs = {kind: [BACKWARD[kind](modules[kind], *args, schedule="random", seed=s) for s in range(4)] for kind in KINDS}
    dqs = [run[0] for run in runs["atomic"]]
    assert len({dq.numpy().tobytes() for dq in dqs}) >= 2, "four block orders gave identical dQ bits"
    spread = max(float((dq - dqs[0]).abs().max()) for dq in dqs[1:])
    assert 0 < spread <= 1e-5 * float(dqs[0].abs().max())  # rounding in the last bits, not a wrong answer
    first = runs["atomic"][0]
    for run in runs["atomic"]:
        assert torch.equal(run[1], first[1]) and torch.equal(run[2], first[2])  # dK, dV: one owner each
    # The split design: same bits for every block order, and with the blocks on two OS threads.
    reference = runs["split"][0]
    again = runs["split"][1:] + [BACKWARD["split"](modules["split"], *args, workers=2)]
    for run in again:
        for got, want in zip(run, reference):
            assert torch.equal(got, want)
    # Two shares per dQ element: commutative, so every order gives the same bits even with atomics.
    two = backward_inputs(33, 32, 32, seed=3)
    pairs = {BACKWARD["atomic"](modules["atomic"], *two, schedule="random", seed=s)[0].numpy().tobytes()
             for s in range(4)}
    assert len(pairs) == 1


def test_launch_plan_sizes_grids_and_refuses_what_a_gpu_would(modules):
    constants = cuda_track.backward_constants(modules["atomic"])
    assert constants == dict(BLOCK_M=16, BLOCK_N=16, THREADS=128, MAX_HEAD_DIM=128)
    assert cuda_track.backward_constants(modules["split"]) == constants
    p = cuda_track.backward_plan(65, 17, 128, constants)
    assert (p.threads, p.delta_blocks, p.kv_blocks, p.q_blocks) == (128, 17, 2, 5)  # 4 warps = 4 rows per block
    assert p.q_shared < p.kv_shared <= cuda_track.BACKWARD_SHARED_LIMIT
    with pytest.raises(CourseError, match="shared memory"):
        cuda_track.backward_plan(65, 17, 128, dict(constants, BLOCK_M=64, BLOCK_N=64))
    with pytest.raises(CourseError, match="whole number of warps"):
        cuda_track.backward_plan(65, 17, 64, dict(constants, THREADS=100))
    q, k, v, o, lse, do = backward_inputs(4, 4, 16)
    big = [torch.zeros(4, 160)] * 6
    with pytest.raises(CourseError, match="D = 160 is too large"):
        cuda_track.backward_split(modules["split"], *big[:4], lse, big[5])
    with pytest.raises(CourseError, match="LSE"):
        cuda_track.backward_atomic(modules["atomic"], q, k, v, o, lse[:3], do)
    renamed = SimpleNamespace(code=modules["split"].code.replace("BLOCK_N", "KEYS_PER_BLOCK"), display_path="x.cu")
    with pytest.raises(CourseError, match="#define BLOCK_N"):
        cuda_track.backward_constants(renamed)


def test_kernel_files_carry_the_course_markers():
    for kind, regions in (("atomic", ("preprocess_delta", "recompute_p", "dkdv_accumulate", "dq_atomic_add")),
                          ("split", ("dkdv_tile", "dq_split_kernel"))):
        path = cuda_track.BACKWARD_FILES[kind]
        text = read_source(path)
        assert text.startswith("// Lesson 07")
        assert text.count("// BEGIN SOLUTION") == text.count("// END SOLUTION") >= 1
        for name in regions:
            assert read_region(path, name).strip()
    assert "atomicAdd" in read_region(cuda_track.BACKWARD_FILES["atomic"], "dq_atomic_add")
    assert "atomic" not in re.sub(r"//[^\n]*", "", read_source(cuda_track.BACKWARD_FILES["split"]))


@pytest.mark.parametrize("kind", KINDS)
def test_the_learners_starting_point_compiles_and_fails_the_check(kind):
    """What a notebook hands out: the file with each solution region replaced by the stub comment."""
    stub = re.sub(r"// BEGIN SOLUTION\n.*?// END SOLUTION\n", "// YOUR CODE HERE\n", read_source(cuda_track.BACKWARD_FILES[kind]),
                  flags=re.S)
    assert "YOUR CODE HERE" in stub and "BEGIN SOLUTION" not in stub
    module = RawModule(code=stub, language="cuda", name=cuda_track.BACKWARD_FILES[kind].rsplit("/", 1)[1])
    with pytest.raises(CheckFailed, match="wrong dq"):
        check_backward(EXERCISE[kind], functools.partial(BACKWARD[kind], module), WRONG_CASES)


def test_every_file_has_three_mistakes_and_every_edit_names_one_line():
    for kind in KINDS:
        assert sum(w.kind == kind for w in WRONG_KERNELS) >= 3, kind
    assert len({w.id for w in WRONG_KERNELS}) == len(WRONG_KERNELS)
    for wrong in WRONG_KERNELS:
        text = read_source(cuda_track.BACKWARD_FILES[wrong.kind])
        for old, _ in wrong.edits:
            assert text.count(old) == 1, (wrong.id, old)


@pytest.mark.parametrize("wrong", WRONG_KERNELS, ids=lambda w: w.id)
def test_every_wrong_kernel_fails_the_check(wrong):
    module = wrong.module()
    fn = functools.partial(BACKWARD[wrong.kind], module, **GRADING_LAUNCH)
    with pytest.raises(CheckFailed) as failure:
        if wrong.measured:  # the mistake shows in what the kernel loads, measured first as course.check does
            from course.grading.causal_tiles import causal_tiles_simt
            causal_tiles_simt(EXERCISE[wrong.kind], module)
        if wrong.kind == "split":  # a failure of backward_dq is explained as course.check explains it
            explain_split_dq(EXERCISE[wrong.kind], module, lambda: check_backward(EXERCISE[wrong.kind], fn, WRONG_CASES))
        else:
            check_backward(EXERCISE[wrong.kind], fn, WRONG_CASES)
    message = str(failure.value)
    assert re.search(wrong.expect, message), message
    problem = hint_problem(wrong.hint, message)  # its hint line as declared (None: no hint line)
    assert problem is None, problem
    if wrong.expect == r"data race":
        assert f"of {cuda_track.BACKWARD_FILES[wrong.kind].rsplit('/', 1)[1]}" in message  # names the learner's line
