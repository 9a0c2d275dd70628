"""The lesson-01 Triton kernel, run on this machine's tier, against the oracle with the error budget."""
from __future__ import annotations

import pytest
import torch

import course
from course import Case, tiers
from course.errors import CheckFailed


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
    q, k, v = course.make_qkv(4, 16, seed=0)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        naive_module.naive_attention(q[None], k[None], v[None])
    with pytest.raises(ValueError, match="zero keys"):
        naive_module.naive_attention(q, k[:0], v[:0])


def test_a_kernel_without_rescale_fails(naive_module, tmp_path):
    """The corpus in autograder/corpora/wrong is graded end to end elsewhere; this is the quick unit-level proof."""
    from course.kernels import kernel_path
    source = kernel_path("triton/01_naive").read_text().replace("correction = tl.exp(m - m_new)", "correction = 1.0")
    path = tmp_path / "no_rescale.py"
    path.write_text(source)
    from course.kernels import load_triton_module
    broken = load_triton_module(str(path))
    with pytest.raises(CheckFailed, match="wrong answer"):
        course.check("01.naive_triton", broken.naive_attention)


def test_untouched_stub_and_kernel_errors_point_at_the_kernel(tmp_path):
    import re

    from course.kernels import kernel_path, load_triton_module
    source = kernel_path("triton/01_naive").read_text()
    stub = re.sub(r"    # BEGIN SOLUTION.*?# END SOLUTION\n", "    # YOUR CODE HERE\n    raise NotImplementedError()\n",
                  source, flags=re.S)
    (tmp_path / "stub.py").write_text(stub)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        course.check("01.naive_triton", load_triton_module(str(tmp_path / "stub.py")).naive_attention)

    typo = source.replace("score = tl.sum(q * k, axis=0) * scale", "score = tl.sum(q * kk, axis=0) * scale")
    (tmp_path / "typo.py").write_text(typo)
    with pytest.raises(CheckFailed) as info:
        course.check("01.naive_triton", load_triton_module(str(tmp_path / "typo.py")).naive_attention)
    message = str(info.value)
    if course.tiers.triton_interpreted():  # the interpreter reports the kernel's own line
        assert "in naive_attention_kernel: score = tl.sum(q * kk" in message and "NameError" in message
