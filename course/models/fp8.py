"""The 8-bit float formats of lesson 08's fp8 forward, and the arithmetic the course grades it with.

An fp8 number is a sign, E exponent bits and M mantissa bits. With exponent field e and mantissa field f a
normal number is ``(-1)^s · 2^(e - bias) · (1 + f / 2^M)``; e = 0 is the subnormal range, ``2^(1 - bias) · f / 2^M``.
Two formats are in Hopper's tensor cores, two more (``fnuz``) in AMD's MI300:

=============  ===  ===  ====  ===========  ==============  ===========================================
format         E    M    bias  max          smallest normal  special values
=============  ===  ===  ====  ===========  ==============  ===========================================
e4m3fn         4    3    7     448          2^-6            NaN = S.1111.111 only; no inf ("fn": finite)
e5m2           5    2    15    57,344       2^-14           IEEE-like: ±inf, several NaNs
e4m3fnuz       4    3    8     240          2^-7            one NaN (0x80, the pattern of -0); no -0, no inf
e5m2fnuz       5    2    16    57,344       2^-15           one NaN (0x80); no -0, no inf
=============  ===  ===  ====  ===========  ==============  ===========================================

Rounding to nearest moves a value by at most half a step: ``u = 2^-(M + 1)`` of it in the normal range (1/16 for
e4m3, 1/8 for e5m2), and at most half the subnormal step ``2^(1 - bias - M) / 2`` below it. A scale maps a tensor
onto the format (``x · scale``, with ``scale = max / amax`` its absolute maximum lands on the format's largest
number); the kernel multiplies by the *descale* ``1 / scale`` after its products. A scale moves a tensor's range; it
cannot stretch the format's, which spans ``max / smallest normal``: 2^14.8 for e4m3, 2^29.8 for e5m2. That is the
whole reason for two formats: e4m3 for tensors whose values lie within 15 binades of their maximum (activations:
Q, K, V), e5m2 for tensors that spread wider (gradients).

Only what the lesson, its widget and its checks share is here; the fp8 kernel's wrapper
(``kernels/triton/08_fp8_forward.py``) quantises with :func:`quantize_per_head`, and the check of the kernel builds
the same inputs with it, so the oracle sees exactly the values the kernel multiplied.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["Format", "FORMATS", "E4M3", "E5M2", "fmt", "grid", "quantize_per_head", "dequantize", "choose_format",
           "SUBNORMAL_SHARE", "p_rounding_bound", "score_error_bound", "P_SCALES"]


@dataclass(frozen=True)
class Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    fnuz: bool
    dtype_name: str

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype_name)

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding a normal number to nearest: half a step, ``2^-(M+1)``."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def binades(self) -> float:
        """log2(max / smallest normal): how many factors of two of normal numbers the format spans."""
        return math.log2(self.max / self.smallest_normal)

    def step_at(self, x: float) -> float:
        """The distance between neighbouring numbers of the format around |x| (within its range)."""
        x = abs(x)
        if x < self.smallest_normal:
            return self.smallest_subnormal
        return 2.0 ** (math.floor(math.log2(min(x, self.max))) - self.mantissa_bits)


E4M3 = Format("e4m3fn", 4, 3, 7, 448.0, False, "float8_e4m3fn")
E5M2 = Format("e5m2", 5, 2, 15, 57344.0, False, "float8_e5m2")
FORMATS = {f.name: f for f in (E4M3, E5M2, Format("e4m3fnuz", 4, 3, 8, 240.0, True, "float8_e4m3fnuz"),
                                 Format("e5m2fnuz", 5, 2, 16, 57344.0, True, "float8_e5m2fnuz"))}

# P (the softmax weights, in [0, 1]) is multiplied by a power of two before it is cast to V's format, so that its
# small weights land in the format's normal range instead of its subnormals: 2^8 ≤ 448 for e4m3, 2^15 ≤ 57,344 for
# e5m2. A power of two changes no bit of the mantissa; the kernel divides it out of O at the end.
P_SCALES = {"e4m3fn": 256.0, "e5m2": 32768.0}


def fmt(which: "str | torch.dtype | Format") -> Format:
    """The :class:`Format` of a name (``"e4m3fn"``, ``"e4m3"``), a torch dtype or a Format."""
    if isinstance(which, Format):
        return which
    if isinstance(which, torch.dtype):
        for f in FORMATS.values():
            if f.dtype == which:
                return f
        raise ValueError(f"{which} is not an fp8 dtype; the formats are {', '.join(FORMATS)}")
    name = {"e4m3": "e4m3fn"}.get(str(which), str(which))
    if name not in FORMATS:
        raise ValueError(f"no fp8 format {which!r}; the formats are {', '.join(FORMATS)}")
    return FORMATS[name]


def grid(which) -> torch.Tensor:
    """Every finite non-negative number of the format, ascending (float64): all 256 bit patterns decoded."""
    f = fmt(which)
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(f.dtype).double()
    values = values[torch.isfinite(values) & (values >= 0)]
    return torch.unique(values)


def quantize_per_head(x: torch.Tensor, which) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (B, H, N, D) → (x8, descale): each head scaled so that its absolute maximum lands on the format's max.

    x8 has the fp8 dtype; descale (B, H) float32 is ``amax / max`` (1 for an all-zero head); ``x8 · descale`` is the
    dequantised tensor. The scaling runs in float32 (``x · (max / amax)``), the cast rounds to nearest.
    """
    f = fmt(which)
    amax = x.detach().abs().amax(dim=(-2, -1)).float()
    scale = torch.where(amax > 0, f.max / amax.clamp_min(torch.finfo(torch.float32).tiny), torch.ones_like(amax))
    x8 = (x.float() * scale[..., None, None]).clamp(-f.max, f.max).to(f.dtype)
    return x8, (1.0 / scale).float()


def dequantize(x8: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """x8 · descale in float64: the values a kernel that descales correctly computes with."""
    return x8.double() * descale.double()[..., None, None]


SUBNORMAL_SHARE = 0.01
"""The share of a tensor's nonzero values that may fall below e4m3's smallest normal after scaling before the
course picks e5m2 for it (:func:`choose_format`)."""


def choose_format(x: torch.Tensor) -> Format:
    """e4m3 (three mantissa bits) unless, scaled per head onto e4m3, more than 1% of the tensor's nonzero values fall
    below its smallest normal (2^-6, losing mantissa bits or flushing to zero): then e5m2, whose range is twice as
    many binades. A decision on the host (it reads one number from the tensor)."""
    amax = x.detach().abs().amax(dim=(-2, -1), keepdim=True).float()
    scaled = x.detach().abs().float() * (E4M3.max / amax.clamp_min(torch.finfo(torch.float32).tiny))
    nonzero = x.detach() != 0
    below = (scaled < E4M3.smallest_normal) & nonzero
    share = float(below.sum()) / max(1, int(nonzero.sum()))
    return E5M2 if share > SUBNORMAL_SHARE else E4M3


def p_rounding_bound(p: torch.Tensor, v: torch.Tensor, which, p_scale: float, relative: float = 2.0 ** -12
                     ) -> torch.Tensor:
    """The largest error the cast of P to V's format can put in O = P V / l, per output element.

    ``p`` (..., Nq, Nk) is the float64 oracle's softmax (rows summing to 1, so l is already divided out), ``v``
    (..., Nk, D) the dequantised V. The kernel rounds ``p · p_scale`` to the format; a weight moves by at most
    ``u · p`` in the normal range and by half the subnormal step ``s / 2`` below it (a masked key's 0 not at all) (in P's units, ``s / p_scale``),
    after its own float32 error ``relative · p`` (the scores' float32 sums and exp2) has moved it first. So

        |O_id - O*_id| ≤ Σ_j (max(u · p_ij, s / (2 · p_scale)) + relative · p_ij) · |v_jd|,

    the sum over j bounded term by term: the bound holds for any signs of the errors, and it is what the check
    of the kernel allows for P (plus the output's own rounding, see the check).
    """
    f = fmt(which)
    p = p.double()
    half_sub = f.smallest_subnormal / 2 / p_scale
    normal = p * p_scale >= f.smallest_normal
    per_weight = torch.where(normal, f.unit_roundoff * p, torch.full_like(p, half_sub))
    per_weight = torch.where(p == 0, torch.zeros_like(p), per_weight)  # a masked key: exactly 0 in both
    return (per_weight + relative * p) @ v.double().abs()


def score_error_bound(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """How far float32 sums can move a score: ``γ_D · scale · Σ_d |q_d k_d|`` with γ_D = D·2^-24 / (1 - D·2^-24).
    The products of two fp8 numbers are exact in float32 (4 + 4 mantissa bits fit in 24); only the sums round."""
    d = q.shape[-1]
    gamma = d * 2.0 ** -24 / (1 - d * 2.0 ** -24)
    return gamma * scale * (q.double().abs() @ k.double().abs().transpose(-2, -1))
