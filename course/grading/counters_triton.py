"""The counters of a Triton launch on the interpreter: bytes loaded, stored and updated atomically, per program
and per tensor.

The interpreter has no warps, so there are no requests, sectors or bank conflicts to count: only the bytes
each program's ``tl.load``, ``tl.store`` and atomics touch, counting only the elements a mask lets through.
:func:`course.grading.racecheck.interpreter_checks` records the accesses (its ``launches=`` list);
:func:`triton_counters` turns one such record into a :class:`TritonCounters`.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from course.models.traffic import empty_row, finish
from course.simt.launch_counters import tensor_table

__all__ = ["TritonCounters", "triton_counters"]


@dataclass
class TritonCounters:
    """One interpreted Triton launch: bytes loaded, stored and updated atomically, per program and per tensor.

    Only the elements a mask lets through are counted (an element of a masked-off lane is not read).
    ``per_program[(x, y, z)][tensor]`` holds ``load_bytes``, ``store_bytes`` and ``atomic_bytes``."""

    kernel: str
    grid: tuple[int, int, int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    per_program: dict[tuple[int, int, int], dict[str, dict[str, int]]] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    language: str = "triton"

    @property
    def metrics(self) -> dict[str, float]:
        m: dict[str, float] = defaultdict(int)
        for r in self.rows:
            key = {"load": "course__global_ld_thread_bytes", "store": "course__global_st_thread_bytes",
                   "atomic": "course__global_atom_thread_bytes"}[r["op"]]
            m[key] += r["thread_bytes"]
        m["course__programs"] = math.prod(self.grid)
        return finish(m)

    @property
    def by_tensor(self) -> dict[str, dict[str, int]]:
        return tensor_table(self.rows)

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)


_KIND = {"r": "load", "w": "store", "a": "atomic"}


def triton_counters(launch) -> TritonCounters:
    """Counters of one launch recorded by :func:`course.grading.racecheck.interpreter_checks` (its ``launches=`` list)."""
    spans = sorted(((t.data_ptr(), t.data_ptr() + max(t.numel(), 1) * t.element_size(), name)
                    for name, t in launch.buffers), key=lambda s: s[0])
    starts = np.array([s[0] for s in spans], dtype=np.uint64)

    def tensor_of(address: int) -> str:
        i = int(np.searchsorted(starts, np.uint64(address), side="right")) - 1
        # Views of one tensor overlap: take the last argument that starts at or before the address and holds it.
        while i >= 0 and not spans[i][0] <= address < spans[i][1]:
            i -= 1
        return spans[i][2] if i >= 0 else "?"

    rows: dict[tuple, dict[str, Any]] = {}
    per_program: dict[tuple[int, int, int], dict[str, dict[str, int]]] = {}
    for program, _, kind, line, addresses, size in launch.ops:
        op = _KIND[kind]
        tensor = tensor_of(int(addresses[0]))  # one access stays inside one argument (the bounds check)
        nbytes = int(addresses.size) * int(size)
        key = (line, tensor, op, size)
        row = rows.get(key)
        if row is None:
            row = rows[key] = empty_row(f"line {line}", line, "global", tensor, op, int(size))
        row["instructions"] += 1
        row["lanes"] += int(addresses.size)
        row["thread_bytes"] += nbytes
        row["bytes_requested"] += len(np.unique(addresses)) * int(size)
        mine = per_program.setdefault(program, {}).setdefault(
            tensor, {"load_bytes": 0, "store_bytes": 0, "atomic_bytes": 0})
        mine[f"{op}_bytes"] += nbytes
    ordered = sorted(rows.values(), key=lambda r: (r["line"], r["tensor"], r["op"]))
    return TritonCounters(launch.kernel, tuple(launch.grid), ordered, per_program, dict(launch.constants))
