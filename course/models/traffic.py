"""The cost model of counters mode: a CUDA C or Metal launch's warp accesses turned into Nsight Compute's metrics.

The CPU runtime records each distinct warp access (course/simt/launch_counters.py) and costs none of them; this module
applies the course's model of the memory system, :mod:`course.models.memory_model`, to each: requests, 32-byte
sectors, bytes requested and moved for global memory, wavefronts and bank conflicts for shared memory, and
sums them into the launch's metrics, named as Nsight Compute names them where it has a metric (``NSIGHT``) and
``course__...`` where it has none (``COURSE``). Importing this module installs :func:`cost_launch` as the
runtime's cost model. docs/counters.md describes the model and how it was checked against Nsight Compute.
"""
from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache
from typing import Any, Sequence

from course.models import memory_model as mm
from course.simt.launch_counters import MODULE, OPS, SHARED, LaunchCounters, set_cost_model

__all__ = ["NSIGHT", "COURSE", "pattern_cost", "empty_row", "finish", "summarize", "cost_launch"]

# Metric names per operation: Nsight Compute's _op_ld / _op_st.
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


def empty_row(where: str, line: int | None, memory: str, tensor: str, op: str, width: int) -> dict[str, Any]:
    """A row of the cost table with nothing counted yet: one per source line, memory, tensor, operation and width."""
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
        row = rows.get(key) or rows.setdefault(key, empty_row(where, _line_number(where), memory, tensor, op, width))
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
