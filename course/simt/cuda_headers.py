"""Which directory of CUDA headers NVRTC gets for a kernel (plain Python over directory trees, testable without a GPU).

NVRTC compiles in memory and knows no include path of its own: a kernel that includes <mma.h> or
<cuda_fp16.h> needs a directory of CUDA headers passed to it. Not every directory that holds mma.h
will do: pip's CUDA packages (nvidia/cu13/include) ship mma.h without the crt/mma.h it includes. So
the directories a CUDA installation may put headers in are searched in order (:func:`cuda_header_candidates`),
each is checked for every header the kernel includes and every header those include in turn, and the first
complete one whose CUDA version matches NVRTC's is used (:func:`choose_cuda_headers`). The GPU launcher
(:mod:`course.simt.gpu`) asks :func:`include_options` for NVRTC's ``--include-path``.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .diagnostics import GpuUnavailable
from .toolchain import nvcc_path

__all__ = ["HeaderDir", "CudaHeadersMissing", "kernel_includes", "header_version", "cuda_header_candidates",
           "choose_cuda_headers", "header_candidates_here", "include_options"]


@dataclass(frozen=True)
class HeaderDir:
    """A directory that may hold CUDA's headers, where it came from, and the CUDA version its headers declare."""
    path: Path
    source: str
    version: tuple[int, int] | None = None

    def describe(self) -> str:
        version = f"CUDA {self.version[0]}.{self.version[1]}" if self.version else "version unknown"
        return f"{self.path} ({self.source}, {version})"


class CudaHeadersMissing(GpuUnavailable):
    """No directory of CUDA headers that NVRTC could use for this kernel; the message says what is missing."""

    title = "CUDA headers missing"


# A directory with none of these is no CUDA header directory (nvcc in /usr/local/bin makes /usr/local/include
# a toolkit's include folder by position alone).
_MARKERS = ("cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "mma.h", "cuda_fp16.h")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)
_VERSION_MACROS = (("cuda.h", "CUDA_VERSION"), ("cuda_runtime_api.h", "CUDART_VERSION"))


def _without_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)


def kernel_includes(source: str) -> list[tuple[str, bool]]:
    """Every ``#include`` of ``source`` outside comments, as (name, quoted), in order, each once."""
    seen: dict[str, bool] = {}
    for bracket, name in _INCLUDE.findall(_without_comments(source)):
        seen.setdefault(name.strip(), bracket == '"')
    return list(seen.items())


def header_version(directory: Path) -> tuple[int, int] | None:
    """The CUDA version the headers of ``directory`` declare (CUDA_VERSION 13000 -> (13, 0)), if they say."""
    for name, macro in _VERSION_MACROS:
        try:
            text = (directory / name).read_text(errors="replace")
        except OSError:
            continue
        found = re.search(rf"#\s*define\s+{macro}\s+(\d+)", text)
        if found:
            number = int(found.group(1))
            return number // 1000, number % 1000 // 10
    return None


def _target_dir() -> str:
    """The toolkit's per-platform folder under targets/: x86_64-linux, sbsa-linux (64-bit Arm servers)."""
    machine = platform.machine().lower()
    return "sbsa-linux" if machine in ("aarch64", "arm64") else f"{machine or 'x86_64'}-linux"


def cuda_header_candidates(*, env: Mapping[str, str], nvcc: str | None, usr_local: Path = Path("/usr/local"),
                           triton: Path | None = None, pip_roots: Sequence[Path] = (),
                           pathfinder: Sequence[Path] = (), target: str = "x86_64-linux") -> list[HeaderDir]:
    """The directories to try for NVRTC's headers, in order, each existing directory once.

    In order: ``CUDA_HOME`` and ``CUDA_PATH``; the toolkit of ``nvcc`` (its ``targets/<target>/include``,
    then its ``include``); ``/usr/local/cuda`` then ``/usr/local/cuda-*``, newest first; Triton's bundled
    headers (``triton/backends/nvidia/include``, given as ``triton``: the package's folder); pip's CUDA
    packages (``nvidia/cu13/include``, ``nvidia/cu12/include``, ``nvidia/cuda_runtime/include`` under each
    of ``pip_roots``: the folders of the ``nvidia`` namespace package); what ``cuda.pathfinder`` found.
    """
    found: list[HeaderDir] = []
    seen: set[Path] = set()

    def add(path: Path, source: str) -> None:
        try:
            real = path.resolve()
        except OSError:
            return
        if real in seen or not path.is_dir() or not any((path / h).is_file() for h in _MARKERS):
            return
        seen.add(real)
        found.append(HeaderDir(path, source, header_version(path)))

    def toolkit(root: Path, source: str) -> None:
        add(root / "targets" / target / "include", source)
        add(root / "include", source)

    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            toolkit(Path(env[variable]), variable)
    if nvcc:
        toolkit(Path(nvcc).resolve().parent.parent, f"the toolkit of {nvcc}")
    if usr_local.is_dir():
        def newest_first(p: Path) -> tuple:
            numbers = [int(n) for n in re.findall(r"\d+", p.name.removeprefix("cuda"))]
            return (p.name != "cuda", [-n for n in numbers])
        for root in sorted(usr_local.glob("cuda*"), key=newest_first):
            toolkit(root, str(root))
    if triton is not None:
        add(triton / "backends" / "nvidia" / "include", "Triton's bundled CUDA headers")
    for root in pip_roots:
        for sub in ("cu13", "cu12", "cuda_runtime"):
            add(root / sub / "include", "pip's nvidia packages")
    for path in pathfinder:
        add(path, "cuda.pathfinder")
    return found


def _resolve(name: str, quoted: bool, including: Path | None, root: Path) -> Path | None:
    """Where ``#include name`` finds its file under ``root``: beside the including file first for "name"."""
    places = ([including.parent] if quoted and including is not None else []) + [root]
    for place in places:
        path = place / name
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=64)
def _missing(root: Path, wanted: tuple[tuple[str, bool], ...], peers: tuple[Path, ...]) -> tuple[str, ...]:
    """Headers ``root`` lacks for an ``#include`` of each of ``wanted`` and of everything those include.

    An include of the kernel's counts as missing when ``root`` cannot resolve it but a peer directory can;
    an include inside a header of ``root`` when it is quoted with a folder in its name (``"crt/mma.h"``):
    those are the CUDA headers' own parts. Other unresolved names (C++ standard headers, ``<nv/target>``,
    which NVRTC provides itself, includes under an ``#if`` that NVRTC never takes, the learner's own
    headers) are left to NVRTC.
    """
    missing: list[str] = []
    queue = [(name, quoted, None) for name, quoted in wanted]
    done: set[Path] = set()
    while queue:
        name, quoted, including = queue.pop(0)
        path = _resolve(name, quoted, including, root)
        if path is None:
            in_peer = including is None and any((peer / name).is_file() for peer in peers)
            own_part = including is not None and quoted and "/" in name
            if (in_peer or own_part) and name not in missing:
                missing.append(name)
            continue
        if path in done:
            continue
        done.add(path)
        try:
            text = path.read_text(errors="replace") if path.stat().st_size < (4 << 20) else ""
        except OSError:
            continue
        queue += [(n, q, path) for n, q in kernel_includes(text)]
    return tuple(missing)


def choose_cuda_headers(source: str, candidates: Sequence[HeaderDir], nvrtc_version: tuple[int, int] | None
                        ) -> HeaderDir | None:
    """The header directory NVRTC should get for ``source``, or None when the kernel includes none of CUDA's.

    Only a directory with every header the kernel needs (see ``_missing``) is taken: the first whose
    CUDA version is NVRTC's own, else the first of NVRTC's major version (or of an unknown version).
    Raises CudaHeadersMissing, naming what is missing where and how to get it, when none qualifies.
    """
    wanted = tuple(kernel_includes(source))
    peers = tuple(c.path for c in candidates)
    if not wanted:
        return None
    known = [(name, quoted) for name, quoted in wanted if any(_resolve(name, False, None, p) for p in peers)]
    if not known:
        if any(name in _CUDA_HEADERS for name, _ in wanted):
            raise CudaHeadersMissing(_headers_advice(
                f"{' and '.join(n for n, _ in wanted if n in _CUDA_HEADERS)} "
                f"{'is' if sum(n in _CUDA_HEADERS for n, _ in wanted) == 1 else 'are'} in no CUDA header directory "
                f"here (searched {_searched(candidates)})", nvrtc_version))
        return None  # nothing the kernel includes is CUDA's: NVRTC's own search is all it needs
    complete = [c for c in candidates if not _missing(c.path, tuple(known), peers)]
    if nvrtc_version is not None:
        exact = [c for c in complete if c.version == nvrtc_version]
        same_major = [c for c in complete if c.version is None or c.version[0] == nvrtc_version[0]]
        if exact or same_major:
            return (exact or same_major)[0]
        if complete:
            raise CudaHeadersMissing(_headers_advice(
                f"the only complete CUDA headers here are {', '.join(c.describe() for c in complete)}, which do not "
                f"match NVRTC's CUDA {nvrtc_version[0]}.{nvrtc_version[1]}", nvrtc_version))
    elif complete:
        return complete[0]
    lacking = "; ".join(f"{c.path} ({c.source}) lacks {', '.join(_missing(c.path, tuple(known), peers))}"
                        for c in candidates if _missing(c.path, tuple(known), peers))
    names = " and ".join(name for name, _ in known)
    raise CudaHeadersMissing(_headers_advice(
        f"no CUDA header directory here has everything {names} {'need' if len(known) > 1 else 'needs'}: {lacking}",
        nvrtc_version))


# Headers a course kernel may include that only a CUDA installation provides.
_CUDA_HEADERS = frozenset({"mma.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h", "cuda.h", "cuda_pipeline.h",
                           "cooperative_groups.h"})


def _searched(candidates: Sequence[HeaderDir]) -> str:
    places = ", ".join(str(c.path) for c in candidates)
    return places or "CUDA_HOME, CUDA_PATH, the nvcc on PATH, /usr/local/cuda*, Triton's and pip's CUDA headers"


def _headers_advice(what: str, nvrtc_version: tuple[int, int] | None) -> str:
    version = f"{nvrtc_version[0]}.{nvrtc_version[1]}" if nvrtc_version else "that NVRTC's version"
    return (f"NVRTC cannot compile this kernel on the GPU because {what}; install the CUDA toolkit {version} "
            f"(its headers: the cuda-toolkit package, or conda's cuda-cudart-dev and cuda-nvrtc-dev), or point "
            f"CUDA_HOME at a toolkit that has them.")


def header_candidates_here() -> list[HeaderDir]:
    """cuda_header_candidates for this machine: its environment, nvcc, Triton, pip's and cuda.pathfinder's finds."""
    triton = pip_roots = None
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        triton = Path(list(spec.submodule_search_locations)[0])
    spec = importlib.util.find_spec("nvidia")
    pip_roots = [Path(p) for p in spec.submodule_search_locations] if spec and spec.submodule_search_locations else []
    found: list[Path] = []
    if importlib.util.find_spec("cuda") is not None:
        try:
            from cuda import pathfinder
            for library in ("cudart", "nvrtc"):
                where = pathfinder.find_nvidia_header_directory(library)
                if where:
                    found.append(Path(where))
        except Exception:  # an old cuda-python without pathfinder, or one that cannot look here
            pass
    return cuda_header_candidates(env=os.environ, nvcc=nvcc_path(), triton=triton, pip_roots=pip_roots,
                                  pathfinder=found, target=_target_dir())


def include_options(text: str, nvrtc_version: tuple[int, int] | None) -> list[str]:
    """NVRTC's --include-path for ``text`` on this machine (empty when the kernel includes no CUDA header)."""
    chosen = choose_cuda_headers(text, header_candidates_here(), nvrtc_version)
    return [f"--include-path={chosen.path}"] if chosen is not None else []
