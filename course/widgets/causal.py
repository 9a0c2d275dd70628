"""Lesson 06: which tiles a causal kernel skips, which it computes whole, and which it masks.

The tile kinds, their counts and each program's work come from :mod:`course.models.causal` (the course's
conventions: query ``i`` sees key ``j`` when ``j <= i + offset``, with ``offset = Nk - Nq`` bottom-right
and ``0`` top-left); this module adds what the picture needs on top: how many FLOPs the computed tiles
cost, how much of the score matrix is really visible, and how evenly two ways of dealing query tiles
out to programs share the work.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from course.models import causal
from course.widgets.base import interactive, show

__all__ = ["CausalPicture", "causal_picture", "causal_explorer"]

ALIGNMENT_NAMES = {"bottom_right": "bottom-right", "top_left": "top-left"}
KINDS = ("skipped", "full", "diagonal")
COLOURS = {"skipped": "#e4e4e4", "full": "steelblue", "diagonal": "darkorange"}


@dataclass(frozen=True)
class CausalPicture:
    """Everything :func:`causal_explorer` draws for one Nq × Nk causal score matrix cut into tiles.

    ``kinds[qt][kt]`` is the kind of (query tile qt, key tile kt). FLOPs count a tile as 4·rows·keys·D
    with its real (possibly short) rows and keys; D is the same for every tile, so the fraction does not
    depend on it. ``contiguous`` and ``paired`` are the key tiles each program computes.
    """

    n_q: int
    n_k: int
    block_m: int
    block_n: int
    alignment: str
    programs: int
    offset: int                     # query i sees key j when j <= i + offset
    kinds: list[list[str]]          # [query tile][key tile]: "skipped", "full" or "diagonal"
    counts: causal.TileCounts
    computed_scores: int            # score elements inside the computed (full or diagonal) tiles
    visible_scores: int             # score elements the mask lets through
    blind_rows: int                 # query rows that see no key at all
    contiguous: list[int]           # key tiles per program, runs of consecutive query tiles
    paired: list[int]               # key tiles per program, query tiles taken first-with-last
    contiguous_imbalance: float     # max / mean of ``contiguous``
    paired_imbalance: float         # max / mean of ``paired``

    @property
    def query_tiles(self) -> int:
        return len(self.kinds)

    @property
    def key_tiles(self) -> int:
        return len(self.kinds[0])

    @property
    def tiles_per_program(self) -> int:
        """Query tiles each program is dealt (the last programs may get fewer, or none)."""
        return -(-self.query_tiles // self.programs)

    @property
    def scores(self) -> int:
        return self.n_q * self.n_k

    @property
    def flop_fraction(self) -> float:
        """FLOPs of the computed tiles over those of every tile (the full, non-causal matrix)."""
        return self.computed_scores / self.scores

    @property
    def visible_fraction(self) -> float:
        """Share of the Nq × Nk scores that the mask lets through."""
        return self.visible_scores / self.scores

    def summary(self) -> list[str]:
        """The widget's text, one paragraph per entry (plain text)."""
        edge = f"j ≤ i {'+' if self.offset >= 0 else '−'} {abs(self.offset)}"
        lines = [
            f"{self.n_q} × {self.n_k} scores in {self.query_tiles} × {self.key_tiles} tiles of "
            f"{self.block_m} × {self.block_n}, {ALIGNMENT_NAMES[self.alignment]} alignment: query i sees key j "
            f"when {edge}.",
            # The counts of each kind are Exercise 3's answer: the picture shows the tiles, the text does not count them.
            "Tiles: skipped (grey: never loaded), full (blue: computed without a mask), diagonal (orange: computed, "
            "then masked element by element).",
            f"A kernel that skips tiles does {self.flop_fraction:.1%} of the FLOPs of the full non-causal "
            f"matrix, while {self.visible_fraction:.1%} of the scores are visible "
            f"({self.visible_scores:,} of {self.scores:,}); the difference, "
            f"{self.flop_fraction - self.visible_fraction:.1%}, is the masked part of the diagonal tiles.",
        ]
        if self.blind_rows:
            lines.append(f"The first {self.blind_rows} query rows see no key at all (every score masked): "
                         "their output is O = 0 and their LSE = −∞, and a kernel must not divide by their "
                         "zero sum.")
        else:
            lines.append("Every query row sees at least one key.")
        lines.append(
            f"Work per program (key tiles computed), {self.programs} programs: contiguous "
            f"{self.contiguous}, max / mean = {self.contiguous_imbalance:.2f}; paired (first query tile with "
            f"last) {self.paired}, max / mean = {self.paired_imbalance:.2f}. The slowest program sets the "
            "kernel's time.")
        share = self.tiles_per_program
        if share == 1:
            lines.append("Each program holds a single query tile, so there is nothing to pair: pairing only "
                         "reorders the programs. Fewer programs (or smaller BLOCK_M) give it room.")
        elif share % 2:
            lines.append(f"Each program takes {share} query tiles, an odd number, so one pair is split between "
                         "two programs and pairing balances the work only roughly.")
        return lines


def _imbalance(work: list[int]) -> float:
    return max(work) / (sum(work) / len(work))


def causal_picture(n_q: int, n_k: int, block_m: int, block_n: int, alignment: str = "bottom_right",
                   programs: int = 4) -> CausalPicture:
    """What :func:`causal_explorer` draws for these sizes, alignment and number of programs."""
    if isinstance(programs, bool):
        raise ValueError(f"programs must be a whole number of at least 1; it is {programs!r}.")
    shift = causal.offset(n_q, n_k, alignment)
    counts = causal.tile_counts(n_q, n_k, block_m, block_n, alignment)
    query_tiles, key_tiles = -(-n_q // block_m), -(-n_k // block_n)
    kinds = [[causal.tile_kind(n_q, n_k, block_m, block_n, qt, kt, alignment) for kt in range(key_tiles)]
             for qt in range(query_tiles)]
    computed = 0
    for qt, row in enumerate(kinds):
        rows = min(n_q, (qt + 1) * block_m) - qt * block_m
        for kt, kind in enumerate(row):
            if kind != "skipped":
                computed += rows * (min(n_k, (kt + 1) * block_n) - kt * block_n)
    # row i sees keys 0 .. i + offset, as many of them as exist
    seen = np.clip(np.arange(n_q) + shift + 1, 0, n_k)
    contiguous = causal.program_work(n_q, n_k, block_m, block_n, programs, paired=False, alignment=alignment)
    paired = causal.program_work(n_q, n_k, block_m, block_n, programs, paired=True, alignment=alignment)
    return CausalPicture(
        n_q=n_q, n_k=n_k, block_m=block_m, block_n=block_n, alignment=alignment, programs=programs,
        offset=shift, kinds=kinds, counts=counts, computed_scores=computed, visible_scores=int(seen.sum()),
        blind_rows=int((seen == 0).sum()), contiguous=contiguous, paired=paired,
        contiguous_imbalance=_imbalance(contiguous), paired_imbalance=_imbalance(paired))


def _staircase(n_q: int, n_k: int, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """The mask's edge as a line in score coordinates (element (i, j) is the unit square at x = j, y = i):
    row i's visible keys end at x = i + offset + 1, kept inside the matrix."""
    edge = np.clip(np.arange(n_q) + shift + 1, 0, n_k)
    xs = np.repeat(edge, 2)
    ys = np.repeat(np.arange(n_q), 2) + np.tile([0, 1], n_q)
    return xs, ys


@interactive
def causal_explorer():
    """Lesson 06: the tiles of a causal score matrix, and how evenly programs share them."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    n_q = w.IntSlider(value=256, min=16, max=512, step=16, description="N_q", continuous_update=False)
    n_k = w.IntSlider(value=256, min=16, max=512, step=16, description="N_k", continuous_update=False)
    block_m = w.Dropdown(options=[16, 32, 64], value=64, description="BLOCK_M")
    block_n = w.Dropdown(options=[16, 32, 64], value=64, description="BLOCK_N")
    alignment = w.ToggleButtons(options=[(name, key) for key, name in ALIGNMENT_NAMES.items()],
                                value="bottom_right", description="alignment")
    programs = w.IntSlider(value=2, min=1, max=16, description="programs", continuous_update=False)
    text = w.HTML()
    colour_map = ListedColormap([COLOURS[kind] for kind in KINDS])

    def draw(n_q: int, n_k: int, block_m: int, block_n: int, alignment: str, programs: int) -> None:
        picture = causal_picture(n_q, n_k, block_m, block_n, alignment, programs)
        text.value = ("<p style='max-width:70em'>"
                      + "<br>".join(html.escape(line) for line in picture.summary()) + "</p>")

        fig, (grid, bars) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=[1.2, 1.0])
        codes = np.array([[KINDS.index(kind) for kind in row] for row in picture.kinds])
        x_edges = np.minimum(np.arange(picture.key_tiles + 1) * block_n, n_k)
        y_edges = np.minimum(np.arange(picture.query_tiles + 1) * block_m, n_q)
        grid.pcolormesh(x_edges, y_edges, codes, cmap=colour_map, vmin=-0.5, vmax=2.5, edgecolors="white",
                        linewidth=0.6)
        if picture.blind_rows:
            grid.add_patch(Rectangle((0, 0), n_k, picture.blind_rows, facecolor="none", edgecolor="crimson",
                                     hatch="xx", lw=0, alpha=0.5))
        grid.plot(*_staircase(n_q, n_k, picture.offset), color="crimson", lw=1.4)
        grid.set_xlim(0, n_k)
        grid.set_ylim(n_q, 0)
        handles = [Patch(facecolor=COLOURS[kind], edgecolor="grey", label=kind) for kind in KINDS]
        handles.append(Line2D([], [], color="crimson", lw=1.4, label="mask edge: j = i + offset"))
        if picture.blind_rows:
            handles.append(Patch(facecolor="none", edgecolor="crimson", hatch="xx",
                                 label=f"rows that see no key ({picture.blind_rows})"))
        grid.legend(handles=handles, fontsize=7, loc="upper right", framealpha=0.9)
        grid.set(xlabel="key j", ylabel="query row i",
                 title=f"{ALIGNMENT_NAMES[alignment]}, offset = {picture.offset}: "
                       f"{picture.flop_fraction:.0%} of the FLOPs, {picture.visible_fraction:.0%} visible")

        x = np.arange(programs)
        bars.bar(x - 0.2, picture.contiguous, width=0.4, color="slategrey",
                 label=f"contiguous (max / mean {picture.contiguous_imbalance:.2f})")
        bars.bar(x + 0.2, picture.paired, width=0.4, color="seagreen",
                 label=f"paired (max / mean {picture.paired_imbalance:.2f})")
        bars.axhline(sum(picture.contiguous) / programs, color="k", ls="--", lw=0.9, label="mean")
        bars.set_xticks(x)
        bars.set_ylim(0, 1.4 * max(picture.contiguous + picture.paired))
        bars.set(xlabel="program", ylabel="key tiles computed",
                 title=f"{picture.query_tiles} query tiles dealt to {programs} programs")
        bars.legend(fontsize=8)
        show(fig)

    out = w.interactive_output(draw, dict(n_q=n_q, n_k=n_k, block_m=block_m, block_n=block_n,
                                          alignment=alignment, programs=programs))
    return w.VBox([w.HBox([n_q, n_k]), w.HBox([block_m, block_n]), w.HBox([alignment, programs]), text, out])
