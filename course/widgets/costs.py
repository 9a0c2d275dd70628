"""Lessons 00 and 01: what the N×N score matrix costs, and where attention sits on the roofline."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from course.models import roofline
from course.widgets.base import DTYPES, GIB, human_bytes, interactive, show

__all__ = ["ScoreMatrixCost", "score_matrix_cost", "score_matrix_explorer", "roofline_points", "roofline_explorer"]


@dataclass(frozen=True)
class ScoreMatrixCost:
    """Memory and traffic of one attention forward pass over ``heads`` heads (B·H)."""

    n: int
    d: int
    bytes_per_element: int
    heads: int
    score_matrix: int     # S for all heads
    standard_traffic: int  # three kernels, S and P through global memory
    naive_reads: int       # lesson-01 kernel, one program per row
    fused_traffic: int     # ideal fused kernel: Q, K, V in, O out

    def summary(self) -> str:
        share = 4 * self.score_matrix / self.standard_traffic
        return (f"N = {self.n:,}, D = {self.d}, {self.bytes_per_element}-byte elements, {self.heads} heads:\n"
                f"  S alone takes {human_bytes(self.score_matrix)}.\n"
                f"  Standard attention moves {human_bytes(self.standard_traffic)} ({share:.1%} of it is S and P going back and forth).\n"
                f"  The naive kernel reads {human_bytes(self.naive_reads)} (K twice and V once per query row).\n"
                f"  A fused kernel needs only {human_bytes(self.fused_traffic)}.")


def score_matrix_cost(n: int, d: int, bytes_per_element: int, heads: int = 1) -> ScoreMatrixCost:
    return ScoreMatrixCost(
        n, d, bytes_per_element, heads,
        score_matrix=heads * roofline.score_matrix_bytes(n, n, bytes_per_element),
        standard_traffic=heads * roofline.standard_attention_bytes(n, n, d, bytes_per_element),
        naive_reads=heads * roofline.naive_kernel_bytes_read(n, n, d, bytes_per_element),
        fused_traffic=heads * roofline.flash_attention_bytes(n, n, d, bytes_per_element),
    )


@interactive
def score_matrix_explorer(gpu_memory_gib: float = 80.0):
    """Lesson 01: slide N and watch S outgrow a GPU, and the bytes each approach moves."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    log_n = w.IntSlider(value=12, min=7, max=17, description="log₂ N", continuous_update=False)
    d = w.Dropdown(options=[64, 128], value=64, description="D")
    dtype = w.Dropdown(options=list(DTYPES), value="float16", description="dtype")
    heads = w.IntSlider(value=32, min=1, max=128, description="B·H", continuous_update=False)
    text = w.HTML()

    def draw(log_n: int, d: int, dtype: str, heads: int) -> None:
        b = DTYPES[dtype]
        ns = 2 ** np.arange(7, 18)
        costs = [score_matrix_cost(int(n), d, b, heads) for n in ns]
        here = score_matrix_cost(2**log_n, d, b, heads)
        text.value = "<p style='max-width:60em'>" + here.summary().replace("\n", "<br>") + "</p>"
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        left.loglog(ns, [c.score_matrix / GIB for c in costs], "o-", label="S for all heads")
        left.axhline(gpu_memory_gib, color="crimson", ls="--", label=f"{gpu_memory_gib:g} GiB GPU")
        left.plot([here.n], [here.score_matrix / GIB], "k*", ms=14)
        left.set(xlabel="sequence length N", ylabel="GiB", title="Memory of the N×N score matrix")
        left.legend(fontsize=8)
        for label, attr in (("standard (S, P materialized)", "standard_traffic"),
                            ("naive kernel (reads)", "naive_reads"), ("fused, ideal", "fused_traffic")):
            right.loglog(ns, [getattr(c, attr) / GIB for c in costs], "o-", label=label)
            right.plot([here.n], [getattr(here, attr) / GIB], "k*", ms=10)
        right.set(xlabel="sequence length N", ylabel="GiB moved", title="Global-memory traffic, one forward pass")
        right.legend(fontsize=8)
        show(fig)

    out = w.interactive_output(draw, dict(log_n=log_n, d=d, dtype=dtype, heads=heads))
    return w.VBox([w.HBox([log_n, heads]), w.HBox([d, dtype]), text, out])


def roofline_points(n: int, d: int, bytes_per_element: int, device: roofline.Device) -> dict[str, tuple[float, float]]:
    """(arithmetic intensity, attainable TFLOP/s) of standard and fused attention on ``device``."""
    flops = roofline.attention_flops(n, n, d)
    points = {}
    for label, moved in (("standard", roofline.standard_attention_bytes(n, n, d, bytes_per_element)),
                         ("fused", roofline.flash_attention_bytes(n, n, d, bytes_per_element))):
        ai = roofline.arithmetic_intensity(flops, moved)
        points[label] = (ai, roofline.attainable_flops(ai, device) / 1e12)
    return points


@interactive
def roofline_explorer():
    """Lesson 00: where attention sits on a GPU's roofline as N and D change."""
    import ipywidgets as w
    import matplotlib.pyplot as plt

    log_n = w.IntSlider(value=10, min=6, max=16, description="log₂ N", continuous_update=False)
    d = w.Dropdown(options=[32, 64, 128, 256], value=64, description="D")
    dev = w.Dropdown(options=list(roofline.DEVICES), value="H100 SXM", description="GPU")
    text = w.HTML()

    def draw(log_n: int, d: int, dev: str) -> None:
        device = roofline.DEVICES[dev]
        points = roofline_points(2**log_n, d, 2, device)
        ai = np.logspace(-1, 4, 200)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.loglog(ai, [roofline.attainable_flops(x, device) / 1e12 for x in ai], "k-", lw=2, label=f"{dev} roofline (fp16)")
        ax.axvline(device.ridge_point, color="grey", ls=":", label=f"ridge point {device.ridge_point:.0f} FLOP/B")
        for (label, (x, y)), colour in zip(points.items(), ("crimson", "seagreen")):
            ax.plot([x], [y], "o", color=colour, ms=10, label=f"{label}: {x:.1f} FLOP/B → ≤ {y:.0f} TFLOP/s")
        ax.set(xlabel="arithmetic intensity (FLOP per byte of global memory)", ylabel="attainable TFLOP/s",
               title=f"Attention forward, N = {2**log_n:,}, D = {d}, fp16")
        ax.legend(fontsize=8, loc="lower right")
        show(fig)
        std, fused = points["standard"], points["fused"]
        text.value = (f"<p>Standard attention: at most <b>{std[1]:.0f}</b> TFLOP/s (memory-bound). "
                      f"Fused: at most <b>{fused[1]:.0f}</b> TFLOP/s "
                      f"({'compute-bound' if fused[0] >= device.ridge_point else 'still memory-bound'}).</p>")

    out = w.interactive_output(draw, dict(log_n=log_n, d=d, dev=dev))
    return w.VBox([w.HBox([log_n, d, dev]), text, out])
