"""Lesson 01's CUDA C and Metal kernels, graded on the CPU SIMT runtime.

The reference kernels (two passes over the keys: the row max, then l and acc against it) pass the
exercise checks; every entry of the wrong-kernel corpora for them fails, and fails for its own reason
(the unguarded kernel is caught by memcheck, not by a wrong number; pass 2 without the max by the
overflow on peaky rows).
"""
from __future__ import annotations

import re

import pytest
import torch

import course
from autograder.corpora.wrong import hint_problem
from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
from course import Case
from course.tracks import cuda as cuda_track
from course.errors import CheckFailed
from course.kernels import read_source
from course.simt import KernelCompileError, RawModule

EXERCISES = ["01.naive_cuda", "01.naive_metal"]
SMALL = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(70, 9, 32, seed=2)]


@pytest.mark.parametrize("exercise", EXERCISES)
def test_reference_kernel_passes(exercise):
    report = course.check(exercise, cuda_track.module_for(exercise))
    assert report.cases == 7 and report.worst_ratio < 1


@pytest.mark.parametrize("exercise", EXERCISES)
def test_kernel_matches_the_oracle_in_every_mode(exercise):
    module = cuda_track.module_for(exercise)
    q, k, v = course.make_qkv(37, 48, n_k=29, seed=3)
    want = course.attention(q, k, v).o.float()
    for launch in (dict(), dict(check="memcheck"), dict(check="racecheck", schedule="random", seed=4)):
        out = cuda_track.naive_attention(module, q, k, v, **launch)
        assert torch.allclose(out, want, atol=1e-5), launch


WRONG = [w for w in WRONG_CUDA_KERNELS + WRONG_METAL_KERNELS if w.exercise in EXERCISES]


def test_the_corpora_cover_both_files_and_the_two_pass_mistakes():
    for exercise in EXERCISES:
        names = {w.name for w in WRONG if w.exercise == exercise}
        assert {"unguarded-row", "pass2-without-max", "max-without-scale"} <= names, exercise


@pytest.mark.parametrize("wrong", WRONG, ids=lambda w: w.id)
def test_every_wrong_kernel_fails(wrong):
    """Graded as a learner's cell is: course.check on the compiled module, on a few small cases."""
    with pytest.raises(CheckFailed) as failure:
        course.check(wrong.exercise, wrong.module(), cases=SMALL)
    message = str(failure.value)
    assert re.search(wrong.expect, message), message
    problem = hint_problem(wrong.hint, message)  # its hint line as declared (None: no hint line)
    assert problem is None, problem
    if wrong.name == "unguarded-row":
        assert "out-of-bounds read of `q`" in message
    if wrong.name == "pass2-without-max":  # the overflow shows on the peaky case
        assert "peaky" in message.splitlines()[0], message


@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_kernel_that_does_not_compile_says_where(exercise):
    step = cuda_track.STEPS[exercise]
    text = read_source(step.kernel_file)
    broken = text.replace("l += p;", "l += p")
    assert broken != text
    with pytest.raises(KernelCompileError, match="expected"):
        RawModule(code=broken, language=step.language, name=step.kernel_file.rsplit("/", 1)[1])


def test_a_module_is_what_the_check_wants():
    with pytest.raises(CheckFailed, match="%%cuda / %%metal cell"):
        course.check("01.naive_cuda", lambda q, k, v, scale=None: q)


def test_launcher_refuses_shapes_the_kernel_cannot_take():
    module = cuda_track.module_for("01.naive_cuda")
    q, k, v = course.make_qkv(4, 160, seed=0)
    with pytest.raises(course.CourseError, match="D = 160 is too large"):
        cuda_track.naive_attention(module, q, k, v)


@pytest.mark.parametrize("exercise, module", [
    ("03.tiled_cuda", lambda: cuda_track.module_for("03.tiled_cuda")),
    ("07.backward_split_cuda", lambda: __import__("course.tracks.cuda", fromlist=["x"]).backward_module_for("split")),
])
def test_ladder_exercises_are_checked_by_id(exercise, module):
    """The later CUDA steps are exercises too: course.check takes the compiled module, like lesson 01's."""
    report = course.check(exercise, module(), cases=[Case(17, 20, 16, causal=exercise.startswith("07"), seed=9)])
    assert report.cases >= 1
    with pytest.raises(CheckFailed, match="kernel module|%%cuda"):
        course.check(exercise, "not a module")


def test_a_failed_compile_leaves_nothing_gradable_behind():
    """After a %%cuda cell that compiled once fails to compile, its name must not keep the old module:
    the check says the cell did not compile instead of grading the stale kernel."""
    from course.simt.magic import CompileFailed, _compile_cell

    namespace: dict = {}
    good = read_source("kernels/cuda/01_naive.cu")
    _compile_cell("cuda", "naive_cuda", good, namespace)
    assert isinstance(namespace["naive_cuda"], RawModule)
    with pytest.raises(KernelCompileError):
        _compile_cell("cuda", "naive_cuda", good.replace("return;", "return", 1), namespace)
    assert isinstance(namespace["naive_cuda"], CompileFailed)
    with pytest.raises(CheckFailed, match=r"your %%cuda naive_cuda cell did not compile"):
        course.check("01.naive_cuda", namespace["naive_cuda"])
