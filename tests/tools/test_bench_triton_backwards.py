"""course.tools.bench_triton times the capstone's two backwards side by side: the 08 row (its own backward,
kernels/triton/08_backward.py) and, when named, the 08b7 row (the same forward with lesson 07's backward, atomic dQ).
No GPU here: the plans, the runner's gradients on Triton's interpreter and the page's note are checked."""
from __future__ import annotations

import torch

from course.tools import bench_triton as bench
from course.tools.bench_triton import Measurement, RunInfo, Shape

F16 = torch.float16


def _shape(causal: bool, mode: str) -> Shape:
    return Shape("fp16", 64, 4096, causal, mode, 4, 16)


def _parse(argv):
    return bench.plan_from_args(bench.build_parser().parse_args(argv))


def test_the_lesson07_backward_row_runs_only_when_named_and_only_with_a_backward():
    assert "08b7" not in [k.key for k in _parse([]).kernels]
    assert "08b7" not in [k.key for k in _parse(["--leaderboard"]).kernels]
    assert [k.key for k in _parse(["--leaderboard", "--kernels", "08b7"]).kernels] == ["sdpa", "cudnn", "08", "08b7"]
    assert [k.key for k in _parse(["--kernels", "08,08b7"]).kernels] == ["sdpa", "08", "08b7"]
    row = bench.BY_KEY["08b7"]
    assert row.applies(bench.FWD_BWD, True) and row.applies(bench.FWD_BWD, False)
    assert not row.applies(bench.FWD, True)


def test_both_backwards_give_the_oracles_gradients_through_the_same_forward():
    """On the interpreter: the 08b7 runner and the capstone agree on O bit for bit (one forward) and on the gradients
    within fp16 rounding (two backwards that sum in other orders)."""
    gen = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(1, 2, 40, 16, generator=gen).to(F16) for _ in range(4))
    outputs = {}
    for key in ("08", "08b7"):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        o = bench._load_lesson(bench.BY_KEY[key])(*leaves, True)
        outputs[key] = (o.detach(), *torch.autograd.grad(o, leaves, do))
    assert torch.equal(outputs["08"][0], outputs["08b7"][0])
    for ours, theirs in zip(outputs["08"][1:], outputs["08b7"][1:]):
        assert not torch.equal(ours, torch.zeros_like(ours))
        assert float((ours.float() - theirs.float()).abs().max()) <= 8e-3 * max(1.0, float(theirs.abs().max()))


def test_the_page_says_what_the_lesson07_row_is():
    s = _shape(causal=True, mode=bench.FWD_BWD)
    page = bench.render_markdown([Measurement(s, "sdpa", ms=2.0), Measurement(s, "08", ms=1.0),
                                  Measurement(s, "08b7", ms=1.5)],
                                 RunInfo(device="cpu", torch_version="t", triton_version="x", cuda_version=None,
                                         date="d", command="c", tokens=64, heads=2, min_reps=2))
    assert "| 08 with lesson 07's backward |" in page
    assert "- 08 with lesson 07's backward: the same forward, with lesson 07's backward" in page
    assert "the capstone's own backward, kernels/triton/08_backward.py" in page
