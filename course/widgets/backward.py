"""Lesson 07: who adds to which dQ rows in the backward pass, and what that does to the bits.

Two pictures for ``kernels/triton/07_backward.py``. The first follows the dK/dV kernel's programs over
the query blocks and counts, step by step, how many of them add to the same dQ rows (the "atomic"
design), against a second kernel that owns each query block's dQ rows and stores them once (the
"split" design). The second consumes the gradients of the same backward run several times and shows
how far apart their bits land. Nothing here runs a kernel: the first is arithmetic on sizes, the
second only compares tensors it is handed.
"""
from __future__ import annotations

import html
import numbers
from dataclasses import dataclass, field

import numpy as np
import torch

from course.models.roofline import BACKWARD_MATMULS
from course.widgets.base import interactive, show

__all__ = ["DESIGNS", "GRADIENTS", "DqWriters", "dq_writers", "backward_explorer",
           "BitDifferences", "bit_differences", "determinism_view"]

DESIGNS = ("atomic", "split")
GRADIENTS = ("dq", "dk", "dv")
LABELS = {"dq": "dQ", "dk": "dK", "dv": "dV"}

# Matrix products per (query block, key block) pair, counted once for the course in course.models.roofline:
# 5 with dQ added in the dK/dV loop, 4 + 3 = 7 when a dQ kernel recomputes S and dP for itself.
MATMULS = {design: BACKWARD_MATMULS[design] for design in DESIGNS}


def _whole(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1; it is {value!r}.")
    return int(value)


@dataclass(frozen=True)
class DqWriters:
    """Which programs touch which dQ rows at each step of the backward, for one design.

    Lock-step model: every program that touches dQ starts at once and takes one step per block it
    visits (a query block for a dK/dV program, a key block for a split dQ program). A real GPU runs as
    many programs at once as it has room for, in an order it chooses, so the steps are an idealised
    timeline; the totals (adds, pairs, products) do not depend on it.

    ``grid[b][s]`` counts the programs adding to (atomic) or storing (split) query block b's dQ rows at
    step s. ``atomic_adds`` counts float32 read-modify-writes per head-dimension column, real rows only.
    """

    n_q: int
    n_k: int
    block_m: int
    block_n: int
    causal: bool
    design: str
    offset: int                     # query i sees key j when j <= i + offset (bottom-right: Nk - Nq)
    query_blocks: int
    key_blocks: int
    program_steps: list[int]        # per dQ-touching program: key-block programs (atomic), query-block (split)
    grid: np.ndarray = field(compare=False)   # [query block][step], ints
    peak_writers: int               # max of the grid
    atomic_adds: int                # float32 atomic adds per head-dim column; 0 for split
    adds_per_row: list[int]         # per query row: programs adding to it (atomic); 0 for split
    steps: int                      # columns of the grid: the longest program's loop
    matmuls_per_pair: int           # 5 atomic, 7 split (see MATMULS)
    pairs: int                      # (query block, key block) pairs computed; the same in both designs

    @property
    def programs(self) -> int:
        return len(self.program_steps)

    @property
    def matmuls(self) -> int:
        """Block matrix products of the whole backward (dK/dV kernel, and the dQ kernel when split)."""
        return self.pairs * self.matmuls_per_pair

    def summary(self) -> list[str]:
        """The widget's text, one paragraph per entry (plain text)."""
        mask = (f"causal, bottom-right (query i sees key j when j ≤ i {'+' if self.offset >= 0 else '−'} "
                f"{abs(self.offset)})" if self.causal else "no mask")
        lines = [f"{self.n_q} queries × {self.n_k} keys in blocks of BLOCK_M = {self.block_m} queries and "
                 f"BLOCK_N = {self.block_n} keys: {self.query_blocks} query blocks, {self.key_blocks} key "
                 f"blocks, {mask}."]
        if self.design == "atomic":
            block, step = np.unravel_index(int(np.argmax(self.grid)), self.grid.shape)
            if self.peak_writers > 1:
                clash = (f"Up to {self.peak_writers} of them add to the same dQ rows at the same step (first at "
                         f"step {step}, query block {block}); those additions hit the same addresses and wait on "
                         "each other.")
            elif self.programs == 1:
                clash = "With a single program, no two additions ever meet."
            else:
                clash = ("In this model no two of them reach the same dQ rows at the same step: the causal mask "
                         "staggers their starts. A real schedule can still bring them together.")
            lines.append(
                f"Atomic design: {self.programs} dK/dV programs, one per key block, each adding its share of "
                f"dQ for one query block per step, for {min(self.program_steps)} to {max(self.program_steps)} "
                f"steps. {clash} The busiest rows receive {max(self.adds_per_row)} adds each.")
            lines.append(
                f"In all {self.atomic_adds:,} float32 atomic read-modify-writes per head-dimension column, "
                f"{self.atomic_adds / self.n_q:.2f} per dQ element where a plain store would do one. Their "
                "order changes from run to run, and float addition is not associative, so dQ's last bits do too.")
        else:
            lines.append(
                f"Split design: the dK/dV programs add nothing to dQ. A second kernel runs {self.programs} "
                f"programs, one per query block, each summing its dQ rows in registers over the key blocks it "
                f"sees ({min(self.program_steps)} to {max(self.program_steps)} steps) and storing them once, "
                "with plain stores, at its last step: no atomics, one writer per row, the same order every "
                "time, so every run repeats its bits.")
        lines.append(
            f"Both designs compute the same {self.pairs:,} (query block, key block) pairs. Atomic: "
            f"{MATMULS['atomic']} matrix products per pair ({self.pairs * MATMULS['atomic']:,}); split: "
            f"{MATMULS['split']} ({self.pairs * MATMULS['split']:,}), because its dQ kernel recomputes "
            "S = QKᵀ and dP = dOVᵀ before dQ += dS K: 2 extra products per pair, +40%.")
        lines.append("Steps are a lock-step model (all programs start together); a real GPU runs as many "
                     "programs as it has room for, in an order it chooses.")
        return lines


def dq_writers(n_q: int, n_k: int, block_m: int, block_n: int, causal: bool = True,
               design: str = "atomic") -> DqWriters:
    """Who adds to (atomic) or stores (split) which dQ rows at each step, in the lock-step model.

    Atomic: key-block program j starts at query block max(j·BLOCK_N − offset, 0) // BLOCK_M when causal
    (as ``dkdv_kernel`` computes start_m), at 0 otherwise, and runs to the last query block. Split: query
    block b loops over key blocks 0 .. (the block of key min((b+1)·BLOCK_M − 1 + offset, Nk − 1)) when
    causal, every key block otherwise, and stores its dQ rows at its last step (no step if it sees no key).
    """
    n_q, n_k = _whole("n_q", n_q), _whole("n_k", n_k)
    block_m, block_n = _whole("block_m", block_m), _whole("block_n", block_n)
    if design not in DESIGNS:
        raise ValueError(f"design must be 'atomic' or 'split'; it is {design!r}.")
    causal = bool(causal)
    offset = n_k - n_q
    query_blocks, key_blocks = -(-n_q // block_m), -(-n_k // block_n)
    rows = [min(n_q, (b + 1) * block_m) - b * block_m for b in range(query_blocks)]  # last may be short

    starts = [max(j * block_n - offset, 0) // block_m if causal else 0 for j in range(key_blocks)]
    atomic_steps = [max(query_blocks - s, 0) for s in starts]
    pairs = sum(atomic_steps)

    if design == "atomic":
        program_steps = atomic_steps
        grid = np.zeros((query_blocks, max(program_steps, default=0)), dtype=np.int64)
        for start, length in zip(starts, program_steps):
            for step in range(length):
                grid[start + step, step] += 1
        atomic_adds = sum(sum(rows[start:]) for start in starts)
        # a row in query block b gets one add from each program that starts at or before b
        per_block = [sum(start <= b for start in starts) for b in range(query_blocks)]
        adds_per_row = [per_block[i // block_m] for i in range(n_q)]
    else:
        program_steps = []
        for b in range(query_blocks):
            last_key = min((b + 1) * block_m - 1 + offset, n_k - 1) if causal else n_k - 1
            program_steps.append(last_key // block_n + 1 if last_key >= 0 else 0)
        grid = np.zeros((query_blocks, max(program_steps, default=0)), dtype=np.int64)
        for b, length in enumerate(program_steps):
            if length:
                grid[b, length - 1] = 1
        atomic_adds, adds_per_row = 0, [0] * n_q
        assert sum(program_steps) == pairs  # both designs visit exactly the pairs the mask lets through

    return DqWriters(
        n_q=n_q, n_k=n_k, block_m=block_m, block_n=block_n, causal=causal, design=design, offset=offset,
        query_blocks=query_blocks, key_blocks=key_blocks, program_steps=program_steps, grid=grid,
        peak_writers=int(grid.max()) if grid.size else 0, atomic_adds=atomic_adds, adds_per_row=adds_per_row,
        steps=grid.shape[1], matmuls_per_pair=MATMULS[design], pairs=pairs)


def _paragraphs(lines: list[str]) -> str:
    return "".join(f"<p style='max-width:70em;margin:0.3em 0'>{html.escape(line)}</p>" for line in lines)


@interactive
def backward_explorer():
    """Lesson 07: how many programs add to the same dQ rows at each step, atomic against split."""
    import ipywidgets as w
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    n_q = w.IntSlider(value=256, min=16, max=1024, step=16, description="N_q", continuous_update=False)
    n_k = w.IntSlider(value=256, min=16, max=1024, step=16, description="N_k", continuous_update=False)
    block_m = w.IntSlider(value=32, min=16, max=128, step=16, description="BLOCK_M", continuous_update=False)
    block_n = w.IntSlider(value=64, min=16, max=128, step=16, description="BLOCK_N", continuous_update=False)
    causal = w.Checkbox(value=True, description="causal (bottom-right)")
    design = w.ToggleButtons(options=list(DESIGNS), value="atomic", description="dQ design")
    text = w.HTML()

    def draw(n_q: int, n_k: int, block_m: int, block_n: int, causal: bool, design: str) -> None:
        picture = dq_writers(n_q, n_k, block_m, block_n, causal, design)
        atomic = picture if design == "atomic" else dq_writers(n_q, n_k, block_m, block_n, causal, "atomic")
        text.value = _paragraphs(picture.summary())

        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=[1.1, 1.0])
        top = max(picture.peak_writers, 1)
        colours = matplotlib.colormaps["viridis"].resampled(top)
        left.set_facecolor("#ececec")  # grey where nobody touches the rows (masked zeros)
        cells = picture.grid.shape[0] * picture.grid.shape[1]
        # cell edges at half-integers, so step s and query block b sit on ticks s and b
        mesh = left.pcolormesh(np.arange(picture.steps + 1) - 0.5, np.arange(picture.query_blocks + 1) - 0.5,
                               np.ma.masked_equal(picture.grid, 0), cmap=colours, vmin=0.5, vmax=top + 0.5,
                               edgecolors="white" if cells <= 1600 else "face", linewidth=0.4)
        left.set_xlim(-0.5, picture.steps - 0.5)
        left.set_ylim(picture.query_blocks - 0.5, -0.5)
        left.xaxis.set_major_locator(MaxNLocator(integer=True))
        left.yaxis.set_major_locator(MaxNLocator(integer=True))
        verb = "adding to" if design == "atomic" else "storing"
        bar = fig.colorbar(mesh, ax=left, ticks=range(1, top + 1) if top <= 12 else MaxNLocator(integer=True))
        bar.set_label(f"programs {verb} these dQ rows at this step")
        left.set(xlabel="step (lock-step model)", ylabel="query block",
                 title=f"{design}: at most {picture.peak_writers} writer(s) per dQ block and step")

        rows = np.arange(n_q)
        right.plot(rows, atomic.adds_per_row, drawstyle="steps-mid", color="crimson", lw=1.6,
                   label=f"atomic ({atomic.atomic_adds:,} adds per column in all)")
        right.plot(rows, np.zeros(n_q), color="seagreen", lw=1.6, ls="--", label="split (plain stores, 0 adds)")
        right.set_xlim(0, n_q - 1 if n_q > 1 else 1)
        right.set_ylim(-0.3, max(atomic.adds_per_row) * 1.25 + 0.5)
        right.yaxis.set_major_locator(MaxNLocator(integer=True))
        right.set(xlabel="query row i", ylabel="programs adding to row i",
                  title="float32 atomic adds into each dQ row")
        right.legend(fontsize=8, loc="upper left")
        show(fig)

    out = w.interactive_output(draw, dict(n_q=n_q, n_k=n_k, block_m=block_m, block_n=block_n, causal=causal,
                                          design=design))
    return w.VBox([w.HBox([n_q, n_k]), w.HBox([block_m, block_n]), w.HBox([causal, design]), text, out])


def _line_key(bits: torch.Tensor) -> torch.Tensor:
    """float32 bit patterns (int32) placed on one monotonic integer line (int64): positive floats keep
    their pattern, a negative float goes to −(pattern without its sign bit). ±0 both land on 0, adjacent
    floats on adjacent integers, so the ulps between two floats are the difference of their keys, across
    zero too (the smallest subnormals of opposite sign are 2 apart); ±inf sit one past the largest finite."""
    wide = bits.to(torch.int64)
    return torch.where(wide >= 0, wide, -(wide & 0x7FFFFFFF))


@dataclass(frozen=True)
class BitDifferences:
    """How the bits of (dQ, dK, dV) vary over runs of the same backward on the same inputs.

    Keyed by "dq", "dk", "dv". ``ulps[name]`` holds, per element (flattened), the ulps between the first
    run and the run furthest from it (see :func:`_line_key`); −1 where bits differ and some run gave NaN
    there, since a NaN has no place on the line (such elements are counted in ``nan_differing``).
    """

    runs: int
    elements: dict[str, int]
    differing: dict[str, int]           # elements whose bits are not the same in every run
    nan_differing: dict[str, int]       # of those, elements with a NaN in some run (no ulp distance)
    ulps: dict[str, np.ndarray] = field(compare=False)
    differs: dict[str, np.ndarray] = field(compare=False)    # per element (flattened): bits not all equal

    @property
    def max_ulps(self) -> dict[str, int]:
        return {name: int(u.max(initial=0)) for name, u in self.ulps.items()}

    def summary(self) -> list[str]:
        """One line per gradient (plain text)."""
        return [self.line(name) for name in GRADIENTS]

    def line(self, name: str) -> str:
        label, differing = LABELS[name], self.differing[name]
        if not differing:
            return f"{label}: identical bits in every run"
        most = self.max_ulps[name]
        line = (f"{label}: {differing:,} of {self.elements[name]:,} elements differ in at least one of "
                f"{self.runs} runs (at most {most} ulp{'' if most == 1 else 's'} apart)")
        if self.nan_differing[name]:
            line += f"; {self.nan_differing[name]:,} of them are NaN in some run, with no ulp distance"
        return line


def bit_differences(runs) -> BitDifferences:
    """Compare ``runs``, a list of at least two (dq, dk, dv) tuples of float32 tensors from the same backward
    on the same inputs, bit pattern by bit pattern: -0.0 differs from 0.0, and a NaN with the same bits in
    every run does not differ."""
    runs = list(runs)
    if len(runs) < 2:
        raise ValueError(f"runs must hold at least two runs to compare; it holds {len(runs)}.")
    for r, run in enumerate(runs):
        if not isinstance(run, (tuple, list)) or len(run) != 3:
            raise ValueError(f"runs[{r}] must be a tuple (dq, dk, dv); it is {type(run).__name__}.")
    elements, differing, nan_differing, ulps, masks = {}, {}, {}, {}, {}
    for g, name in enumerate(GRADIENTS):
        tensors = [run[g] for run in runs]
        for r, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
                kind = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"runs[{r}] {name} must be a float32 torch tensor; it is {kind}.")
            if t.shape != tensors[0].shape:
                raise ValueError(f"runs[{r}] {name} has shape {tuple(t.shape)}, run 0's has "
                                 f"{tuple(tensors[0].shape)}: these are not runs of the same backward.")
        values = torch.stack([t.detach().cpu().contiguous().reshape(-1) for t in tensors])
        bits = values.view(torch.int32)
        differs = (bits != bits[0]).any(dim=0)
        keys = _line_key(bits)
        far = (keys - keys[0]).abs().max(dim=0).values
        unordered = differs & torch.isnan(values).any(dim=0)
        far = torch.where(unordered, torch.full_like(far, -1), far)
        elements[name] = values.shape[1]
        differing[name] = int(differs.sum())
        nan_differing[name] = int(unordered.sum())
        ulps[name] = far.numpy()
        masks[name] = differs.numpy()
    return BitDifferences(runs=len(runs), elements=elements, differing=differing, nan_differing=nan_differing,
                          ulps=ulps, differs=masks)


@interactive
def determinism_view(runs_by_design: dict[str, list[tuple]]):
    """Lesson 07's determinism lab: per design, how far each element's runs land from the first run.

    ``runs_by_design`` maps a design name ("atomic", "split") to its runs, (dq, dk, dv) tuples of float32
    tensors. Works in any Python: it returns the widget, and a notebook displays it.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not isinstance(runs_by_design, dict) or not runs_by_design:
        raise ValueError("runs_by_design must be a non-empty dict from design name to its list of runs.")
    results = {design: bit_differences(runs) for design, runs in runs_by_design.items()}
    gradient = w.Dropdown(options=[(LABELS[name], name) for name in GRADIENTS], value="dq", description="gradient")
    text = w.HTML()

    def draw(gradient: str) -> None:
        text.value = _paragraphs([f"{design}: {result.line(gradient)}." for design, result in results.items()])
        fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
        for ax, (design, result) in zip(axes[0], results.items()):
            label = LABELS[gradient]
            ax.set_title(f"{design}: {label}, {result.differing[gradient]:,} of {result.elements[gradient]:,} "
                         "elements differ")
            far = result.ulps[gradient]
            changed = far[result.differs[gradient] & (far >= 0)]  # signed zeros stay, at 0 ulps
            if not result.differing[gradient]:
                ax.text(0.5, 0.5, f"identical bits in every one of {result.runs} runs",
                        ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            most = int(changed.max(initial=0))
            edges = np.arange(most + 2) - 0.5 if most <= 64 else np.linspace(-0.5, most + 0.5, 51)
            ax.hist(changed, bins=edges, color="crimson" if design == "atomic" else "slategrey")
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set(xlabel=f"ulps from the first run (furthest of {result.runs} runs)", ylabel="elements")
            if result.nan_differing[gradient]:
                ax.text(0.98, 0.95, f"{result.nan_differing[gradient]:,} NaN elements not shown",
                        ha="right", va="top", transform=ax.transAxes, fontsize=8)
        show(fig)

    out = w.interactive_output(draw, dict(gradient=gradient))
    return w.VBox([gradient, text, out])
