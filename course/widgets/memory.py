"""Lesson 04: where a warp's 32 lanes land in memory, and what a second tile buffer buys.

The numbers come from :mod:`course.models.memory_model` (sectors, bank conflicts, the tile pipeline); this
module only turns them into pictures.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from course.models import memory_model as mm
from course.widgets.base import interactive, show

__all__ = ["MemoryPicture", "memory_picture", "memory_access_explorer", "barrier_count", "pipeline_explorer"]

PATTERNS = {"column": "column walk: lane j reads row j, column 0",
            "row": "row-wise: lane j reads element j, row after row"}

_UNTOUCHED, _PADDING, _WASTED = (1.0, 1.0, 1.0), (0.82, 0.82, 0.82), (1.0, 0.78, 0.45)
_FREE, _CONFLICT_FREE = (1.0, 1.0, 1.0), (0.36, 0.72, 0.45)


@dataclass(frozen=True)
class MemoryPicture:
    """One warp access into a row-major fp32 tile of 32 rows, costed in global and in shared memory.

    ``coalescing`` and ``banks`` are None when the access is misaligned (``problem`` says why): the GPU
    refuses such a load rather than costing it.
    """

    pattern: str
    row_floats: int
    pad_floats: int
    vector: int
    access: mm.WarpAccess
    coalescing: mm.Coalescing | None
    banks: mm.BankAccess | None
    problem: str | None

    @property
    def stride(self) -> int:
        """Floats from one row's start to the next: D + padding."""
        return self.row_floats + self.pad_floats

    def lane_floats(self) -> list[tuple[int, ...]]:
        """For each lane, the float indices (byte address // 4) it reads."""
        return [tuple(a // 4 + k for k in range(self.vector)) for a in self.access.byte_addresses]

    def summary(self) -> str:
        width = "a float (4 B)" if self.vector == 1 else "a float4 (16 B)"
        head = (f"{PATTERNS[self.pattern]}, {width} per lane; D = {self.row_floats}, rows stored "
                f"{self.stride} floats apart ({self.pad_floats} of padding).")
        if self.problem:
            return head + "\n" + self.problem
        c, b = self.coalescing, self.banks
        scalar_instructions = mm.warp_instructions(c.bytes_requested // 4, 1)
        lines = [head,
                 f"Global memory: {c.sectors} sectors of 32 B moved for {c.bytes_requested} B requested, "
                 f"efficiency {c.efficiency:.1%}, in {c.instructions} instruction"
                 + (f" (scalar loads would need {scalar_instructions})." if self.vector == 4 else "."),
                 f"Shared memory: {'conflict-free (1 way)' if b.ways == 1 else f'{b.ways}-way bank conflict'}, "
                 f"{b.wavefronts} wavefront(s) where {b.phases} is the least "
                 f"({b.phases} phase(s) of {b.lanes_per_phase} lanes)."]
        if self.pattern == "column" and self.vector == 1:
            step = self.stride % mm.BANKS
            lines.append(f"Lane j's word is j·{self.stride} floats in, so in bank (j·{self.stride}) mod 32 = "
                         f"(j·{step}) mod 32: " + ("every lane its own bank." if b.ways == 1 else
                                                   f"the 32 lanes share {mm.BANKS // b.ways} bank(s)."))
        return "\n".join(lines)


def memory_picture(pad_floats: int, vector: int = 1, pattern: str = "column", row_floats: int = 64) -> MemoryPicture:
    """What :func:`memory_access_explorer` draws: the access, and its cost in both memories."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {sorted(PATTERNS)}; it is {pattern!r}.")
    if pattern == "column":
        access = mm.warp_column_walk(mm.WARP, row_floats, pad_floats, 0, vector)
    else:
        access = mm.warp_row_access(row_floats, vector, pad_floats)
    if not access.aligned:
        stride = row_floats + pad_floats
        bad = next(a for a in access.byte_addresses if a % access.access_bytes)
        problem = (f"Misaligned: some lane's float4 starts at byte {bad}, not a multiple of 16 "
                   f"(rows are {stride} floats = {4 * stride} bytes apart). The GPU faults on such a load ('misaligned address'). "
                   "Pad by a multiple of 4 floats, as lesson 04 does.")
        return MemoryPicture(pattern, row_floats, pad_floats, vector, access, None, None, problem)
    return MemoryPicture(pattern, row_floats, pad_floats, vector, access, access.coalescing(), access.banks(), None)


def _tile_image(picture: MemoryPicture, lane_colour) -> np.ndarray:
    """RGB image of the 32-row tile: requested floats in their lane's colour, the rest of each touched sector
    orange (moved for nothing), padding grey."""
    rows, stride = mm.WARP, picture.stride
    image = np.ones((rows, stride, 3))
    image[:, picture.row_floats:] = _PADDING
    floats_per_sector = mm.SECTOR_BYTES // 4
    if picture.coalescing is not None:
        for sector in picture.coalescing.sector_ids:
            for f in range(sector * floats_per_sector, (sector + 1) * floats_per_sector):
                if f < rows * stride:
                    image[f // stride, f % stride] = _WASTED
    for lane, floats in enumerate(picture.lane_floats()):
        for f in floats:
            if f < rows * stride:
                image[f // stride, f % stride] = lane_colour(lane)[:3]
    return image


def _sector_strip(picture: MemoryPicture, lane_colour) -> np.ndarray:
    """RGB strip of the touched sectors side by side, 8 four-byte slots each."""
    owner = {f: lane for lane, floats in enumerate(picture.lane_floats()) for f in floats}
    slots = []
    for sector in picture.coalescing.sector_ids:
        for f in range(sector * 8, sector * 8 + 8):
            slots.append(lane_colour(owner[f])[:3] if f in owner else _WASTED)
    return np.array([slots])


def _bank_image(banks: mm.BankAccess) -> np.ndarray:
    """RGB grid [phase][bank]: white unused, green one word, red darker with more distinct words."""
    import matplotlib.pyplot as plt
    reds = plt.get_cmap("Reds")
    grid = np.ones((banks.phases, mm.BANKS, 3))
    for p, row in enumerate(banks.distinct_words):
        for bank, n in enumerate(row):
            if n == 1:
                grid[p, bank] = _CONFLICT_FREE
            elif n > 1:
                grid[p, bank] = reds(0.35 + 0.65 * min(n, 32) / 32)[:3]
    return grid


@interactive
def memory_access_explorer():
    """Lesson 04: pad the rows of a tile and watch the 32 lanes' sectors and shared-memory banks."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    pad = w.IntSlider(value=0, min=0, max=8, description="padding (floats)", continuous_update=False,
                      style={"description_width": "initial"})
    vector = w.Dropdown(options=[("scalar (float, 4 B)", 1), ("float4 (16 B)", 4)], value=1, description="access")
    pattern = w.Dropdown(options=[(label, key) for key, label in PATTERNS.items()], value="column",
                         description="pattern", layout=w.Layout(width="30em"))
    d = w.Dropdown(options=[8, 16, 32, 64, 128], value=64, description="D")
    text = w.HTML()

    def draw(pad: int, vector: int, pattern: str, d: int) -> None:
        picture = memory_picture(pad, vector, pattern, d)
        text.value = "<p style='max-width:60em'>" + picture.summary().replace("\n", "<br>") + "</p>"
        lanes = plt.get_cmap("viridis")
        lane_colour = lambda lane: lanes(lane / (mm.WARP - 1))  # noqa: E731

        fig, (tile, strip, bank_ax) = plt.subplots(3, 1, figsize=(11, 7.2), height_ratios=[3.2, 0.9, 1.5])
        tile.imshow(_tile_image(picture, lane_colour), aspect="auto", interpolation="nearest",
                    extent=(-0.5, picture.stride - 0.5, mm.WARP - 0.5, -0.5))
        if pad:
            tile.axvline(d - 0.5, color="k", lw=0.8)
        padding = f"columns {d}..{picture.stride - 1} are padding" if pad else "no padding"
        tile.set(xlabel=f"float in the row ({padding})", ylabel="row",
                 title=f"The 32 lanes in a row-major tile of rows {d} + {pad} floats "
                       "(lane colour; orange: moved with a sector, never asked for)")
        sm = plt.cm.ScalarMappable(cmap=lanes, norm=plt.Normalize(0, mm.WARP - 1))
        fig.colorbar(sm, ax=tile, label="lane", pad=0.01)

        if picture.problem:
            for ax, memory_name in ((strip, "global"), (bank_ax, "shared")):
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{memory_name} memory: a misaligned float4 load, the GPU faults",
                        ha="center", va="center", color="crimson", fontsize=13, transform=ax.transAxes)
        else:
            c, banks = picture.coalescing, picture.banks
            strip.imshow(_sector_strip(picture, lane_colour), aspect="auto", interpolation="nearest",
                         extent=(0, 8 * c.sectors, 1, 0))
            for k in range(1, c.sectors):
                strip.axvline(8 * k, color="k", lw=1.2)
            step = max(1, c.sectors // 16)
            strip.set_xticks([8 * k + 4 for k in range(0, c.sectors, step)],
                             [str(c.sector_ids[k]) for k in range(0, c.sectors, step)], fontsize=7)
            strip.set_yticks([])
            strip.set(xlabel="sector number (byte address // 32), eight 4-byte slots each",
                      title=f"Global memory: {c.sectors} sectors moved, {c.efficiency:.1%} of their bytes used")

            bank_ax.imshow(_bank_image(banks), aspect="auto", interpolation="nearest",
                           extent=(-0.5, mm.BANKS - 0.5, banks.phases - 0.5, -0.5))
            for p, row in enumerate(banks.distinct_words):
                for bank, n in enumerate(row):
                    if n:
                        bank_ax.text(bank, p, str(n), ha="center", va="center", fontsize=7,
                                     color="white" if n > 8 else "black")
            bank_ax.set_xticks(range(0, mm.BANKS, 2))
            per = banks.lanes_per_phase
            bank_ax.set_yticks(range(banks.phases),
                               [f"lanes {p * per}-{p * per + per - 1}" for p in range(banks.phases)], fontsize=8)
            verdict = "conflict-free" if banks.ways == 1 else f"{banks.ways}-way conflict"
            bank_ax.set(xlabel="shared-memory bank (numbers: distinct words asked of it)",
                        title=f"Shared memory: {verdict}, {banks.wavefronts} wavefront(s)")
        show(fig)

    out = w.interactive_output(draw, dict(pad=pad, vector=vector, pattern=pattern, d=d))
    return w.VBox([w.HBox([pad, vector, d]), pattern, text, out])


def _gantt(ax, pipeline: mm.Pipeline, colours) -> None:
    """Loads on the upper lane, computes on the lower; stalls hatched, barriers as dashed lines."""
    for s in pipeline.tiles:
        for y, start, end in ((1, s.load_start, s.load_end), (0, s.compute_start, s.compute_end)):
            ax.broken_barh([(start, end - start)], (y - 0.35, 0.7), facecolor=colours[s.buffer], edgecolor="k")
            ax.text((start + end) / 2, y, f"{s.tile}", ha="center", va="center", color="white", fontsize=8)
    for y, stalls in ((1, pipeline.load_stalls), (0, pipeline.compute_stalls)):
        for start, end in stalls:
            ax.broken_barh([(start, end - start)], (y - 0.35, 0.7), facecolor="none", edgecolor="grey",
                           hatch="//", lw=0.5)
    for t in pipeline.barriers:
        ax.axvline(t, color="crimson", ls="--", lw=0.9)
    ax.set_yticks([0, 1], ["compute", "load"])
    ax.set_ylim(-0.6, 1.6)


def barrier_count(pipeline: mm.Pipeline) -> str:
    """How many barriers ``pipeline`` has and where they come from: per tile, and any before the loop."""
    per_tile = pipeline.barriers_per_tile
    before = len(pipeline.barriers) - per_tile * pipeline.n_tiles
    tiles = "one per tile" if per_tile == 1 else f"{per_tile} per tile"
    parts = ([f"{'one' if before == 1 else before} before the loop"] if before else []) + [tiles]
    return f"{len(pipeline.barriers)} barriers ({', '.join(parts)})"


@interactive
def pipeline_explorer():
    """Lesson 04: one K/V buffer against two, as a timeline of loads, computes, barriers and stalls."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    # The default description width (80 px) cuts "compute time" to "compute t…": size each label to its text.
    wide = {"description_width": "initial"}
    load = w.IntSlider(value=3, min=1, max=12, description="load time", continuous_update=False, style=wide)
    compute = w.IntSlider(value=4, min=1, max=12, description="compute time", continuous_update=False, style=wide)
    tiles = w.IntSlider(value=6, min=2, max=12, description="tiles", continuous_update=False, style=wide)
    text = w.HTML()

    def draw(load: int, compute: int, tiles: int) -> None:
        one = mm.pipeline_timeline(tiles, load, compute, buffers=1)
        two = mm.pipeline_timeline(tiles, load, compute, buffers=2)
        colours = ("steelblue", "darkorange")
        fig, axes = plt.subplots(2, 1, figsize=(11, 4.8), sharex=True)
        for ax, p, name in zip(axes, (one, two), ("One buffer", "Two buffers (ping-pong)")):
            _gantt(ax, p, colours)
            ax.set_title(f"{name}: makespan {p.makespan:g}, {barrier_count(p)}", fontsize=10)
        axes[1].set_xlabel("time (units; the numbers in the boxes are tile indices)")
        axes[1].set_xlim(0, one.makespan * 1.02)
        handles = [Patch(facecolor=colours[0], label="buffer 0"), Patch(facecolor=colours[1], label="buffer 1"),
                   Patch(facecolor="none", edgecolor="grey", hatch="//", label="stall"),
                   Line2D([], [], color="crimson", ls="--", label="barrier (__syncthreads, threadgroup_barrier)")]
        fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=4)
        show(fig, rect=(0, 0.07, 1, 1))
        bound = ("the loads set the pace (memory-bound)" if load > compute else
                 "the computes set the pace" if load < compute else "loads and computes take equally long")
        text.value = (
            f"<p style='max-width:60em'>{tiles} tiles, load time L = {load}, compute time C = {compute}.<br>"
            f"One buffer: makespan <b>{one.makespan:g}</b> = n·(L + C): every load waits for the compute before it "
            f"to release the buffer (write-after-read), every compute for its load (read-after-write); "
            f"{barrier_count(one)}.<br>"
            f"Two buffers: makespan <b>{two.makespan:g}</b> = L + (n − 1)·max(L, C) + C: the load of tile j + 1 "
            f"runs under the compute on tile j, and {bound}; {barrier_count(two)}.<br>"
            f"Speed-up <b>{one.makespan / two.makespan:.2f}×</b> (never more than (L + C) / max(L, C) = "
            f"{(load + compute) / max(load, compute):.2f}×).</p>")

    out = w.interactive_output(draw, dict(load=load, compute=compute, tiles=tiles))
    return w.VBox([w.HBox([load, compute, tiles]), text, out])
