"""Memory-traffic counters a learner can trust without a GPU: ``course.grading.counters(kernel_or_function, *inputs)``.

    c = course.grading.counters(tiled_cuda, q, k, v)          # a %%cuda / %%metal module: the step's own launch
    c = course.grading.counters(kernel, grid, block, args)    # one course.simt.RawKernel launch
    c = course.grading.counters(tiled_attention, q, k, v)     # a Python function launching Triton or SIMT kernels
    c                                                 # a table in the notebook; print(c) for plain text
    c.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"], c.by_tensor["k"]["load_bytes"], c.rows

CUDA C and Metal kernels run on the CPU runtime in counters mode (``check="counters"``): every access
is grouped with the other lanes of its warp at the same instruction and costed with
:mod:`course.models.memory_model` (requests, 32-byte sectors, bytes requested and moved; shared-memory
wavefronts and bank conflicts), with barriers, atomics and vector widths, in Nsight Compute's names
where it has one (course.simt.counters.NSIGHT; the course's own are ``course__...``). Triton kernels run
on the interpreter, which has no warps: for them the counters are the bytes each program loads and
stores, per tensor, counting only the elements a mask lets through. docs/counters.md has the model.

``check_measured`` grades an IO-accounting exercise (``course.check("03.tiled_bytes", fn, kernel=...)``)
against the traffic the learner's own kernel was measured to move.
"""
from __future__ import annotations

import html
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import re
from functools import lru_cache

import numpy as np

from course.models import memory_model as mm
from course.errors import CheckFailed, CourseError
from course.tracks.table import TRACK_NAMES
from course.simt.counters import MODULE, OPS, SHARED, LaunchCounters, set_cost_model, tensor_table

__all__ = ["counters", "first_finished", "Counters", "TritonCounters", "triton_counters", "check_measured",
           "MEASURED_EXERCISES", "NSIGHT", "COURSE", "pattern_cost", "cost_launch"]

KernelCounters = LaunchCounters  # what a CUDA C or Metal launch reports (course/simt/counters.py)

# ------------------------------------------------------------------------------------------------
# The metrics, and which names are Nsight Compute's
# ------------------------------------------------------------------------------------------------

_OP_SUFFIX = {"load": "ld", "store": "st"}

# Metric -> what it counts. NSIGHT: Nsight Compute's own metric names, computed here with the course's
# model; COURSE: the course's own quantities (prefixed course__), for which Nsight Compute has no name.
NSIGHT = {
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global load requests (one per warp instruction)",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "32-byte sectors those requests move",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum": "bytes moved by global loads (sectors x 32)",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio": "sectors per global load request",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global store requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "32-byte sectors those requests move",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum": "bytes moved by global stores (sectors x 32)",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio": "sectors per global store request",
    "smsp__sass_inst_executed_op_shared_ld.sum": "shared-memory load instructions (warp level)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "wavefronts (passes through the banks) of shared loads",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum":
        "extra wavefronts of shared loads caused by bank conflicts",
    "smsp__sass_inst_executed_op_shared_st.sum": "shared-memory store instructions (warp level)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "wavefronts of shared stores",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum":
        "extra wavefronts of shared stores caused by bank conflicts",
    "smsp__inst_executed_op_shared_atom.sum": "shared-memory atomic instructions (warp level)",
}
COURSE = {
    "course__global_ld_thread_bytes": "bytes the threads loaded from global memory (active lanes x width)",
    "course__global_ld_bytes_requested": "distinct bytes the lanes of each global load asked for, summed over loads",
    "course__global_ld_efficiency_pct": "bytes requested / bytes moved by global loads",
    "course__global_st_thread_bytes": "bytes the threads stored to global memory (active lanes x width)",
    "course__global_st_bytes_requested": "distinct bytes the lanes of each global store wrote, summed over stores",
    "course__global_st_efficiency_pct": "bytes requested / bytes moved by global stores",
    "course__global_atom_requests": "global atomic requests (Nsight: ..._op_atom.sum + ..._op_red.sum)",
    "course__global_atom_sectors": "sectors of global atomics (Nsight: ..._op_atom.sum + ..._op_red.sum)",
    "course__global_atom_thread_bytes": "bytes the threads updated atomically in global memory",
    "course__shared_ld_thread_bytes": "bytes the threads loaded from shared memory",
    "course__shared_st_thread_bytes": "bytes the threads stored to shared memory",
    "course__barriers": "block-wide barriers (__syncthreads / threadgroup_barrier) completed, summed over blocks",
    "course__barrier_warp_instructions": "the same, once per warp that took part",
    "course__warp_collectives": "warp collectives completed (shuffles, votes, __syncwarp, matrix operations)",
    "course__module_variable_accesses": "warp accesses to __device__ / __constant__ variables (not modelled)",
    "course__programs": "programs in a Triton launch's grid",
}


@lru_cache(maxsize=1 << 16)
def pattern_cost(memory: str, width: int, lanes: tuple[tuple[int, int], ...], op: str = "load") -> dict[str, int]:
    """The cost of one warp access; ``lanes`` holds (lane, byte offset) for each lane taking part.

    Global memory: sectors and distinct bytes requested, by :func:`course.models.memory_model.coalescing`.
    Shared memory: wavefronts and bank conflicts by :func:`course.models.memory_model.bank_access`, counting only
    the phases that have a lane taking part; the conflicts are the wavefronts beyond one per phase.
    8- and 16-byte shared *loads* then pair their phases as Hopper does (:func:`_paired_phases`).
    """
    if memory == "global":
        c = mm.coalescing([offset for _, offset in lanes], width)
        return {"sectors": c.sectors, "bytes_requested": c.bytes_requested}
    phases = mm.phases_of(width)
    per_phase = mm.WARP // phases
    by_lane = dict(lanes)
    addresses, active, distinct = [], [], []
    for phase in range(phases):
        mine = [by_lane[l] for l in range(phase * per_phase, (phase + 1) * per_phase) if l in by_lane]
        active.append(bool(mine))
        distinct.append(len(set(mine)))
        # A lane not taking part reads the word of one that does (a broadcast adds nothing); in a phase
        # where no lane takes part, any word: that phase is left out below.
        filler = mine[0] if mine else lanes[0][1]
        addresses += [by_lane.get(l, filler) for l in range(phase * per_phase, (phase + 1) * per_phase)]
    banks = mm.bank_access(addresses, width)
    ways = [max(row) for row, used in zip(banks.distinct_words, active) if used]
    conflicts = sum(w - 1 for w in ways)
    wavefronts = sum(ways)
    if op == "load" and phases > 1:
        phase_ways = [max(row) for row in banks.distinct_words]
        wavefronts = _paired_phases(addresses, active, distinct, phase_ways, width) + conflicts
    return {"wavefronts": wavefronts, "bank_conflicts": conflicts, "ways": max(ways)}


def _paired_phases(addresses: list[int], active: list[bool], distinct: list[int], phase_ways: list[int],
                   width: int) -> int:
    """Conflict-free wavefronts of an 8- or 16-byte shared load whose phases are served in pairs.

    Measured with Nsight Compute on Hopper (docs/counters.md): the phases of a wide load come in pairs (a
    16-byte load's quarter-warps 0+1 and 2+3, an 8-byte load's two half-warps), and a pair takes one
    wavefront, not two, when together it asks for at most 128 bytes, counting each phase's distinct
    addresses on their own (lanes of one phase reading the same address count once; lanes of the two
    phases do not merge), and no bank is asked for two different words. A lone active phase takes one.
    ``addresses`` holds every lane's byte address (lanes not taking part repeat one of their phase's).
    Bank conflicts, extra wavefronts within a phase, are added by the caller.
    """
    per_phase = len(addresses) // len(active)
    total = 0
    for first in range(0, len(active), 2):
        pair = [p for p in (first, first + 1) if p < len(active) and active[p]]
        if (len(pair) == 2 and sum(distinct[p] for p in pair) * width <= mm.BANKS * mm.BANK_BYTES
                and all(phase_ways[p] == 1 for p in pair)
                and _one_word_per_bank([a for p in pair for a in addresses[p * per_phase:(p + 1) * per_phase]], width)):
            total += 1
        else:
            total += len(pair)
    return total


def _one_word_per_bank(addresses: list[int], width: int) -> bool:
    """Whether these lanes' accesses of ``width`` bytes ask no bank for two different 4-byte words."""
    words: dict[int, int] = {}
    for address in addresses:
        for k in range(max(1, width // mm.BANK_BYTES)):
            word = address // mm.BANK_BYTES + k
            if words.setdefault(word % mm.BANKS, word) != word:
                return False
    return True


def _line_number(where: str) -> int | None:
    m = re.match(r"line (\d+) of", where)
    return int(m.group(1)) if m else None


def _empty_row(where: str, line, memory: str, tensor: str, op: str, width: int) -> dict[str, Any]:
    return {"where": where, "line": line, "memory": memory, "tensor": tensor, "op": op, "width": width,
            "instructions": 0, "lanes": 0, "thread_bytes": 0, "bytes_requested": 0, "sectors": 0, "bytes_moved": 0,
            "wavefronts": 0, "bank_conflicts": 0, "max_ways": 0}


def _rows(launch: LaunchCounters) -> list[dict[str, Any]]:
    rows: dict[tuple, dict[str, Any]] = {}
    for rec in launch.patterns:
        mask, width, count, buffer = int(rec["mask"]), int(rec["width"]), int(rec["count"]), int(rec["buffer"])
        memory = "global" if buffer >= 0 else "shared" if buffer == SHARED else "module"
        tensor = launch.buffers[buffer] if 0 <= buffer < len(launch.buffers) else memory
        op = OPS[int(rec["kind"])]
        lanes = tuple((l, int(rec["offsets"][l])) for l in range(32) if mask >> l & 1)
        where = launch.lines.get(int(rec["pc"]), "an unknown line")
        key = (where, memory, tensor, op, width)
        row = rows.get(key) or rows.setdefault(key, _empty_row(where, _line_number(where), memory, tensor, op, width))
        row["instructions"] += count
        row["lanes"] += count * len(lanes)
        row["thread_bytes"] += count * len(lanes) * width
        if buffer == MODULE:
            continue
        cost = pattern_cost(memory, width, lanes, op)
        if memory == "global":
            row["sectors"] += count * cost["sectors"]
            row["bytes_moved"] += count * cost["sectors"] * mm.SECTOR_BYTES
            row["bytes_requested"] += count * cost["bytes_requested"]
        else:
            row["wavefronts"] += count * cost["wavefronts"]
            row["bank_conflicts"] += count * cost["bank_conflicts"]
            row["max_ways"] = max(row["max_ways"], cost["ways"])
    return sorted(rows.values(), key=lambda r: (r["line"] is None, r["line"] or 0, r["memory"], r["op"], r["tensor"]))


def finish(m: dict[str, float]) -> dict[str, float]:
    """Every metric present (zeros included), counts as ints, and the ratios computed from the sums."""
    out: dict[str, float] = {name: 0 for name in list(NSIGHT) + list(COURSE)}
    out.update(m)
    for s in ("ld", "st"):
        requests = out[f"l1tex__t_requests_pipe_lsu_mem_global_op_{s}.sum"]
        moved = out[f"l1tex__t_bytes_pipe_lsu_mem_global_op_{s}.sum"]
        out[f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{s}.ratio"] = (
            out[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{s}.sum"] / requests if requests else 0.0)
        out[f"course__global_{s}_efficiency_pct"] = (
            100.0 * out[f"course__global_{s}_bytes_requested"] / moved if moved else 0.0)
    return {k: (v if k.endswith((".ratio", "_pct")) else int(v)) for k, v in out.items()}


def summarize(rows: Sequence[dict[str, Any]], events: dict[str, int]) -> dict[str, float]:
    """A launch's metrics (NSIGHT and COURSE names) from its cost rows and the runtime's own counts."""
    m: dict[str, float] = defaultdict(int)
    for r in rows:
        n, memory, op = r["instructions"], r["memory"], r["op"]
        if memory == "global" and op in _OP_SUFFIX:
            s = _OP_SUFFIX[op]
            m[f"l1tex__t_requests_pipe_lsu_mem_global_op_{s}.sum"] += n
            m[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{s}.sum"] += r["sectors"]
            m[f"l1tex__t_bytes_pipe_lsu_mem_global_op_{s}.sum"] += r["bytes_moved"]
            m[f"course__global_{s}_bytes_requested"] += r["bytes_requested"]
            m[f"course__global_{s}_thread_bytes"] += r["thread_bytes"]
        elif memory == "global":
            m["course__global_atom_requests"] += n
            m["course__global_atom_sectors"] += r["sectors"]
            m["course__global_atom_thread_bytes"] += r["thread_bytes"]
        elif memory == "shared" and op in _OP_SUFFIX:
            s = _OP_SUFFIX[op]
            m[f"smsp__sass_inst_executed_op_shared_{s}.sum"] += n
            m[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{s}.sum"] += r["wavefronts"]
            m[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{s}.sum"] += r["bank_conflicts"]
            m[f"course__shared_{s}_thread_bytes"] += r["thread_bytes"]
        elif memory == "shared":
            m["smsp__inst_executed_op_shared_atom.sum"] += n
        else:
            m["course__module_variable_accesses"] += n
    m["course__barriers"] = events.get("barriers", 0)
    m["course__barrier_warp_instructions"] = events.get("barrier_warps", 0)
    m["course__warp_collectives"] = events.get("warp_collectives", 0)
    return finish(m)


def cost_launch(launch: LaunchCounters) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """(rows, metrics) of a CUDA C or Metal launch's warp access patterns: the course's model applied."""
    rows = _rows(launch)
    return rows, summarize(rows, launch.events)


set_cost_model(cost_launch)


# ------------------------------------------------------------------------------------------------
# Triton: bytes per program and per tensor, from the interpreter's accesses
# ------------------------------------------------------------------------------------------------

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
            row = rows[key] = {"where": f"line {line}", "line": line, "memory": "global", "tensor": tensor,
                               "op": op, "width": int(size), "instructions": 0, "lanes": 0, "thread_bytes": 0,
                               "bytes_requested": 0, "sectors": 0, "bytes_moved": 0, "wavefronts": 0,
                               "bank_conflicts": 0, "max_ways": 0}
        row["instructions"] += 1
        row["lanes"] += int(addresses.size)
        row["thread_bytes"] += nbytes
        row["bytes_requested"] += len(np.unique(addresses)) * int(size)
        mine = per_program.setdefault(program, {}).setdefault(
            tensor, {"load_bytes": 0, "store_bytes": 0, "atomic_bytes": 0})
        mine[f"{op}_bytes"] += nbytes
    ordered = sorted(rows.values(), key=lambda r: (r["line"], r["tensor"], r["op"]))
    return TritonCounters(launch.kernel, tuple(launch.grid), ordered, per_program, dict(launch.constants))


# ------------------------------------------------------------------------------------------------
# The result a learner sees
# ------------------------------------------------------------------------------------------------

_SUMMARY = [  # (label, load metric, store metric)
    ("global requests", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
     "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    ("sectors (32 B)", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
     "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    ("sectors per request", "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
     "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"),
    ("bytes the threads asked for", "course__global_ld_thread_bytes", "course__global_st_thread_bytes"),
    ("bytes requested (distinct per request)", "course__global_ld_bytes_requested", "course__global_st_bytes_requested"),
    ("bytes moved (sectors x 32)", "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
     "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum"),
    ("coalescing efficiency", "course__global_ld_efficiency_pct", "course__global_st_efficiency_pct"),
    ("shared instructions", "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum"),
    ("shared wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    ("bank conflicts (extra wavefronts)", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
]
_OTHERS = [("global atomic requests", "course__global_atom_requests"),
           ("global atomic sectors", "course__global_atom_sectors"),
           ("shared atomic instructions", "smsp__inst_executed_op_shared_atom.sum"),
           ("block barriers", "course__barriers"),
           ("warp collectives", "course__warp_collectives")]
_TRITON = [("bytes loaded", "course__global_ld_thread_bytes"), ("bytes stored", "course__global_st_thread_bytes"),
           ("bytes updated atomically", "course__global_atom_thread_bytes"), ("programs", "course__programs")]


def _fmt(name: str, value: float) -> str:
    if name.endswith("_pct"):
        return f"{value:.1f}%"
    if name.endswith(".ratio"):
        return f"{value:.2f}"
    return f"{int(value):,}"


def _describe(name: str) -> str:
    return NSIGHT.get(name) or COURSE.get(name) or {"course__programs": "programs in the grid"}.get(name, "")


@dataclass
class Counters:
    """What ``course.grading.counters`` measured: one entry per kernel launch, with sums over all of them.

    ``metrics``: metric name -> value over every launch (Nsight Compute's names where it has one, see
    ``describe``); ``by_tensor``: per tensor, the bytes loaded / stored / updated atomically and (CUDA C,
    Metal) requests, sectors, bytes requested and moved; ``rows``: one dict per kernel and source line,
    memory, tensor, operation and access width, ready for a plot or a DataFrame."""

    launches: list[Any]

    @property
    def metrics(self) -> dict[str, float]:
        total: dict[str, float] = defaultdict(float)
        for launch in self.launches:
            for name, value in launch.metrics.items():
                if not name.endswith((".ratio", "_pct")):
                    total[name] += value
        return finish(total)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [{"kernel": launch.kernel, **row} for launch in self.launches for row in launch.rows]

    @property
    def by_tensor(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for launch in self.launches:
            for name, counts in launch.by_tensor.items():
                mine = out.setdefault(name, dict.fromkeys(counts, 0))
                for key, value in counts.items():
                    mine[key] = mine.get(key, 0) + value
        return out

    @property
    def simt(self) -> bool:
        return any(isinstance(launch, KernelCounters) for launch in self.launches)

    def __getitem__(self, name: str) -> float:
        return self.metrics[name]

    @staticmethod
    def describe(name: str) -> str:
        """What a metric counts, and whether its name is Nsight Compute's or the course's own."""
        if name in NSIGHT:
            return f"{NSIGHT[name]} (Nsight Compute's metric name)"
        return f"{_describe(name)} (the course's own measure)" if _describe(name) else ""

    # -- tables --

    @property
    def widths(self) -> dict[tuple[str, str, int], int]:
        """Warp instructions (Triton: tl.load / tl.store calls) per (memory, operation, bytes per lane)."""
        out: dict[tuple[str, str, int], int] = defaultdict(int)
        for r in self.rows:
            out[(r["memory"], r["op"], r["width"])] += r["instructions"]
        return dict(sorted(out.items()))

    def summary_rows(self) -> list[tuple[str, str, str, str]]:
        """(label, loads, stores, metric names): the summary table."""
        m = self.metrics
        out = []
        if self.simt:
            for label, ld, st in _SUMMARY:
                out.append((label, _fmt(ld, m[ld]), _fmt(st, m[st]), f"{ld} / {st}"))
            for label, name in _OTHERS:
                if m.get(name):
                    out.append((label, _fmt(name, m[name]), "", name))
        else:
            out.append(("bytes (only elements a mask lets through)", _fmt("", m["course__global_ld_thread_bytes"]),
                        _fmt("", m["course__global_st_thread_bytes"]),
                        "course__global_ld_thread_bytes / course__global_st_thread_bytes"))
            for label, name in _TRITON[2:]:
                if m.get(name):
                    out.append((label, _fmt(name, m[name]), "", name))
        return out

    def tensor_rows(self) -> list[tuple[str, ...]]:
        """(tensor, loaded, stored, atomic, sectors, efficiency), bytes as the threads / programs asked."""
        rows = []
        for name, t in self.by_tensor.items():
            eff = f"{100 * t['bytes_requested'] / t['bytes_moved']:.1f}%" if t.get("bytes_moved") else "-"
            rows.append((name, f"{t['load_bytes']:,}", f"{t['store_bytes']:,}", f"{t['atomic_bytes']:,}",
                         f"{t['sectors']:,}" if t.get("sectors") else "-", eff))
        return rows

    def width_rows(self) -> list[tuple[str, str, str]]:
        return [(f"{memory} {op}", f"{width} B", f"{n:,}") for (memory, op, width), n in self.widths.items()]

    def line_rows(self, limit: int = 12) -> list[tuple[str, ...]]:
        """The source lines that cost the most (sectors, wavefronts in shared memory, else bytes)."""
        def weight(r):
            return r["sectors"] + r["wavefronts"] or r["thread_bytes"] / 32
        chosen = sorted(self.rows, key=weight, reverse=True)[:limit]
        chosen.sort(key=lambda r: (r["kernel"], r["line"] or 0))
        out = []
        for r in chosen:
            if r["memory"] == "shared":
                cost = f"{r['wavefronts']:,} wavefronts, {r['bank_conflicts']:,} conflicts (worst {r['max_ways']}-way)"
            elif r["sectors"]:
                eff = 100 * r["bytes_requested"] / r["bytes_moved"]
                cost = f"{r['sectors']:,} sectors, {r['thread_bytes']:,} B asked for, {eff:.1f}% efficient"
            else:
                cost = f"{r['thread_bytes']:,} B"
            out.append((r["where"], f"{r['memory']} {r['op']}", r["tensor"], f"{r['width']} B",
                        f"{r['instructions']:,}", cost))
        return out

    def _headline(self) -> str:
        parts = []
        for launch in self.launches:
            if isinstance(launch, KernelCounters):
                parts.append(f"{launch.kernel} ({launch.language}): grid {launch.grid} x block {launch.block}, "
                             f"{launch.seconds:.3f} s in counters mode")
            else:
                parts.append(f"{launch.kernel} (Triton interpreter): grid {launch.grid}")
        return "; ".join(parts)

    _TENSOR_HEAD = ("tensor", "loaded (B)", "stored (B)", "atomic (B)", "sectors", "efficiency")
    _WIDTH_HEAD = ("access", "bytes per lane", "instructions")
    _LINE_HEAD = ("where", "access", "tensor", "width", "instructions", "cost")

    def __str__(self) -> str:
        def block(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
            widths = [max(len(str(x)) for x in column) for column in zip(head, *rows)]
            fmt = lambda row: "  " + "  ".join(f"{str(x):<{w}}" if i == 0 else f"{str(x):>{w}}"  # noqa: E731
                                               for i, (x, w) in enumerate(zip(row, widths)))
            return [fmt(head)] + [fmt(row) for row in rows]

        lines = [self._headline()]
        summary = self.summary_rows()
        lines += block(("", "loads", "stores"), [r[:3] for r in summary])
        if self.tensor_rows():
            lines += ["by tensor:"] + block(self._TENSOR_HEAD, self.tensor_rows())
        if self.width_rows():
            lines += ["by access width:"] + block(self._WIDTH_HEAD, self.width_rows())
        if self.line_rows():
            lines += ["by source line (the costliest):"] + block(self._LINE_HEAD, self.line_rows())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Counters of {len(self.launches)} launch(es): {self._headline()}>"

    def _repr_html_(self) -> str:
        e = html.escape

        def table(head: Sequence[str], rows: Sequence[Sequence[str]], titles: Sequence[str] | None = None) -> str:
            out = ["<table style='border-collapse:collapse;font-size:90%'><tr>"
                   + "".join(f"<th style='text-align:left;padding:2px 8px'>{e(h)}</th>" for h in head) + "</tr>"]
            for i, row in enumerate(rows):
                title = f" title='{e(titles[i])}'" if titles else ""
                out.append(f"<tr{title}>" + "".join(f"<td style='padding:2px 8px'>{e(str(c))}</td>" for c in row)
                           + "</tr>")
            return "".join(out) + "</table>"

        summary = self.summary_rows()
        parts = [f"<div><b>{e(self._headline())}</b>",
                 table(["", "loads", "stores"], [r[:3] for r in summary], [r[3] for r in summary])]
        for title, head, rows in (("by tensor", self._TENSOR_HEAD, self.tensor_rows()),
                                  ("by access width", self._WIDTH_HEAD, self.width_rows()),
                                  ("by source line (the costliest)", self._LINE_HEAD, self.line_rows())):
            if rows:
                parts.append(f"<br><b>{title}</b>" + table(head, rows))
        parts.append("<small>Hover a summary row for its metric name (Nsight Compute's where it has one). "
                     "The model and its limits: docs/counters.md.</small></div>")
        return "".join(parts)


# ------------------------------------------------------------------------------------------------
# Measuring
# ------------------------------------------------------------------------------------------------

def _module_function(module, tiles=None, exercise: str | None = None) -> Callable[..., Any]:
    """The attention function of a %%cuda / %%metal module's step (the course's own launch)."""
    from course.tracks import cuda, metal
    from course.tracks import table
    if module.language == "cuda":
        return cuda.attention_function(module, exercise, tiles)
    if exercise is None:
        found = [row.id for row in table.exercises(track="metal") if row.entry[0] in module.kernels and row.lesson != "07"]
        if len(found) != 1:
            raise CourseError("cannot tell which Metal step these kernels are for; pass exercise=\"03.tiled_metal\" "
                              "or the like, or measure a function that launches them.")
        exercise = found[0]
    if exercise in cuda.STEPS:  # one thread per row: the CUDA launcher serves lessons 01 and 02 of Metal
        return cuda.attention_function(module, exercise, tiles)
    forward = metal.FORWARD[exercise]
    return lambda q, k, v, causal=False: forward(module, q, k, v, causal, tiles=tiles)


def counters(target: Any, *inputs: Any, tiles=None, exercise: str | None = None, **options: Any) -> Counters:
    """Run ``target`` once on ``inputs`` and measure its memory traffic.

    ``target`` is a ``course.simt.RawKernel`` (``inputs`` are then ``grid, block, args``; ``options`` the
    launch's, e.g. ``shared_mem=``), a ``%%cuda`` / ``%%metal`` module (launched as its lesson step, on
    ``q, k, v``, with ``tiles=`` if given), or any Python function that launches CUDA C, Metal or Triton
    kernels. CUDA C and Metal kernels run on the CPU runtime in counters mode; Triton kernels on the
    interpreter. Returns a :class:`Counters` (a table in a notebook).
    """
    from course.grading.racecheck import interpreter_checks
    from course.simt import RawKernel, RawModule
    from course.simt.kernel import collect_counters

    _refuse_unfinished(target)
    if isinstance(target, RawModule):
        target = _module_function(target, tiles, exercise)
    elif tiles is not None or exercise is not None:
        raise CourseError("tiles= and exercise= choose the launch of a %%cuda / %%metal module; pass them to your "
                          "own function instead.")
    if type(target).__name__ in ("JITFunction", "Autotuner", "Heuristics"):
        raise CourseError("a @triton.jit kernel is launched as kernel[grid](...): pass the Python function that "
                          "launches it (and its inputs) instead.")
    if not callable(target):
        raise CourseError(f"course.grading.counters measures a kernel, a %%cuda / %%metal module or a function; got "
                          f"{type(target).__name__}.")
    triton_launches: list = []
    order: list = []
    with collect_counters() as simt_launches:
        with interpreter_checks(launches=triton_launches):
            target(*inputs, **options)
    order = list(simt_launches) + [triton_counters(launch) for launch in triton_launches]
    if not order:
        what = "kernel" if isinstance(target, RawKernel) else getattr(target, "__name__", "the function")
        raise CourseError(f"{what} launched no kernel that could be measured: CUDA C and Metal kernels are measured "
                          "on the CPU runtime, Triton kernels on its interpreter (on a machine without a GPU).")
    return Counters(order)


def _stub_exercise(module) -> str | None:
    """The exercise whose kernel ``module`` still is exactly as handed out (every solution region empty)."""
    from course.grading.engines import untouched_stub
    from course.tracks import table
    for row in table.exercises(track=module.language):
        if row.entry[0] in module.kernels and untouched_stub(row.id, module.code):
            return row.id
    return None


def _refuse_unfinished(target: Any) -> None:
    """A sentence instead of a measurement of nothing: a %%cuda / %%metal cell that failed to compile, or
    that still holds the kernel as handed out (it would run, and load no K or V at all)."""
    import os

    from course.grading.answers import NotFinished
    from course.paths import REPO
    from course.simt import RawModule
    from course.simt.magic import CompileFailed
    if isinstance(target, CompileFailed):
        raise NotFinished(f"your %%{target.language} {target.name} cell did not compile, so its kernel is not finished "
                          f"yet: fix the error that cell shows, run it, then run this cell again.")
    if not isinstance(target, RawModule) or _stub_exercise(target) is None:
        return
    path = target.display_path
    if os.path.isabs(path):  # a kernel file: in a copy of the course without its solutions (the grader's)
        shown = os.path.relpath(path, REPO) if path.startswith(str(REPO) + os.sep) else path
        raise NotFinished(f"the kernel in {shown} is not finished yet: its solution regions are empty in this copy "
                          f"of the course, so there is nothing to measure.")
    cell = os.path.splitext(os.path.basename(path))[0]
    raise NotFinished(f"your %%{target.language} {cell} cell is not finished yet (nothing is written where it says "
                      f"`// YOUR CODE HERE`): complete it, run it, then run this cell again.")


def first_finished(*inputs: Any, **tracks: Any) -> tuple[str, Counters]:
    """Measure the first of ``tracks`` (track name -> a %%cuda / %%metal module or a function launching
    Triton kernels) that is finished: ``track, c = first_finished(q, k, v, triton=f, cuda=m, metal=m2)``.

    A track still holding its stub (or whose cell failed) is skipped; when none is finished, one sentence
    (course.grading.answers.NotFinished) says so. Any other error of a kernel is raised as it is."""
    from course.grading.answers import NotFinished, unfinished_sentence
    for track, target in tracks.items():
        try:
            return track, counters(target, *inputs)
        except Exception as error:  # noqa: BLE001 - only an unfinished exercise is passed over
            if unfinished_sentence(error) is None:
                raise
    named = [TRACK_NAMES.get(t, t) for t in tracks]
    names = " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    raise NotFinished(f"This cell measures your kernel, which is not finished yet in any track ({names}): complete "
                      f"one, run its cell, then run this cell again.")


# ------------------------------------------------------------------------------------------------
# Grading an IO-accounting exercise against the learner's own kernel
# ------------------------------------------------------------------------------------------------

# The size the kernel is measured at: not a multiple of any tile, so a partial tile of queries and of keys
# is counted too; float32, so bytes_per_element is 4.
MEASURED_SIZE = dict(n_q=40, n_k=72, d=16)
MEASURED_EXERCISES = ("03.tiled_bytes",)


def _kernel_programs(result: Counters) -> int:
    """Blocks (CUDA C, Metal) or programs (Triton) along the query rows of the launch that wrote O."""
    grids = [launch.grid for launch in result.launches]
    return max(grid[0] for grid in grids)


def check_measured(exercise: str, fn: Callable[..., Any], kernel: Any) -> str:
    """Compare the learner's traffic formula with what their own ``kernel`` was measured to move.

    Raises CheckFailed with the per-tensor breakdown when they disagree; returns the line to print when
    they agree. ``kernel`` is a %%cuda / %%metal module of lesson 03 or 04, or a function ``f(q, k, v)``
    launching Triton kernels (lesson 03's or 04's, with LSE)."""
    from course.models import roofline
    from course.inputs import make_qkv

    if exercise not in MEASURED_EXERCISES:
        raise CheckFailed(f"{exercise}: kernel= grades a traffic formula against a kernel's measured traffic, which "
                          f"exists for {', '.join(MEASURED_EXERCISES)} only.")
    n_q, n_k, d = MEASURED_SIZE["n_q"], MEASURED_SIZE["n_k"], MEASURED_SIZE["d"]
    q, k, v = make_qkv(n_q, d, n_k=n_k, seed=3)
    try:
        result = counters(kernel, q, k, v)
    except CourseError as e:
        raise CheckFailed(f"{exercise}: could not measure your kernel: {e}") from None
    programs = _kernel_programs(result)
    block_m = -(-n_q // programs)  # a tile height giving that many programs (the formula needs no other)
    measured = result.by_tensor
    moved = sum(t["load_bytes"] + t["store_bytes"] + t["atomic_bytes"] for t in measured.values())
    args = dict(n_q=n_q, n_k=n_k, d=d, block_m=block_m, bytes_per_element=4)
    theirs = fn(**args)
    lesson = roofline.tiled_kernel_bytes(**args)
    parts = ", ".join(f"{name} {t['load_bytes'] + t['atomic_bytes']:,} B read" if t["load_bytes"]
                      else f"{name} {t['store_bytes'] + t['atomic_bytes']:,} B written"
                      for name, t in measured.items())
    where = (f"n_q={n_q}, n_k={n_k}, d={d}, float32, {programs} program(s) of block_m={block_m}")
    if moved != lesson:
        raise CheckFailed(
            f"{exercise}: your kernel moved {moved:,} bytes at {where} ({parts}), but the lesson's count for a tiled "
            f"kernel is {lesson:,}: Q read once, K and V once per program, O and the float32 LSE written once.\n"
            f"  hint: a tensor whose bytes are off is read or written more (or less) often than that; "
            f"course.grading.counters(your_kernel, q, k, v) shows which source line does it.")
    if theirs != moved:
        raise CheckFailed(f"{exercise}: at {where} your formula gives {theirs!r} bytes, but your kernel was measured to "
                          f"move {moved:,} ({parts}).")
    return f"{exercise}: your formula agrees with your kernel's measured traffic at {where}: {moved:,} bytes ({parts})."


# ------------------------------------------------------------------------------------------------
# main(): one step's counters here, or the same launch on a GPU for Nsight Compute
# ------------------------------------------------------------------------------------------------

NCU_METRICS = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,"
               "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,"
               "smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_shared_st.sum,"
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,"
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,"
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,"
               "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum,l1tex__t_requests_pipe_lsu_mem_global_op_red.sum,"
               "smsp__inst_executed_op_shared_atom.sum")


def main(argv: Sequence[str] | None = None) -> int:
    """``main(["03", "--n", "64", "--d", "32"])``: the counters of CUDA step 03's kernel file
    at that size on the CPU runtime; with ``--gpu``, the same single launch on an NVIDIA GPU instead, to run
    under ``ncu --metrics ...`` (docs/counters.md gives the command)."""
    import argparse

    from course.inputs import make_qkv
    from course.kernels import kernel_path
    from course.tracks import cuda
    from course.tracks import table

    steps = {row.lesson: row.id for row in table.exercises(track="cuda") if row.id in cuda.STEPS}
    parser = argparse.ArgumentParser(prog="course.grading.counters.main", description=main.__doc__)
    parser.add_argument("lesson", choices=sorted(steps))
    parser.add_argument("--n", type=int, default=64, help="query and key length (default 64)")
    parser.add_argument("--d", type=int, default=32, help="head dim (default 32)")
    parser.add_argument("--gpu", action="store_true", help="launch once on an NVIDIA GPU (for ncu) instead")
    args = parser.parse_args(argv)
    exercise = steps[args.lesson]
    step = cuda.STEPS[exercise]
    q, k, v = make_qkv(args.n, args.d, seed=0)
    if step.half_inputs:
        q, k, v = (t.half() for t in (q, k, v))
    if not args.gpu:
        module = cuda.module_for(exercise)
        print(counters(module, q, k, v))
        return 0
    from course.simt import gpu
    ok, why = gpu.cuda_available()
    if not ok:
        print(why)
        return 1
    path = str(kernel_path(step.kernel_file))
    if step.layout == "naive":
        qa, ka, va = (t.float().numpy() for t in (q, k, v))
        o = np.zeros_like(qa)
        blocks = -(-args.n // cuda.THREADS_PER_BLOCK)
        gpu.launch_cuda(None, path, step.kernel, (blocks,), (cuda.THREADS_PER_BLOCK,),
                        (qa, ka, va, o, args.n, args.n, args.d, args.d ** -0.5))
    else:
        def runner(name, grid, block, launch_args, shared_mem):
            gpu.launch_cuda(None, path, name, grid, block, launch_args, shared_mem=shared_mem)
        cuda.forward(exercise, None, q, k, v, runner=runner)
    print(f"launched {step.kernel} once on the GPU (n={args.n}, d={args.d}); profile this command with ncu.")
    return 0


class _CallableModule(type(math)):
    """``course.grading.counters(...)`` measures; ``course.grading.counters.Counters`` and the rest stay reachable."""

    def __call__(self, target: Any, *inputs: Any, **options: Any) -> Counters:
        return counters(target, *inputs, **options)


sys.modules[__name__].__class__ = _CallableModule
