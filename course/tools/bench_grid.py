"""What the Triton benchmark (:mod:`course.tools.bench_triton`) measures and the arithmetic on it: the modes, dtypes
and default grids, the kernels it times (each lesson's, the two SDPA baselines, the rows timed only when named), one
shape and one measurement, and the pure numbers read off them (FLOPs, the GPU's peak, ratios against the previous
lesson and cuDNN, whether an output disagrees with SDPA's)."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from course.models import roofline
from course.tracks import table
from course.tools.timing import forward_flops, tflops


# ----------------------------------------------------------------------------------------------
# What is measured
# ----------------------------------------------------------------------------------------------

FWD, FWD_BWD = "fwd", "fwd+bwd"
MODES = (FWD, FWD_BWD)
MODE_NAMES = {FWD: "forward", FWD_BWD: "forward + backward"}
MODE_ALIASES = {"fwd": FWD, "forward": FWD, "f": FWD,
                 "fwd+bwd": FWD_BWD, "fwd_bwd": FWD_BWD, "fwdbwd": FWD_BWD, "forward+backward": FWD_BWD,
                 "bwd": FWD_BWD, "backward": FWD_BWD}

DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_ALIASES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
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

# What a step can be timed on follows how the benchmark calls it (its row's bench_call).
_SCOPE_OF_CALL = {"qkv": _FORWARD_PLAIN, "qkv_causal": _FORWARD_ANY, "": _EVERYTHING, "fp8": _FORWARD_ANY}


def _declared() -> tuple[Kernel, ...]:
    """A kernel for every Triton step whose row declares ``bench_ladder``, in the table's order."""
    return tuple(Kernel(row.bench_ladder[0], row.bench_ladder[1], row.id, _SCOPE_OF_CALL[row.bench_call])
                 for row in table.exercises(track="triton") if row.bench_ladder)


_STEPS = _declared()
# The fp8 forward (Q, K, V in e4m3, per-head scales; bench_call "fp8"): timed by default from the command line but kept
# off the ladder: its inputs are quantised once per shape, so the kernel alone is timed, its output is compared with a
# tolerance of its own, and a GPU before sm_89 has no fp8 tensor cores (its rows say so instead of a time).
FP8 = next(k for k in _STEPS if table.exercise(k.exercise).bench_call == "fp8")
FP8_TOLERANCE = 0.1  # relative RMS against SDPA: e4m3 rounds Q, K, V and P by up to 1/16 each (course.models.fp8)
KERNELS: tuple[Kernel, ...] = (SDPA, CUDNN, *(k for k in _STEPS if k is not FP8))
# The step the leaderboard shape times (its row declares bench_leaderboard): the capstone's operator.
LEADER = next(k for k in _STEPS if table.exercise(k.exercise).bench_leaderboard)
# Timed only when named (--kernels ...,08d): the leader called directly, outside autotune(), as a model calls it:
# the launch tables of lessons 06 and 07 on a GPU family they name, the check configs elsewhere.
DIRECT = Kernel(f"{LEADER.key}d", f"{LEADER.label.split()[0]} direct call", LEADER.exercise, LEADER.applies_to)
# Timed only when named (--kernels ...,08b7): the leader's forward with lesson 07's backward (atomic dQ), both
# autotuned: what the capstone ran before it had its own backward, beside the leader's time.
_BACKWARD_ONLY = frozenset({(FWD_BWD, False), (FWD_BWD, True)})
LESSON07_BACKWARD = Kernel(f"{LEADER.key}b7", f"{LEADER.label.split()[0]} with lesson 07's backward", LEADER.exercise,
                           _BACKWARD_ONLY)
OPTIONAL: tuple[Kernel, ...] = (DIRECT, FP8, LESSON07_BACKWARD)
BY_KEY = {k.key: k for k in KERNELS + OPTIONAL}


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
    lesson = BY_KEY[m.kernel].lesson
    if lesson is None:
        return None
    earlier = [x for x in measurements
               if x.shape == m.shape and BY_KEY[x.kernel].lesson is not None and BY_KEY[x.kernel].lesson < lesson]
    return max(earlier, key=lambda x: BY_KEY[x.kernel].lesson, default=None)


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
