"""Lesson 08's fp8 widget: a tensor's values over the numbers e4m3 and e5m2 can hold, the scale as a slider, and the
attention error the scale leaves beside it.

:func:`fp8_view` says what one scale does to one tensor (how much clips above the format's largest number, how much
falls below its smallest normal or flushes to zero, how coarse the rounding is where the largest values land);
:func:`fp8_attention_error` runs attention on Q, K and V quantised with that scale against float64 attention on the
originals. :func:`fp8_explorer` draws both.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from course.models import fp8
from course.reference import attention
from course.widgets.base import interactive, show

__all__ = ["Fp8View", "fp8_view", "quantised", "fp8_attention_error", "sample_qkv", "fp8_explorer"]


@dataclass(frozen=True)
class Fp8View:
    format: str
    log2_scale: float
    clipped: float
    """Share of the values whose scaled magnitude is beyond the format's largest number (they become max)."""
    subnormal: float
    """Share of the nonzero values that land below the smallest normal (fewer mantissa bits), flushed ones included."""
    flushed: float
    """Share of the nonzero values that round to zero."""
    step_at_top: float
    """The distance between neighbouring numbers where the tensor's largest value lands, in the tensor's own units."""
    worst_relative: float
    """The largest relative error of a value that neither clipped nor flushed."""

    def summary(self) -> str:
        return (f"{self.format}, scale 2^{self.log2_scale:g}: {self.clipped:.1%} of the values clip at the format's "
                f"largest number, {self.subnormal:.1%} fall below its smallest normal ({self.flushed:.1%} to zero); "
                f"near the largest value neighbouring numbers are {self.step_at_top:.3g} apart; the worst relative "
                f"error of the rest is {self.worst_relative:.3g}.")


def quantised(x: torch.Tensor, which, log2_scale: float) -> torch.Tensor:
    """x · 2^log2_scale rounded to the format (saturating at its largest number), then divided back: float64."""
    f = fp8.fmt(which)
    scale = 2.0 ** log2_scale
    scaled = (x.double() * scale).clamp(-f.max, f.max).float()
    return scaled.to(f.dtype).double() / scale


def fp8_view(x: torch.Tensor, which, log2_scale: float) -> Fp8View:
    """What a scale of 2^log2_scale does to ``x`` in one format."""
    f = fp8.fmt(which)
    scaled = x.double().abs() * 2.0 ** log2_scale
    nonzero = scaled > 0
    count = max(1, int(nonzero.sum()))
    back = quantised(x, f, log2_scale).abs()
    clipped = scaled > f.max * (1 + 1e-9)  # not the largest value itself, put on max up to rounding of the scale
    flushed = nonzero & (back == 0)
    kept = nonzero & ~clipped & ~flushed
    rel = ((back - x.double().abs()) / x.double().abs().clamp_min(1e-300))[kept].abs()
    top = float(scaled.max()) if scaled.numel() else 0.0
    return Fp8View(f.name, log2_scale, float(clipped.sum()) / max(1, x.numel()),
                   float((nonzero & (scaled < f.smallest_normal)).sum()) / count, float(flushed.sum()) / count,
                   f.step_at(min(top, f.max)) / 2.0 ** log2_scale, float(rel.max()) if rel.numel() else 0.0)


def fp8_attention_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, which, log2_offset: float) -> float:
    """Largest |O − O*| / max |O*|: O from Q, K, V quantised to the format, each with the scale that puts its absolute
    maximum on the format's largest number times 2^log2_offset (0 is that scale; above it the top values clip, below
    it the small ones lose bits), O* float64 attention on the originals."""
    f = fp8.fmt(which)
    parts = []
    for t in (q, k, v):
        amax = float(t.abs().max())
        parts.append(quantised(t, f, math.log2(f.max / amax) + log2_offset) if amax > 0 else t.double())
    got = attention(*parts).o
    want = attention(q.double(), k.double(), v.double()).o
    return float((got - want).abs().max() / want.abs().max())


def sample_qkv(n: int = 64, d: int = 32, outliers: bool = True, seed: int = 0):
    """Q, K, V (n × d, float64) from a fixed seed; ``outliers``: every seventh key carries 2^17 in channel 0, which no
    query reads (the massive activations of large models)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) for _ in range(3))
    if outliers:
        q[:, 0] = 0.0
        k[::7, 0] = 2.0 ** 17
    return q, k, v


@functools.lru_cache(maxsize=4)
def _errors(outliers: bool, offsets: tuple[int, ...]) -> dict[str, list[float]]:
    """Attention's error at every offset of the slider, for both formats: computed once per sample, not per move."""
    q, k, v = sample_qkv(outliers=outliers)
    return {name: [fp8_attention_error(q, k, v, name, o) for o in offsets] for name in ("e4m3fn", "e5m2")}


@interactive
def fp8_explorer():
    """Lesson 08: slide the scale of K (in binades from the one that puts its maximum on the format's largest number)
    and see where its values land on the e4m3 or e5m2 grid, and what attention's error becomes."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    import numpy as np

    offset = w.IntSlider(value=0, min=-12, max=6, description="log₂ scale ×", continuous_update=False)
    which = w.Dropdown(options=["e4m3fn", "e5m2"], value="e4m3fn", description="format")
    outliers = w.Checkbox(value=True, description="massive activations in K")
    text = w.HTML()

    def draw(offset: int, which: str, outliers: bool) -> None:
        f = fp8.fmt(which)
        q, k, v = sample_qkv(outliers=outliers)
        log2_scale = math.log2(f.max / float(k.abs().max())) + offset
        view = fp8_view(k, f, log2_scale)
        offsets = list(range(-12, 7))
        errors = _errors(outliers, tuple(offsets))
        text.value = (f"<p style='max-width:60em'>K: {view.summary()}<br>Attention's error with Q, K, V in {f.name} "
                      f"at this scale: {errors[f.name][offsets.index(offset)]:.3g} of max |O|.</p>")
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        scaled = (k.abs() * 2.0 ** log2_scale).flatten()
        scaled = scaled[scaled > 0].numpy()
        bins = np.arange(math.floor(math.log2(f.smallest_subnormal)) - 4, math.log2(f.max) + 8, 0.25)
        left.hist(np.log2(scaled), bins=bins, color="tab:blue", alpha=0.7, label="K's values, scaled")
        grid = fp8.grid(f)
        for g in np.log2(grid[grid > 0].numpy()):
            left.axvline(g, color="0.6", lw=0.4)
        left.axvspan(math.log2(f.max), bins[-1], color="crimson", alpha=0.15, label="clips")
        left.axvspan(bins[0], math.log2(f.smallest_normal), color="orange", alpha=0.15, label="subnormal / zero")
        left.set(xlabel="log₂ |value| (grey: the format's numbers)", ylabel="values", title=f"K on the {f.name} grid")
        left.legend(fontsize=8)
        for name, ys in errors.items():
            right.semilogy(offsets, ys, "o-", label=name)
        right.plot([offset], [errors[f.name][offsets.index(offset)]], "k*", ms=14)
        right.set(xlabel="log₂ scale × (0: amax on the format's max)", ylabel="max |O − O*| / max |O*|",
                  title="Attention's error")
        right.legend(fontsize=8)
        show(fig)

    out = w.interactive_output(draw, dict(offset=offset, which=which, outliers=outliers))
    return w.VBox([w.HBox([offset, which, outliers]), text, out])
