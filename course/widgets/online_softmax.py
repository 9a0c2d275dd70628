"""Lesson 02: the running (m, l) of the online softmax, block by block."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from course.widgets.base import interactive, show

__all__ = ["OnlineSoftmaxStep", "online_softmax_trace", "online_softmax_explorer"]


@dataclass(frozen=True)
class OnlineSoftmaxStep:
    """The running state of one row after ``seen`` columns, read ``block`` at a time."""

    seen: int
    m: float           # running max
    l: float           # running sum of exp(x - m)
    alpha: float       # factor the previous sum was multiplied by at this step
    l_no_rescale: float  # the same sum when the rescale is forgotten


def online_softmax_trace(x, block: int) -> list[OnlineSoftmaxStep]:
    """Replay the online softmax over a row, one block of columns per step (float64)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or block < 1:
        raise ValueError("online_softmax_trace takes a non-empty row and a positive block size")
    m, l, l_wrong, steps = -np.inf, 0.0, 0.0, []
    for start in range(0, x.size, block):
        chunk = x[start:start + block]
        m_new = max(m, float(chunk.max()))
        alpha = float(np.exp(m - m_new))
        l = l * alpha + float(np.exp(chunk - m_new).sum())
        l_wrong = l_wrong + float(np.exp(chunk - m_new).sum())
        m = m_new
        steps.append(OnlineSoftmaxStep(min(start + block, x.size), m, l, alpha, l_wrong))
    return steps


@interactive
def online_softmax_explorer(n: int = 64, seed: int = 0):
    """Lesson 02: step through a peaky row block by block and watch (m, l) and the rescale."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    # A row whose maximum keeps rising from left to right: every new block can raise m.
    x = rng.normal(0.0, 3.0, n) + np.linspace(0.0, 12.0, n)
    block = w.Dropdown(options=[1, 4, 8, 16], value=8, description="block")
    step = w.IntSlider(value=1, min=1, max=n // 8, description="blocks read", continuous_update=False)
    text = w.HTML()

    def on_block(change) -> None:
        step.max = -(-n // change["new"])
        step.value = min(step.value, step.max)

    block.observe(on_block, names="value")

    def draw(block: int, step: int) -> None:
        trace = online_softmax_trace(x, block)
        now = trace[min(step, len(trace)) - 1]
        true_l = float(np.exp(x - now.m)[: now.seen].sum())
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
        colours = ["steelblue" if j < now.seen else "lightgrey" for j in range(n)]
        left.bar(range(n), x, color=colours)
        left.axhline(now.m, color="crimson", ls="--", label=f"running max m = {now.m:.2f}")
        left.axvline(now.seen - 0.5, color="k", lw=0.8)
        left.set(xlabel="column j", ylabel="score x_j", title=f"{now.seen} of {n} columns read")
        left.legend(fontsize=8, loc="upper left")
        seen = [s.seen for s in trace[:step]]
        right.plot(seen, [s.l for s in trace[:step]], "o-", color="seagreen", label="l with the rescale")
        right.plot(seen, [s.l_no_rescale for s in trace[:step]], "x--", color="crimson", label="l, rescale forgotten")
        right.set_yscale("log")
        right.set(xlabel="columns read", ylabel="running sum l (against the current max)",
                  title="The running sum, block by block")
        right.legend(fontsize=8)
        show(fig)
        text.value = (f"<p>After {now.seen} columns: m = {now.m:.3f}, l = {now.l:.4f} "
                      f"(Σ exp(x − m) over those columns is {true_l:.4f}). At this step the old sum was multiplied "
                      f"by α = exp(m_old − m_new) = {now.alpha:.3g}. Without that rescale l would be "
                      f"{now.l_no_rescale:.4f}, measured against a max it was never computed with.</p>")

    out = w.interactive_output(draw, dict(block=block, step=step))
    return w.VBox([w.HBox([block, step]), text, out])
