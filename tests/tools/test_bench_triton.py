"""course.tools.bench_triton: the CPU path end to end, and the pure parts of the GPU path with fake timings."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from course.tools import bench_triton as bench
from course.tools.bench_triton import FWD, FWD_BWD, Measurement, RunInfo, Shape

H100 = "NVIDIA H100 80GB HBM3"


def _run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    # COURSE_TIER=cpu: even on a machine with a GPU this takes the no-GPU path (the smoke), never the full run.
    env = dict(os.environ, COURSE_TIER="cpu")
    return subprocess.run([sys.executable, "-m", "course.tools.bench_triton", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=bench.REPO)


def test_cpu_path_says_it_needs_a_gpu_and_runs_the_smoke():
    from course.tracks.triton import STEPS
    result = _run()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "needs" in lines[0] and "NVIDIA GPU" in lines[0] and "found" in lines[0], lines[0]
    assert "smoke" in lines[0]
    for step in STEPS:
        assert any(line.startswith(f"✓ {step.id}:") for line in lines), (step.id, result.stdout)
    assert f"{len(STEPS)} of {len(STEPS)} steps passed." in result.stdout


def test_help_documents_every_option():
    result = _run("--help", timeout=60)
    assert result.returncode == 0
    for option in ("--quick", "--dtypes", "--head-dims", "--seq-lens", "--modes", "--reps", "--out", "--plot"):
        assert option in result.stdout, option
    assert "Exit status" in result.stdout


@pytest.mark.parametrize("argv", [["--dtypes", "fp8"], ["--seq-lens", "abc"], ["--head-dims", "0"],
                                  ["--modes", "sideways"], ["--reps", "0"], ["--kernels", "07"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2


def test_plan_from_arguments():
    plan = bench.plan_from_args(bench.build_parser().parse_args([]))
    assert plan.dtypes == ["fp16", "bf16"] and plan.head_dims == [64, 128]
    assert plan.seq_lens == [512, 1024, 2048, 4096, 8192, 16384]
    assert plan.modes == [FWD, FWD_BWD] and plan.causal == [False, True] and plan.min_reps == 20
    shapes = list(plan.shapes())
    assert len(shapes) == 2 * 2 * 2 * 2 * 6
    assert all(s.batch * s.n == 16384 and s.heads == 16 for s in shapes)
    quick = bench.plan_from_args(bench.build_parser().parse_args(
        ["--quick", "--seq-lens", "2k,512", "--modes", "forward", "--causal", "yes", "--kernels", "06"]))
    assert quick.dtypes == ["fp16"] and quick.seq_lens == [512, 2048] and quick.modes == [FWD]
    assert quick.causal == [True] and [k.key for k in quick.kernels] == ["sdpa", "06"]
    assert bench.parse_size("16k") == 16384 and bench.parse_size("512") == 512 and bench.size_text(8192) == "8k"


def test_cudnn_baseline_and_leaderboard_plan():
    plan = bench.plan_from_args(bench.build_parser().parse_args([]))
    assert [k.key for k in plan.kernels][:2] == ["sdpa", "cudnn"]
    assert "cudnn" not in [k.key for k in bench.plan_from_args(bench.build_parser().parse_args(["--no-cudnn"])).kernels]
    board = bench.plan_from_args(bench.build_parser().parse_args(["--leaderboard"]))
    (shape,) = list(board.shapes())
    assert (shape.batch, shape.heads, shape.n, shape.d, shape.dtype) == (1, 16, 16384, 64, "bf16")
    assert shape.causal and shape.mode == FWD_BWD and [k.key for k in board.kernels] == ["sdpa", "cudnn", "08"]
    # Ratios against cuDNN: its time over the kernel's; nothing for the baselines themselves.
    s = _shape()
    results = [Measurement(s, "sdpa", ms=2.0), Measurement(s, "cudnn", ms=1.0), Measurement(s, "08", ms=1.25)]
    assert bench.vs_cudnn(results, results[2]) == pytest.approx(0.8)
    assert bench.vs_cudnn(results, results[0]) is None and bench.vs_cudnn(results, results[1]) is None
    md = bench.render_markdown(results, RunInfo(device=H100, torch_version="t", triton_version="t"))
    assert _row(md, "4k", "08 flash_attention")[6:9] == ["1.60×", "0.80×", "—"]


def test_flop_formulas():
    assert bench.forward_flops(2, 16, 1024, 1024, 64) == 4 * 2 * 16 * 1024 * 1024 * 64
    assert bench.forward_flops(2, 16, 1024, 1024, 64, causal=True) == 2 * 2 * 16 * 1024 * 1024 * 64
    assert bench.forward_flops(1, 1, 3, 5, 7) == 4 * 3 * 5 * 7
    fwd = Shape("fp16", 128, 4096, False, FWD, 4, 16)
    both = Shape("fp16", 128, 4096, True, FWD_BWD, 4, 16)
    assert bench.total_flops(fwd) == 4 * 4 * 16 * 4096 ** 2 * 128
    assert bench.total_flops(both) == 3.5 * bench.total_flops(fwd) / 2
    # 1 TFLOP in 1 ms is 1000 TFLOP/s.
    assert bench.tflops(1e12, 1.0) == pytest.approx(1000.0)
    assert bench.tflops(1e12, None) is None and bench.tflops(1e12, 0.0) is None


def test_peak_is_known_only_for_h100_sxm_and_h200():
    assert bench.peak_tflops(H100, "fp16") == pytest.approx(989.4)
    assert bench.peak_tflops("NVIDIA H200", "bf16") == pytest.approx(989.4)
    assert bench.peak_tflops(H100, "fp32") is None
    for name in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"):
        assert bench.peak_tflops(name, "fp16") is None, name


# ---- the markdown table from fake measurements -------------------------------------------------

def _shape(n: int = 4096, causal: bool = False, mode: str = FWD) -> Shape:
    return Shape("fp16", 64, n, causal, mode, 16384 // n, 16)


def _fake_results() -> list[Measurement]:
    s, big = _shape(), _shape(16384)
    return [
        Measurement(s, "sdpa", ms=2.0),
        Measurement(s, "03", ms=8.0, max_abs_diff=1e-3, rel_rms_diff=4e-4),
        Measurement(s, "04", ms=4.0, max_abs_diff=1e-3, rel_rms_diff=4e-4),
        Measurement(s, "05", ms=1.0, max_abs_diff=0.5, rel_rms_diff=0.3, flagged=True),
        Measurement(s, "06", ms=1.6, max_abs_diff=9.8e-4, rel_rms_diff=4e-4),
        Measurement(big, "sdpa", ms=20.0),
        Measurement(big, "03", status="OOM", detail="CUDA out of memory. Tried to allocate 2.00 GiB"),
        Measurement(big, "04", ms=40.0, max_abs_diff=1e-3, rel_rms_diff=4e-4),
    ]


def _row(markdown: str, n: str, label: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 3 and cells[0] == n and cells[2] == label:
            return cells
    raise AssertionError(f"no row for N={n} {label}:\n{markdown}")


def test_ratios():
    results = _fake_results()
    by = {(m.shape.n, m.kernel): m for m in results}
    assert bench.ratios(results, by[4096, "04"]) == (pytest.approx(0.5), pytest.approx(2.0))
    assert bench.ratios(results, by[4096, "06"]) == (pytest.approx(1.25), pytest.approx(1 / 1.6))
    assert bench.ratios(results, by[4096, "03"]) == (pytest.approx(0.25), None)     # no earlier lesson
    assert bench.ratios(results, by[16384, "04"]) == (pytest.approx(0.5), None)     # 03 ran out of memory
    assert bench.ratios(results, by[16384, "03"]) == (None, None)
    # Lesson 08's previous is 06 (07 has no forward of its own), and a different shape never counts.
    m08 = Measurement(_shape(), "08", ms=1.0)
    assert bench.previous_lesson(results + [m08], m08).kernel == "06"
    other = Measurement(_shape(causal=True), "08", ms=1.0)
    assert bench.previous_lesson(results + [other], other) is None


def test_markdown_table_from_fake_measurements():
    info = RunInfo(device=H100, torch_version="2.13.0", triton_version="3.9.0", cuda_version="12.8",
                   date="2030-01-01 00:00 UTC", command="python -m course.tools.bench_triton --quick", plot="benchmarks.png")
    md = bench.render_markdown(_fake_results(), info)
    assert H100 in md and "torch 2.13.0 (CUDA 12.8), triton 3.9.0" in md and "2030-01-01" in md
    assert "python -m course.tools.bench_triton --quick" in md and "![" in md and "benchmarks.png" in md
    assert "## fp16 · D = 64 · non-causal · forward" in md
    assert "| N | B×H | kernel | ms | TFLOP/s | % of peak | vs SDPA | vs previous | max abs diff vs SDPA |" in md
    assert "median" in md and "L2" in md and "Lesson 01" in md
    flops = bench.forward_flops(4, 16, 4096, 4096, 64)
    sdpa = _row(md, "4k", "SDPA (flash)")
    assert sdpa[1] == "4×16" and sdpa[3] == "2.000"
    assert float(sdpa[4]) == pytest.approx(flops / 2e-3 / 1e12, abs=0.05)
    assert sdpa[5] == f"{100 * flops / 2e-3 / 1e12 / 989.4:.1f}%" and sdpa[6] == "1.00×" and sdpa[8] == "(reference)"
    assert _row(md, "4k", "04 pipelined")[6:8] == ["0.50×", "2.00× (vs 03)"]
    assert _row(md, "4k", "03 tiled")[6:8] == ["0.25×", "—"]
    assert _row(md, "4k", "05 tensor cores")[8] == "5.0e-01 ⚠"
    assert _row(md, "4k", "06 causal")[6:9] == ["1.25×", "0.62× (vs 05)", "9.8e-04"]
    oom = _row(md, "16k", "03 tiled")
    assert oom[3] == "OOM" and oom[4:] == ["—"] * 5
    assert _row(md, "16k", "04 pipelined")[6:8] == ["0.50×", "—"]
    assert "## Errors" in md and "CUDA out of memory" in md
    # A device whose peak is unknown gets no % of peak column.
    plain = bench.render_markdown(_fake_results(), RunInfo(device="NVIDIA L4", torch_version="t", triton_version="t"))
    assert "| % of peak |" not in plain and len(_row(plain, "4k", "SDPA (flash)")) == 8


def test_error_classification():
    assert bench.classify_error(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB"))[0] == "OOM"
    assert bench.classify_error(RuntimeError("No available kernel. Aborting execution."))[0] == "unsupported"
    status, detail = bench.classify_error(ValueError("bad shape"))
    assert status == "error" and detail == "ValueError: bad shape"
    assert bench.disagrees(1e-3, 1e-3, "fp16") is False
    assert bench.disagrees(0.3, 0.2, "fp16") is True
    assert bench.disagrees(float("nan"), float("nan"), "bf16") is True
    assert bench.disagrees(1e-2, 1e-2, "bf16") is False   # bf16 has 3 fewer mantissa bits


# ---- the timing loop with a fake clock ---------------------------------------------------------

class FakeClock:
    """A device whose work takes the durations we say; events read the clock when recorded."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = self.syncs = self.flushes = 0

    def fn(self):
        self.calls += 1
        self.now += next(self.durations)

    def flush(self):
        self.flushes += 1
        self.now += 1000.0          # a flush is slow, and must never land inside a timed run

    def sync(self):
        self.syncs += 1

    def event(self):
        clock = self

        class Event:
            def record(self):
                self.t = clock.now

            def elapsed_time(self, other):
                return other.t - self.t
        return Event()


def test_measure_times_each_run_and_takes_the_median():
    # First call (compile + autotune) 5000 ms, 3 warm-up runs of 10 ms, then timed runs.
    timed = [9.0, 11.0, 10.0, 250.0, 10.5, 9.5, 10.2]
    clock = FakeClock([5000.0, 10.0, 10.0, 10.0] + timed)
    timing = bench.measure(clock.fn, synchronize=clock.sync, new_event=clock.event, flush=clock.flush,
                           warmup=3, min_reps=7, min_total_ms=50.0)
    assert timing.estimate_ms == pytest.approx(10.0)
    assert timing.times_ms == pytest.approx(timed)          # neither the first call nor a flush is in any run
    assert timing.median_ms == pytest.approx(10.2)          # the 250 ms outlier does not move the median
    assert timing.reps == 7 and clock.flushes == 7 and clock.calls == 1 + 3 + 7
    assert clock.syncs == 3                                  # after the first call, the warm-up, and the runs


def test_measure_runs_until_the_minimum_total_time():
    clock = FakeClock([1.0] * 1000)
    timing = bench.measure(clock.fn, synchronize=clock.sync, new_event=clock.event, warmup=2, min_reps=5,
                           min_total_ms=40.0)
    assert timing.reps == 40 and timing.median_ms == pytest.approx(1.0)
    clock = FakeClock([0.001] * 1000)
    capped = bench.measure(clock.fn, synchronize=clock.sync, new_event=clock.event, min_reps=5, max_reps=100)
    assert capped.reps == 100
    with pytest.raises(ValueError):
        bench.measure(clock.fn, synchronize=clock.sync, new_event=clock.event, warmup=0)


# ---- the whole grid on a CPU stand-in ----------------------------------------------------------

class WallEvent:
    def record(self):
        import time
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def _cpu_backend() -> bench.Backend:
    return bench.Backend("CPU stand-in", "cpu", lambda: None, WallEvent, None, lambda: None, warmup=1, min_total_ms=0.0)


def _math_attention(q, k, v, causal):
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


def test_grid_with_fake_kernels_reports_oom_and_disagreement(tmp_path):
    def oom_at_64(q, k, v, causal):
        if q.shape[-2] == 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
        return _math_attention(q, k, v, causal)

    runners = {"sdpa": _math_attention, "cudnn": _math_attention, "03": _math_attention, "04": oom_at_64,
               "05": lambda q, k, v, causal: _math_attention(q, k, v, causal) * 1.5,
               "06": _math_attention, "08": ImportError("kernels/triton/08_flash_attention.py is broken")}
    plan = bench.Plan(dtypes=["fp32"], head_dims=[16], seq_lens=[32, 64], modes=[FWD, FWD_BWD], causal=[False, True],
                      kernels=list(bench.KERNELS), tokens=64, heads=2, min_reps=2)
    results: list[Measurement] = []
    lines: list[str] = []
    bench.run_gpu(plan, results, backend=_cpu_backend(), runners=runners, log=lines.append)
    got = {(m.shape.n, m.shape.mode, m.shape.causal, m.kernel): m for m in results}
    # Which kernels run where: 03-05 forward non-causal, 06 forward, 08 and both baselines everywhere.
    assert len(results) == 2 * (7 + 4 + 3 + 3)
    assert {k for (n, mode, causal, k) in got if mode == FWD_BWD} == {"sdpa", "cudnn", "08"}
    assert {k for (n, mode, causal, k) in got if causal and mode == FWD} == {"sdpa", "cudnn", "06", "08"}
    assert got[32, FWD, False, "03"].ok and not got[32, FWD, False, "03"].flagged
    assert got[32, FWD, False, "03"].max_abs_diff == 0.0 and got[32, FWD, False, "03"].reps >= 2
    assert got[64, FWD, False, "04"].status == "OOM" and got[32, FWD, False, "04"].ok
    assert got[32, FWD, False, "05"].flagged and got[32, FWD, False, "05"].rel_rms_diff == pytest.approx(0.5)
    assert got[32, FWD_BWD, True, "sdpa"].ok                 # forward + backward through autograd
    assert got[32, FWD, True, "08"].status == "error" and "ImportError" in got[32, FWD, True, "08"].detail
    assert len(lines) == len(results) and any("DISAGREES" in line for line in lines)
    md = bench.render_markdown(results, RunInfo(device="CPU stand-in", torch_version="t", triton_version="t"))
    assert "| vs SDPA | vs cuDNN | vs previous |" in md
    assert _row(md, "64", "04 pipelined")[3] == "OOM" and _row(md, "64", "04 pipelined")[4:] == ["—"] * 5
    assert _row(md, "32", "SDPA (cuDNN)")[6] == "1.00×"
    assert _row(md, "32", "05 tensor cores")[-1].endswith("⚠")
    png = tmp_path / "plot.png"
    assert bench.write_plot(results, png, "CPU stand-in") and png.stat().st_size > 1000


def test_grid_runs_the_real_kernels_on_the_interpreter():
    """The course's own kernels, called the way the GPU run calls them, agree with SDPA (tiny shapes)."""
    plan = bench.Plan(dtypes=["fp32"], head_dims=[16], seq_lens=[32], modes=[FWD, FWD_BWD], causal=[False, True],
                      kernels=list(bench.KERNELS), tokens=32, heads=2, min_reps=1)
    results: list[Measurement] = []
    bench.run_gpu(plan, results, backend=_cpu_backend(), log=lambda line: None)
    assert len(results) == 7 + 4 + 3 + 3
    # cuDNN's backend exists on CUDA only: on the CPU it is refused, and the table says so rather than failing.
    cudnn = [m for m in results if m.kernel == "cudnn"]
    assert cudnn and all(m.status == "unsupported" for m in cudnn), [(m.status, m.detail) for m in cudnn]
    for m in (m for m in results if m.kernel != "cudnn"):
        assert m.ok, (m.shape.describe(), m.kernel, m.status, m.detail)
        if m.kernel != "sdpa":
            assert m.max_abs_diff is not None and not m.flagged, (m.shape.describe(), m.kernel, m.max_abs_diff)


def test_gpu_main_writes_markdown_and_plot_and_sets_the_exit_status(tmp_path, monkeypatch, capsys):
    """main()'s GPU path with the device faked: files written, exit 1 when a kernel disagrees with SDPA."""
    monkeypatch.setattr(bench, "gpu_ready", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: H100)
    monkeypatch.setattr(bench, "cuda_backend", _cpu_backend)
    runners = {"sdpa": _math_attention, "06": _math_attention, "08": _math_attention}
    monkeypatch.setattr(bench, "load_runners", lambda kernels, log=print: dict(runners))
    out, plot = tmp_path / "docs" / "bench.md", tmp_path / "docs" / "bench.png"
    argv = ["--dtypes", "fp32", "--head-dims", "16", "--seq-lens", "32", "--kernels", "06,08", "--reps", "1",
            "--tokens", "32", "--heads", "2", "--out", str(out), "--plot", str(plot)]
    assert bench.main(argv) == 0
    md = out.read_text()
    assert "--seq-lens 32" in md and "](bench.png)" in md and plot.is_file() and H100 in md
    assert "Lesson 01" in capsys.readouterr().out
    runners["06"] = lambda q, k, v, causal: -_math_attention(q, k, v, causal)
    assert bench.main(argv) == 1
    assert "disagreed with SDPA" in capsys.readouterr().out


def test_a_rewritten_page_keeps_what_was_recorded_beside_the_benchmark():
    """docs/benchmarks.md holds measurements no benchmark run repeats (the backward sweep, the profiler's counters)
    below KEEP_BELOW; a new run replaces everything above it and nothing below."""
    old = "# old run\n\n| stale table |\n\n" + bench.KEEP_BELOW + "\n\n## Backward sweep (H200)\n\n| kept |\n"
    page = bench.keep_recorded("# new run\n\n| new table |\n", old)
    assert page.startswith("# new run\n\n| new table |\n") and "stale" not in page
    assert page.endswith(bench.KEEP_BELOW + "\n\n## Backward sweep (H200)\n\n| kept |\n")
    assert bench.keep_recorded("# new run\n", "# a page without the line\n") == "# new run\n"
    assert bench.keep_recorded("# new run\n", None) == "# new run\n"


def test_the_direct_call_row_is_timed_only_when_named_and_never_autotunes(monkeypatch):
    """08d times lesson 08 called as a model calls it, outside autotune() (the launch tables where they name the
    GPU); it runs only when --kernels names it, beside the autotuned 08."""
    parse = lambda argv: bench.plan_from_args(bench.build_parser().parse_args(argv))  # noqa: E731
    assert "08d" not in [k.key for k in parse([]).kernels]
    assert [k.key for k in parse(["--kernels", "08,08d"]).kernels] == ["sdpa", "08", "08d"]
    assert [k.key for k in parse(["--leaderboard", "--kernels", "08d"]).kernels] == ["sdpa", "cudnn", "08", "08d"]
    asked = []
    monkeypatch.setattr(bench.triton_track, "solution", lambda row, tuned=False: asked.append((row.id, tuned)) or
                        (lambda q, k, v, causal: "o"))
    for key in ("08", "08d"):
        assert bench._load_lesson(bench.BY_KEY[key])(None, None, None, True) == "o"
    assert asked == [("08.flash_attention_triton", True), ("08.flash_attention_triton", False)]
    s = _shape(causal=True)
    page = bench.render_markdown([Measurement(s, "sdpa", ms=2.0), Measurement(s, "08d", ms=1.0)],
                                 RunInfo(device="cpu", torch_version="t", triton_version="x", cuda_version=None,
                                         date="d", command="c", tokens=64, heads=2, min_reps=2))
    assert "| 08 direct call |" in page and "- 08 direct call: the same operator called outside `autotune()`" in page


def test_the_ladder_is_what_the_steps_declare():
    """The benchmark times the Triton steps whose rows declare ``bench_ladder``, in the table's order, each on what its
    ``bench_call`` can run; the leaderboard times the one row that declares ``bench_leaderboard``."""
    from course.tracks import table
    declared = [row for row in table.exercises(track="triton") if row.bench_ladder]
    assert [k.key for k in bench.KERNELS[2:]] + [bench.FP8.key] == [row.bench_ladder[0] for row in declared]
    assert all(bench.BY_KEY[row.bench_ladder[0]].exercise == row.id for row in declared)
    assert bench.BY_KEY["03"].applies_to == {(FWD, False)} and bench.BY_KEY["06"].applies(FWD, True)
    assert not bench.BY_KEY["06"].applies(FWD_BWD, False) and bench.BY_KEY["08"].applies(FWD_BWD, True)
    leaders = [row for row in table.exercises(track="triton") if row.bench_leaderboard]
    assert [row.id for row in leaders] == [bench.LEADER.exercise] == [bench.DIRECT.exercise]
