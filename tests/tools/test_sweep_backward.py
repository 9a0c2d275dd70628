"""python -m course.tools.sweep_backward: its grid, its validation against the check config's gradients, its loop
(on Triton's interpreter, with a stand-in timer) and its one sentence on a machine without a GPU."""
from __future__ import annotations

import json

import pytest
import torch

from course.kernels import load_triton_module
from course.tools import sweep_backward as sweep_tool

F16 = torch.float16


def _power_of_two(x: int) -> bool:
    return x >= 16 and x & (x - 1) == 0


@pytest.mark.parametrize("kind", ["dkdv", "dq", "dkdv_split"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_grid_holds_the_check_config_and_the_h200_winners(kind, head_dim):
    configs = sweep_tool.grid(kind, head_dim)
    assert len(configs) == len(set(configs)) > 10
    for m, n, warps, stages in configs:
        assert _power_of_two(m) and _power_of_two(n) and warps in (4, 8) and 2 <= stages <= 4
    kernel = sweep_tool.KINDS[kind][1]
    check = load_triton_module("triton/07_backward").check_config(head_dim, F16)[kernel]
    assert (check.kwargs["BLOCK_M"], check.kwargs["BLOCK_N"], check.num_warps, check.num_stages) in configs
    winners = {("dkdv_kernel", 64): (128, 128, 8, 2), ("dkdv_kernel", 128): (32, 64, 4, 2),
               ("dq_kernel", 64): (128, 64, 8, 4), ("dq_kernel", 128): (64, 32, 4, 2)}
    assert winners[kernel, head_dim] in configs
    assert sweep_tool.KINDS[kind][0] == ("atomic" if kind == "dkdv" else "split")


def test_no_grid_past_d128_and_unknown_kinds_refused():
    assert sweep_tool.grid("dkdv", 256) == [] and sweep_tool.grid("dq", 256) == []
    with pytest.raises(ValueError, match="kind must be one of dkdv, dq, dkdv_split"):
        sweep_tool.grid("dv", 64)


def test_validation_accepts_rounding_and_refuses_a_wrong_gradient():
    gen = torch.Generator().manual_seed(0)
    ref = [torch.randn(2, 3, 40, 16, generator=gen).to(F16) for _ in range(3)]
    ok, errors = sweep_tool.validate([t.clone() for t in ref], ref, F16)
    assert ok and errors == [0.0, 0.0, 0.0]
    # One rounding step of fp16 in every element: another summation order, still the same answer.
    nudged = [t + (t.double() * 2 ** -11).to(F16) for t in ref]
    assert sweep_tool.validate(nudged, ref, F16)[0]
    wrong = [ref[0], ref[1] * 1.01, ref[2]]  # dK off by 1%: a lost update or a missing tile
    ok, errors = sweep_tool.validate(wrong, ref, F16)
    assert not ok and errors[1] > sweep_tool.tolerance(F16) and errors[0] == errors[2] == 0.0
    poisoned = [ref[0], ref[1], torch.full_like(ref[2], float("nan"))]
    ok, errors = sweep_tool.validate(poisoned, ref, F16)
    assert not ok and errors[2] == float("inf")
    with pytest.raises(ValueError):
        sweep_tool.validate(ref[:2], ref, F16)


TINY = {"tiny": sweep_tool.Shape(1, 2, 40, 16, True, F16)}


def _fake_timer(calls: list):
    def time_ms(fn):
        fn()
        calls.append(1)
        return 2.0 if len(calls) == 1 else 1.0  # the check config "takes" 2 ms, every other config 1 ms
    return time_ms


def test_the_loop_validates_then_times_each_config_on_the_interpreter():
    calls: list = []
    configs = lambda kind, d: [(16, 32, 4, 2), (32, 16, 4, 3)]  # noqa: E731
    kinds = ["dkdv", "dq", "dkdv_split"]
    records = list(sweep_tool.sweep(TINY, kinds, _fake_timer(calls), "cpu", configs=configs))
    assert [(r["kind"], r["config"] if isinstance(r["config"], str) else tuple(r["config"].values()))
            for r in records] == [(kind, c) for kind in kinds for c in ("check_config", (16, 32, 4, 2), (32, 16, 4, 3))]
    for r in records:
        json.dumps(r)
        if r["config"] != "check_config":
            assert r["agrees"] and r["ms"] == 1.0 and "error" not in r, r
    assert records[1]["speedup"] == 2.0
    assert len(calls) == 9


def test_a_config_that_disagrees_is_not_timed_and_one_that_fails_is_a_line(monkeypatch):
    real = sweep_tool.backward

    def lossy(args, kind, config):  # a launch that loses a tenth of dV
        dq, dk, dv = real(args, kind, config)
        return (dq, dk, dv * 0.9) if config == (16, 32, 4, 2) else (dq, dk, dv)
    monkeypatch.setattr(sweep_tool, "backward", lossy)
    calls: list = []
    configs = lambda kind, d: [(16, 32, 4, 2), (24, 32, 4, 2)]  # noqa: E731  (24: not a power of two)
    records = list(sweep_tool.sweep(TINY, ["dkdv"], _fake_timer(calls), "cpu", configs=configs))
    assert len(calls) == 1, "only the check config was timed"
    disagrees, fails = records[1], records[2]
    assert disagrees["agrees"] is False and "ms" not in disagrees
    assert float(disagrees["rel_err_vs_check_config"][2]) > sweep_tool.tolerance(F16)
    assert "error" in fails and "ms" not in fails


@pytest.mark.skipif(torch.cuda.is_available(), reason="a fact about machines without a GPU")
def test_without_a_gpu_it_says_so_in_one_sentence(capsys):
    assert sweep_tool.main([]) == 0
    out = capsys.readouterr().out.strip()
    assert out == sweep_tool.NO_GPU and out.count(". ") == 0 and "GPU" in out


def test_list_shows_the_grid_and_bad_arguments_are_refused(capsys):
    assert sweep_tool.main(["--list", "--shapes", "d128_causal", "--kinds", "dkdv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("d128_causal dkdv ") and "32x64/w4/s2" in lines[0]
    with pytest.raises(SystemExit):
        sweep_tool.main(["--shapes", "huge"])
