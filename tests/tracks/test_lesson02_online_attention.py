"""Lesson 02's one-sweep attention kernels: Triton (kernels/triton/02_online_softmax.py, online_attention)
and Metal (kernels/metal/02_online_softmax.metal, one thread per row on the CPU SIMT runtime).

Each fuses lesson 01's two passes over the keys into one: the running max, sum and accumulator of the
keys seen so far, with l and acc rescaled by exp(m - m_new) when the max grows. The course's kernels pass
their exercises and agree with lesson 01's; a stub and the corpus's mistakes (a missing rescale of acc
or of l, a max that is never kept) fail. (CUDA's lesson 02, one warp per row, is in test_cuda_ladder.py.)
"""
from __future__ import annotations

import re

import pytest
import torch

import course
from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
from autograder.corpora.wrong.triton import WRONG_KERNELS
from course import Case
from course.errors import CheckFailed
from course.kernels import kernel_path, load_triton_module, read_region, read_source
from course.simt import RawModule
from course.tracks import cuda as cuda_track
from course.tracks import table

TRITON = "02.online_softmax_attention_triton"
METAL = "02.online_softmax_metal"


@pytest.fixture(scope="module")
def online():
    return load_triton_module("triton/02_online_softmax")


# ------------------------------------------------------------------------------------------------
# Triton
# ------------------------------------------------------------------------------------------------

def test_the_table_names_the_triton_kernel_as_a_variant_of_the_shared_file():
    row = table.exercise(TRITON)
    assert row.kernel_file == "kernels/triton/02_online_softmax.py" and row.entry == ("online_attention",)
    assert row.run_command == "python -m course run 02 --track triton"


def test_triton_kernel_passes_its_exercise(online):
    report = course.check(TRITON, online.online_attention)
    assert report.cases == 8 and report.worst_ratio < 1


def test_triton_kernel_agrees_with_lesson_01_and_takes_a_scale(online, naive_module):
    q, k, v = course.make_qkv(23, 32, n_k=75, seed=4)
    for scale in (None, 0.3):
        one, two = online.online_attention(q, k, v, scale), naive_module.naive_attention(q, k, v, scale)
        assert torch.allclose(one, two, atol=1e-5), scale
    assert torch.allclose(online.online_attention(q, k, v, 0.3).double(),
                          course.attention(q, k, v, scale=0.3).o, atol=1e-5)


def test_triton_kernel_sweeps_the_keys_once(online):
    text = kernel_path("triton/02_online_softmax").read_text()
    kernel = text.split("def online_attention_kernel(")[1].split("@triton.jit")[0].split("\ndef ")[0]
    assert kernel.count("for start in range(0, n_keys, BLOCK_N):") == 1
    update = read_region("triton/02_online_softmax", "online_attention_update")
    assert "alpha = tl.exp(m - m_new)" in update and "acc * alpha" in update and "l * alpha" in update


def test_triton_wrapper_rejects_bad_shapes(online):
    q, k, v = course.make_qkv(4, 16, seed=0)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        online.online_attention(q[None], k[None], v[None])
    with pytest.raises(ValueError, match="zero keys"):
        online.online_attention(q, k[:0], v[:0])


def test_triton_stub_is_not_started(tmp_path):
    source = kernel_path("triton/02_online_softmax").read_text()
    update = re.search(r"( *)# region: online_attention_update\n(.*?)# endregion: online_attention_update", source, re.S)
    indent = update.group(1)
    stub = source.replace(update.group(2), f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()\n{indent}")
    (tmp_path / "stub.py").write_text(stub)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        course.check(TRITON, load_triton_module(str(tmp_path / "stub.py")).online_attention)


def test_triton_corpus_has_the_rescale_mistakes():
    names = {w.name for w in WRONG_KERNELS if w.exercise == TRITON}
    assert {"acc-not-rescaled", "sum-not-rescaled", "stale-max"} <= names  # graded in test_triton_track.py


# ------------------------------------------------------------------------------------------------
# Metal
# ------------------------------------------------------------------------------------------------

def test_metal_kernel_launches_like_lesson_01():
    step = cuda_track.STEPS[METAL]
    assert (step.kernel_file, step.kernel, step.language, step.layout) == (
        "kernels/metal/02_online_softmax.metal", "online_attention", "metal", "naive")
    assert cuda_track.step_for_module(cuda_track.module_for(METAL)) == METAL
    assert cuda_track.step_for_module(cuda_track.module_for("01.naive_metal")) == "01.naive_metal"


def test_metal_kernel_passes_its_exercise():
    report = course.check(METAL, cuda_track.module_for(METAL))
    assert report.cases == 7 and report.worst_ratio < 1


def test_metal_kernel_matches_the_oracle_in_every_mode():
    module = cuda_track.module_for(METAL)
    q, k, v = course.make_qkv(37, 48, n_k=29, seed=3)
    want = course.attention(q, k, v).o.float()
    fn = cuda_track.attention_function(module)
    assert torch.allclose(fn(q, k, v), want, atol=1e-5)
    for launch in (dict(check="memcheck"), dict(check="racecheck", schedule="random", seed=4)):
        out = cuda_track.naive_attention(module, q, k, v, kernel="online_attention", **launch)
        assert torch.allclose(out, want, atol=1e-5), launch


def test_metal_kernel_sweeps_the_keys_once_and_rescales():
    text = read_source("kernels/metal/02_online_softmax.metal")
    assert text.count("for (uint j = 0; j < n_k; ++j)") == 1 and "What changed from 01" in text
    update = read_region("kernels/metal/02_online_softmax.metal", "online_softmax_update")
    assert "exp(m - m_new)" in update and "l * correction" in update and "acc[c] * correction" in update


def test_metal_stub_compiles_and_fails():
    path = "kernels/metal/02_online_softmax.metal"
    stub = re.sub(r"// BEGIN SOLUTION\n.*?// END SOLUTION\n", "// YOUR CODE HERE\n", read_source(path), flags=re.S)
    assert "YOUR CODE HERE" in stub and "BEGIN SOLUTION" not in stub
    module = RawModule(code=stub, language="metal", name="02_online_softmax.metal")
    with pytest.raises(CheckFailed, match=r"not implemented yet|wrong|NaN|Inf"):
        course.check(METAL, module, cases=[Case(17, 17, 16, seed=1)])


@pytest.mark.parametrize("wrong", [w for w in WRONG_METAL_KERNELS if w.exercise == METAL], ids=lambda w: w.id)
def test_every_wrong_metal_kernel_fails_the_exercise(wrong):
    """As a learner's %%metal cell is graded (the corpus's own grading is in test_metal_track.py)."""
    with pytest.raises(CheckFailed) as failure:
        course.check(METAL, wrong.module(), cases=[Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1),
                                                    Case(70, 9, 32, seed=2)])
    message = str(failure.value)
    assert re.search(wrong.expect, message), message
