"""What the Triton benchmark (:mod:`course.tools.bench_triton`) writes: the markdown page (with what was recorded
beside it kept), the console line of each measurement, and the plot."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from course.tools.bench_grid import (BASELINES, BY_KEY, CUDNN, DEFAULT_HEADS, DEFAULT_TOKENS, DIFF_TOLERANCE, DIRECT,
                                     FP8, FP8_TOLERANCE, KERNELS, LESSON07_BACKWARD, MODE_NAMES, OPTIONAL, SDPA,
                                     Measurement, peak_tflops, previous_lesson, ratios, size_text, vs_cudnn)
from course.tools.timing import DEFAULT_REPS, FLUSH_BYTES, MIN_TOTAL_MS


# ----------------------------------------------------------------------------------------------
# Formatting (pure)
# ----------------------------------------------------------------------------------------------

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
    kernel = BY_KEY[m.kernel]
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
        lines += [f"- {m.shape.describe()}, {BY_KEY[m.kernel].label}: {m.status}: {m.detail}" for m in errors]
    return "\n".join(lines) + "\n"


def console_line(measurements: Sequence[Measurement], m: Measurement, peak: float | None) -> str:
    """One line per measurement while the benchmark runs."""
    head = f"{m.shape.describe():<36} {BY_KEY[m.kernel].label:<19}"
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
