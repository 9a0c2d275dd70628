"""What ``course.counters`` shows a learner: :class:`Counters`, the launches one call measured, with sums over them.

A table in a notebook (``_repr_html_``), plain text with ``print``: a summary in Nsight Compute's metric names
where it has one, then the bytes per tensor, the warp instructions per access width and the source lines that
cost the most. A launch is a :class:`course.simt.launch_counters.LaunchCounters` (CUDA C, Metal; costed by
:mod:`course.models.traffic`) or a :class:`course.grading.counters_triton.TritonCounters` (bytes only).
"""
from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from course.models.traffic import COURSE, NSIGHT, finish
from course.simt.launch_counters import LaunchCounters

__all__ = ["Counters"]

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
        return any(isinstance(launch, LaunchCounters) for launch in self.launches)

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
            if isinstance(launch, LaunchCounters):
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
