"""Lesson 07's determinism lab: one backward pass, run again and again with its blocks in a new order.

On a GPU the order in which blocks run, and so the order in which their atomic additions reach a dQ
element, changes from run to run. The CPU runtime runs blocks one after another, so the lab changes the
order on purpose (``schedule="random"`` with a new seed per run): each dQ element is then a float sum of
the same shares in another order, and rounding shows in its last bits. dK and dV have one owner per
row, and the split design's dQ kernel sums in one fixed order, so their bits never change.
"""
from __future__ import annotations

from typing import Sequence

import torch

from course.errors import CourseError
from course.inputs import Case
from course.reference import attention
from course.tracks import cuda as cuda_track

__all__ = ["differing_elements", "block_order_runs", "DESIGNS"]

DESIGNS = ("atomic", "split")


def differing_elements(runs: Sequence[torch.Tensor]) -> int:
    """Elements whose bits are not the same in every run (compared as bits: -0.0 differs from 0.0, and a
    NaN with the same bits in every run does not differ)."""
    if len(runs) < 2:
        raise ValueError(f"comparing runs needs at least two; got {len(runs)}")
    bits = torch.stack([r.detach().cpu().contiguous().view(torch.int32) for r in runs])
    return int((bits != bits[0]).any(dim=0).sum())


def block_order_runs(design: str, runs: int = 8, n_q: int = 64, n_k: int = 256, d: int = 32, causal: bool = False,
                     module=None, seed: int = 7) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``runs`` times (dQ, dK, dV) of the CUDA C backward ``design`` on the same float32 inputs, run ``i``
    with its blocks in the random order of seed ``i``. ``module`` is a compiled kernel module (a
    ``%%cuda`` cell); the default is the course's own kernel file for the design."""
    if design not in DESIGNS:
        raise CourseError(f"design must be 'atomic' or 'split'; got {design!r}")
    if runs < 2:
        raise CourseError(f"the lab compares runs: ask for at least 2, not {runs}")
    module = module if module is not None else cuda_track.backward_module_for(design)
    launch = cuda_track.backward_atomic if design == "atomic" else cuda_track.backward_split
    case = Case(n_q, n_k, d, causal=causal, seed=seed)
    q, k, v = case.tensors()
    forward = attention(q, k, v, causal)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1))
    args = (q, k, v, forward.o.float(), forward.lse.float(), do)
    return [launch(module, *args, causal=causal, schedule="random", seed=s) for s in range(runs)]
