"""Lesson 05: which lane of the warp holds which element of a matrix fragment (measured, see course.models.fragments)."""
from __future__ import annotations

import html

import numpy as np

from course.models.fragments import FRAGMENTS, LANES, fragment_map, lane_cells, owner_text
from course.widgets.base import interactive, show

__all__ = ["lane_colours", "fragment_explorer"]


def lane_colours() -> np.ndarray:
    """One RGB colour per lane (32 × 3): the hue changes from one lane to the next (8 hues), the shade
    every 8 lanes (4 shades), so lanes that hold neighbouring elements are easy to tell apart."""
    import matplotlib

    c = matplotlib.colormaps["tab20c"](np.arange(20))[:, :3]  # 5 hues × 4 shades, dark to light
    b = matplotlib.colormaps["tab20b"](np.arange(20))[:, :3]
    hues = [c[0:4], c[4:8], c[8:12], c[12:16], b[4:8], b[8:12], b[12:16], b[16:20]]
    return np.array([hues[lane % 8][lane // 8] for lane in range(LANES)])


def _lane_sentence(track: str, lane: int) -> str:
    cells = lane_cells(track, lane)
    shape = FRAGMENTS[track]
    listed = ", ".join(f"e{e} → ({r}, {c})" for e, r, c in cells)
    rows = sorted({r for _, r, _ in cells})
    where = f"row {rows[0]}" if len(rows) == 1 else f"rows {', '.join(map(str, rows))}"
    return (f"<p><b>Lane {lane}</b> holds {len(cells)} of the {shape.rows * shape.cols} elements of the "
            f"{html.escape(shape.label)}, in {where}: {listed} (slot e → (row, col)).</p>")


@interactive
def fragment_explorer():
    """Lesson 05: the lane that owns each element of a wmma 16×16 or simdgroup 8×8 fragment, one lane at a time."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    lane = w.IntSlider(value=0, min=0, max=LANES - 1, description="lane", continuous_update=False)
    track = w.Dropdown(options=[(f.label, name) for name, f in FRAGMENTS.items()], value="cuda",
                       description="fragment", layout=w.Layout(width="380px"))
    text = w.HTML()
    colours = lane_colours()

    def draw(lane: int, track: str) -> None:
        owner, slot = fragment_map(track)
        rows, cols = owner.shape
        mine = owner == lane
        image = colours[owner]
        image[~mine] = 0.35 * image[~mine] + 0.65  # everyone else's cells fade towards white
        fig, ax = plt.subplots(figsize=(6.4 if rows > 8 else 4.6,) * 2)
        ax.imshow(image, interpolation="nearest")
        small = 7 if rows > 8 else 9
        for r in range(rows):
            for c in range(cols):
                if mine[r, c]:
                    ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, lw=2.2, ec="black"))
                    ax.text(c, r, f"e{slot[r, c]}", ha="center", va="center", fontsize=small + 1,
                            fontweight="bold")
                else:
                    ax.text(c, r, str(owner[r, c]), ha="center", va="center", fontsize=small - 1, color="0.35")
        ax.set_xticks(range(cols))
        ax.set_yticks(range(rows))
        ax.tick_params(labelsize=small, top=True, labeltop=True, bottom=False, labelbottom=False)
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        ax.set_title(f"Lane {lane}'s elements outlined, with its slot e;\n"
                     f"every other cell shows the lane that holds it", fontsize=9)
        show(fig)
        text.value = _lane_sentence(track, lane) + f"<p>{html.escape(owner_text(track))}</p>"

    out = w.interactive_output(draw, dict(lane=lane, track=track))
    return w.VBox([w.HBox([lane, track]), text, out])
