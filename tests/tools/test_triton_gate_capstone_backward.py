"""The compile gate covers the capstone's own backward (kernels/triton/08_backward.py), a given kernel file that lesson
08 wraps and no exercise of its own: it is one of the gate's lessons, called the way lesson 08 calls it (grouped heads
too), its configs labelled by both tile pairs, and (slow) its check configs compile for sm_90 without spilling."""
from __future__ import annotations

import pytest
import torch

from course.kernels import load_triton_module
from course.tools import triton_gate
from course.tracks import fake_launches, triton_build, triton_compile
from course.tracks.triton_compile import Matrix, run_gate


def test_the_gate_knows_the_capstones_backward():
    assert "08_backward" in triton_compile.LESSONS
    assert triton_gate._lessons(["08_b"]) == ("08_backward",)
    cases = list(fake_launches.cases("08_backward", Matrix(dtypes=("fp16",), head_dims=(64,), gqa=True)))
    assert cases == [{"dtype": "fp16", "head_dim": 64, "causal": c, **v} for c in (False, True)
                     for v in ({}, {"variant": "GQA"})]


def test_a_numbered_block_config_is_labelled_unambiguously():
    assert triton_build.config_label({"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32,
                                         "BLOCK_D": 64, "num_warps": 4, "num_stages": 5}) == \
        "M1=32 N1=128 M2=128 N2=32 w4 s5"
    assert triton_build.config_label({"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2}) == \
        "M64 N32 w8 s2"


@pytest.mark.slow
def test_the_check_configs_compile_for_sm90_without_spills():
    """fp16 at D 64 and 128, causal, with and without grouped heads (the numbers are in the file's REGISTERS)."""
    report = run_gate(Matrix(lessons=("08_backward",), dtypes=("fp16",), head_dims=(64, 128), causal=(True,),
                             targets=(90,), gqa=True))
    assert report.ok, report.summary() + "\n\n" + report.errors()
    rows = [r for r in report.results if r.kernel == "bwd_kernel"]
    assert sorted((r.head_dim, r.variant) for r in rows) == [(64, ""), (64, "GQA"), (128, ""), (128, "GQA")]
    if any(r.limit for r in rows):
        pytest.skip(f"this Triton's registers cannot be read: {next(r.limit for r in rows if r.limit)}")
    check = load_triton_module("triton/08_backward").check_config
    for r in rows:
        c = check(r.head_dim, torch.float16)["bwd_kernel"]
        assert r.config == triton_build.config_label({**c.kwargs, "num_warps": c.num_warps,
                                                         "num_stages": c.num_stages}), r.label
        assert not r.spills and r.regs and r.regs <= 255, r.label
