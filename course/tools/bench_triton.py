"""The Triton track's benchmark: every lesson kernel against PyTorch's FlashAttention (SDPA).

    python -m course.tools.bench_triton              # the full grid on a GPU (several minutes, much of it compiling
                                        # and autotuning), written to docs/benchmarks.md (what `make bench` runs)
    python -m course.tools.bench_triton --quick      # a small subset
    python -m course.tools.bench_triton --leaderboard  # B=1, H=16, N=16k, D=64, causal, bf16, fwd+bwd: 08 vs both SDPAs
    python -m course.tools.bench_triton --leaderboard --kernels 08b7  # and 08 with lesson 07's backward beside it
    python -m course.tools.bench_triton --help       # every option

On a CUDA GPU it times, for each dtype, head dim D, sequence length N, causal or not and mode
(forward, or forward + backward), every lesson kernel that applies and
``torch.nn.functional.scaled_dot_product_attention`` restricted to its flash backend (the reference)
and to its cuDNN backend (a second baseline, the fastest a PyTorch user can call on Hopper), in one
process on the same inputs. Each kernel's output is first compared with SDPA's (max abs diff),
then timed. The results go to a markdown table (``--out``) and a plot (``--plot``).

Without a CUDA GPU there is nothing to time: it says so in one sentence and runs a correctness
smoke instead, every step of ``course.tracks.triton.STEPS`` on one tiny case through
``course.check`` (Triton's interpreter), and exits 0 when all pass.

Which kernels apply where:

* 03 tiled, 04 pipelined, 05 tensor cores: forward, non-causal (they have no mask).
* 06 causal: forward, causal and not.
* 08 flash_attention: forward and forward + backward, causal and not (its backward is its own,
  kernels/triton/08_backward.py: one launch, no atomics). The benchmark autotunes both: the forward over
  lesson 06's list, the backward over 08_backward.py's ``tuning_configs``. What an H200 measured is in
  docs/benchmarks.md; a learner's direct call of ``flash_attention`` (outside ``autotune()``) runs the launch
  tables instead (row ``08d`` when named).
* 08b7 (only when named): forward + backward of the same operator with lesson 07's backward (atomic dQ, its
  dK/dV and dQ kernels autotuned over lesson 07's ``tuning_configs``, the float32 dQ buffer zeroed before
  every timed trial) in place of the capstone's own: the two backwards side by side in one run, on the same
  inputs and the same forward. Lesson 07 has no row of its own.
* Lesson 01's naive kernel and lesson 02's one-sweep kernel are left out: they take a single (N, D)
  head and every query row reads all of K and V (01 reads K twice), so beyond small N they take
  minutes, not milliseconds.

Timing (:mod:`course.tools.timing`, shared with ``bench_cuda``): one untimed call first (Triton
compiles and autotunes on the first call of each new shape), a few warm-up runs that also estimate
the run time, then at least ``--reps`` runs and at least 100 ms in total, each preceded by a write
of 256 MB (larger than any GPU's L2 cache, so no run finds its inputs in L2 from the previous one)
and bracketed by CUDA events; the median is reported. FLOPs: forward 4·B·H·Nq·Nk·D, halved when
causal; forward + backward 3.5× the forward (the backward does 2.5× the forward's matmul work).

The page it writes (``--out``, docs/benchmarks.md by default) is replaced whole, except what follows the line
``KEEP_BELOW`` in the page it replaces: measurements recorded beside the benchmark (a launch-config sweep, a
profiler's counters), each naming its own machine and date, are kept until someone removes them.

The pure parts (FLOP counts, ratios, the markdown, and the timing loop, which is given a callable,
a synchronize function and an event factory) take no GPU and are unit-tested on the CPU. What is measured lives in
:mod:`course.tools.bench_grid`, the page, the console line and the plot in :mod:`course.tools.bench_report`; this
module runs the kernels, times them, runs the smoke and reads the command line, and the names importers use are all
reachable from here.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from course import tiers
from course.paths import REPO
from course.tracks.common import MAX_HEAD_DIM
from course.tools.bench_grid import (BY_KEY, CUDNN, DEFAULT_DTYPES, DEFAULT_HEAD_DIMS, DEFAULT_HEADS, DEFAULT_SEQ_LENS,
                                     DEFAULT_TOKENS, DIRECT, DTYPE_ALIASES, DTYPES, FP8, FP8_TOLERANCE, FWD, FWD_BWD,
                                     KERNELS, LEADER, LESSON07_BACKWARD, MODE_ALIASES, MODES, OPTIONAL, QUICK_DTYPES,
                                     QUICK_HEAD_DIMS, QUICK_SEQ_LENS, SDPA, Kernel, Measurement, Shape, disagrees,
                                     parse_size, peak_tflops, previous_lesson, ratios, size_text, total_flops, vs_cudnn)
from course.tools.bench_report import KEEP_BELOW, RunInfo, console_line, keep_recorded, render_markdown, write_plot
from course.tools.timing import (DEFAULT_REPS, MAX_REPS, MIN_TOTAL_MS, Timing, cuda_l2_flush, forward_flops, measure,
                                 tflops)
from course.exercises import check
from course.inputs import Case
from course.lessons.lesson08_fp8 import Fp8Case
from course.tracks import table
from course.tracks import triton as triton_track
from course.tracks.triton import STEPS, solution

__all__ = [
    "Kernel", "KERNELS", "Shape", "Measurement", "Timing", "Backend", "Plan", "RunInfo", "measure", "forward_flops",
    "total_flops", "tflops", "peak_tflops", "ratios", "render_markdown", "write_plot", "parse_size", "build_parser",
    "run_gpu", "run_smoke", "main", "previous_lesson", "vs_cudnn", "KEEP_BELOW",
]

# ----------------------------------------------------------------------------------------------
# The GPU run
# ----------------------------------------------------------------------------------------------

def classify_error(exc: BaseException) -> tuple[str, str]:
    """(status, one-line detail) of an exception raised while running a kernel."""
    text = " ".join(str(exc).split())
    short = text if len(text) <= 160 else text[:157] + "…"
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower():
        return "OOM", short
    if type(exc).__name__ == "OutOfResources":
        return "out of resources", short
    if "no available kernel" in text.lower() or "no viable backend" in text.lower():
        return "unsupported", short
    return "error", f"{type(exc).__name__}: {short}"


def _load_lesson(kernel: Kernel) -> Callable[..., Any]:
    """``fn(q, k, v, causal) → o`` for a lesson kernel, through course.tracks.triton."""
    # Benchmarks autotune (checks never); the direct-call row times what a model's call launches.
    if kernel.key == LESSON07_BACKWARD.key:
        return _with_lesson07_backward()
    fn = triton_track.solution(triton_track.step(kernel.exercise), tuned=kernel.key != DIRECT.key)
    if kernel.key == FP8.key:
        return _fp8_runner(fn)
    return _CALLS[table.exercise(kernel.exercise).bench_call](fn)


# How a step's solution gives O, by what its row declares (bench_call).
_CALLS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "qkv": lambda fn: lambda q, k, v, causal: fn(q, k, v)[0],
    "qkv_causal": lambda fn: lambda q, k, v, causal: fn(q, k, v, causal)[0],
    "": lambda fn: lambda q, k, v, causal: fn(q, k, v, causal=causal),
}


def _with_lesson07_backward() -> Callable[..., Any]:
    """``fn(q, k, v, causal) → o``: lesson 08's operator as it was before it had its own backward (lesson 06's forward,
    lesson 07's backward with the atomic dQ), both autotuned as the 08 row is."""
    from course.kernels import load_triton_module  # here, not on top: only this row needs lesson 07's file
    forward, backward = load_triton_module("triton/06_causal"), load_triton_module("triton/07_backward")
    tuned = None if tiers.triton_interpreted() else True  # the interpreter has nothing to time: the check configs

    class Lesson07Backward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            with triton_track.autotune(tuned):
                o, lse = forward.causal_attention_forward(q, k, v, causal)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal = causal
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            with triton_track.autotune(tuned):
                dq, dk, dv = backward.attention_backward_bhnd(q, k, v, o, lse, do.contiguous(), causal=ctx.causal,
                                                              dq_mode="atomic")
            return dq, dk, dv, None

    return lambda q, k, v, causal: Lesson07Backward.apply(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal))


def _fp8_runner(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The fp8 forward on inputs quantised to e4m3 once per input tensor (not inside the timed call)."""
    from course.kernels import load_triton_module  # here, not on top: only the fp8 row needs the kernel file
    from course.models import fp8  # here, not on top: only the fp8 row quantises
    if torch.cuda.is_available() and not tiers.triton_interpreted() and torch.cuda.get_device_capability() < (8, 9):
        major, minor = torch.cuda.get_device_capability()
        raise RuntimeError(f"this GPU (sm_{major}{minor}) has no fp8 tensor cores (they start with sm_89: Ada, "
                           "Hopper), so the fp8 forward is not timed here")
    module = load_triton_module(triton_track.step(FP8.exercise).kernel_file)
    quantised: dict[int, tuple] = {}

    def run(q, k, v, causal):
        key = id(q)
        if key not in quantised:  # the first call of a shape: quantise, and check the whole path once
            quantised.clear()
            parts = [fp8.quantize_per_head(t, fp8.E4M3) for t in (q, k, v)]
            quantised[key] = (*(p[0] for p in parts), *(p[1] for p in parts))
            fn(q, k, v, causal=causal)
        q8, k8, v8, dq, dk, dv = quantised[key]
        return module.fp8_attention_forward(q8, k8, v8, dq, dk, dv, causal, 1.0 / math.sqrt(q.shape[-1]))[0]
    return run


def _sdpa(backend: str = "FLASH_ATTENTION") -> Callable[..., Any]:
    """SDPA restricted to one backend: FLASH_ATTENTION (the reference) or CUDNN_ATTENTION."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention
    chosen = getattr(SDPBackend, backend)

    def run(q, k, v, causal):
        # Nq = Nk here, so SDPA's top-left causal mask is the course's bottom-right one.
        with sdpa_kernel(chosen):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def _step(attn: Callable[..., Any], shape: Shape, tensors: dict[str, torch.Tensor]) -> Callable[[], tuple]:
    """The callable that is checked and timed: a forward, or a forward and the backward from dO."""
    q, k, v = tensors["q"], tensors["k"], tensors["v"]
    if shape.mode == FWD:
        return lambda: (attn(q, k, v, shape.causal),)
    do = tensors["do"]

    def forward_backward():
        o = attn(q, k, v, shape.causal)
        # autograd.grad, not .backward(): nothing accumulates into .grad between runs.
        return (o, *torch.autograd.grad(o, (q, k, v), do))
    return forward_backward


_OUTPUT_NAMES = ("o", "dq", "dk", "dv")


def compare_outputs(outputs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> tuple[float, float, str]:
    """(max abs diff, largest relative RMS diff, name of the output with the max abs diff) over matching outputs.

    Outputs are O, then dQ, dK, dV for forward + backward. A non-finite difference gives NaNs.
    """
    max_abs, rel_rms, worst = 0.0, 0.0, _OUTPUT_NAMES[0]
    for name, out, ref in zip(_OUTPUT_NAMES, outputs, reference):
        if out.shape != ref.shape:
            raise ValueError(f"{name} has shape {tuple(out.shape)}, SDPA's has {tuple(ref.shape)}")
        ref32 = ref.detach().float()
        diff = out.detach().float() - ref32
        this_abs = float(diff.abs().max()) if diff.numel() else 0.0
        this_rel = float(diff.norm() / ref32.norm().clamp_min(1e-30))
        if not (math.isfinite(this_abs) and math.isfinite(this_rel)):
            return float("nan"), float("nan"), name
        if this_abs > max_abs:
            max_abs, worst = this_abs, name
        rel_rms = max(rel_rms, this_rel)
    return max_abs, rel_rms, worst


def _make_inputs(shape: Shape, device: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(shape.n * 1000 + shape.d)
    dims = (shape.batch, shape.heads, shape.n, shape.d)
    dtype = DTYPES[shape.dtype]
    grad = shape.mode == FWD_BWD
    t = {name: torch.randn(dims, device=device, dtype=dtype, generator=gen).requires_grad_(grad and name != "do")
         for name in ("q", "k", "v", "do")}
    if not grad:
        del t["do"]
    return t


@dataclass
class Plan:
    dtypes: list[str]
    head_dims: list[int]
    seq_lens: list[int]
    modes: list[str]
    causal: list[bool]
    kernels: list[Kernel]
    tokens: int = DEFAULT_TOKENS
    heads: int = DEFAULT_HEADS
    min_reps: int = DEFAULT_REPS

    def shapes(self) -> Iterable[Shape]:
        for dtype in self.dtypes:
            for d in self.head_dims:
                for mode in self.modes:
                    for causal in self.causal:
                        for n in self.seq_lens:
                            yield Shape(dtype, d, n, causal, mode, max(1, self.tokens // n), self.heads)


@dataclass
class Backend:
    """The device-specific pieces of a run; :func:`cuda_backend` is the real one (tests pass a CPU stand-in)."""

    name: str
    device: str
    synchronize: Callable[[], None]
    new_event: Callable[[], Any]
    flush: Callable[[], Any] | None
    empty_cache: Callable[[], None]
    warmup: int = 3
    min_total_ms: float = MIN_TOTAL_MS


def cuda_backend() -> Backend:
    """CUDA events, torch.cuda.synchronize, and an L2 flush (:func:`course.tools.timing.cuda_l2_flush`)."""
    return Backend(name=torch.cuda.get_device_name(), device="cuda", synchronize=torch.cuda.synchronize,
                   new_event=lambda: torch.cuda.Event(enable_timing=True), flush=cuda_l2_flush(),
                   empty_cache=torch.cuda.empty_cache)


def load_runners(kernels: Sequence[Kernel], log: Callable[[str], None] = print
                 ) -> dict[str, Callable[..., Any] | BaseException]:
    """``fn(q, k, v, causal) → o`` per kernel key; the exception instead where a kernel file does not load."""
    runners: dict[str, Callable[..., Any] | BaseException] = {}
    for kernel in kernels:
        try:
            runners[kernel.key] = (_sdpa() if kernel.key == SDPA.key else _sdpa("CUDNN_ATTENTION")
                                   if kernel.key == CUDNN.key else _load_lesson(kernel))
        except Exception as exc:  # its cells will say so, and the exit status will be 1
            runners[kernel.key] = exc
            log(f"{kernel.label}: could not be loaded: {type(exc).__name__}: {exc}")
    return runners


def run_gpu(plan: Plan, results: list[Measurement], backend: Backend | None = None,
            runners: dict[str, Callable[..., Any] | BaseException] | None = None,
            log: Callable[[str], None] = print) -> list[Measurement]:
    """Measure every (shape, kernel) of the plan, appending to ``results`` as it goes (so an
    interrupted run still has what it measured). ``backend`` defaults to the current CUDA device,
    ``runners`` to the course's kernels and SDPA (see :func:`load_runners`).
    """
    backend = backend or cuda_backend()
    device, name, sync = backend.device, backend.name, backend.synchronize
    if runners is None:
        runners = load_runners(plan.kernels, log)

    for shape in plan.shapes():
        peak = peak_tflops(name, shape.dtype)
        kernels = [k for k in plan.kernels if k.applies(shape.mode, shape.causal)]
        if not kernels:
            continue
        reference: tuple | None = None
        tensors: dict[str, torch.Tensor] = {}
        try:
            tensors = _make_inputs(shape, device)
        except Exception as exc:
            status, detail = classify_error(exc)
            for kernel in kernels:
                results.append(Measurement(shape, kernel.key, status=status, detail=f"allocating inputs: {detail}"))
                log(console_line(results, results[-1], peak))
            backend.empty_cache()
            continue
        for kernel in kernels:
            m = Measurement(shape, kernel.key)
            runner = runners[kernel.key]
            step = outputs = None
            try:
                if isinstance(runner, BaseException):
                    raise runner
                step = _step(runner, shape, tensors)
                outputs = tuple(t.detach() for t in step())   # first call: compiles and autotunes
                sync()
                if kernel.key == SDPA.key:
                    reference = outputs
                elif reference is not None:
                    m.max_abs_diff, m.rel_rms_diff, m.worst_output = compare_outputs(outputs, reference)
                    m.flagged = (disagrees(m.max_abs_diff, m.rel_rms_diff, shape.dtype) if kernel.key != FP8.key
                                 else not m.rel_rms_diff <= FP8_TOLERANCE)
                outputs = None
                timing = measure(step, synchronize=sync, new_event=backend.new_event, flush=backend.flush,
                                 warmup=backend.warmup, min_reps=plan.min_reps, min_total_ms=backend.min_total_ms)
                m.ms, m.reps = timing.median_ms, timing.reps
            except Exception as exc:
                m.status, m.detail = classify_error(exc)
                m.ms = None
            step = outputs = None  # noqa: F841  (drop the closure over this shape's tensors)
            if m.status != "ok":
                try:  # free what the failed call left behind (an OOM's partial allocations)
                    sync()
                    backend.empty_cache()
                except Exception:
                    m.detail += " (the CUDA context is broken after this; later results are unreliable)"
            results.append(m)
            log(console_line(results, m, peak))
        del tensors, reference
        try:
            backend.empty_cache()
        except Exception:
            pass
    return results


# ----------------------------------------------------------------------------------------------
# Without a GPU: the correctness smoke
# ----------------------------------------------------------------------------------------------

def smoke_cases() -> dict[str, Any]:
    """One tiny case per step of the Triton track (interpreter-sized: the whole smoke takes seconds), as each step's
    row declares it (``smoke_case``)."""
    return {row.id: _smoke_case(row.smoke_case) for row in table.exercises(track="triton") if row.smoke_case}


_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _smoke_case(declared: dict[str, Any]) -> Any:
    if "kv_heads" in declared:  # Q heads over fewer K/V heads: an input of the fp8 forward
        return Fp8Case(**declared)
    return Case(**{name: _DTYPES[value] if name == "dtype" else value for name, value in declared.items()})


def run_smoke(log: Callable[[str], None] = print) -> bool:
    """course.check on every step of course.tracks.triton.STEPS with one small case; True if all pass."""

    cases = smoke_cases()
    passed = 0
    for step in STEPS:
        case = cases.get(step.id, Case(17, 17, 16))
        start = time.perf_counter()
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):
                report = check(step.id, solution(step), cases=[case])
            line = f"{report} [{time.perf_counter() - start:.1f} s]"
            passed += 1
        except Exception as exc:
            message = str(exc).strip() or type(exc).__name__
            first, *rest = message.splitlines()
            if not first.startswith(step.id):
                first = f"{step.id}: {type(exc).__name__}: {first}"
            line = "\n".join([f"✗ {first}"] + [f"    {r}" for r in rest])
        log(line)
    log(f"{passed} of {len(STEPS)} steps passed.")
    return passed == len(STEPS)


def no_gpu_sentence() -> str:
    """The one sentence printed when there is nothing to time, naming what this machine has instead."""
    then = "so it runs a correctness smoke of the Triton track on Triton's interpreter instead."
    if torch.cuda.is_available():
        return (f"This benchmark needs Triton running natively on an NVIDIA GPU, and found "
                f"{torch.cuda.get_device_name(0)} with Triton's interpreter switched on "
                f"(COURSE_TIER={os.environ.get('COURSE_TIER', 'auto')}, "
                f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')}), {then}")
    cpu = f"{platform.machine() or 'unknown'}, {os.cpu_count() or '?'} cores"
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        found = f"only a CPU ({cpu}; torch {torch.__version__} is a CPU-only build)"
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        found = (f"no CUDA device ({cpu}; torch {torch.__version__} is built with CUDA {torch.version.cuda} but "
                 f"sees no GPU" + (f", CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ")"))
    return f"This benchmark needs an NVIDIA GPU with CUDA, but found {found}, {then}"


def gpu_ready() -> bool:
    return torch.cuda.is_available() and not tiers.triton_interpreted()


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def _list(parse: Callable[[str], Any]) -> Callable[[str], list]:
    def parse_list(text: str) -> list:
        items = [parse(x) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("give at least one value")
        return list(dict.fromkeys(items))
    return parse_list


def _dtype(text: str) -> str:
    key = DTYPE_ALIASES.get(text.strip().lower())
    if key is None:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; use fp16, bf16 or fp32")
    return key


def _mode(text: str) -> str:
    key = MODE_ALIASES.get(text.strip().lower())
    if key is None:
        raise argparse.ArgumentTypeError(f"unknown mode {text!r}; use fwd or fwd+bwd")
    return key


def _whole_number(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (no upper bound when None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low}..{high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"a {what} must be {bounds}; got {value}")
        return value
    return parse


_head_dim = _whole_number("head dim", 1, MAX_HEAD_DIM)
_positive = _whole_number("whole number", 1)


def _kernel_key(text: str) -> str:
    key = text.strip().lower()
    if key not in BY_KEY:
        raise argparse.ArgumentTypeError(f"unknown kernel {text!r}; use {', '.join(BY_KEY)}")
    return key


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course.tools.bench_triton",
        description="Time the Triton track's kernels (lessons 03-08) against torch SDPA's flash backend on a CUDA "
                    "GPU, verify each against SDPA, and write a markdown table and a plot. Without a CUDA GPU it "
                    "runs a correctness smoke of every step on Triton's interpreter instead.",
        epilog="Exit status: 0 all measured kernels agree with SDPA (or, without a GPU, the smoke passed); "
               "1 a kernel failed, crashed or disagreed with SDPA (or a smoke step failed); 2 bad arguments. "
               "OOM cells are reported, not failures.",
    )
    parser.add_argument("--quick", action="store_true",
                        help=f"a small subset: dtypes {','.join(QUICK_DTYPES)}, head dims "
                             f"{','.join(map(str, QUICK_HEAD_DIMS))}, lengths {','.join(map(size_text, QUICK_SEQ_LENS))} "
                             "(options given explicitly still win)")
    parser.add_argument("--dtypes", type=_list(_dtype), default=None, metavar="LIST",
                        help=f"comma-separated dtypes among fp16, bf16, fp32 (default {','.join(DEFAULT_DTYPES)}; "
                             "SDPA's flash backend has no fp32)")
    parser.add_argument("--head-dims", type=_list(_head_dim), default=None, metavar="LIST",
                        help=f"comma-separated head dims D (default {','.join(map(str, DEFAULT_HEAD_DIMS))})")
    parser.add_argument("--seq-lens", type=_list(parse_size), default=None, metavar="LIST",
                        help="comma-separated sequence lengths N, 'k' = 1024 "
                             f"(default {','.join(map(size_text, DEFAULT_SEQ_LENS))})")
    parser.add_argument("--modes", type=_list(_mode), default=None, metavar="LIST",
                        help="comma-separated modes: fwd (forward only), fwd+bwd (forward and backward) "
                             "(default fwd,fwd+bwd)")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both",
                        help="causal masking: both (default), yes (causal only), no (non-causal only)")
    parser.add_argument("--kernels", type=_list(_kernel_key), default=None, metavar="LIST",
                        help="kernels to time among cudnn,03,04,05,06,08,08d,08f,08b7 (default all but 08d, lesson 08 "
                             "called directly, and 08b7, lesson 08 with lesson 07's backward; SDPA's flash backend "
                             "always runs: it is the reference and the baseline)")
    parser.add_argument("--no-cudnn", action="store_true",
                        help="leave out the second baseline, SDPA's cuDNN backend")
    parser.add_argument("--leaderboard", action="store_true",
                        help=f"only the leaderboard shape: B=1, H={LEADERBOARD['heads']}, "
                             f"N={size_text(LEADERBOARD['n'])}, D={LEADERBOARD['d']}, causal, "
                             f"{LEADERBOARD['dtype']}, forward + backward, lesson 08 against both baselines")
    parser.add_argument("--reps", type=_positive, default=None, metavar="N",
                        help=f"at least N timed runs per measurement (default {DEFAULT_REPS}, --quick 10); runs "
                             f"continue until {MIN_TOTAL_MS:g} ms in total, up to {MAX_REPS}")
    parser.add_argument("--heads", type=_positive, default=DEFAULT_HEADS, metavar="H",
                        help=f"attention heads H (default {DEFAULT_HEADS})")
    parser.add_argument("--tokens", type=_positive, default=DEFAULT_TOKENS, metavar="T",
                        help=f"tokens per batch B·N; B = T / N (default {DEFAULT_TOKENS})")
    parser.add_argument("--out", type=Path, default=None, metavar="PATH",
                        help="markdown file to write (default docs/benchmarks.md in the repository)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PATH",
                        help="plot to write, TFLOP/s against N per kernel (default docs/benchmarks.png in the "
                             "repository)")
    parser.add_argument("--smoke", action="store_true",
                        help="run only the correctness smoke (what a machine without a GPU does), even on a GPU")
    return parser


def plan_from_args(args: argparse.Namespace) -> Plan:
    if args.leaderboard:
        return leaderboard_plan(args.reps, cudnn=not args.no_cudnn, direct=DIRECT.key in (args.kernels or []),
                                lesson07=LESSON07_BACKWARD.key in (args.kernels or []))
    quick = args.quick
    keys = set(args.kernels or [k.key for k in KERNELS] + [FP8.key])
    if args.no_cudnn:
        keys.discard(CUDNN.key)
    return Plan(
        dtypes=args.dtypes or list(QUICK_DTYPES if quick else DEFAULT_DTYPES),
        head_dims=args.head_dims or list(QUICK_HEAD_DIMS if quick else DEFAULT_HEAD_DIMS),
        seq_lens=sorted(args.seq_lens or (QUICK_SEQ_LENS if quick else DEFAULT_SEQ_LENS)),
        modes=args.modes or list(MODES),
        causal={"both": [False, True], "yes": [True], "no": [False]}[args.causal],
        kernels=[k for k in KERNELS + OPTIONAL if k.key == SDPA.key or k.key in keys],
        tokens=args.tokens, heads=args.heads,
        min_reps=args.reps or (10 if quick else DEFAULT_REPS),
    )


# A well-known course leaderboard's shape: one sequence of 16k tokens, 16 heads of 64, causal, bf16, forward and
# backward together.
LEADERBOARD = {"n": 16384, "heads": 16, "d": 64, "dtype": "bf16"}


def leaderboard_plan(reps: int | None = None, cudnn: bool = True, direct: bool = False, lesson07: bool = False) -> Plan:
    """The leaderboard shape: SDPA, cuDNN and lesson 08 autotuned, with ``direct`` lesson 08 called directly, and with
    ``lesson07`` lesson 08 with lesson 07's backward (the two backwards side by side)."""
    keys = ({SDPA.key, LEADER.key} | ({CUDNN.key} if cudnn else set()) | ({DIRECT.key} if direct else set())
            | ({LESSON07_BACKWARD.key} if lesson07 else set()))
    return Plan(dtypes=[LEADERBOARD["dtype"]], head_dims=[LEADERBOARD["d"]], seq_lens=[LEADERBOARD["n"]],
                modes=[FWD_BWD], causal=[True], kernels=[k for k in KERNELS + OPTIONAL if k.key in keys],
                tokens=LEADERBOARD["n"], heads=LEADERBOARD["heads"], min_reps=reps or DEFAULT_REPS)


def _versions() -> tuple[str, str]:
    try:
        import triton
        triton_version = triton.__version__
    except Exception:
        triton_version = "not installed"
    return torch.__version__, triton_version


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.smoke or not gpu_ready():
        if not args.smoke:
            print(no_gpu_sentence(), flush=True)
        return 0 if run_smoke(log=lambda line: print(line, flush=True)) else 1

    plan = plan_from_args(args)
    out = args.out or REPO / "docs" / "benchmarks.md"
    plot = args.plot or REPO / "docs" / "benchmarks.png"
    device = torch.cuda.get_device_name()
    torch_version, triton_version = _versions()
    print(f"{device}: torch {torch_version} (CUDA {torch.version.cuda}), triton {triton_version}")
    print("Lesson 01's naive kernel and lesson 02's one-sweep kernel are left out: they take one (N, D) head and are "
          "far too slow beyond small N.")
    started = time.perf_counter()
    results: list[Measurement] = []
    interrupted = False
    try:
        run_gpu(plan, results, log=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        interrupted = True
        print(f"interrupted: writing the {len(results)} measurements taken so far.")
    command = " ".join(["python -m course.tools.bench_triton", *(shlex.quote(a) for a in argv)])
    info = RunInfo(device=device, torch_version=torch_version, triton_version=triton_version,
                   cuda_version=torch.version.cuda,
                   date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), command=command,
                   tokens=plan.tokens, heads=plan.heads, min_reps=plan.min_reps)
    if args.quick:
        info.notes.append("A --quick run: a subset of the grid.")
    if args.leaderboard:
        info.notes.append("A --leaderboard run: only the leaderboard shape (B=1, H=16, N=16k, D=64, causal, bf16, "
                          "forward + backward).")
    if interrupted:
        info.notes.append("The run was interrupted: the tables are incomplete.")
    info.notes.append(f"The whole run took {time.perf_counter() - started:.0f} s.")
    out.parent.mkdir(parents=True, exist_ok=True)
    if write_plot(results, plot, device):
        info.plot = os.path.relpath(plot.resolve(), out.resolve().parent)
        print(f"wrote {plot}")
    out.write_text(keep_recorded(render_markdown(results, info), out.read_text() if out.exists() else None))
    print(f"wrote {out}")
    failed = [m for m in results if m.status == "error" or m.flagged]
    if failed:
        print(f"{len(failed)} measurement(s) failed or disagreed with SDPA:")
        for m in failed:
            print(f"  {m.shape.describe()} {BY_KEY[m.kernel].label}: {m.detail or 'output differs from SDPA'}")
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
