"""Inputs that expose mistakes in attention kernels.

``make_qkv`` draws Q, K, V for one test case. The ``kind`` decides how hard the case is:

* ``"normal"``: unit-normal entries; scores have variance ~1 after scaling.
* ``"peaky"``: Q and K scaled so that scaled scores reach the hundreds. ``exp`` of such a score
  overflows float32 (max ~3.4e38 = e^88.7) unless the row max is subtracted first, and a missing
  rescale of a running sum shows up as a wrong, not just imprecise, answer.
* ``"constant_rows"``: every key identical, so every softmax row is exactly uniform; a kernel that
  divides by the wrong count or forgets a tail of keys is caught.

Shapes that are not multiples of a block size (1, 17, 129) and head dims 16..128 are the defaults
of ``standard_cases``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Literal

import torch

__all__ = ["Case", "make_qkv", "standard_cases", "ODD_LENGTHS", "HEAD_DIMS"]

Kind = Literal["normal", "peaky", "constant_rows"]

ODD_LENGTHS: tuple[int, ...] = (1, 17, 129)
HEAD_DIMS: tuple[int, ...] = (16, 32, 64, 128)


@dataclass(frozen=True)
class Case:
    """One test case: sizes, distribution, masking and dtype."""

    n_q: int
    n_k: int
    d: int
    kind: Kind = "normal"
    causal: bool = False
    dtype: torch.dtype = torch.float32
    batch: tuple[int, ...] = field(default=())
    seed: int = 0

    def describe(self, scale: float | None = None) -> str:
        """The case in words that reproduce it: sizes, kind, causal, dtype and seed (``make_qkv``'s
        arguments), and the softmax scale when a check passes one explicitly."""
        shape = f"Nq={self.n_q}, Nk={self.n_k}, D={self.d}"
        if self.batch:
            shape = f"batch={self.batch}, " + shape
        extras = [self.kind] + (["causal"] if self.causal else []) + [str(self.dtype).replace("torch.", ""),
                                                                      f"seed={self.seed}"]
        text = f"{shape} ({', '.join(extras)})"
        return text if scale is None else f"{text} with scale={float(scale)!r}"

    def tensors(self, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of the case (see :func:`make_qkv`): on the CPU, where the float64 oracle runs, unless
        ``device`` says otherwise; ``device=course.tiers.device()`` for tensors a Triton kernel reads."""
        return make_qkv(self.n_q, self.d, n_k=self.n_k, kind=self.kind, dtype=self.dtype, batch=self.batch,
                        seed=self.seed, device=device)


def make_qkv(n_q: int, d: int, *, n_k: int | None = None, kind: Kind = "normal", dtype: torch.dtype = torch.float32,
             batch: tuple[int, ...] = (), seed: int = 0, device: str | torch.device = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q (…, Nq, D), K and V (…, Nk, D), contiguous, reproducible from ``seed`` (the values do not depend on
    ``device``: they are drawn on the CPU, then moved).

    ``device`` is where they are put: the CPU by default (the float64 oracle, the CPU runtime of CUDA C and
    Metal); ``device=course.tiers.device()`` for tensors a Triton kernel reads, which on the GPU tier
    must be in GPU memory."""
    n_k = n_q if n_k is None else n_k
    if n_q < 1 or n_k < 1 or d < 1:
        raise ValueError(f"sizes must be positive; got Nq={n_q}, Nk={n_k}, D={d}")
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n_q, d, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, n_k, d, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, n_k, d, generator=gen, dtype=torch.float64)
    if kind == "peaky":
        # Scaled scores q·k/sqrt(D) have standard deviation ~ 12*12 = 144: far past exp's range.
        q, k = q * 12.0, k * 12.0
    elif kind == "constant_rows":
        k = k[..., :1, :].expand_as(k).clone()
    elif kind != "normal":
        raise ValueError(f"unknown kind {kind!r}; use 'normal', 'peaky' or 'constant_rows'")
    return tuple(t.to(dtype).to(device).contiguous() for t in (q, k, v))  # type: ignore[return-value]


def standard_cases(*, dtypes: Iterable[torch.dtype] = (torch.float32,), head_dims: Iterable[int] = (16, 64),
                   lengths: Iterable[int] = ODD_LENGTHS, kinds: Iterable[Kind] = ("normal", "peaky"),
                   causal: bool = False, cross: bool = True) -> list[Case]:
    """A small grid of cases: every length with every head dim and kind, plus Nq != Nk pairs."""
    cases: list[Case] = []
    seed = 0
    for dtype in dtypes:
        for d in head_dims:
            for n in lengths:
                for kind in kinds:
                    cases.append(Case(n, n, d, kind=kind, causal=causal, dtype=dtype, seed=seed))
                    seed += 1
            if cross:
                lens = sorted(lengths)
                for n_q, n_k in ((lens[0], lens[-1]), (lens[-1], lens[len(lens) // 2])):
                    cases.append(Case(n_q, n_k, d, causal=causal, dtype=dtype, seed=seed))
                    seed += 1
    return cases
