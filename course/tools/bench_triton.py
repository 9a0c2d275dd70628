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
a synchronize function and an event factory) take no GPU and are unit-tested on the CPU.
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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from course.models import roofline
from course import tiers
from course.paths import REPO
from course.tracks.common import MAX_HEAD_DIM
from course.tools.timing import (DEFAULT_REPS, FLUSH_BYTES, MAX_REPS, MIN_TOTAL_MS, Timing, cuda_l2_flush,
                                 forward_flops, measure, tflops)
from course.exercises import check
from course.inputs import Case
from course.lessons.lesson08 import Fp8Case
from course.tracks import table
from course.tracks import triton as triton_track
from course.tracks.triton import STEPS, solution

__all__ = [
    "Kernel", "KERNELS", "Shape", "Measurement", "Timing", "Backend", "Plan", "RunInfo", "measure", "forward_flops",
    "total_flops", "tflops", "peak_tflops", "ratios", "render_markdown", "write_plot", "parse_size", "build_parser",
    "run_gpu", "run_smoke", "main",
]

# ----------------------------------------------------------------------------------------------
# What is measured
# ----------------------------------------------------------------------------------------------

FWD, FWD_BWD = "fwd", "fwd+bwd"
MODES = (FWD, FWD_BWD)
MODE_NAMES = {FWD: "forward", FWD_BWD: "forward + backward"}
_MODE_ALIASES = {"fwd": FWD, "forward": FWD, "f": FWD,
                 "fwd+bwd": FWD_BWD, "fwd_bwd": FWD_BWD, "fwdbwd": FWD_BWD, "forward+backward": FWD_BWD,
                 "bwd": FWD_BWD, "backward": FWD_BWD}

DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
_DTYPE_ALIASES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
                  "bf16": "bf16", "bfloat16": "bf16",
                  "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32"}

DEFAULT_DTYPES = ("fp16", "bf16")
DEFAULT_HEAD_DIMS = (64, 128)
DEFAULT_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_DTYPES = ("fp16",)
QUICK_HEAD_DIMS = (64, 128)
QUICK_SEQ_LENS = (1024, 4096)
DEFAULT_TOKENS = 16384      # B · N: every N gets the same number of tokens, so B = 16384 / N
DEFAULT_HEADS = 16

# Output vs SDPA: relative RMS difference above which a kernel is flagged as disagreeing. Two
# correct kernels differ by their rounding: ~1e-3 relative in fp16, ~8x that in bf16 (3 fewer
# mantissa bits); a wrong mask or a missed rescale is off by 10% or more.
DIFF_TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2, "fp32": 5e-3}


@dataclass(frozen=True)
class Kernel:
    key: str                 # "03" … "08", "sdpa"
    label: str               # shown in tables and the plot
    exercise: str | None     # course.tracks.triton step (None: PyTorch's SDPA)
    applies_to: frozenset    # {(mode, causal)} this kernel can run

    @property
    def lesson(self) -> int | None:
        return int(self.key) if self.key.isdigit() else None

    def applies(self, mode: str, causal: bool) -> bool:
        return (mode, causal) in self.applies_to


_FORWARD_PLAIN = frozenset({(FWD, False)})
_FORWARD_ANY = frozenset({(FWD, False), (FWD, True)})
_EVERYTHING = frozenset({(m, c) for m in MODES for c in (False, True)})

SDPA = Kernel("sdpa", "SDPA (flash)", None, _EVERYTHING)
# The second baseline: SDPA's cuDNN backend, the fastest attention a PyTorch user can call on a Hopper GPU.
# SDPA (flash) stays the reference every output is compared with; cuDNN is compared with it like a lesson kernel.
CUDNN = Kernel("cudnn", "SDPA (cuDNN)", None, _EVERYTHING)
BASELINES = (SDPA.key, CUDNN.key)
KERNELS: tuple[Kernel, ...] = (
    SDPA,
    CUDNN,
    Kernel("03", "03 tiled", "03.tiled_triton", _FORWARD_PLAIN),
    Kernel("04", "04 pipelined", "04.double_buffer_triton", _FORWARD_PLAIN),
    Kernel("05", "05 tensor cores", "05.mma_triton", _FORWARD_PLAIN),
    Kernel("06", "06 causal", "06.causal_triton", _FORWARD_ANY),
    Kernel("08", "08 flash_attention", "08.flash_attention_triton", _EVERYTHING),
)
# Timed only when named (--kernels ...,08d): lesson 08's operator called directly, outside autotune(), as a model
# calls it: the launch tables of lessons 06 and 07 on a GPU family they name, the check configs elsewhere.
DIRECT = Kernel("08d", "08 direct call", "08.flash_attention_triton", _EVERYTHING)
# Lesson 08's fp8 forward (Q, K, V in e4m3, per-head scales): timed by default from the command line, beside the
# capstone's 16-bit forward; its inputs are quantised once per shape, so the kernel alone is timed. A GPU before
# sm_89 has no fp8 tensor cores: its rows say so instead of a time.
FP8 = Kernel("08f", "08 fp8 forward", "08.fp8_forward_triton", _FORWARD_ANY)
FP8_TOLERANCE = 0.1  # relative RMS against SDPA: e4m3 rounds Q, K, V and P by up to 1/16 each (course.models.fp8)
# Timed only when named (--kernels ...,08b7): lesson 08's forward with lesson 07's backward (atomic dQ), both autotuned:
# what the capstone ran before it had its own backward, beside the 08 row's time.
_BACKWARD_ONLY = frozenset({(FWD_BWD, False), (FWD_BWD, True)})
LESSON07_BACKWARD = Kernel("08b7", "08 with lesson 07's backward", "08.flash_attention_triton", _BACKWARD_ONLY)
OPTIONAL: tuple[Kernel, ...] = (DIRECT, FP8, LESSON07_BACKWARD)
_BY_KEY = {k.key: k for k in KERNELS + OPTIONAL}


@dataclass(frozen=True)
class Shape:
    """One point of the grid: Q, K, V are (batch, heads, n, d), Nq = Nk = n."""

    dtype: str
    d: int
    n: int
    causal: bool
    mode: str
    batch: int
    heads: int

    @property
    def group(self) -> tuple[str, int, str, bool]:
        """Which table (and plot panel) the shape belongs to: everything but N."""
        return (self.dtype, self.d, self.mode, self.causal)

    def describe(self) -> str:
        return f"{self.dtype} D={self.d} N={size_text(self.n)} {'causal' if self.causal else 'non-causal'} {self.mode}"


@dataclass
class Measurement:
    shape: Shape
    kernel: str                       # Kernel.key
    ms: float | None = None           # median time of one call; None when it did not run
    status: str = "ok"                # ok | OOM | out of resources | unsupported | error | skipped
    detail: str = ""                  # the error, when status is not ok
    max_abs_diff: float | None = None  # vs SDPA, over every output compared
    rel_rms_diff: float | None = None
    worst_output: str = ""            # which output (o, dq, dk, dv) had the largest difference
    flagged: bool = False             # disagrees with SDPA beyond DIFF_TOLERANCE
    reps: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.ms is not None and self.ms > 0

    @property
    def tflops(self) -> float | None:
        return tflops(total_flops(self.shape), self.ms) if self.ok else None


# ----------------------------------------------------------------------------------------------
# FLOPs, ratios, peaks (pure)
# ----------------------------------------------------------------------------------------------

def total_flops(shape: Shape) -> float:
    """FLOPs of one call in ``shape.mode``: the forward, or 3.5× it for forward + backward.

    The backward does five matmuls of the forward's size (S again, dV, dP, dQ, dK) against the
    forward's two: 2.5× the forward, 3.5× for both passes together.
    """
    fwd = forward_flops(shape.batch, shape.heads, shape.n, shape.n, shape.d, shape.causal)
    return fwd * (3.5 if shape.mode == FWD_BWD else 1.0)


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """Dense fp16/bf16 tensor-core peak of the device, where we know it (H100 SXM, H200); else None.

    PCIe and NVL variants run at lower clocks and power, so they are not given the SXM number.
    """
    if dtype not in ("fp16", "bf16"):
        return None
    name = device_name.upper()
    if "PCIE" in name or "NVL" in name:
        return None
    sxm = roofline.DEVICES["H100 SXM"].peak_tflops_fp16
    if "H200" in name:
        return sxm                      # same GH100 die and clocks as the H100 SXM, more memory
    if "H100" in name and ("SXM" in name or "HBM3" in name):
        return sxm                      # the SXM part reports itself as "NVIDIA H100 80GB HBM3"
    return None


def previous_lesson(measurements: Sequence[Measurement], m: Measurement) -> Measurement | None:
    """The measurement of the latest earlier lesson on the same shape (08 → 06 → 05 → 04 → 03)."""
    lesson = _BY_KEY[m.kernel].lesson
    if lesson is None:
        return None
    earlier = [x for x in measurements
               if x.shape == m.shape and _BY_KEY[x.kernel].lesson is not None and _BY_KEY[x.kernel].lesson < lesson]
    return max(earlier, key=lambda x: _BY_KEY[x.kernel].lesson, default=None)


def ratios(measurements: Sequence[Measurement], m: Measurement) -> tuple[float | None, float | None]:
    """(speed vs SDPA, speed vs the previous lesson's kernel) on the same shape; >1 means faster.

    None where either side did not run (or there is no previous lesson for this mode).
    """
    if not m.ok:
        return None, None
    sdpa = next((x for x in measurements if x.shape == m.shape and x.kernel == SDPA.key), None)
    vs_sdpa = sdpa.ms / m.ms if (m.kernel != SDPA.key and sdpa is not None and sdpa.ok) else None
    prev = previous_lesson(measurements, m)
    vs_prev = prev.ms / m.ms if (prev is not None and prev.ok) else None
    return vs_sdpa, vs_prev


def vs_cudnn(measurements: Sequence[Measurement], m: Measurement) -> float | None:
    """Speed against SDPA's cuDNN backend on the same shape (>1 is faster); None where either did not run."""
    if not m.ok or m.kernel in BASELINES:
        return None
    cudnn = next((x for x in measurements if x.shape == m.shape and x.kernel == CUDNN.key), None)
    return cudnn.ms / m.ms if (cudnn is not None and cudnn.ok) else None


def disagrees(max_abs: float, rel_rms: float, dtype: str) -> bool:
    """True when a kernel's output is too far from SDPA's to be rounding (or is not finite)."""
    if not (math.isfinite(max_abs) and math.isfinite(rel_rms)):
        return True
    return rel_rms > DIFF_TOLERANCE.get(dtype, 5e-3)


# ----------------------------------------------------------------------------------------------
# Formatting (pure)
# ----------------------------------------------------------------------------------------------

def size_text(n: int) -> str:
    """512 → '512', 1024 → '1k', 16384 → '16k'."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def parse_size(text: str) -> int:
    """'512' → 512, '1k' → 1024, '16K' → 16384."""
    t = text.strip().lower()
    try:
        value = int(t[:-1]) * 1024 if t.endswith("k") else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a length: {text!r} (use e.g. 512, 1k, 16k)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"lengths must be positive; got {text!r}")
    return value


def _fmt_ms(ms: float) -> str:
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def _fmt_ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def _fmt_tflops(t: float) -> str:
    return f"{t:.1f}" if t >= 1 else f"{t:.2g}"


def _fmt_diff(m: Measurement) -> str:
    if m.kernel == SDPA.key:
        return "(reference)"
    if m.max_abs_diff is None:
        return "—"
    text = f"{m.max_abs_diff:.1e}"
    if m.worst_output and m.worst_output != "o":
        text += f" ({m.worst_output})"
    return text + (" ⚠" if m.flagged else "")


def _status_cell(m: Measurement) -> str:
    return {"OOM": "OOM", "out of resources": "out of resources", "unsupported": "unsupported",
            "skipped": "skipped"}.get(m.status, "error")


def row_cells(measurements: Sequence[Measurement], m: Measurement, peak: float | None,
              with_cudnn: bool = False) -> list[str]:
    """The table row of one measurement: N, B×H, kernel, ms, TFLOP/s, [% peak], vs SDPA, [vs cuDNN], vs previous,
    diff."""
    kernel = _BY_KEY[m.kernel]
    cells = [size_text(m.shape.n), f"{m.shape.batch}×{m.shape.heads}", kernel.label]
    if m.ok:
        vs_sdpa, vs_prev = ratios(measurements, m)
        tf = m.tflops
        cells += [_fmt_ms(m.ms), _fmt_tflops(tf)]
        if peak:
            cells.append(f"{100 * tf / peak:.1f}%")
        prev = previous_lesson(measurements, m)
        prev_text = _fmt_ratio(vs_prev) + (f" (vs {prev.kernel})" if vs_prev is not None else "")
        cells.append("1.00×" if m.kernel == SDPA.key else _fmt_ratio(vs_sdpa))
        if with_cudnn:
            cells.append("1.00×" if m.kernel == CUDNN.key else _fmt_ratio(vs_cudnn(measurements, m)))
        cells.append(prev_text)
    else:
        cells += [_status_cell(m), "—"] + (["—"] if peak else []) + ["—"] * (3 if with_cudnn else 2)
    cells.append(_fmt_diff(m))
    return cells


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def group_title(group: tuple[str, int, str, bool]) -> str:
    dtype, d, mode, causal = group
    return f"{dtype} · D = {d} · {'causal' if causal else 'non-causal'} · {MODE_NAMES[mode]}"


def _groups(measurements: Sequence[Measurement]) -> dict[tuple, list[Measurement]]:
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.shape.group, []).append(m)
    return groups


@dataclass
class RunInfo:
    """What the markdown says about where and how the numbers were taken."""

    device: str
    torch_version: str
    triton_version: str
    cuda_version: str | None = None
    date: str = ""
    command: str = "python -m course.tools.bench_triton"
    tokens: int = DEFAULT_TOKENS
    heads: int = DEFAULT_HEADS
    min_reps: int = DEFAULT_REPS
    min_total_ms: float = MIN_TOTAL_MS
    flush_bytes: int = FLUSH_BYTES
    plot: str | None = None           # path of the plot, relative to the markdown file
    notes: list[str] = field(default_factory=list)


KEEP_BELOW = "<!-- Recorded beside the benchmark: bench_triton keeps what follows when it rewrites the page. -->"


def keep_recorded(new_page: str, old_page: str | None) -> str:
    """The page to write: the new run's page, then ``KEEP_BELOW`` and what followed it in the old page (if any)."""
    if not old_page or KEEP_BELOW not in old_page:
        return new_page
    return new_page.rstrip("\n") + "\n\n" + KEEP_BELOW + old_page.split(KEEP_BELOW, 1)[1]


def render_markdown(measurements: Sequence[Measurement], info: RunInfo) -> str:
    """The whole results page: header, method, one table per (dtype, D, mode, causal)."""
    peaks = {m.shape.dtype: peak_tflops(info.device, m.shape.dtype) for m in measurements}
    known = sorted({p for p in peaks.values() if p})
    lines = [
        "# Benchmarks: the Triton track against PyTorch SDPA (flash backend)",
        "",
        f"Written by `{info.command}`; do not edit by hand (run it again on a GPU instead).",
        "",
        f"- Device: **{info.device}**" + (f" (dense fp16/bf16 peak taken as {known[0]:g} TFLOP/s)" if known else
                                          " (peak unknown to the benchmark: no % of peak column)"),
        f"- torch {info.torch_version}" + (f" (CUDA {info.cuda_version})" if info.cuda_version else "") +
        f", triton {info.triton_version}",
        f"- Date: {info.date}",
        f"- Shapes: Q, K, V of (B, H, N, D) with B·N = {info.tokens} tokens (B = {info.tokens} / N), "
        f"H = {info.heads}, Nq = Nk = N; scale 1/√D; inputs standard normal.",
        "",
        "## Method",
        "",
        "- Every kernel runs in one process on the same inputs as `torch.nn.functional.scaled_dot_product_attention` "
        "under `sdpa_kernel(SDPBackend.FLASH_ATTENTION)` (SDPA runs first on each shape). Where the table has a "
        "`vs cuDNN` column, SDPA under `SDPBackend.CUDNN_ATTENTION` ran too, as a second baseline "
        "(unsupported: its backend refused the input).",
        "- Before timing, each kernel's outputs (O; for forward + backward also dQ, dK, dV) are compared with SDPA's: "
        "the column gives the max abs difference (and which output, when not O); ⚠ marks a relative RMS difference above "
        + ", ".join(f"{v:g} ({k})" for k, v in DIFF_TOLERANCE.items() if k in {m.shape.dtype for m in measurements})
        + ", more than rounding explains.",
        "- Timing: one untimed call (Triton compiles and autotunes each new shape on its first call), warm-up runs "
        f"that estimate the run time, then at least {info.min_reps} runs and at least {info.min_total_ms:g} ms in "
        f"total. Before every run {info.flush_bytes // 2**20} MB are written to flush the L2 cache; each run is "
        "bracketed by CUDA events; the table gives the **median**.",
        "- FLOPs: forward 4·B·H·Nq·Nk·D, halved when causal; forward + backward 3.5× the forward. "
        "TFLOP/s = FLOPs / median time.",
        "- `vs SDPA` and `vs previous` are speed ratios (their time / this kernel's time): above 1 is faster. "
        "The previous lesson is the latest earlier lesson measured on the same shape.",
        "- Lessons 03-05 have no mask, so they run forward non-causal only; 06 runs forward; 08 (06's forward with "
        "the capstone's own backward, kernels/triton/08_backward.py, as an autograd Function; both autotuned) runs "
        "everything. Lesson 07 has no row of its own (see 08 with lesson 07's backward, when it was timed).",
        "- Lesson 01's naive kernel and lesson 02's one-sweep kernel are not in the tables: they take one (N, D) head "
        "and every query row reads all of K and V (lesson 01 reads K twice), so beyond small N a single call takes "
        "minutes.",
        "- OOM: the GPU ran out of memory for that shape; out of resources: the kernel needs more shared memory or "
        "registers than the GPU has; unsupported: SDPA's flash backend refused the input.",
    ]
    if any(m.kernel == DIRECT.key for m in measurements):
        lines.append("- 08 direct call: the same operator called outside `autotune()`, as a model calls it: the launch "
                     "tables of lessons 06 and 07 (`LAUNCH_TABLE`) where they name this GPU, the check configs elsewhere; "
                     "nothing is tuned or timed at call time.")
    if any(m.kernel == LESSON07_BACKWARD.key for m in measurements):
        lines.append("- 08 with lesson 07's backward: the same forward, with lesson 07's backward (atomic dQ, its kernels "
                     "autotuned over lesson 07's lists, the dQ buffer zeroed before every trial) in place of the "
                     "capstone's own: the two backwards side by side, on the same inputs.")
    if any(m.kernel == FP8.key for m in measurements):
        lines.append("- 08 fp8 forward: lesson 08's fp8 kernel on Q, K, V quantised to e4m3 per head once per shape (the "
                     "kernel alone is timed; O in float16); its output is compared with SDPA's within a relative RMS of "
                     f"{FP8_TOLERANCE:g}, what 8-bit operands allow. A GPU before sm_89 has no fp8 tensor cores.")
    for note in info.notes:
        lines.append(f"- {note}")
    if info.plot:
        lines += ["", f"![TFLOP/s against N for every kernel]({info.plot})"]
    with_cudnn = any(m.kernel == CUDNN.key for m in measurements)
    for group, members in _groups(measurements).items():
        peak = peak_tflops(info.device, group[0])
        header = ["N", "B×H", "kernel", "ms", "TFLOP/s"] + (["% of peak"] if peak else []) + \
                 ["vs SDPA"] + (["vs cuDNN"] if with_cudnn else []) + ["vs previous", "max abs diff vs SDPA"]
        lines += ["", f"## {group_title(group)}", ""]
        lines += _table(header, [row_cells(measurements, m, peak, with_cudnn) for m in members])
    errors = [m for m in measurements if m.status not in ("ok", "skipped") and m.detail]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {m.shape.describe()}, {_BY_KEY[m.kernel].label}: {m.status}: {m.detail}" for m in errors]
    return "\n".join(lines) + "\n"


def console_line(measurements: Sequence[Measurement], m: Measurement, peak: float | None) -> str:
    """One line per measurement while the benchmark runs."""
    head = f"{m.shape.describe():<36} {_BY_KEY[m.kernel].label:<19}"
    if not m.ok:
        return f"{head} {m.status}" + (f": {m.detail}" if m.detail else "")
    vs_sdpa, vs_prev = ratios(measurements, m)
    parts = [f"{_fmt_ms(m.ms):>8} ms", f"{_fmt_tflops(m.tflops):>7} TFLOP/s"]
    if peak:
        parts.append(f"{100 * m.tflops / peak:5.1f}% peak")
    if m.kernel != SDPA.key:
        parts.append(f"{_fmt_ratio(vs_sdpa)} SDPA")
        if m.kernel != CUDNN.key and vs_cudnn(measurements, m) is not None:
            parts.append(f"{_fmt_ratio(vs_cudnn(measurements, m))} cuDNN")
        parts.append(f"{_fmt_ratio(vs_prev)} prev")
        if m.max_abs_diff is not None:
            parts.append(f"max|Δ| {m.max_abs_diff:.1e} rel {m.rel_rms_diff:.1e}" + (" ⚠ DISAGREES" if m.flagged else ""))
    return f"{head} " + "  ".join(parts)


def write_plot(measurements: Sequence[Measurement], path: Path, device: str = "") -> bool:
    """TFLOP/s against N, one line per kernel, one panel per (dtype, D, mode, causal). False if nothing ran."""
    groups = {g: ms for g, ms in _groups(measurements).items() if any(m.ok for m in ms)}
    if not groups:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    colors = {k.key: f"C{i}" for i, k in enumerate(KERNELS + OPTIONAL)}
    for ax, (group, members) in zip(axes.flat, groups.items()):
        for kernel in KERNELS + OPTIONAL:
            points = sorted((m.shape.n, m.tflops) for m in members if m.kernel == kernel.key and m.ok)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colors[kernel.key],
                        linestyle="--" if kernel.key in BASELINES else "-", label=kernel.label)
        ns = sorted({m.shape.n for m in members})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [size_text(n) for n in ns])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(group_title(group), fontsize=9)
        ax.set_xlabel("N")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    if device:
        fig.suptitle(device)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


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
    key = _DTYPE_ALIASES.get(text.strip().lower())
    if key is None:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; use fp16, bf16 or fp32")
    return key


def _mode(text: str) -> str:
    key = _MODE_ALIASES.get(text.strip().lower())
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
    if key not in _BY_KEY:
        raise argparse.ArgumentTypeError(f"unknown kernel {text!r}; use {', '.join(_BY_KEY)}")
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
    keys = ({SDPA.key, "08"} | ({CUDNN.key} if cudnn else set()) | ({DIRECT.key} if direct else set())
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
            print(f"  {m.shape.describe()} {_BY_KEY[m.kernel].label}: {m.detail or 'output differs from SDPA'}")
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
