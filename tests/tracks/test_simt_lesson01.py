"""Lesson 01's CUDA C and Metal kernels, graded on the CPU SIMT runtime.

The reference kernels pass the exercise checks; every entry of the wrong-solution corpus for them fails,
and fails for its own reason (the unguarded kernel is caught by memcheck, not by a wrong number).
"""
from __future__ import annotations

import pytest
import torch

import course
from autograder.corpora.wrong import lesson01
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


def _wrong_entries(cell: str):
    return [w for w in lesson01.WRONG if w.cell == cell]


@pytest.mark.parametrize("wrong", _wrong_entries("naive_cuda") + _wrong_entries("naive_metal"),
                         ids=lambda w: w.student_id)
def test_every_wrong_kernel_fails(wrong):
    exercise = "01." + wrong.cell
    step = cuda_track.STEPS[exercise]
    text = wrong.apply(read_source(step.kernel_file))
    try:
        module = RawModule(code=text, language=step.language, name=step.kernel_file.rsplit("/", 1)[1])
    except KernelCompileError as err:
        assert wrong.name == "does-not-compile", err
        assert "expected" in str(err)
        return
    with pytest.raises(CheckFailed) as failure:
        course.check(exercise, module, cases=SMALL)
    if wrong.name == "unguarded-row":
        assert "out-of-bounds read of `q`" in str(failure.value)


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
