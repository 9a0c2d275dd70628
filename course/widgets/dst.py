"""Lesson 09: why DST, the math unit's register file of 4 to 16 tiles, shapes the tiling of one FlashAttention step.

The widget launches a small TT-Lang operation on the simulator for every size it shows and reads what
:mod:`course.lessons.dst` counts: the tiles each ``store`` keeps live in DST. The operation is one plain attention step on
one block (not the online-softmax update of the lesson's exercise: no running max, no rescaling across K/V tiles):
``rows`` query tiles against ``rows`` key tiles, head dim D = 32 · ``d_tiles``, so Q, K, V and O are
rows × d_tiles tiles and S and P rows × rows tiles::

    S = Q Kᵀ · scale,  m = rowmax(S),  P = exp(S − m),  l = rowsum(P),  O = P V / l

written either **fused**, as one ``store`` (at rows = 2, D = 64 exactly the notebook's ``fused_block_step``), or
**split**, as seven stores whose intermediates go through dataflow buffers of their own (a value read back from a
buffer stays in L1 and takes no DST). The split applies the scale in a step of its own: ``Q Kᵀ · fill(scale)`` in
one step would keep three rows × rows blocks live (the product, the filled block and their product).
"""
from __future__ import annotations

import functools
import html
import math
import textwrap
from dataclasses import dataclass

from course.lessons import dst
from course.widgets.base import interactive, show

__all__ = ["MODES", "StepCount", "BlockStep", "block_step_source", "block_step", "largest_fitting_rows",
           "dst_explorer"]

TILE = 32
MAX_ROWS = MAX_D_TILES = 4
# (label, (dtype bits, full sync)); the first is the default, and the mode the course's kernels are written for
MODES = (("16-bit, half sync", (16, False)), ("16-bit, full sync", (16, True)),
         ("32-bit, half sync", (32, False)), ("32-bit, full sync", (32, True)))
_FITS, _OVER = "seagreen", "crimson"
_MARK = "  # step: "  # ends each store line of the generated source with the step's label


@dataclass(frozen=True)
class StepCount:
    """One store of the block step: its label, the DST tiles it keeps live at its peak, the values it computes
    and the tiles of the block it stores."""
    label: str
    tiles: int
    operations: int
    stored: int


@dataclass(frozen=True)
class BlockStep:
    """What the simulator ran and :mod:`course.lessons.dst` counted for one size: the steps in the kernel's order, and
    how far O is from PyTorch's ``softmax(Q Kᵀ / √D) V`` on the same (bfloat16) inputs."""
    rows: int
    d_tiles: int
    split: bool
    steps: tuple[StepCount, ...]
    error: float

    @property
    def peak(self) -> int:
        return max(s.tiles for s in self.steps)


def _check(rows: int, d_tiles: int) -> None:
    if not (1 <= rows <= MAX_ROWS and 1 <= d_tiles <= MAX_D_TILES):
        raise ValueError(f"rows and d_tiles are 1 to {MAX_ROWS} tiles, not rows = {rows}, d_tiles = {d_tiles}")


def block_step_source(rows: int, d_tiles: int, split: bool) -> str:
    """The TT-Lang text of the operation ``block_step(q, k, v, out)`` for one size (see the module's docstring);
    split, ``block_step(q, k, v, out, scores)``, where ``scores`` (Nq × Nk) only gives the S and P buffers a shape."""
    _check(rows, d_tiles)
    r, d = rows, d_tiles
    scale = 1.0 / math.sqrt(TILE * d_tiles)
    if split:
        # A buffer is made like a tensor at least its size, so the rows × rows ones are made like `scores`
        # (Nq × Nk, otherwise unused): at rows > d_tiles, `out` is too narrow.
        buffers = f"""
            qk_buf = ttl.make_dataflow_buffer_like(scores, shape=({r}, {r}), block_count=1)
            s_buf = ttl.make_dataflow_buffer_like(scores, shape=({r}, {r}), block_count=1)
            m_buf = ttl.make_dataflow_buffer_like(scores, shape=({r}, 1), block_count=1)
            p_buf = ttl.make_dataflow_buffer_like(scores, shape=({r}, {r}), block_count=1)
            l_buf = ttl.make_dataflow_buffer_like(scores, shape=({r}, 1), block_count=1)
            pv_buf = ttl.make_dataflow_buffer_like(out, shape=({r}, {d}), block_count=1)"""
        compute = f"""
                with q_buf.wait() as q_blk, k_buf.wait() as k_blk, qk_buf.reserve() as qk_blk:
                    qk_blk.store(q_blk @ ttl.block.transpose(k_blk)){_MARK}Q·Kᵀ
                with qk_buf.wait() as qk_blk, s_buf.reserve() as s_blk:
                    s_blk.store(qk_blk * ttl.block.fill({scale!r}, shape=({r}, {r}))){_MARK}S = Q·Kᵀ·scale
                with s_buf.wait() as s_blk:
                    with m_buf.reserve() as m_blk:
                        m_blk.store(ttl.math.reduce_max(s_blk, dims=[-1], shape=({r}, 1))){_MARK}m = rowmax(S)
                    with m_buf.wait() as m_blk, p_buf.reserve() as p_blk:
                        p_blk.store(ttl.math.exp(s_blk - ttl.block.broadcast(m_blk, dims=[-1], shape=({r}, {r})))){_MARK}P = exp(S − m)
                with p_buf.wait() as p_blk, v_buf.wait() as v_blk:
                    with l_buf.reserve() as l_blk:
                        l_blk.store(ttl.math.reduce_sum(p_blk, dims=[-1], shape=({r}, 1))){_MARK}l = rowsum(P)
                    with pv_buf.reserve() as pv_blk:
                        pv_blk.store(p_blk @ v_blk){_MARK}P·V
                with pv_buf.wait() as pv_blk, l_buf.wait() as l_blk, out_buf.reserve() as o_blk:
                    o_blk.store(pv_blk * ttl.block.broadcast(ttl.math.recip(l_blk), dims=[-1], shape=({r}, {d}))){_MARK}O = P·V / l"""
    else:  # the notebook's fused_block_step, with its 2s made rows and d_tiles
        buffers = ""
        compute = f"""
                with q_buf.wait() as q_blk, k_buf.wait() as k_blk, v_buf.wait() as v_blk, out_buf.reserve() as o_blk:
                    s = q_blk @ ttl.block.transpose(k_blk) * ttl.block.fill({scale!r}, shape=({r}, {r}))
                    m = ttl.math.reduce_max(s, dims=[-1], shape=({r}, 1))
                    p = ttl.math.exp(s - ttl.block.broadcast(m, dims=[-1], shape=({r}, {r})))
                    l = ttl.math.reduce_sum(p, dims=[-1], shape=({r}, 1))
                    o_blk.store(p @ v_blk * ttl.block.broadcast(ttl.math.recip(l), dims=[-1], shape=({r}, {d}))){_MARK}O = softmax(Q·Kᵀ·scale)·V"""
    # the f-strings above are indented to sit inside this template; dedent the whole once
    return textwrap.dedent(f"""
        @ttl.operation(grid=(1, 1))
        def block_step(q, k, v, out{", scores" if split else ""}):
            q_buf = ttl.make_dataflow_buffer_like(q, shape=({r}, {d}), block_count=1)
            k_buf = ttl.make_dataflow_buffer_like(k, shape=({r}, {d}), block_count=1)
            v_buf = ttl.make_dataflow_buffer_like(v, shape=({r}, {d}), block_count=1)
            out_buf = ttl.make_dataflow_buffer_like(out, shape=({r}, {d}), block_count=1){buffers}

            @ttl.datamovement()
            def reader():
                with q_buf.reserve() as q_blk, k_buf.reserve() as k_blk, v_buf.reserve() as v_blk:
                    for tensor, blk in ((q, q_blk), (k, k_blk), (v, v_blk)):
                        ttl.copy(tensor[0:{r}, 0:{d}], blk).wait()

            @ttl.compute()
            def compute():{compute}

            @ttl.datamovement()
            def writer():
                with out_buf.wait() as o_blk:
                    ttl.copy(o_blk, out[0:{r}, 0:{d}]).wait()
        """)


@functools.lru_cache(maxsize=None)
def block_step(rows: int, d_tiles: int, split: bool) -> BlockStep:
    """Launch the block step of this size on the simulator and count its DST tiles per store (cached: a launch
    takes a tenth of a second, a slider move should not)."""
    import torch

    from course.lessons import dataflow  # here, not on top: +5 ms to `import course.widgets`, in every lesson
    source = block_step_source(rows, d_tiles, split)
    # A file name of its own: the census keys steps by (file, line), and the line tells which step it is.
    filename = f"<dst_explorer: {'split' if split else 'fused'} step, rows={rows}, d_tiles={d_tiles}>"
    labels = {n: line.split(_MARK, 1)[1] for n, line in enumerate(source.splitlines(), 1) if _MARK in line}
    ttl, _ = dataflow.simulator()
    namespace = {"ttl": ttl}
    exec(compile(source, filename, "exec"), namespace)

    gen = torch.Generator().manual_seed(rows * 10 + d_tiles)
    n, d = TILE * rows, TILE * d_tiles
    q, k, v = (torch.randn(n, d, generator=gen).to(torch.bfloat16).float() for _ in range(3))
    out = dataflow.upload(torch.zeros(n, d))
    extra = [dataflow.upload(torch.zeros(n, n))] if split else []
    _, _, census = dataflow.launch(namespace["block_step"], *(dataflow.upload(t) for t in (q, k, v)), out, *extra,
                                   name="the DST explorer's block step")
    counted = {s.line: s for s in census.steps.values() if s.file == filename}
    if sorted(counted) != sorted(labels):
        raise RuntimeError(f"expected a DST count for the stores on lines {sorted(labels)}, got {sorted(counted)}")
    steps = tuple(StepCount(label=labels[line], tiles=s.tiles, operations=s.operations,
                            stored=math.prod(s.stored_shape)) for line, s in sorted(counted.items()))
    expected = torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v
    error = float((dataflow.download(out) - expected).abs().max())
    return BlockStep(rows=rows, d_tiles=d_tiles, split=split, steps=steps, error=error)


def largest_fitting_rows(d_tiles: int, split: bool, dtype_bits: int = 16, full_sync: bool = False) -> int:
    """The most rows of tiles (up to 4) whose block step fits in DST at this D and mode, by running them; 0: none."""
    limit = dst.capacity(dtype_bits, full_sync)
    return max((r for r in range(1, MAX_ROWS + 1) if block_step(r, d_tiles, split).peak <= limit), default=0)


def _mode_name(dtype_bits: int, full_sync: bool) -> str:
    return f"{dtype_bits}-bit {'full' if full_sync else 'half'} sync"


def _rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''} of tiles"


def _remedy(step: BlockStep, dtype_bits: int, full_sync: bool) -> str:
    """One sentence on what would make a step that does not fit fit, from the counts of the other settings."""
    limit = dst.capacity(dtype_bits, full_sync)
    options = []
    fewer = largest_fitting_rows(step.d_tiles, step.split, dtype_bits, full_sync)
    if fewer:
        options.append(f"{_rows(fewer)} ({block_step(fewer, step.d_tiles, step.split).peak} tiles)")
    if not step.split:
        split_peak = block_step(step.rows, step.d_tiles, True).peak
        if split_peak <= limit:
            options.append(f"splitting it into steps (at most {split_peak} tiles a step)")
    if not full_sync and step.peak <= dst.capacity(dtype_bits, True):
        options.append(f"full sync (DST holds {dst.capacity(dtype_bits, True)})")
    if options:
        return "It would fit with " + ", or with ".join(options) + "."
    both = largest_fitting_rows(step.d_tiles, True, dtype_bits, True)
    if both:
        return (f"No single change makes it fit; split into steps and in full sync, up to {_rows(both)} "
                f"({block_step(both, step.d_tiles, True).peak} tiles) do.")
    return ("Not even one row of tiles, split into steps, in full sync, fits at this D: its largest step keeps "
            f"{block_step(1, step.d_tiles, True).peak} tiles live; only a smaller D would.")


def _summary(step: BlockStep, dtype_bits: int, full_sync: bool) -> list[str]:
    limit = dst.capacity(dtype_bits, full_sync)
    r, d = step.rows, step.d_tiles
    fits = step.peak <= limit
    how = (f"split into {len(step.steps)} stores, each intermediate through a dataflow buffer of its own"
           if step.split else "fused into one store")
    lines = [f"A block of {r} query tile{'s' if r > 1 else ''} ({TILE * r} rows) against {r} key "
             f"tile{'s' if r > 1 else ''}, D = {TILE * d} ({d} tile{'s' if d > 1 else ''}): Q, K, V and O are "
             f"{r}×{d} tiles, S and P {r}×{r}; one attention step, {how}."]
    at_peak = [html.escape(s.label) for s in step.steps if s.tiles == step.peak]
    where = f" (in {', '.join(at_peak[:-1])} and {at_peak[-1]})" if len(at_peak) > 1 else \
        f" (in {at_peak[0]})" if step.split else ""
    verdict = "fits" if fits else "does not fit"
    lines.append(f"Peak: <b>{step.peak} tiles</b> live in DST{where}; {_mode_name(dtype_bits, full_sync)} holds "
                 f"{limit}: <b>{verdict}</b>" + ("." if fits else f" ({step.peak - limit} too many)."))
    best = largest_fitting_rows(d, step.split, dtype_bits, full_sync)
    setting = f"at D = {TILE * d}, {'split' if step.split else 'fused'}, in {_mode_name(dtype_bits, full_sync)}"
    lines.append(f"The largest block that fits {setting}: " + (f"rows = {best}." if best else
                 f"none (rows = 1 needs {block_step(1, d, step.split).peak} tiles)."))
    if not fits:
        lines.append(_remedy(step, dtype_bits, full_sync))
    lines.append(f"The simulator's O is within {step.error:.1e} of PyTorch's softmax(QKᵀ/√D)·V. Counted with "
                 "course/lessons/dst.py: a value computed in a step holds its tiles until its last reader is done; blocks "
                 "read from a buffer take none.")
    return lines


@interactive
def dst_explorer():
    """Lesson 09: the DST tiles each store of one attention step keeps live, fused or split into steps, against
    the capacity of a DST mode. Needs no code of the learner's: it launches its own operation on the simulator.

    Controls: rows of tiles per block (1–4), the head dim D (32–128), the DST mode, and split into steps.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt

    from course.lessons import dataflow  # here, not on top: +5 ms to `import course.widgets`, in every lesson
    dataflow.simulator()  # without it, say so now in the course's sentence, not in a traceback at each redraw
    rows = w.IntSlider(value=2, min=1, max=MAX_ROWS, description="rows", continuous_update=False)
    d_tiles = w.Dropdown(options=[(str(TILE * n), n) for n in range(1, MAX_D_TILES + 1)], value=2, description="D")
    mode = w.Dropdown(options=[(f"{label} ({dst.capacity(*value)} tiles)", value) for label, value in MODES],
                      value=MODES[0][1], description="DST mode")
    split = w.Checkbox(value=False, description="split into steps")
    text = w.HTML()

    def draw(rows: int, d_tiles: int, mode: tuple[int, bool], split: bool) -> None:
        bits, full_sync = mode
        limit = dst.capacity(bits, full_sync)
        step = block_step(rows, d_tiles, split)
        text.value = "".join(f"<p style='max-width:70em;margin:0.3em 0'>{line}</p>"
                             for line in _summary(step, bits, full_sync))
        # the same scale for every rows at this D, so the bars grow as the slider moves
        widest = max(limit, *(block_step(r, d_tiles, split).peak for r in range(1, MAX_ROWS + 1)))
        fig, ax = plt.subplots(figsize=(10, 1.6 + 0.45 * len(step.steps)))
        ys = range(len(step.steps))[::-1]  # the first store on top
        ax.barh(ys, [s.tiles for s in step.steps], color=[_OVER if s.tiles > limit else _FITS for s in step.steps])
        for y, s in zip(ys, step.steps):
            ax.text(s.tiles + widest * 0.01, y, str(s.tiles), va="center", fontsize=8)
        ax.axvline(limit, color="k", ls="--", lw=1, label=f"DST holds {limit} ({_mode_name(bits, full_sync)})")
        ax.set_yticks(list(ys), [s.label for s in step.steps])
        ax.set_xlim(0, widest * 1.1)
        ax.set_xlabel("DST tiles live at the step's peak")
        ax.set_title(f"{'split' if split else 'fused'} step, rows = {rows}, D = {TILE * d_tiles}: "
                     f"peak {step.peak} tiles", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0))
        show(fig)

    out = w.interactive_output(draw, dict(rows=rows, d_tiles=d_tiles, mode=mode, split=split))
    return w.VBox([w.HBox([rows, d_tiles]), w.HBox([mode, split]), text, out])
