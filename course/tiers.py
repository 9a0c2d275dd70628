"""Which execution tiers this machine has, and the choice the course makes for the learner.

The course always has a CPU tier. ``configure()`` runs when ``course`` is imported: when there is no
usable CUDA GPU (or ``COURSE_TIER=cpu`` is set, as ``make lab`` does) it switches Triton to its
interpreter, so a learner never has to know about ``TRITON_INTERPRET``. The variable has to be set
before a ``@triton.jit`` function is defined, which is why notebooks import ``course`` first.
"""
from __future__ import annotations

import sys

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from course.paths import KERNELS
from course.simt.compiler import KernelCompileError, compiler
from course.simt.toolchain import apple_metal

__all__ = ["Tier", "TierDevice", "configure", "triton_interpreted", "device", "active_tier", "detect_tiers", "report",
           "SIMULATOR_VERSION", "TESTED_TRITON"]

_ENV = "COURSE_TIER"  # "cpu" forces the CPU tier; "auto" (default) takes a GPU when there is one


def _cuda_gpu() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def configure() -> None:
    """Pick the tier once per process (idempotent). An explicit TRITON_INTERPRET is respected."""
    forced_cpu = os.environ.get(_ENV, "auto").lower() == "cpu"
    if "TRITON_INTERPRET" not in os.environ and (forced_cpu or _cuda_gpu() is None):
        os.environ["TRITON_INTERPRET"] = "1"


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TierDevice(str):
    """The CPU tier's ``"cpu"`` as :func:`device` hands it out: a plain ``"cpu"`` to PyTorch, and a mark that the
    code asked for the tier's device, which on a GPU machine is the GPU (read by :mod:`course.device_guard`)."""


def device() -> str:
    """The device the tier's tensors live on: ``"cuda"`` on the GPU tier (Triton compiles for the GPU and reads
    GPU memory only), ``"cpu"`` on the CPU tier (Triton's interpreter). Every tensor a Triton kernel reads is
    made with ``device=course.tiers.device()`` (or moved there), in checks, tests and notebooks alike.

    Inside :func:`course.device_guard.gpu_device_rules` the CPU tier's ``"cpu"`` remembers it was asked
    for, so a tensor made without asking is caught before the GPU tier would fail on it."""
    if triton_interpreted() or _cuda_gpu() is None:
        return TierDevice("cpu")
    return "cuda"


def active_tier() -> str:
    """A short label for reports: which tier graded this run."""
    if triton_interpreted():
        return "CPU tier (Triton interpreter)"
    gpu = _cuda_gpu()
    return f"GPU tier ({gpu})" if gpu else "CPU tier"


@dataclass(frozen=True)
class Tier:
    name: str
    available: bool
    detail: str


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        from importlib.metadata import version
        return version(module)
    except Exception:
        return "installed"


def _nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    release = [line for line in out.splitlines() if "release" in line]
    return release[-1].strip() if release else "present"


def _cxx_version() -> str | None:
    """The C++ compiler the CPU runtime would use, as ``g++ 12.2.0``; None when there is none."""
    try:
        cxx = compiler()
        first = subprocess.run([cxx, "-dumpfullversion"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (KernelCompileError, OSError, subprocess.TimeoutExpired):
        return None
    return f"{os.path.basename(cxx)} {first}".strip()


def detect_tiers() -> list[Tier]:
    """Every tier the course knows, whether this machine has it, and what it needs if not."""
    triton = _version("triton")
    gpu = _cuda_gpu()
    nvcc = _nvcc_version()
    metal_ok, metal_detail = apple_metal()
    cxx = _cxx_version()
    return [
        Tier("Triton interpreter (CPU)", *_triton_interpreter(triton)),
        Tier("Triton native (GPU)", triton is not None and gpu is not None,
             f"{gpu}" if (triton and gpu) else "needs an NVIDIA (CUDA) or AMD (ROCm) GPU with a matching PyTorch and triton"),
        Tier("CUDA C on the CPU runtime", cxx is not None,
             f"{cxx} compiles kernels; threads run as fibers, with memcheck and racecheck" if cxx
             else _NEEDS_CXX),
        Tier("Metal on the CPU runtime", cxx is not None,
             f"{cxx} compiles kernels through the course's Metal front end" if cxx
             else _NEEDS_CXX),
        Tier("nvcc compile gate", nvcc is not None, nvcc or "needs the CUDA toolkit's nvcc on PATH"),
        Tier("CUDA GPU", gpu is not None, gpu or "no CUDA device visible to PyTorch"),
        Tier("Apple Metal GPU", metal_ok, metal_detail),
        Tier("Tenstorrent TT-Lang simulator (lesson 09)", *_tt_simulator()),
    ]


_NEEDS_CXX = ("needs Apple's C++ compiler: xcode-select --install" if sys.platform == "darwin"
              else "needs a C++ compiler: apt-get install g++ (make lab installs it)")
# The Triton versions the course is tested with, oldest and newest (pyproject.toml declares the oldest).
TESTED_TRITON = ((3, 6), (3, 9))
# The TT-Lang simulator lesson 09 is written for (pyproject.toml pins it; course.lessons.dataflow runs it).
SIMULATOR_VERSION = "1.1.6"


def _minor(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return ()


def _triton_interpreter(triton: str | None) -> tuple[bool, str]:
    """Whether Triton's interpreter runs the Triton track here, and why not."""
    if triton is None:
        if sys.platform != "linux":
            return False, ("Triton has no build for this system (its wheels are Linux only), so the Triton track needs "
                           "Linux, e.g. a Linux VM or container; the CUDA C and Metal tracks run here")
        return False, "needs the triton package: pip install 'triton>=3.6' (make lab installs it)"
    numpy = _version("numpy") or ""
    if _minor(triton) and _minor(triton) < (3, 7) and _minor(numpy) >= (2, 4):
        return False, (f"triton {triton}'s interpreter fails under NumPy {numpy}, which no longer turns a 1-element "
                       f"array into an int (fixed from Triton 3.7 on): pip install 'numpy<2.4' (make lab does)")
    low, high = TESTED_TRITON
    if _minor(triton) and not low <= _minor(triton) <= high:
        return True, (f"triton {triton}; the course is tested with Triton {low[0]}.{low[1]} to {high[0]}.{high[1]}, "
                      f"so a failure here may be this Triton's")
    return True, f"triton {triton}"


def _tt_simulator() -> tuple[bool, str]:
    """Lesson 09's simulator: installed at the version the lesson is written for, or what it needs."""
    found = _distribution_version("tt-lang-sim")
    if found == SIMULATOR_VERSION:
        return True, f"tt-lang-sim {found}: runs @ttl.operation programs on a simulated grid of Tensix cores"
    if found:
        return False, (f"tt-lang-sim {found} is installed; lesson 09 is written for {SIMULATOR_VERSION}: "
                       f"pip install tt-lang-sim=={SIMULATOR_VERSION}")
    if sys.version_info < (3, 11):
        return False, "needs Python 3.11 or newer (tt-lang-sim); lesson 09 only, the rest of the course runs"
    return False, f"needs tt-lang-sim=={SIMULATOR_VERSION} (make lab installs it); lesson 09 only"


def _distribution_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _span(lessons: list[str]) -> str:
    """["01", "02", "03", "05"] -> "01-03, 05"."""
    runs: list[list[str]] = []
    for lesson in lessons:
        if runs and int(lesson) == int(runs[-1][-1]) + 1:
            runs[-1].append(lesson)
        else:
            runs.append([lesson])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


# A track's kernel file is kernels/<track>/<lesson>_<step>.<ext> (course.tracks.table's naming rule; its test holds
# every file to a row of the table and every row to a file).
_KERNEL_FILE = re.compile(r"(\d\d)_\w+\.\w+")


def _track_lessons(track: str) -> list[str]:
    """The lessons that have a kernel in ``track``, read off the kernel files of the course folder."""
    folder = KERNELS / track
    found = {m.group(1) for p in (folder.iterdir() if folder.is_dir() else ()) if p.is_file()
             and (m := _KERNEL_FILE.fullmatch(p.name))}
    return sorted(found)


def _lessons_here(available: dict[str, bool]) -> list[str]:
    """Which lessons' exercises run here, in which track, from the tiers found (lesson 00 needs none of them)."""
    tracks = (("Triton", "triton", available.get("Triton interpreter (CPU)") or available.get("Triton native (GPU)")),
              ("CUDA C", "cuda", available.get("CUDA C on the CPU runtime")),
              ("Metal", "metal", available.get("Metal on the CPU runtime")))
    here, missing = [], []
    for label, track, ok in tracks:
        lessons = _track_lessons(track)
        text = f"{label} (lessons {_span(lessons)})" if lessons else label  # no kernel files: no course folder here
        (here if ok else missing).append(text)
    simulator = next((ok for name, ok in available.items() if name.startswith("Tenstorrent")), False)
    (here if simulator else missing).append("lesson 09 on the TT-Lang simulator")
    lines = [f"Tracks you can work in here: {', '.join(here) if here else 'none'}."]
    if missing:
        lines.append(f"Not here: {', '.join(missing)} (the tiers above say what each needs).")
    return lines


def report(rows: list[Tier] | None = None) -> str:
    """The tiers this machine has (``rows``, default: detected now), what each missing one needs, the tracks that
    leaves, and the tier this process grades on."""
    rows = detect_tiers() if rows is None else rows
    width = max(len(t.name) for t in rows)
    lines = ["Execution tiers on this machine:", ""]
    for t in rows:
        mark = "yes" if t.available else " - "
        lines.append(f"  [{mark}] {t.name:<{width}}  {t.detail}")
    if any(t.available and t.name.endswith("on the CPU runtime") for t in rows):
        from course.simt.kernel import boundary_here  # seccomp around the child that runs a kernel (docs/simt.md)
        lines += ["", f"CPU runtime: {boundary_here()[1]}."]
    lines += ["", *_lessons_here({t.name: t.available for t in rows})]
    lines += ["", f"Exercises in this process are graded on: {active_tier()}"]
    if triton_interpreted():
        lines.append("Triton runs in interpreter mode (TRITON_INTERPRET=1), set by the course; nothing to do.")
    return "\n".join(lines)
