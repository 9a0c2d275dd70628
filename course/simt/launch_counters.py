"""What counters mode (``check="counters"``) recorded in one launch: warp access patterns.

The runtime (runtime.cpp) puts each warp's accesses back together: lane l's k-th access at one
instruction since the warp last met belongs with the other lanes' k-th accesses there. It reports every
distinct warp access as a *pattern*: the lanes taking part and their byte offsets from a 128-byte
boundary, the width per lane, load / store / atomic, the buffer (or shared memory), the instruction's
source line, and how many times that exact access occurred. The runtime does not cost them: the
course's model of the memory system (course/models/memory_model.py, applied by course/models/traffic.py) turns
patterns into sectors, bank conflicts and Nsight Compute's metrics, so that the runtime stays free of
the course around it. ``LaunchCounters.metrics``, ``.rows`` and ``.by_tensor`` ask that model, which
``course.models.traffic`` installs with :func:`set_cost_model` when the course package is imported.

It also counts the launch's warp-level matrix products (``LaunchCounters.matrix_ops``): per call site,
shape and operand types, how many ``wmma::mma_sync`` or ``simdgroup_multiply[_accumulate]`` operations
completed, one per warp.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .diagnostics import KernelLaunchError

__all__ = ["LaunchCounters", "MatrixOps", "read_counters", "set_cost_model", "tensor_table", "PATTERN", "OPS"]

# numpy mirrors of SimtCounterHeader, SimtMatrixOp and SimtPattern (runtime.cpp).
HEADER_FIELDS = ("capacity", "patterns", "dropped", "barriers", "barrier_warps", "warp_collectives", "matrix_ops",
                 "matrix_kinds")
MATRIX_KINDS = 16  # kSimtMatrixKinds
MATRIX_OP = np.dtype([("pc", "<u8"), ("m", "<u2"), ("n", "<u2"), ("k", "<u2"), ("a", "u1"), ("b", "u1"), ("c", "u1"), ("d", "u1"),
                      ("reserved", "u1", (6,)), ("count", "<u8")])
_HEADER_BYTES = 8 * len(HEADER_FIELDS) + MATRIX_KINDS * MATRIX_OP.itemsize
ELEMENTS = {0: "", 1: "fp16", 2: "fp32", 3: "other"}  # simt::MatrixElement; "" for a C that is not added
PATTERN = np.dtype([("pc", "<u8"), ("count", "<u8"), ("mask", "<u4"), ("buffer", "<i4"), ("kind", "u1"),
                    ("width", "u1"), ("piece", "<u2"), ("reserved", "<u4"), ("offsets", "<u8", (32,))])
OPS = {0: "load", 1: "store", 2: "atomic"}
SHARED, MODULE = -1, -2  # PATTERN["buffer"] for shared memory and for the module's own variables

_cost_model: Callable[["LaunchCounters"], tuple[list, dict]] | None = None


def set_cost_model(model: Callable[["LaunchCounters"], tuple[list, dict]]) -> None:
    """Install ``model(launch) -> (rows, metrics)``, which costs a launch's patterns (course/models/traffic.py)."""
    global _cost_model
    _cost_model = model


@dataclass(frozen=True)
class MatrixOps:
    """Warp-level matrix operations of one kind in a launch: ``count`` times D (m × n) = A (m × k) B (k × n) + C,
    one per warp (a ``wmma::mma_sync``, a ``simdgroup_multiply_accumulate``), with the element type of each
    operand ("fp16", "fp32"; ``c`` is "" where no C is added, as in ``simdgroup_multiply``), made at ``line``
    ("line N of file")."""

    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    d: str
    count: int
    line: str = ""

    @property
    def shape(self) -> str:
        return f"{self.m}×{self.n}×{self.k}"

    @property
    def sixteen_bit(self) -> bool:
        """Whether both factors are 16-bit: what the matrix units multiply at full rate."""
        return self.a == self.b == "fp16"


@dataclass
class LaunchCounters:
    """The warp access patterns of one launch, and the counts the runtime keeps itself.

    ``patterns``: a numpy array of PATTERN records; ``lines``: instruction offset -> "line N of file";
    ``buffers``: the buffer arguments' names, by index; ``events``: barriers (block-wide, summed over
    blocks), barrier_warps (the same, per warp taking part), warp_collectives and matrix_ops (the warp-level
    matrix products, every kind); ``matrix_ops``: those products by shape and operand types."""

    kernel: str
    language: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    patterns: np.ndarray
    lines: dict[int, str]
    buffers: tuple[str, ...]
    events: dict[str, int]
    matrix_ops: tuple[MatrixOps, ...] = ()
    seconds: float = 0.0
    _costed: tuple[list, dict] | None = field(default=None, repr=False)

    def _cost(self) -> tuple[list, dict]:
        if self._costed is None:
            if _cost_model is None:
                raise RuntimeError("no model of the memory system is installed to cost these patterns: import "
                                   "course.grading.counters (importing the course package does it).")
            self._costed = _cost_model(self)
        return self._costed

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per (source line, memory, tensor, operation, width): instructions, sectors, wavefronts..."""
        return self._cost()[0]

    @property
    def metrics(self) -> dict[str, float]:
        """Nsight Compute's metric names (and the course's own, ``course__...``) -> value."""
        return self._cost()[1]

    @property
    def by_tensor(self) -> dict[str, dict[str, int]]:
        """Global traffic per buffer: bytes loaded / stored / updated atomically, requests, sectors..."""
        return tensor_table(self.rows)

    @property
    def widths(self) -> dict[tuple[str, str, int], int]:
        """Warp instructions per (memory, operation, bytes per lane): how wide the accesses were."""
        out: dict[tuple[str, str, int], int] = {}
        for r in self.rows:
            key = (r["memory"], r["op"], r["width"])
            out[key] = out.get(key, 0) + r["instructions"]
        return dict(sorted(out.items()))

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def __getitem__(self, name: str) -> float:
        return self.metrics[name]


def tensor_table(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Global traffic per tensor, summed from cost rows: the bytes the threads loaded / stored / updated
    atomically, and the requests, sectors, distinct bytes requested and bytes moved."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["memory"] != "global":
            continue
        t = out.setdefault(r["tensor"], {k: 0 for k in ("load_bytes", "store_bytes", "atomic_bytes", "requests",
                                                        "sectors", "bytes_requested", "bytes_moved")})
        t[f"{r['op']}_bytes"] += r["thread_bytes"]
        t["requests"] += r["instructions"]
        for k in ("sectors", "bytes_requested", "bytes_moved"):
            t[k] += r[k]
    return out


def read_counters(lib, handle: int, kernel, spec, buffer_names: Sequence[str]) -> LaunchCounters:
    """The patterns of a launch that succeeded (called by RawKernel before the launch's memory is released)."""
    address = lib.dll.simt_counters(handle)
    raw = ctypes.string_at(address, _HEADER_BYTES)
    header = dict(zip(HEADER_FIELDS, np.frombuffer(raw, dtype="<u8", count=len(HEADER_FIELDS)).tolist()))
    kinds = np.frombuffer(raw, dtype=MATRIX_OP, count=min(header["matrix_kinds"], MATRIX_KINDS),
                          offset=8 * len(HEADER_FIELDS))
    if header["dropped"]:
        raise KernelLaunchError(f"{kernel.name}: counters mode saw more than {header['capacity']:,} different warp "
                                f"access patterns, too many to report; measure a smaller launch (fewer blocks or "
                                f"a shorter sequence).")
    n = header["patterns"]
    records = np.frombuffer(ctypes.string_at(address + _HEADER_BYTES, n * PATTERN.itemsize), dtype=PATTERN).copy()
    offsets = sorted({int(pc) for pc in records["pc"]} | {int(pc) for pc in kinds["pc"]})
    lines: dict[int, str] = {}
    if offsets:
        # addr2line wants the address of the access itself: one byte before the return address.
        text = "\n".join("{pc:%x}" % max(pc - 1, 0) for pc in offsets)
        lines = dict(zip(offsets, lib.symbolize(text, kernel.module.display_path).split("\n")))
    merged: dict[tuple, int] = {}  # copies of one call (an unrolled loop) share its line
    for r in kinds:
        key = (int(r["m"]), int(r["n"]), int(r["k"]), *(ELEMENTS.get(int(r[x]), "other") for x in "abcd"),
               lines.get(int(r["pc"]), ""))
        merged[key] = merged.get(key, 0) + int(r["count"])
    matrix_ops = tuple(MatrixOps(*key[:7], count, key[7]) for key, count in merged.items())
    events = {k: header[k] for k in ("barriers", "barrier_warps", "warp_collectives", "matrix_ops")}
    return LaunchCounters(kernel=kernel.name, language=kernel.module.language, grid=tuple(spec.grid),
                          block=tuple(spec.block), patterns=records, lines=lines, buffers=tuple(buffer_names),
                          events=events, matrix_ops=matrix_ops)
