"""Lesson 03: one query tile of the FlashAttention-2 forward pass, K/V tile by K/V tile, and what tiling saves.

One program owns BLOCK_M query rows. Its Q tile stays on chip; K and V stream through in tiles of
BLOCK_N keys, and each row carries a running max m, a running sum l = Σ exp(s − m) and an
unnormalised output accumulator. After the last tile O = acc / l and LSE = m + log l.
(kernels/triton/03_tiled.py is the real kernel; this is the same recurrence in float64 numpy.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from course.models import roofline
from course.widgets.base import DTYPES, human_bytes, interactive, show

__all__ = ["TilingStep", "tiling_inputs", "tiling_scores", "tiling_trace", "hbm_bytes",
           "tiling_explorer"]



def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")


def tiling_inputs(n_q: int, n_k: int, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random Q (n_q, d), K and V (n_k, d) in float64 whose scores drift upwards along the keys.

    Every query has a positive first coordinate and the keys' first coordinate grows from 0, so
    q·k gains about 8 from the first key to the last on top of unit-size noise: later key tiles
    keep raising the running max, and the rescale has work to do.
    """
    _positive(n_q=n_q, n_k=n_k, d=d)
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n_q, d))
    k = rng.normal(size=(n_k, d))
    v = rng.normal(size=(n_k, d))
    q[:, 0] = rng.uniform(0.75, 1.25, n_q)
    k[:, 0] = np.linspace(0.0, 8.0 * math.sqrt(d), n_k)
    return q, k, v


def tiling_scores(n_q: int, n_k: int, d: int = 16, seed: int = 0) -> np.ndarray:
    """The full score matrix S = Q Kᵀ / √d (n_q × n_k) of :func:`tiling_inputs`."""
    q, k, _ = tiling_inputs(n_q, n_k, d, seed)
    return q @ k.T / math.sqrt(d)


@dataclass(frozen=True, eq=False)
class TilingStep:
    """The state of one query tile's rows right after K/V tile ``tile`` has been used.

    The arrays have one entry per row of the query tile (``acc`` one row each) and are read-only.
    """

    tile: int              # index j of the K/V tile on chip at this step
    n_tiles: int           # how many K/V tiles the loop has in all
    rows: tuple[int, int]  # query rows [start, stop) of the Q tile (on chip for the whole loop)
    keys: tuple[int, int]  # keys [start, stop) of the K/V tile on chip now
    m: np.ndarray          # running max of each row's scores
    l: np.ndarray          # running Σ exp(s − m) of each row
    alpha: np.ndarray      # exp(m_old − m_new): what the old l and acc were multiplied by at this step
    share: np.ndarray      # fraction of each row's final softmax weight (hence of its output) accounted for
    acc: np.ndarray        # running Σ exp(s − m) · v, not yet divided by l

    @property
    def o(self) -> np.ndarray:
        """acc / l: the output the rows would have if the keys stopped here."""
        return self.acc / self.l[:, None]

    @property
    def lse(self) -> np.ndarray:
        """m + log l: each row's log Σ exp(s) over the keys read so far."""
        return self.m + np.log(self.l)


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.setflags(write=False)
    return a


def tiling_trace(n_q: int = 64, n_k: int = 128, block_m: int = 16, block_n: int = 16, *, d: int = 16,
                 seed: int = 0, query_tile: int = 0) -> list[TilingStep]:
    """Replay one program of the tiled forward pass in float64: query tile ``query_tile`` (rows
    query_tile·block_m onwards) against every K/V tile of block_n keys, one step per K/V tile.

    The last tile of queries or keys may be short when a block size does not divide n_q or n_k. At
    the end the replay checks that acc / l is softmax(S)V of the tile and m + log l its log-sum-exp.
    """
    _positive(n_q=n_q, n_k=n_k, block_m=block_m, block_n=block_n, d=d)
    query_tiles = -(-n_q // block_m)
    if int(query_tile) != query_tile or not 0 <= query_tile < query_tiles:
        raise ValueError(f"query_tile must be between 0 and {query_tiles - 1} ({n_q} query rows in tiles of "
                         f"{block_m}), not {query_tile!r}.")
    q, k, v = tiling_inputs(n_q, n_k, d, seed)
    row0, row1 = query_tile * block_m, min(n_q, (query_tile + 1) * block_m)
    s = q[row0:row1] @ k.T / math.sqrt(d)

    m = np.full(row1 - row0, -np.inf)
    l = np.zeros(row1 - row0)
    acc = np.zeros((row1 - row0, d))
    states = []
    for start in range(0, n_k, block_n):
        stop = min(n_k, start + block_n)
        tile = s[:, start:stop]
        m_new = np.maximum(m, tile.max(axis=1))
        alpha = np.exp(m - m_new)                 # exp(-inf) = 0 at the first tile: nothing to rescale yet
        p = np.exp(tile - m_new[:, None])
        l = l * alpha + p.sum(axis=1)
        acc = acc * alpha[:, None] + p @ v[start:stop]
        m = m_new
        states.append(((start, stop), m, l, alpha, acc))

    lse = m + np.log(l)
    peak = s.max(axis=1, keepdims=True)
    weights = np.exp(s - peak)
    expected_o = weights @ v / weights.sum(axis=1, keepdims=True)
    expected_lse = peak[:, 0] + np.log(weights.sum(axis=1))
    if not (np.allclose(acc / l[:, None], expected_o, rtol=1e-10, atol=1e-12)
            and np.allclose(lse, expected_lse, rtol=1e-12, atol=1e-12)):
        raise RuntimeError("The tiled replay does not end at softmax(S)V and its log-sum-exp: "
                           "the recurrence is broken.")

    return [TilingStep(tile=j, n_tiles=len(states), rows=(row0, row1), keys=keys, m=_frozen(m_j), l=_frozen(l_j),
                       alpha=_frozen(alpha_j), share=_frozen(l_j * np.exp(m_j - lse)), acc=_frozen(acc_j))
            for j, (keys, m_j, l_j, alpha_j, acc_j) in enumerate(states)]


def hbm_bytes(n: int, d: int, block_m: int, bytes_per_element: int) -> dict[str, int]:
    """Global-memory bytes of one head's forward pass at N queries and N keys, three ways.

    - ``naive``: the lesson-01 kernel (one program per query row, reading K twice and V once), plus writing O;
    - ``tiled``: the lesson-03 kernel with BLOCK_M query rows per program (:func:`course.models.roofline.tiled_kernel_bytes`);
    - ``ideal``: a fused kernel that reads Q, K, V once and writes O once.
    """
    _positive(n=n, d=d, block_m=block_m, bytes_per_element=bytes_per_element)
    return {
        "naive": roofline.naive_kernel_bytes_read(n, n, d, bytes_per_element) + n * d * bytes_per_element,
        "tiled": roofline.tiled_kernel_bytes(n, n, d, block_m, bytes_per_element),
        "ideal": roofline.flash_attention_bytes(n, n, d, bytes_per_element),
    }


USED = dict(facecolor="grey", edgecolor="none", alpha=0.6)
"""How the explorer greys out the K/V tiles a program has used and dropped (the lesson's prose says "greyed")."""


@interactive
def tiling_explorer(n_q: int = 64, n_k: int = 128, d: int = 16, seed: int = 0, head_dim: int = 64,
                    dtype: str = "float16"):
    """Lesson 03: step one query tile through the K/V tiles and watch m, l and the bytes tiling saves.

    ``n_q``, ``n_k`` and ``d`` size the small problem that is replayed; ``head_dim`` and ``dtype`` are
    those of the byte counts (the right-hand plot), which are for a real N × N attention.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    b = DTYPES[dtype]
    scores = tiling_scores(n_q, n_k, d, seed)
    key_tile = w.IntSlider(value=0, min=0, max=-(-n_k // 16) - 1, description="key tile", continuous_update=False)
    query_tile = w.IntSlider(value=0, min=0, max=-(-n_q // 16) - 1, description="query tile",
                             continuous_update=False)
    block_m = w.Dropdown(options=[8, 16, 24, 32], value=16, description="BLOCK_M")
    block_n = w.Dropdown(options=[8, 16, 24, 32], value=16, description="BLOCK_N")
    log_n = w.Dropdown(options=[(f"{2**p:,}", p) for p in range(8, 17)], value=12, description="length N")
    text = w.HTML()

    def on_block_n(change) -> None:
        key_tile.max = -(-n_k // change["new"]) - 1
        key_tile.value = min(key_tile.value, key_tile.max)

    def on_block_m(change) -> None:
        query_tile.max = -(-n_q // change["new"]) - 1
        query_tile.value = min(query_tile.value, query_tile.max)

    block_n.observe(on_block_n, names="value")
    block_m.observe(on_block_m, names="value")

    def draw(key_tile: int, query_tile: int, block_m: int, block_n: int, log_n: int) -> None:
        query_tile = min(query_tile, -(-n_q // block_m) - 1)
        trace = tiling_trace(n_q, n_k, block_m, block_n, d=d, seed=seed, query_tile=query_tile)
        now = trace[min(key_tile, len(trace) - 1)]
        before = trace[now.tile - 1] if now.tile else None
        (row0, row1), (key0, key1) = now.rows, now.keys
        rows = np.arange(row0, row1)

        fig, axes = plt.subplot_mosaic([["s", "m", "bytes"], ["s", "l", "bytes"]], figsize=(15, 4.6),
                                       width_ratios=[1.5, 1.0, 1.1])
        grid = axes["s"]
        grid.imshow(scores, cmap="viridis", aspect="auto", interpolation="nearest",
                    extent=(-0.5, n_k - 0.5, n_q - 0.5, -0.5))
        fade = dict(facecolor="white", edgecolor="none", alpha=0.75)
        grid.add_patch(Rectangle((-0.5, -0.5), n_k, row0, **fade))               # other programs' rows
        grid.add_patch(Rectangle((-0.5, row1 - 0.5), n_k, n_q - row1, **fade))
        grid.add_patch(Rectangle((key1 - 0.5, row0 - 0.5), n_k - key1, row1 - row0, **fade))  # not read yet
        if key0:
            grid.add_patch(Rectangle((-0.5, row0 - 0.5), key0, row1 - row0, **USED))  # used and gone
        grid.add_patch(Rectangle((-0.5, row0 - 0.5), n_k, row1 - row0, fill=False, edgecolor="darkorange", lw=2))
        grid.add_patch(Rectangle((key0 - 0.5, row0 - 0.5), key1 - key0, row1 - row0, fill=False,
                                 edgecolor="crimson", lw=3))
        for x in range(block_n, n_k, block_n):
            grid.axvline(x - 0.5, color="white", lw=0.4)
        for y in range(block_m, n_q, block_m):
            grid.axhline(y - 0.5, color="white", lw=0.4)
        grid.legend(handles=[Patch(fill=False, edgecolor="darkorange", lw=2, label="Q tile (on chip throughout)"),
                             Patch(fill=False, edgecolor="crimson", lw=3, label=f"K/V tile {now.tile} (on chip now)"),
                             Patch(**USED, label="K/V tiles already used (greyed)"),
                             Patch(facecolor="white", edgecolor="lightgrey", label="not read by this program yet")],
                    fontsize=7, loc="lower left", framealpha=0.9)
        grid.set(xlabel="key", ylabel="query row",
                 title=f"Scores S: query tile {query_tile}, step {now.tile + 1} of {now.n_tiles}")

        top, bottom = axes["m"], axes["l"]
        if before is not None:
            top.plot(rows, before.m, "o", mfc="none", color="grey", ms=4, label="m before this tile")
        top.plot(rows, now.m, "o", color="crimson", ms=4, label="m after this tile")
        top.set(ylabel="running max m", title="Each row's running max and sum")
        top.legend(fontsize=7)
        bottom.bar(rows, now.l, color="seagreen", width=0.8)
        bottom.set(xlabel="query row", ylabel="running sum l")
        for ax in (top, bottom):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))

        right = axes["bytes"]
        ns = 2 ** np.arange(8, 17)
        counts = [hbm_bytes(int(n), head_dim, block_m, b) for n in ns]
        here = hbm_bytes(2**log_n, head_dim, block_m, b)
        for key, label, colour in (("naive", "naive (one program per row)", "crimson"),
                                   ("tiled", f"tiled, BLOCK_M = {block_m}", "steelblue"),
                                   ("ideal", "ideal fused (each byte once)", "seagreen")):
            right.loglog(ns, [c[key] for c in counts], "o-", ms=3, color=colour, label=label)
            right.plot([2**log_n], [here[key]], "*", color="k", ms=10)
        right.axvline(2**log_n, color="grey", ls=":", lw=1)
        right.set(xlabel="sequence length N", ylabel="bytes moved to and from global memory",
                  title=f"One head, D = {head_dim}, {dtype}")
        right.legend(fontsize=7)
        show(fig)

        raised = int((now.alpha < 1.0).sum())
        q_tile_bytes = (row1 - row0) * d * b
        kv_bytes = 2 * key1 * d * b
        if before is None:
            rescale = ("This is the first K/V tile, so α = exp(−∞ − m) = 0 for every row: "
                       "there was no old sum to rescale.")
        else:
            rescale = (f"The max went up in {raised} of {row1 - row0} rows; the old l and acc were multiplied by "
                       f"α = exp(m_old − m_new), from {now.alpha.min():.3g} to {now.alpha.max():.3g} "
                       f"(mean {now.alpha.mean():.3g}).")
        text.value = (
            f"<p style='max-width:70em'><b>Step {now.tile + 1} of {now.n_tiles}.</b> On chip: the Q tile "
            f"(query rows {row0}–{row1 - 1}) and K/V tile {now.tile} (keys {key0}–{key1 - 1}). {rescale} "
            f"The rows now account for {now.share.mean():.1%} of their final softmax weight on average "
            f"(from {now.share.min():.1%} to {now.share.max():.1%}). So far this program has read "
            f"{human_bytes(q_tile_bytes)} of Q once and {human_bytes(kv_bytes)} of K and V ({dtype}, D = {d}).<br>"
            f"At N = {2**log_n:,}, D = {head_dim}, {dtype}, one head: the naive kernel moves "
            f"<b>{human_bytes(here['naive'])}</b> ({here['naive']:,} bytes), the tiled kernel with BLOCK_M = "
            f"{block_m} moves <b>{human_bytes(here['tiled'])}</b> ({here['tiled']:,} bytes: K and V are read "
            f"{-(-2**log_n // block_m):,} times), and the ideal fused kernel <b>{human_bytes(here['ideal'])}</b> "
            f"({here['ideal']:,} bytes).</p>")

    out = w.interactive_output(draw, dict(key_tile=key_tile, query_tile=query_tile, block_m=block_m,
                                          block_n=block_n, log_n=log_n))
    return w.VBox([w.HBox([key_tile, query_tile]), w.HBox([block_m, block_n, log_n]), text, out])
