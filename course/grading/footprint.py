"""What a plain-PyTorch answer builds while it runs: the largest tensor, its matrix products, and the
fused attention it may have called.

Lesson 03's tiled forward in PyTorch must never hold the N×N score matrix, not even a strip of it as
wide as all the keys. Comparing its answer with the oracle cannot tell that apart from standard
attention, so the check also watches the run: every ATen operator PyTorch dispatches (views, copies
and products alike) passes through :class:`Footprint`, which keeps the largest result and counts the
products; allocations made outside PyTorch (numpy arrays, Python lists) are measured with
``tracemalloc``, so moving the N×N matrix into numpy does not hide it.
"""
from __future__ import annotations

import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["Footprint", "Watched", "SeenEnough", "watch"]

# Products a tiled loop makes twice per pair of tiles (S = Q Kᵀ and P V), however it is spelled
# (@, matmul, einsum and bmm all reach one of these).
_PRODUCTS = ("mm", "bmm", "addmm", "baddbmm", "mv", "dot", "addbmm")
# PyTorch's own attention: a call does the whole computation in one operator, which watching
# its results cannot see into.
_FUSED_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention", "_cudnn_attention",
                    "_fused_sdp")


@dataclass
class Watched:
    """What a call built: the largest tensor an operator returned, the products, fused attention calls."""

    largest: int = 0
    largest_shape: tuple[int, ...] = ()
    largest_op: str = ""
    products: int = 0
    fused_attention: list[str] = field(default_factory=list)
    outside_torch_bytes: int = 0
    """Peak bytes allocated through Python's allocator during the call (numpy arrays, lists, floats)."""
    wide_shape: tuple[int, ...] = ()
    """The first tensor as wide as all the keys that is not K or V again (see :class:`Footprint`'s ``keys``)."""
    wide_op: str = ""


class SeenEnough(Exception):
    """Raised inside the watched call once it has built more than it may: no need to watch the rest."""


class Footprint(TorchDispatchMode):
    def __init__(self, max_elements: int | None = None, max_products: int | None = None,
                 keys: tuple[int, int] | None = None) -> None:
        """``keys`` = (Nk, D): a tensor with a dimension of Nk is a strip of scores (as wide as all the keys) when a
        matrix product made it or its other dimensions hold other than D elements; K and V copied, converted or
        transposed are not. The call stops at the first one."""
        super().__init__()
        self.seen = Watched()
        self.max_elements, self.max_products, self.keys = max_elements, max_products, keys

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func.__name__ if hasattr(func, "__name__") else str(func)
        base = name.split(".")[0]
        if base in _PRODUCTS:
            self.seen.products += 1
        if any(marker in base for marker in _FUSED_ATTENTION) and base not in self.seen.fused_attention:
            self.seen.fused_attention.append(base)
        for value in tree_flatten(result)[0]:
            if isinstance(value, torch.Tensor) and value.numel() > self.seen.largest:
                self.seen.largest, self.seen.largest_shape, self.seen.largest_op = (
                    value.numel(), tuple(value.shape), base)
            if (self.keys is not None and not self.seen.wide_shape and isinstance(value, torch.Tensor)
                    and self.keys[0] in value.shape
                    and (base in _PRODUCTS or value.numel() // self.keys[0] != self.keys[1])):
                self.seen.wide_shape, self.seen.wide_op = tuple(value.shape), base
        if ((self.max_elements is not None and self.seen.largest > self.max_elements)
                or (self.max_products is not None and self.seen.products > self.max_products)
                or self.seen.fused_attention or self.seen.wide_shape):
            raise SeenEnough
        return result


def watch(fn: Callable[..., Any], *args: Any, max_elements: int | None = None, max_products: int | None = None,
          python_bytes: bool = True, keys: tuple[int, int] | None = None, **kwargs: Any) -> tuple[Any, Watched]:
    """Call ``fn`` and return (its result, what it built). The caller's own tensors are not counted.

    The call is stopped (its result is then None) as soon as it calls a fused attention operator, returns
    a tensor of more than ``max_elements``, makes more than ``max_products`` products or builds a strip of
    scores as wide as all ``keys`` = (Nk, D) (see :class:`Footprint`): a learner whose
    loop breaks the rule learns it at once, not after the whole slow run. ``python_bytes=False`` leaves
    allocations outside PyTorch unmeasured (tracemalloc slows a Python-heavy call several times), for callers
    whose learner code cannot reach plain Python data anyway (lesson 09's gated TT-Lang).
    """
    with Footprint():  # the first dispatch imports PyTorch's machinery for it: not the learner's bytes
        torch.zeros(2) @ torch.zeros(2)
    tracing = python_bytes and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start()
    if python_bytes:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
    mode = Footprint(max_elements, max_products, keys)
    result = None
    try:
        try:
            with mode:
                result = fn(*args, **kwargs)
        except SeenEnough:
            pass
        if python_bytes:
            mode.seen.outside_torch_bytes = max(0, tracemalloc.get_traced_memory()[1] - before)
    finally:
        if tracing:
            tracemalloc.stop()
    return result, mode.seen
