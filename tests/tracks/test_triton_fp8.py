"""Lesson 08's fp8 forward: the formats' arithmetic, the budget the check derives from them, the interpreter's cast
that the kernel rounds around, and what the compile gate compiles for which target."""
from __future__ import annotations

import pytest
import torch

import course
from course.errors import CheckFailed
from course.kernels import kernel_path, load_triton_module
from course.lessons.lesson08_fp8 import Fp8Case
from course.models import fp8
from course.tracks import triton as triton_track
from course.tracks.triton_compile import Matrix, run_gate

pytestmark = [pytest.mark.cpu_tier("the interpreter's fp8 cast and the check's cases are the CPU tier's")]


@pytest.mark.parametrize("name", sorted(fp8.FORMATS))
def test_the_formats_are_what_torch_decodes(name):
    f = fp8.FORMATS[name]
    info = torch.finfo(f.dtype)
    values = fp8.grid(f)
    assert float(values.max()) == f.max == info.max
    assert f.smallest_normal == info.smallest_normal
    assert float(values[values > 0].min()) == f.smallest_subnormal
    above_one = values[values > 1]
    assert 2 * f.unit_roundoff == float(above_one.min()) - 1  # the step above 1 (torch's finfo says 0.125 for e5m2fnuz)
    # fnuz: the bit pattern of -0 (0x80) is the one NaN, and there is no -0 at all
    everything = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(f.dtype).double()
    negative_zero = bool(((everything == 0) & (torch.signbit(everything))).any())
    assert negative_zero == (not f.fnuz)
    assert bool(torch.isnan(everything[0x80])) == f.fnuz
    assert int(torch.isnan(everything).sum()) == {"e4m3fn": 2, "e5m2": 6}.get(name, 1)


def test_quantising_maps_each_heads_maximum_onto_the_formats_and_dequantises_close():
    x = torch.randn(2, 3, 50, 16, generator=torch.Generator().manual_seed(0)) * torch.tensor([1.0, 300.0, 1e-3])[:, None, None]
    for f in (fp8.E4M3, fp8.E5M2):
        x8, descale = fp8.quantize_per_head(x, f)
        assert x8.dtype == f.dtype and descale.shape == (2, 3)
        assert torch.equal(x8.double().abs().amax(dim=(-2, -1)), torch.full((2, 3), f.max, dtype=torch.float64))
        back = fp8.dequantize(x8, descale)
        normal = x.abs() * (f.max / x.abs().amax(dim=(-2, -1), keepdim=True)) >= f.smallest_normal
        rel = ((back - x.double()).abs() / x.double().abs())[normal]
        assert float(rel.max()) <= f.unit_roundoff * (1 + 1e-6)


def test_the_format_rule_picks_e5m2_for_massive_activations_only():
    normal, _, _ = Fp8Case(1, 2, 2, 8, 40, 64, seed=1).tensors()
    _, outlier_k, _ = Fp8Case(1, 2, 2, 8, 40, 64, kind="outlier", seed=1).tensors()
    assert fp8.choose_format(normal) is fp8.E4M3
    assert fp8.choose_format(outlier_k) is fp8.E5M2


def test_the_p_rounding_bound_holds_and_is_not_loose():
    """The bound the check allows for P's cast, against P really cast (torch) and multiplied in float64."""
    gen = torch.Generator().manual_seed(3)
    for f in (fp8.E4M3, fp8.E5M2):
        s = torch.randn(4, 30, 200, generator=gen, dtype=torch.float64) * 3
        p = torch.softmax(s, dim=-1)
        v = torch.randn(4, 200, 16, generator=gen, dtype=torch.float64)
        p_scale = fp8.P_SCALES[f.name]
        rounded = (p * p_scale).float().to(f.dtype).double() / p_scale
        err = ((rounded - p) @ v).abs()
        bound = fp8.p_rounding_bound(p, v, f, p_scale, relative=0.0)
        assert bool((err <= bound).all())
        assert float((err / bound).max()) > 0.1  # a bound ten times the worst error would grade nothing


def test_the_interpreters_fp8_cast_is_why_the_kernel_rounds_first(tmp_path):
    """Triton 3.9's interpreter casts float32 → e4m3 wrongly when the mantissa's carry meets an odd exponent
    (126.8 → 64); the kernel rounds first on the interpreter (ROUND_FIRST). Without it the check fails."""
    module = load_triton_module("triton/08_fp8_forward")
    row = triton_track.step("08.fp8_forward_triton")
    assert course.check(row.id, triton_track.solution(row))
    text = kernel_path(row.kernel_file).read_text()
    assert text.count("ROUND_FIRST=tiers.triton_interpreted()") == 1
    plain = tmp_path / "08_fp8_forward.py"
    plain.write_text(text.replace("ROUND_FIRST=tiers.triton_interpreted()", "ROUND_FIRST=False"))
    from course.lessons.lesson08_fp8 import _fp8_forward  # the check itself: course.check would launch with the course's wrapper
    with pytest.raises(CheckFailed, match="wrong O"):
        _fp8_forward(triton_track.solution(row, str(plain)))
    assert module.FP8_DTYPES == (torch.float8_e4m3fn, torch.float8_e5m2)


def test_grouped_heads_and_rows_that_see_no_key():
    """Four query heads over two K/V heads, Nq > Nk causal (the first rows see nothing: O = 0, LSE = -inf)."""
    fn = triton_track.solution(triton_track.step("08.fp8_forward_triton"))
    q, k, v = Fp8Case(1, 4, 2, 40, 17, 32, causal=True, seed=7).tensors()
    o, lse = fn(q, k, v, causal=True)
    assert o.dtype == torch.float16 and lse.dtype == torch.float32
    assert bool((o[:, :, :23] == 0).all()) and bool(torch.isneginf(lse[:, :, :23]).all())
    assert bool(torch.isfinite(lse[:, :, 23:]).all())
    assert course.check("08.fp8_forward_triton", fn, cases=[Fp8Case(1, 4, 2, 40, 17, 32, causal=True, seed=7)])


def test_the_gate_compiles_both_formats_for_sm90_and_says_why_not_e4m3_on_sm80():
    report = run_gate(Matrix(lessons=("08_fp8_forward",), head_dims=(64,), causal=(True,), targets=(80, 90)), jobs=1)
    assert report.ok, report.errors()
    rows = {(r.dtype, r.target): r for r in report.results}
    for dtype in ("e4m3", "e5m2"):
        r = rows[dtype, 90]
        assert r.status == "ok" and r.compiled and 0 < r.regs <= 255 and not r.spills, r.label
    assert rows["e5m2", 80].status == "ok"
    skipped = rows["e4m3", 80]
    assert skipped.status == "skip" and not skipped.compiled and "sm_80 has no e4m3" in skipped.note
    assert "1 e4m3 launch(es) not compiled for a target without fp8 tensor cores" in report.summary()


def test_the_benchmark_times_the_fp8_forward_by_default_and_says_why_not_before_sm89(monkeypatch):
    from course.tools import bench_triton as bench
    plan = bench.plan_from_args(bench.build_parser().parse_args([]))
    assert bench.FP8.key in [k.key for k in plan.kernels]
    q, k, v = (t.contiguous() for t in Fp8Case(1, 2, 2, 64, 64, 32, seed=3).tensors())
    run = bench._load_lesson(bench.FP8)
    o = run(q, k, v, True)
    reference = bench._sdpa()(q.float(), k.float(), v.float(), True).half()
    assert bench.compare_outputs((o,), (reference,))[1] <= bench.FP8_TOLERANCE
    assert torch.equal(run(q, k, v, True), o)  # the second call reuses the quantised inputs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(bench.tiers, "triton_interpreted", lambda: False)
    with pytest.raises(RuntimeError, match=r"this GPU \(sm_80\) has no fp8 tensor cores"):
        bench._load_lesson(bench.FP8)
