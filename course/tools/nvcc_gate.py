"""The real compiler as a gate for the CUDA track.

The CPU tier compiles a lesson's ``.cu`` file with g++ against the course's headers. g++ is a
different compiler: it can accept code nvcc rejects (an operator the headers happen to provide, a
host-only library call in a kernel) and it says nothing about what the kernel costs on a GPU. This
module runs NVIDIA's own ``nvcc`` over the same files, for the targets the course is written for
(A100 = sm_80, H100 = sm_90), with warnings as errors, and reads ptxas' report of each kernel's
registers, spills, shared memory and stack frame. It needs the CUDA toolkit, not a GPU.

    python -m course.tools.nvcc_gate                    # every kernels/cuda/*.cu, a markdown table
    python -m course.tools.nvcc_gate my.cu --arch 90    # some files, one target
    python -m course.tools.nvcc_gate --allow-missing    # exit 0 (with a note) where nvcc is not installed

Exit status: 0 when everything compiled, 1 when a file did not (nvcc's diagnostics are printed as
``file:line: error: ...``), 2 when nvcc is missing (unless ``--allow-missing``) or the arguments are wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from course.paths import KERNELS
from course.simt.limits import GATE_TARGETS as TARGETS
from course.simt.toolchain import FRAME, nvcc_diagnostics, nvcc_path

__all__ = ["KernelResources", "NvccError", "NvccMissing", "TARGETS", "CUDA_DIR", "NVCC_FLAGS", "nvcc_path",
           "cuda_sources", "compile_file", "compile_archs", "parse_ptxas", "markdown_table", "main"]

CUDA_DIR = KERNELS / "cuda"
# -Werror all-warnings covers every tool nvcc drives (front end, ptxas, host compiler);
# -Xptxas -v makes ptxas print each kernel's resource usage.
NVCC_FLAGS = ("-std=c++17", "-Werror", "all-warnings", "-Xptxas", "-v")
COMPILE_TIMEOUT = 300.0  # seconds for one nvcc run (a heavily unrolled kernel can take a while in ptxas)


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (``__global__`` function) compiled for one target."""
    file: str
    arch: str                 # "sm_80"
    kernel: str               # demangled, without parameters ("tile<64>"); extern "C" names as written
    registers: int
    spill_stores: int         # bytes per thread written to local memory because registers ran out
    spill_loads: int
    smem_bytes: int           # static __shared__ memory (dynamic `extern __shared__` is sized at launch)
    stack_frame: int          # bytes of per-thread stack (local arrays indexed at run time, spills, calls)
    barriers: int = 0         # named barriers in use (__syncthreads uses barrier 0)
    mangled: str = ""         # the symbol ptxas names (what cuModuleGetFunction would take)


class NvccError(Exception):
    """nvcc rejected a file; ``diagnostics`` holds its messages with locations as ``file:line``."""

    def __init__(self, file: str, diagnostics: str, returncode: int):
        self.file, self.diagnostics, self.returncode = file, diagnostics, returncode
        super().__init__(f"nvcc rejected {file} (exit status {returncode}; warnings count as errors):\n{diagnostics}")


class NvccMissing(RuntimeError):
    """No nvcc on this machine."""


def cuda_sources(directory: str | os.PathLike = CUDA_DIR) -> list[Path]:
    """The ``.cu`` files the gate compiles by default (sorted, so tables and test ids are stable)."""
    folder = Path(directory)
    return sorted(p for p in folder.glob("*.cu") if p.is_file()) if folder.is_dir() else []


def _arch(arch: int | str) -> str:
    """80, "80", "sm_80", "sm80", "sm_90a" -> the number part ("80", "90a")."""
    text = str(arch).strip().lower().removeprefix("sm").lstrip("_")
    if not re.fullmatch(r"\d{2,3}[af]?", text):
        raise ValueError(f"not a GPU target: {arch!r} (expected e.g. 80, 90 or sm_90)")
    return text


def _shown(path: Path) -> str:
    """A path as a person reads it: relative to the current folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def nvcc_command(path: str | os.PathLike, archs: Iterable[int | str], nvcc: str) -> list[str]:
    """One nvcc run for every target: one -gencode each, so ptxas reports each target's kernels."""
    gencode = []
    for a in archs:
        a = _arch(a)
        gencode += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    return [nvcc, *NVCC_FLAGS, *gencode, "-c", "-o", os.devnull, str(path)]


def compile_archs(path: str | os.PathLike, archs: Sequence[int | str] = TARGETS, *, nvcc: str | None = None,
                  timeout: float = COMPILE_TIMEOUT) -> list[KernelResources]:
    """Compile ``path`` for every target in one nvcc run; each kernel's resources per target.

    Raises NvccError with nvcc's diagnostics when the file does not compile or anything warns,
    NvccMissing when there is no nvcc.
    """
    nvcc = nvcc or nvcc_path()
    if nvcc is None:
        raise NvccMissing("nvcc (the CUDA toolkit's compiler) is not installed on this machine")
    shown = _shown(Path(path))
    try:
        proc = subprocess.run(nvcc_command(shown, archs, nvcc), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NvccError(shown, f"nvcc ran for more than {timeout:.0f} s and was stopped", -9) from None
    output = proc.stdout + proc.stderr
    diagnostics = nvcc_diagnostics(output)
    if proc.returncode != 0:
        raise NvccError(shown, diagnostics or output.strip(), proc.returncode)
    # Anything -Werror did not catch (a driver-level "nvcc warning") still fails the gate.
    if re.search(r"\bwarning\b", diagnostics, re.IGNORECASE):
        raise NvccError(shown, diagnostics, proc.returncode)
    return parse_ptxas(output, file=shown)


def compile_file(path: str | os.PathLike, arch: int | str) -> list[KernelResources]:
    """Compile ``path`` for one target (80, "sm_90", ...); each kernel's resources."""
    return compile_archs(path, (arch,))


# ------------------------------------------------------------------------------------------------
# Reading nvcc's output
# ------------------------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas(text: str, file: str = "") -> list[KernelResources]:
    """Per-kernel records from ``ptxas -v`` output (as nvcc -Xptxas -v passes it on).

    ptxas writes, per entry function and target::

        Compiling entry function '_Z4tilePf' for 'sm_80'
        Function properties for _Z4tilePf
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        Used 24 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]

    Properties of non-inlined device functions follow their caller's block; they are not kernels,
    so only lines about the entry being compiled are taken.
    """
    found: list[dict] = []
    current: dict | None = None
    subject = None           # the function the next lines are about
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = {"mangled": m.group(1), "arch": m.group(2), "registers": 0, "barriers": 0, "smem_bytes": 0,
                       "stack_frame": 0, "spill_stores": 0, "spill_loads": 0}
            found.append(current)
            subject = m.group(1)
        elif m := _PROPERTIES.search(line):
            subject = m.group(1)
        elif current is None or subject != current["mangled"]:
            continue
        elif m := FRAME.search(line):
            current["stack_frame"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        elif _USED.search(line):
            # "Used 24 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem, ..."
            # The parts vary between ptxas versions and targets: read each on its own.
            for part in line.split(":", 1)[-1].split(","):
                part = part.strip()
                if m := re.fullmatch(r"Used (\d+) registers", part):
                    current["registers"] = int(m.group(1))
                elif m := re.fullmatch(r"used (\d+) barriers", part):
                    current["barriers"] = int(m.group(1))
                elif m := re.fullmatch(r"(\d+) bytes smem", part):
                    current["smem_bytes"] = int(m.group(1))
    names = _demangle([r["mangled"] for r in found])
    return [KernelResources(file=file, kernel=names.get(r["mangled"], r["mangled"]), **r) for r in found]


def _demangle(symbols: list[str]) -> dict[str, str]:
    """C++ symbols -> names without parameters (``c++filt -p``, or CUDA's cu++filt); as-is without either."""
    mangled = sorted({s for s in symbols if s.startswith("_Z")})
    if not mangled:
        return {}
    nvcc = nvcc_path()
    tools = [shutil.which("c++filt"), str(Path(nvcc).parent / "cu++filt") if nvcc else None]
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            continue
        try:
            out = subprocess.run([tool, "-p"], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                                 timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        lines = out.stdout.splitlines()
        if out.returncode == 0 and len(lines) == len(mangled):
            return dict(zip(mangled, lines))
    return {}


# ------------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------------

def markdown_table(records: Iterable[KernelResources]) -> str:
    head = ("file", "kernel", "arch", "registers", "spill stores (B)", "spill loads (B)", "smem (B)", "stack frame (B)")
    rows = [head, *((r.file, f"`{r.kernel}`", r.arch, str(r.registers), str(r.spill_stores), str(r.spill_loads),
                     str(r.smem_bytes), str(r.stack_frame)) for r in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    numeric = range(3, len(head))

    def line(row):
        return "| " + " | ".join(c.rjust(w) if i in numeric else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(row, widths))) + " |"
    rule = "|" + "|".join("-" * (w + 1) + (":" if i in numeric else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(rows[0]), rule, *map(line, rows[1:])])


def _sort_key(r: KernelResources):
    return (r.file, r.kernel, r.arch)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m course.tools.nvcc_gate", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help=f"CUDA files or folders of them (default: every {_shown(CUDA_DIR)}/*.cu)")
    p.add_argument("--arch", nargs="+", default=[str(t) for t in TARGETS],
                   help=f"targets, e.g. 80 90 (default: {' '.join(str(t) for t in TARGETS)})")
    p.add_argument("--allow-missing", action="store_true", help="exit 0 with a note when nvcc is not installed")
    p.add_argument("--jobs", type=int, help="nvcc runs at a time (default: min(2, cores))")
    p.add_argument("--json", help="also write the per-kernel records to this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    try:
        archs = [_arch(x) for x in a.arch]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    nvcc = nvcc_path()
    if nvcc is None:
        print("nvcc (the CUDA toolkit's compiler) is not installed, so the CUDA files were not compiled"
              + (" (--allow-missing: not a failure)." if a.allow_missing else "."))
        return 0 if a.allow_missing else 2
    files: list[Path] = []
    for given in a.files or [str(CUDA_DIR)]:
        p = Path(given)
        if p.is_dir():
            files += cuda_sources(p)
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: no such file or folder: {given}", file=sys.stderr)
            return 2
    if not files:
        print(f"no .cu files in {', '.join(a.files) or _shown(CUDA_DIR)}: nothing to compile.")
        return 0

    start = time.monotonic()

    def one(path: Path) -> list[KernelResources] | NvccError:
        try:
            return compile_archs(path, archs, nvcc=nvcc)
        except NvccError as e:
            return e

    with ThreadPoolExecutor(max_workers=max(1, a.jobs or min(2, os.cpu_count() or 1))) as pool:
        outcomes = list(pool.map(one, files))
    records = sorted((r for o in outcomes if isinstance(o, list) for r in o), key=_sort_key)
    failures = [o for o in outcomes if isinstance(o, NvccError)]
    targets = ", ".join(f"sm_{x}" for x in archs)
    if records:
        print(markdown_table(records))
        print()
    for path, outcome in zip(files, outcomes):
        if isinstance(outcome, list) and not outcome:
            print(f"{_shown(path)}: compiled, but has no __global__ function (no kernel to report).")
    for e in failures:
        print(f"FAILED {e.file} (nvcc exit status {e.returncode}; warnings count as errors):\n{e.diagnostics}\n")
    spilled = sorted({f"{r.kernel} ({r.arch})" for r in records if r.spill_stores})
    summary = (f"{len(files) - len(failures)}/{len(files)} file(s) compiled with nvcc for {targets} "
               f"in {time.monotonic() - start:.1f} s")
    if spilled:
        summary += f"; spilling registers to local memory: {', '.join(spilled)}"
    print(summary)
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(r) for r in records], indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
