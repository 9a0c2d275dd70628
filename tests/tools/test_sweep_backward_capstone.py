"""python -m course.tools.sweep_backward --kinds capstone: the capstone's own backward (kernels/triton/08_backward.py)
swept like lesson 07's, its grid holding the check config and the tuning list, its loop run on Triton's interpreter
with a stand-in timer, and a config that gives other gradients refused before it is timed."""
from __future__ import annotations

import pytest
import torch

from course.kernels import load_triton_module
from course.tools import sweep_backward as sweep_tool

F16 = torch.float16


def _label(config) -> tuple[int, ...]:
    kw = config.kwargs
    return (kw["BLOCK_M1"], kw["BLOCK_N1"], kw["BLOCK_M2"], kw["BLOCK_N2"], config.num_warps, config.num_stages)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_grid_holds_the_check_config_and_every_tuning_config(head_dim):
    configs = sweep_tool.grid("capstone", head_dim)
    assert len(configs) == len(set(configs)) > 10 and all(len(c) == 6 for c in configs)
    bwd = load_triton_module("triton/08_backward")
    assert _label(bwd.check_config(head_dim, F16)["bwd_kernel"]) in configs
    for config in bwd.tuning_configs(head_dim, F16):
        assert _label(config) in configs, config
    assert sweep_tool.grid("capstone", 256) == []
    assert sweep_tool.KINDS["capstone"][1] == "bwd_kernel"


def test_the_loop_validates_then_times_the_capstones_configs_on_the_interpreter():
    calls: list = []

    def time_ms(fn):
        fn()
        calls.append(1)
        return 2.0 if len(calls) == 1 else 1.0

    tiny = {"tiny": sweep_tool.Shape(1, 2, 40, 16, True, F16)}
    configs = lambda kind, d: [(16, 32, 32, 16, 4, 2), (32, 64, 64, 32, 4, 5)]  # noqa: E731
    records = list(sweep_tool.sweep(tiny, ["capstone"], time_ms, "cpu", configs=configs))
    assert [r["config"] for r in records[1:]] == [dict(zip(sweep_tool.FIELDS["capstone"], c))
                                                   for c in configs("capstone", 16)]
    check = load_triton_module("triton/08_backward").check_config(16, F16)["bwd_kernel"]
    assert records[0]["config"] == "check_config" and records[0]["launch"].startswith(
        f"BLOCK_M1 {check.kwargs['BLOCK_M1']}, BLOCK_N1 {check.kwargs['BLOCK_N1']}")
    for r in records[1:]:
        assert r["agrees"] and r["ms"] == 1.0 and r["speedup"] == 2.0 and "error" not in r, r
    assert len(calls) == 3


def test_a_capstone_config_that_disagrees_is_not_timed(monkeypatch):
    real = sweep_tool.backward

    def lossy(args, kind, config):  # a launch that drops a tenth of dK
        dq, dk, dv = real(args, kind, config)
        return (dq, dk * 0.9, dv) if config is not None else (dq, dk, dv)
    monkeypatch.setattr(sweep_tool, "backward", lossy)
    calls: list = []
    tiny = {"tiny": sweep_tool.Shape(1, 2, 24, 16, False, F16)}
    records = list(sweep_tool.sweep(tiny, ["capstone"], lambda fn: calls.append(1) or 1.0, "cpu",
                                    configs=lambda kind, d: [(16, 16, 16, 16, 4, 2)]))
    assert len(calls) == 1 and records[1]["agrees"] is False and "ms" not in records[1]


def test_list_shows_the_capstone_grid(capsys):
    assert sweep_tool.main(["--list", "--shapes", "leaderboard", "--kinds", "capstone"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("leaderboard capstone ") and "32x128x128x32/w4/s5" in lines[0]
