"""The CUDA C ladder's benchmark, in the manner of llm.c's dev/cuda: validate every step, then time it.

    python -m course.tools.bench_cuda            # validate on the CPU runtime; on a GPU also validate there and time
    python -m course.tools.bench_cuda --quick    # fewer tile sizes and shapes
    python -m course.tools.bench_cuda --help     # every option

1. Validation, always: every step of the ladder (kernels/cuda/02-06) runs on the CPU SIMT runtime at
   several tile sizes (``TILE_CHOICES``), on shapes that are no multiple of any tile, and is compared
   with the float64 oracle within the error budget (O, and LSE where the step writes it; causal and
   not for step 06). A step that fails is reported and the others go on.
2. On an NVIDIA GPU (``course.simt.gpu.launch_cuda``: NVRTC through cupy or cuda-python), the same
   validation on the GPU, lesson 01's kernel included, then timings on (heads, N, N, D) float16 inputs:
   every tile choice of every step, the best one reported, next to the previous step and ``torch`` SDPA
   on the same inputs; lesson 01's naive kernel runs one head per launch. A step that fails on the GPU
   (it does not compile there, or its answer is wrong) is not timed, since timing a wrong kernel tells
   nothing: its row in the table says why, and every other step is still timed. A step that failed only
   on the CPU runtime is timed, with a note. The table goes to ``docs/cuda_benchmarks.md`` (``--out``)
   with the device's name; the exit status is 1 when any validation failed.
   Timing follows ``bench_triton``'s policy (:mod:`course.tools.timing`: an untimed first call,
   warm-up, at least ``--reps`` runs and 100 ms, an L2 flush before each run, the median), but a
   run's time is ``LaunchResult.seconds`` (launch to completion, measured on the host around the
   launch and a device synchronize: it includes a few microseconds of launch overhead, small next
   to kernels of milliseconds), not CUDA events, which would also count the launcher's host work
   before the launch. SDPA is timed the same way (synchronize, call, synchronize). Steps 02-04
   compute in float32 and get float32 copies of the inputs (made outside the timed launch).
3. Without a GPU it says so in one sentence, runs only the validation, and exits 0 when it passed.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from course.grading.compare_attention import check_attention
from course.errors import CheckFailed, CourseError
from course.inputs import Case
from course.kernels import kernel_path
from course.paths import REPO
from course.simt import gpu
from course.tools.timing import DEFAULT_REPS, MIN_TOTAL_MS, cuda_l2_flush, forward_flops, measure_self_timed, tflops
from course.tracks import table
from course.tracks.cuda import STEPS, Tiles, forward, module_for
from course.tracks.cuda_gpu import GpuRunner, run_step

__all__ = ["LADDER", "TILE_CHOICES", "LadderResult", "gpu_status", "validate_cpu", "validate_gpu", "time_gpu",
           "render_markdown", "main"]

# The forward ladder of the CUDA track: the steps whose rows declare ladder tiles (lesson 01 is timed as the naive
# baseline). Tile sizes every step is validated at (and, on a GPU, timed at): the step's default, then its row's.
TILE_CHOICES: dict[str, list[Tiles]] = {row.id: [STEPS[row.id].tiles] + [Tiles(*t) for t in row.ladder_tiles]
                                        for row in table.exercises(track="cuda") if row.ladder_tiles}
LADDER = list(TILE_CHOICES)
NAIVE = table.ladder_baseline("cuda").id  # the naive baseline: one thread per query row, one head per launch
DEFAULT_OUT = REPO / "docs" / "cuda_benchmarks.md"


def tiles_text(tiles: Tiles) -> str:
    return f"block_m={tiles.block_m}" + (f" block_n={tiles.block_n}" if tiles.block_n else "")


def _choices(exercise: str, quick: bool) -> list[Tiles]:
    return TILE_CHOICES[exercise][:2] if quick else TILE_CHOICES[exercise]


def validation_cases(exercise: str, lengths: Sequence[tuple[int, int]] = ((70, 93), (131, 57)),
                     seed: int = 31) -> list[Case]:
    """Two cases of (Nq, Nk) ``lengths``: a peaky one at a head dim that is no power of two, a plain one
    at D = 64; causal copies too for step 06. The default lengths are no multiple of any tile choice
    and have Nq != Nk both ways."""
    step = STEPS[exercise]
    dt = torch.float16 if step.half_inputs else torch.float32
    d = 48 if step.d_multiple == 16 else 36 if step.d_multiple == 4 else 40
    (nq_peaky, nk_peaky), (nq_plain, nk_plain) = lengths
    cases = [Case(nq_peaky, nk_peaky, d, kind="peaky", dtype=dt, seed=seed),
             Case(nq_plain, nk_plain, 64, dtype=dt, seed=seed + 1)]
    if step.causal:
        cases += [replace(c, causal=True, seed=c.seed + 10) for c in cases]
    return cases


def _check(exercise: str, fn: Callable[..., Any], device: str = "cpu"):
    step = STEPS[exercise]
    return check_attention(exercise, fn, validation_cases(exercise), with_lse=step.writes_lse,
                           pass_causal=step.causal, device=device)


def _function(exercise: str, tiles: Tiles, module=None, runner=None) -> Callable[..., Any]:
    """The step as check_attention calls it, on the CPU runtime (``module``) or through ``runner``."""
    if STEPS[exercise].causal:
        return lambda q, k, v, causal=False: forward(exercise, module, q, k, v, None, causal, tiles, runner=runner)
    return lambda q, k, v: forward(exercise, module, q, k, v, None, False, tiles, runner=runner)


def validate_cpu(steps: Sequence[str] = LADDER, quick: bool = False, log: Callable[[str], None] = print
                 ) -> dict[str, str]:
    """Every step at every tile choice on the CPU runtime against the oracle: {step: why it failed} for the
    steps that failed (empty when all passed). A failing step does not stop the others."""
    failed: dict[str, str] = {}
    for exercise in steps:
        try:
            module = module_for(exercise)
        except CourseError as e:  # it does not compile for the CPU runtime here
            log(f"✗ {exercise} does not compile for the CPU runtime:\n{e}")
            failed[exercise] = f"does not compile for the CPU runtime: {_short(e)}"
            continue
        for tiles in _choices(exercise, quick):
            try:
                report = _check(exercise, _function(exercise, tiles, module=module))
            except (CheckFailed, CourseError) as failure:
                log(f"✗ {exercise} {tiles_text(tiles)} on the CPU runtime:\n{failure}")
                failed.setdefault(exercise, f"{tiles_text(tiles)} failed on the CPU runtime: {_short(failure)}")
                continue
            log(f"✓ {exercise} {tiles_text(tiles)}: {report.cases} cases within budget "
                f"on the CPU runtime (worst {report.worst_ratio:.2f}× of budget)")
    return failed


# ------------------------------------------------------------------------------------------------
# The GPU
# ------------------------------------------------------------------------------------------------

def gpu_status() -> tuple[bool, str]:
    """Whether kernels can be launched and timed on an NVIDIA GPU here, and if not, why."""
    ok, why = gpu.cuda_available()
    if not ok:
        return False, why
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} sees no CUDA device (it is needed for the inputs and for SDPA)"
    return True, why


class _GpuRunner:
    """``forward``'s runner on the GPU: launch_cuda on the step's file; keeps each launch's seconds."""

    def __init__(self, exercise: str):
        self.path = str(kernel_path(STEPS[exercise].kernel_file))
        self.seconds: list[float] = []

    def __call__(self, name: str, grid, block, args, shared_mem: int) -> None:
        self.seconds.append(gpu.launch_cuda(None, self.path, name, grid, block, args, shared_mem=shared_mem).seconds)


def _naive_on_gpu(q, k, v):
    """Lesson 01's kernel on the GPU, as check_attention calls it."""
    runner = GpuRunner(path=kernel_path(STEPS[NAIVE].kernel_file))
    return run_step(NAIVE, runner, q, k, v)


def validate_gpu(steps: Sequence[str] = LADDER, quick: bool = False, log: Callable[[str], None] = print,
                 naive: bool = True) -> dict[str, str]:
    """The CPU validation on the GPU (lesson 01's kernel too, with ``naive``): {step: why it failed} for the
    steps that failed at any tile choice (empty when all passed). A failing step does not stop the others."""
    failed: dict[str, str] = {}
    work = ([(NAIVE, None)] if naive else []) + [(e, t) for e in steps for t in _choices(e, quick)]
    for exercise, tiles in work:
        label = f"{exercise} {tiles_text(tiles)}" if tiles else exercise
        try:
            if tiles is None:
                report = check_attention(exercise, _naive_on_gpu, validation_cases(exercise), device="cuda")
            else:
                report = _check(exercise, _function(exercise, tiles, runner=_GpuRunner(exercise)), device="cuda")
        except (CheckFailed, CourseError) as failure:
            log(f"✗ {label} on the GPU:\n{failure}")
            failed.setdefault(exercise, f"{tiles_text(tiles) + ' ' if tiles else ''}failed on the GPU: "
                                        f"{_short(failure)}")
            continue
        log(f"✓ {label}: {report.cases} cases within budget on the GPU (worst {report.worst_ratio:.2f}× of budget)")
    return failed


@dataclass
class LadderResult:
    """One row of the table: a step (at its fastest tiles), lesson 01 or SDPA on one shape."""

    shape: tuple[int, int, int, bool]   # heads, N, D, causal
    name: str                           # "02.online_softmax_cuda", "torch SDPA", ...
    ms: float | None
    tiles: Tiles | None = None
    note: str = ""

    @property
    def tflops(self) -> float | None:
        heads, n, d, causal = self.shape
        return tflops(forward_flops(1, heads, n, n, d, causal), self.ms)


def _median_ms(once: Callable[[], float], reps: int, flush: Callable[[], object]) -> float:
    """Median of ``once()`` (seconds per call, as launches report them) in milliseconds.

    At most 10× ``reps`` runs: each launch also costs host work its seconds do not show.
    """
    return measure_self_timed(lambda: once() * 1e3, flush=flush, min_reps=reps, max_reps=10 * reps).median_ms


def _time_step(exercise: str, tiles: Tiles, q, k, v, causal: bool, reps: int, flush: Callable[[], object]) -> float:
    runner = _GpuRunner(exercise)
    if not STEPS[exercise].half_inputs:  # float32 copies once, outside the timed launches
        q, k, v = (t.float() for t in (q, k, v))

    def once() -> float:
        runner.seconds.clear()
        forward(exercise, None, q, k, v, None, causal, tiles, runner=runner)
        return sum(runner.seconds)
    return _median_ms(once, reps, flush)


def _time_naive(q, k, v, reps: int, flush: Callable[[], object]) -> float:
    path = str(kernel_path(STEPS[NAIVE].kernel_file))
    q, k, v = (t.float().contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    heads, n, d = q.shape
    blocks = (n + 63) // 64

    def once() -> float:  # lesson 01's kernel takes one head per launch
        return sum(gpu.launch_cuda(None, path, STEPS[NAIVE].kernel, (blocks,), (64,),
                                   (q[h], k[h], v[h], o[h], n, n, d, 1.0 / math.sqrt(d))).seconds for h in range(heads))
    return _median_ms(once, reps, flush)


def _time_sdpa(q, k, v, causal: bool, reps: int, flush: Callable[[], object]) -> float:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q4, k4, v4 = (t[None] for t in (q, k, v))

    def once() -> float:
        torch.cuda.synchronize()  # the flush before this run is not part of it
        start = time.perf_counter()
        sdpa(q4, k4, v4, is_causal=causal)
        torch.cuda.synchronize()
        return time.perf_counter() - start
    return _median_ms(once, reps, flush)


def time_gpu(shapes: Sequence[tuple[int, int, int, bool]], quick: bool, reps: int,
             log: Callable[[str], None] = print, steps: Sequence[str] = LADDER,
             untimed: dict[str, str] | None = None, notes: dict[str, str] | None = None) -> list[LadderResult]:
    """Every step on every shape (its fastest tile choice), lesson 01's kernel and SDPA. ``untimed``: steps
    not to time, with why (they failed validation on the GPU); ``notes``: a remark for a step's rows."""
    untimed, notes = untimed or {}, notes or {}
    results: list[LadderResult] = []
    flush = cuda_l2_flush()
    for heads, n, d, causal in shapes:
        shape = (heads, n, d, causal)
        rows: list[LadderResult] = []
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(heads, n, d, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
        if not causal:
            if NAIVE in untimed:
                rows.append(LadderResult(shape, NAIVE, None, note=f"not timed: {untimed[NAIVE]}"))
            else:
                try:
                    rows.append(LadderResult(shape, NAIVE, _time_naive(q, k, v, max(2, reps // 4), flush)))
                except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
                    rows.append(LadderResult(shape, NAIVE, None, note=_short(e)))
        for exercise in steps:
            if causal and not STEPS[exercise].causal:
                continue
            if exercise in untimed:
                rows.append(LadderResult(shape, exercise, None, note=f"not timed: {untimed[exercise]}"))
                continue
            best: LadderResult | None = None
            for tiles in _choices(exercise, quick):
                try:
                    t = LadderResult(shape, exercise, _time_step(exercise, tiles, q, k, v, causal, reps, flush), tiles,
                                     note=notes.get(exercise, ""))
                except Exception as e:  # noqa: BLE001
                    t = LadderResult(shape, exercise, None, tiles, note=_short(e))
                if best is None or (t.ms is not None and (best.ms is None or t.ms < best.ms)):
                    best = t
            rows.append(best)  # type: ignore[arg-type]
        rows.append(LadderResult(shape, "torch SDPA", _time_sdpa(q, k, v, causal, reps, flush)))
        for t in rows:
            log(f"{_shape_text(shape)}  {t.name:22s} " + (f"{t.ms:9.3f} ms" if t.ms else f"failed: {t.note}"))
        results += rows
    return results


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 140 else text[:137] + "…"


def _shape_text(shape: tuple[int, int, int, bool]) -> str:
    heads, n, d, causal = shape
    return f"H={heads} N={n} D={d}{' causal' if causal else ''}"


def _cell(text: str) -> str:
    """``text`` safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def render_markdown(results: Sequence[LadderResult], device: str, when: str) -> str:
    """The timings as markdown: one table per shape; each step against the previous one and SDPA."""
    lines = ["# The CUDA C ladder on a GPU", "",
             f"Measured with `python -m course.tools.bench_cuda` on **{device}**, {when}. Inputs (H, N, N, D) float16 "
             "(float32 copies for steps 02-04); each step at its fastest tile choice; times are medians of "
             "launch-to-completion on the host (see the module's docstring).", ""]
    shapes = list(dict.fromkeys(t.shape for t in results))
    for shape in shapes:
        rows = [t for t in results if t.shape == shape]
        sdpa = next((t.ms for t in rows if t.name == "torch SDPA"), None)
        lines += [f"## {_shape_text(shape)}", "",
                  "| step | tiles | ms | TFLOP/s | vs previous step | vs SDPA | note |",
                  "|---|---|--:|--:|--:|--:|---|"]
        previous = None
        for t in rows:
            tiles = tiles_text(t.tiles) if t.tiles else ""
            if t.ms is None:
                lines.append(f"| {t.name} | {tiles} | – | | | | {_cell(t.note) or 'failed'} |")
                continue
            vs_prev = f"{previous / t.ms:.2f}× faster" if previous and t.name != "torch SDPA" else ""
            vs_sdpa = f"{t.ms / sdpa:.2f}× SDPA's time" if sdpa and t.name != "torch SDPA" else ""
            lines.append(f"| {t.name} | {tiles} | {t.ms:.3f} | {t.tflops:.1f} | {vs_prev} | {vs_sdpa} | {_cell(t.note)} |")
            if t.name != "torch SDPA":
                previous = t.ms
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m course.tools.bench_cuda", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two tile choices per step and one shape")
    p.add_argument("--steps", default=",".join(LADDER), help="comma-separated exercise ids (default: the whole ladder)")
    p.add_argument("--heads", type=int, default=16, help="heads per launch on the GPU (default 16)")
    p.add_argument("--sizes", default="1024,4096", help="sequence lengths N on the GPU (default 1024,4096)")
    p.add_argument("--head-dims", default="64,128", help="head dims D on the GPU (default 64,128)")
    p.add_argument("--reps", type=int, default=DEFAULT_REPS,
                   help=f"at least this many timed runs (default {DEFAULT_REPS}) and {MIN_TOTAL_MS:g} ms of them")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"markdown output (default {DEFAULT_OUT})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ok, why = gpu_status()
    if not ok:
        print(f"No NVIDIA GPU can run kernels here ({why.rstrip('.')}), so only the CPU-runtime validation runs "
              f"and nothing is timed.")
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in LADDER]
    if unknown:
        print(f"not a step of the CUDA ladder: {', '.join(unknown)}; the steps are {', '.join(LADDER)}", file=sys.stderr)
        return 2
    print("Validating every step on the CPU SIMT runtime against the float64 oracle:")
    cpu_failed = validate_cpu(steps, quick=args.quick)
    if not ok:
        _summary(cpu_failed, {})
        return 1 if cpu_failed else 0
    print("Validating every step on the GPU:")
    gpu_failed = validate_gpu(steps, quick=args.quick)
    sizes = [int(s) for s in args.sizes.split(",")][:1 if args.quick else None]
    dims = [int(s) for s in args.head_dims.split(",")][:1 if args.quick else None]
    shapes = [(args.heads, n, d, causal) for n in sizes for d in dims for causal in (False, True)]
    notes = {e: f"CPU runtime: {why}" for e, why in cpu_failed.items() if e not in gpu_failed}
    results = time_gpu(shapes, args.quick, args.reps, steps=steps, untimed=gpu_failed, notes=notes)
    device = torch.cuda.get_device_name(0)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_markdown(results, device, when))
    print(f"Wrote {args.out}")
    _summary(cpu_failed, gpu_failed)
    return 1 if cpu_failed or gpu_failed else 0


def _summary(cpu_failed: dict[str, str], gpu_failed: dict[str, str]) -> None:
    for where, failed in (("on the CPU runtime", cpu_failed), ("on the GPU", gpu_failed)):
        if failed:
            print(f"Failed validation {where}: {', '.join(failed)}.")


if __name__ == "__main__":
    sys.exit(main())
