"""The lesson-01 Triton kernel (two passes over the keys, a block of keys per step), run on this machine's
tier, against the oracle with the error budget."""
from __future__ import annotations

import pytest
import torch

import course
from course import Case, tiers
from course.errors import CheckFailed
from track_support import qkv

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]


@pytest.mark.parametrize("case", [
    Case(1, 1, 16), Case(17, 17, 128, kind="peaky", seed=1), Case(17, 129, 32, seed=2), Case(65, 3, 64, seed=3),
    Case(40, 40, 16, kind="constant_rows", seed=4), Case(33, 20, 64, dtype=torch.float16, kind="peaky", seed=5),
], ids=lambda c: c.describe())
def test_naive_kernel_within_budget(naive_module, case):
    course.check("01.naive_triton", naive_module.naive_attention, cases=[case])


def test_default_exercise_cases_pass(naive_module):
    report = course.check("01.naive_triton", naive_module.naive_attention)
    assert report.tier == tiers.active_tier()


def test_wrapper_rejects_bad_shapes_clearly(naive_module):
    q, k, v = qkv(4, 16, seed=0)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        naive_module.naive_attention(q[None], k[None], v[None])
    with pytest.raises(ValueError, match="zero keys"):
        naive_module.naive_attention(q, k[:0], v[:0])


def test_the_kernel_makes_two_passes_and_no_rescale(naive_module):
    from course.kernels import read_region
    region = read_region("triton/01_naive", "two_passes")
    assert region.count("for start in range(0, n_keys, BLOCK_N):") == 2
    assert "tl.exp(scores - m)" in region and "alpha" not in region and "m_new" not in region


def test_pass_two_without_the_max_fails_on_peaky_rows(naive_module, tmp_path):
    """The corpus in autograder/corpora/wrong is graded end to end elsewhere; this is the quick unit-level proof:
    exp of the raw scores overflows where scores reach the hundreds, and only there."""
    from course.kernels import kernel_path, load_triton_module
    source = kernel_path("triton/01_naive").read_text()
    assert source.count("p = tl.exp(scores - m)") == 1
    path = tmp_path / "no_max.py"
    path.write_text(source.replace("p = tl.exp(scores - m)", "p = tl.exp(scores)"))
    broken = load_triton_module(str(path))
    course.check("01.naive_triton", broken.naive_attention, cases=[Case(17, 40, 16, seed=1)])  # mild scores: no overflow
    with pytest.raises(CheckFailed, match="wrong answer.*peaky"):
        course.check("01.naive_triton", broken.naive_attention, cases=[Case(17, 40, 16, kind="peaky", seed=1)])


def test_untouched_stub_and_kernel_errors_point_at_the_kernel(tmp_path):
    import re

    from course.kernels import kernel_path, load_triton_module
    source = kernel_path("triton/01_naive").read_text()
    stub = re.sub(r"    # BEGIN SOLUTION.*?# END SOLUTION\n", "    # YOUR CODE HERE\n    raise NotImplementedError()\n",
                  source, flags=re.S)
    (tmp_path / "stub.py").write_text(stub)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        course.check("01.naive_triton", load_triton_module(str(tmp_path / "stub.py")).naive_attention)

    typo = source.replace("s = tl.sum(q[None, :] * k, axis=1) * scale", "s = tl.sum(q[None, :] * kk, axis=1) * scale")
    assert typo != source
    (tmp_path / "typo.py").write_text(typo)
    with pytest.raises(CheckFailed) as info:
        course.check("01.naive_triton", load_triton_module(str(tmp_path / "typo.py")).naive_attention)
    message = str(info.value)
    if course.tiers.triton_interpreted():  # the interpreter reports the kernel's own line
        # Refused by Triton's real compiler before anything runs, naming the learner's line.
        assert "s = tl.sum(q[None, :] * kk" in message and "NameError" in message and "line" in message
