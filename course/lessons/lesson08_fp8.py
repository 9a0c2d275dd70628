"""Lesson 08's fp8 half: the fp8 forward (kernels/triton/08_fp8_forward.py: Q, K and V in 8 bits, descaled in the
kernel) with the quantisation mistakes its check recognises, and the exercises around it: a format and its scale,
the error of a score, the value of a byte, two choices. :mod:`course.lessons.lesson08` declares them with the
capstone's; this module's name is not a lesson's, so the lessons' loader reads it only through lesson 08.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from course.errors import CheckFailed
from course.grading.checks import kernel_options, learner_call
from course.grading.compare_values import Mistake, check_values
from course.grading.comparison import Report
from course.grading.exercise import Exercise, ModelPolicy, ladder
from course.models import fp8
from course.reference import causal_mask
from course.tracks import table

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY", "Fp8Case", "FP8_QUESTIONS"]

_FP8 = table.exercises(lesson="08", step="fp8_forward", track="triton")[0].id  # the id, from its row


@dataclass(frozen=True)
class Fp8Case:
    """One input of the fp8 forward's check: Q (batch, heads, Nq, D), K and V (batch, kv_heads, Nk, D).

    ``kind``: ``normal`` (standard normal values, float16), ``large`` (K and V far beyond e4m3's 448, float16: an
    fp8 cast without a scale clips them) or ``outlier`` (float32; a few keys with one channel near 2^17, the
    "massive activations" of large models, which Q never reads: scaled onto e4m3 every other value of K falls
    below its normal range, so K, and Q with it, goes to e5m2)."""
    batch: int
    heads: int
    kv_heads: int
    n_q: int
    n_k: int
    d: int
    causal: bool = False
    kind: str = "normal"
    seed: int = 0

    def describe(self) -> str:
        heads = f"H={self.heads}" + (f" over H_kv={self.kv_heads}" if self.kv_heads != self.heads else "")
        return (f"B={self.batch}, {heads}, Nq={self.n_q}, Nk={self.n_k}, D={self.d} ({self.kind}, "
                f"{'causal' if self.causal else 'not causal'}, seed={self.seed})")

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        q = torch.randn(self.batch, self.heads, self.n_q, self.d, generator=gen)
        k = torch.randn(self.batch, self.kv_heads, self.n_k, self.d, generator=gen)
        v = torch.randn(self.batch, self.kv_heads, self.n_k, self.d, generator=gen)
        if self.kind == "large":
            return q.half(), (k * 600).half(), (v * 900).half()
        if self.kind == "outlier":
            q[..., 0] = 0.0                                      # no query reads the outlier channel
            k[..., ::7, 0] = 2.0 ** 17                           # every seventh key carries the massive value
            return q, k, v
        return q.half(), k.half(), v.half()


def _fp8_cases() -> list[Fp8Case]:
    return [Fp8Case(1, 2, 2, 17, 40, 32, seed=1), Fp8Case(2, 4, 2, 65, 33, 64, causal=True, seed=2),
            Fp8Case(1, 2, 1, 33, 70, 16, causal=True, kind="large", seed=3),
            Fp8Case(1, 2, 2, 40, 40, 64, kind="outlier", seed=4), Fp8Case(1, 1, 1, 1, 1, 32, seed=5)]


def _formats(q, k, v, all_e4m3: bool = False) -> tuple[fp8.Format, fp8.Format, fp8.Format]:
    """The formats the kernel's wrapper picks: Q and K share the wider of their two choices (one product)."""
    if all_e4m3:
        return fp8.E4M3, fp8.E4M3, fp8.E4M3
    qk = max(fp8.choose_format(q), fp8.choose_format(k), key=lambda f: f.binades)
    return qk, qk, fp8.choose_format(v)


def _scores(q, k, causal: bool, scale: float) -> torch.Tensor:
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1]), float("-inf"))
    return s


def _oracle(q, k, v, group: int, causal: bool, scale: float, p_scale_kept: float = 1.0):
    """(O, LSE, P) in float64 of float64 inputs, K and V repeated over each group of query heads."""
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    return (p @ v) * p_scale_kept, lse, p


# What the kernel computes if the descaling (or the quantisation in front of it) goes wrong in one of the ways
# learners get it wrong: each builds the dequantised inputs that mistake amounts to and a sentence naming it.
_FP8_MISTAKES = {
    "qk-not-descaled": "the scores are not descaled: Q8·K8ᵀ is the product of the scaled tensors, so it must be "
                       "multiplied by Q's and K's descales (amax / max of each head) along with the softmax scale.",
    "qk-descaled-twice": "the descales of Q and K are applied twice: they multiply the scores once, folded into "
                         "qk_scale (Q8·dq · K8·dk = dq·dk · Q8·K8).",
    "v-not-descaled": "O is missing V's descale: P·V8 is the product with the scaled V, so O must be multiplied by V's "
                      "descale (folded into o_scale).",
    "v-descaled-twice": "V's descale is applied twice: O = (dv / l) · P·V8 takes it once.",
    "p-scale-kept": "O is P_SCALE times too large: P went into the second product as P · P_SCALE, so o_scale "
                    "divides it out again.",
}


def _fp8_inputs(q, k, v, mistake: str = ""):
    """The dequantised Q, K, V (float64) the kernel computes with, and V's format; with ``mistake`` the ones that
    mistake computes with instead. (The quantisation itself, the format and the scale, is the course's wrapper's,
    which a kernel exercise never replaces: its mistakes are graded by 08.fp8_scale.)"""
    formats = _formats(q, k, v)
    out = []
    for x, f in zip((q, k, v), formats):
        x8, descale = fp8.quantize_per_head(x, f)
        power = {"qk-not-descaled": 0, "qk-descaled-twice": 2}.get(mistake, 1) if x is not v else \
            {"v-not-descaled": 0, "v-descaled-twice": 2}.get(mistake, 1)
        out.append(x8.double() * descale.double()[..., None, None] ** power)
    return (*out, formats[2])


def _fp8_budget(p: torch.Tensor, v: torch.Tensor, o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, group: int,
                scale: float, v_format: fp8.Format) -> tuple[torch.Tensor, torch.Tensor]:
    """(O's budget, the LSE's budget), element by element, derived from the formats.

    The oracle runs on the dequantised inputs, so what the formats did to Q, K and V is not charged to the kernel.
    What the kernel still rounds:

    - the scores: fp8 × fp8 products are exact in float32 (3 + 3 mantissa bits < 24); the sums of D of them round,
      |Δs| ≤ γ_D · scale · Σ_d |q_d k_d|, γ_D = D·2^-24 / (1 - D·2^-24) (course.models.fp8.score_error_bound); a
      weight p = exp(s - LSE) moves by a factor e^(2|Δs|) at most, and exp2 in float32 adds 2^-20;
    - P, cast to V's format as P · P_SCALE: at most u = 2^-(M+1) of a weight in the normal range (1/16 for e4m3,
      1/8 for e5m2) and half the subnormal step below it, summed with |v| (course.models.fp8.p_rounding_bound);
    - O, written in float16: 2^-11 of |O|, and the float32 sums of the accumulator, n_k·2^-24 of Σ p |v|.

    The LSE moves with the largest score error of its row, plus float32's rounding of m + log2(l): 2^-20 · (|LSE|+1).
    """
    k_rep = k.repeat_interleave(group, dim=1)
    ds = fp8.score_error_bound(q, k_rep, scale)
    ds = torch.where(torch.isfinite(p) & (p > 0), ds, torch.zeros_like(ds)).amax(dim=-1, keepdim=True)
    relative = torch.expm1(2 * ds) + 2.0 ** -20 + k.shape[-2] * 2.0 ** -24
    p_bound = fp8.p_rounding_bound(p, v.repeat_interleave(group, dim=1), v_format, fp8.P_SCALES[v_format.name],
                                   relative=relative)
    return p_bound + 2.0 ** -11 * o.abs() + 1e-30, ds[..., 0] + 2.0 ** -20


def _fp8_forward(fn, cases: Iterable[Fp8Case] | None = None) -> Report:
    """The kernel's O and LSE against the float64 oracle on the dequantised inputs, within the formats' budget."""
    cases = list(cases) if cases is not None else _fp8_cases()
    options = kernel_options()
    worst = 0.0
    for case in cases:
        text = case.describe()
        q, k, v = case.tensors()
        group = case.heads // case.kv_heads
        scale = 1.0 / math.sqrt(case.d)
        result = learner_call(_FP8, fn, tuple(t.to(options["device"]) for t in (q, k, v)),
                              dict(causal=case.causal), text)
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, torch.Tensor)
                                                                               for t in result)):
            raise CheckFailed(f"{_FP8}: on {text} your function returned {type(result).__name__}; expected a pair "
                              "(o, lse) of tensors.")
        o, lse = (t.detach().cpu().double() for t in result)
        if tuple(o.shape) != tuple(q.shape) or tuple(lse.shape) != tuple(q.shape[:3]):
            raise CheckFailed(f"{_FP8}: on {text} O has shape {tuple(o.shape)} and the LSE {tuple(lse.shape)}; expected "
                              f"{tuple(q.shape)} and {tuple(q.shape[:3])}.")
        qd, kd, vd, v_format = _fp8_inputs(q, k, v)
        want_o, want_lse, p = _oracle(qd, kd, vd, group, case.causal, scale)
        budget, lse_budget = _fp8_budget(p, vd, want_o, qd, kd, group, scale, v_format)
        bad_o = ~((o - want_o).abs() <= budget)
        empty = torch.isinf(want_lse)
        bad_lse = torch.where(empty, lse != want_lse, ~((lse - want_lse).abs() <= lse_budget))
        if bad_o.any() or bad_lse.any():
            raise CheckFailed(_fp8_failure(text, o, lse, want_o, want_lse, budget, lse_budget, bad_o, bad_lse,
                                           (q, k, v), group, case.causal, scale))
        worst = max(worst, float(((o - want_o).abs() / budget).max()))
    return Report(_FP8, len(cases), worst_ratio=worst, tier=options["tier"])


def _fp8_failure(text, o, lse, want_o, want_lse, budget, lse_budget, bad_o, bad_lse, inputs, group, causal,
                 scale) -> str:  # noqa: PLR0913
    """The failure's sentence: where O (or the LSE) is off and by how much, and the mistake that gives this output."""
    if bad_o.any():
        where = tuple(int(i) for i in bad_o.nonzero()[0])
        got, want, allowed = float(o[where]), float(want_o[where]), float(budget[where])
        what = (f"wrong O on {text}: at batch {where[0]}, head {where[1]}, row {where[2]}, column {where[3]} it is "
                f"{got:.5g} where the float64 oracle on the dequantised inputs gives {want:.5g} (the budget the formats "
                f"leave the kernel there is {allowed:.3g})")
    else:
        where = tuple(int(i) for i in bad_lse.nonzero()[0])
        what = (f"wrong LSE on {text}: at batch {where[0]}, head {where[1]}, row {where[2]} it is {float(lse[where]):.6g} "
                f"where the oracle gives {float(want_lse[where]):.6g}")
    line = f"{_FP8}: {what}."
    fits = []
    for mistake, sentence in _FP8_MISTAKES.items():
        qd, kd, vd, v_format = _fp8_inputs(*inputs, mistake=mistake)
        kept = fp8.P_SCALES[v_format.name] if mistake == "p-scale-kept" else 1.0
        alt_o, alt_lse, alt_p = _oracle(qd, kd, vd, group, causal, scale, p_scale_kept=kept)
        if torch.equal(alt_o, want_o) and torch.equal(alt_lse, want_lse):
            continue  # this input does not tell the mistake apart from the right answer
        alt_budget, _ = _fp8_budget(alt_p, vd, alt_o / kept, qd, kd, group, scale, v_format)
        tol_o = 2 * kept * alt_budget
        finite = torch.isfinite(alt_lse)
        lse_ok = bool(torch.where(finite, (lse - alt_lse).abs() <= 2 * lse_budget + 1e-5 * alt_lse.abs(),
                                  lse == alt_lse).all())
        if bool(((o - alt_o).abs() <= tol_o).all()) and lse_ok:
            fits.append(sentence)
    if len(fits) == 1:
        line += f"\n  hint: {fits[0]}"
    return line


EXERCISES = (
    Exercise(_FP8, "The fp8 forward: Q, K and V in 8 bits, descaled in the kernel", _fp8_forward, isolated=True),
)


# -- the learner's fp8 exercises: a format and its scale, the error of a score, the bits of a byte, two choices -----

def _needs_e5m2(amax: float, smallest: float) -> bool:
    """The course's rule (course.models.fp8.choose_format, in two numbers): scaled so that amax lands on 448, does
    the smallest value that must keep its bits (a tensor's 1st percentile) stay at or above e4m3's 2^-6?"""
    return smallest * (fp8.E4M3.max / amax) < fp8.E4M3.smallest_normal


def _fp8_scale_right(amax: float, smallest: float) -> float:
    return (fp8.E5M2 if _needs_e5m2(amax, smallest) else fp8.E4M3).max / amax


_SCALE_MISTAKES = [
    Mistake("every tensor goes to e4m3 here, also those whose values need e5m2's range: when amax / smallest is more "
            "than 448 / 2^-6 = 28,672 (15 binades), the smallest values land below e4m3's normal range once amax "
            "sits on 448, and lose their bits; e5m2 spans 30 binades (its scale maps amax to 57,344).",
            lambda amax, smallest: fp8.E4M3.max / amax),
    Mistake("this scale maps amax to 57,344, e5m2's largest number, also for tensors that fit e4m3 (amax / smallest "
            "within 28,672): those take e4m3, whose extra mantissa bit halves the rounding error, with scale "
            "448 / amax. (Cast to e4m3 with e5m2's scale, everything above 448 would clip.)",
            lambda amax, smallest: fp8.E5M2.max / amax),
    Mistake("this is the descale, amax / max: the scale multiplies the tensor onto the format (x · max / amax), the "
            "kernel multiplies the descale back in.",
            lambda amax, smallest: amax / (fp8.E5M2 if _needs_e5m2(amax, smallest) else fp8.E4M3).max),
    Mistake("a scale of 1 casts the tensor as it is: values beyond the format's largest number clip (torch's cast to "
            "e4m3 saturates at 448) and small ones fall out of the normal range. Scale so that amax lands on the "
            "format's largest number.", lambda amax, smallest: 1.0),
]


def _fp8_scale(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(amax=3.5, smallest=0.01), dict(amax=900.0, smallest=0.5),
                         dict(amax=2.0 ** 17, smallest=1.0), dict(amax=0.004, smallest=1e-9),
                         dict(amax=1.0, smallest=1.0 / 28672), dict(amax=1.0, smallest=1.0 / 28673)]
    return check_values("08.fp8_scale", fn, _fp8_scale_right, args, _SCALE_MISTAKES)


def _score_error_right(mantissa_bits: int, abs_dot: float) -> float:
    u = 2.0 ** -(mantissa_bits + 1)
    return ((1 + u) ** 2 - 1) * abs_dot


_SCORE_MISTAKES = [
    Mistake("2^-M is the whole step between neighbouring numbers near 1; rounding to nearest moves a value by at most "
            "half of it, u = 2^-(M+1).",
            lambda mantissa_bits, abs_dot: ((1 + 2.0 ** -mantissa_bits) ** 2 - 1) * abs_dot),
    Mistake("both q and k are rounded: each product q_d·k_d becomes q_d(1+δ)·k_d(1+ε), off by up to (1+u)² − 1 of "
            "itself, not u.", lambda mantissa_bits, abs_dot: 2.0 ** -(mantissa_bits + 1) * abs_dot),
    Mistake("2u is the first-order bound; the worst case is (1+u)² − 1 = 2u + u² (both roundings in the same "
            "direction), and u² is not negligible when u = 1/16.",
            lambda mantissa_bits, abs_dot: 2 * 2.0 ** -(mantissa_bits + 1) * abs_dot),
]


def _score_error(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(mantissa_bits=3, abs_dot=1.0), dict(mantissa_bits=2, abs_dot=1.0),
                         dict(mantissa_bits=3, abs_dot=37.5), dict(mantissa_bits=10, abs_dot=8.0)]
    return check_values("08.score_error", fn, _score_error_right, args, _SCORE_MISTAKES)


def _decode(bits: int, name: str) -> float:
    """The value of one byte in one format, as torch decodes it."""
    f = fp8.fmt(name)
    return float(torch.tensor([bits], dtype=torch.int32).to(torch.uint8).view(f.dtype).double()[0])


def _decode_as(bits: int, name: str, *, bias_shift: int = 0, fnuz_rules: bool | None = None) -> float:
    """A learner's decoder with one rule changed: the bias off by ``bias_shift``, or the fn/fnuz special values of the
    other family (``fnuz_rules``)."""
    f = fp8.fmt(name)
    fnuz = f.fnuz if fnuz_rules is None else fnuz_rules
    sign, e, m = bits >> 7, (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1), bits & ((1 << f.mantissa_bits) - 1)
    top = (1 << f.exponent_bits) - 1
    if fnuz and bits == 0x80:
        return math.nan
    if not fnuz and f.exponent_bits == 5 and e == top:
        return math.nan if m else math.copysign(math.inf, -sign or 1)
    if not fnuz and f.exponent_bits == 4 and e == top and m == (1 << f.mantissa_bits) - 1:
        return math.nan
    bias = f.bias + bias_shift
    value = (2.0 ** (1 - bias) * m / 2 ** f.mantissa_bits if e == 0 else
             2.0 ** (e - bias) * (1 + m / 2 ** f.mantissa_bits))
    return -value if sign else value


def _same_value(a: float, b: float) -> bool:
    if math.isnan(b):
        return math.isnan(a)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


_BITS_MISTAKES = [
    ("the fnuz formats' exponent bias is one more than the fn formats' (8 for e4m3fnuz, 16 for e5m2fnuz): the same "
     "bits mean half the value.", lambda bits, fmt: _decode_as(bits, fmt, bias_shift=-1 if fp8.fmt(fmt).fnuz else 0)),
    ("in an fnuz format the pattern 0x80 (sign set, all else zero) is the one NaN: fnuz has no negative zero.",
     lambda bits, fmt: -0.0 if fp8.fmt(fmt).fnuz and bits == 0x80 else _decode(bits, fmt)),
    ("these are the fnuz rules in an fn format: e4m3fn and e5m2 have a negative zero (0x80 is -0.0), e5m2 has "
     "infinities (exponent all ones, mantissa 0) and e4m3fn one NaN per sign (S.1111.111).",
     lambda bits, fmt: _decode(bits, fmt) if fp8.fmt(fmt).fnuz else _decode_as(bits, fmt, fnuz_rules=True)),
    ("these are the fn formats' special values in an fnuz format: fnuz has no infinities and no NaN but 0x80, so its "
     "top exponent holds ordinary numbers (e4m3fnuz's largest, 0x7F, is 240; e5m2fnuz's is 57,344).",
     lambda bits, fmt: (math.nan if bits == 0x80 else _decode_as(bits, fmt, fnuz_rules=False)) if fp8.fmt(fmt).fnuz
     else _decode(bits, fmt)),
]


# The bytes the visible check asks in every format: every fourth, and each format's special patterns (zeros, the
# largest numbers, infinities, NaNs); the hidden tests draw from the others.
_VISIBLE_BITS = tuple(sorted(set(range(0, 256, 4)) | {0x01, 0x7B, 0x7D, 0x7E, 0x7F, 0x81, 0xFB, 0xFD, 0xFE, 0xFF}))
_DRAWN_BITS = tuple(b for b in range(256) if b not in _VISIBLE_BITS)


def _fp8_value(fn, arguments: Iterable[dict] | None = None) -> Report:
    """A quarter of the bytes of every format, the special ones among them, by default; the values compared with
    torch's decoding, NaN and the sign of zero included."""
    args = list(arguments) if arguments is not None else [dict(bits=b, fmt=name) for name in fp8.FORMATS
                                                          for b in _VISIBLE_BITS]
    returned, first_wrong = [], None
    for a in args:
        call = f"fp8_value(bits=0x{a['bits']:02X}, fmt={a['fmt']!r})"
        got = learner_call("08.fp8_value", fn, (), dict(a), call)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(f"08.fp8_value: {call} returned {type(got).__name__} {got!r}; expected a float "
                              "(math.nan for NaN, math.inf for infinity).")
        want = _decode(a["bits"], a["fmt"])
        returned.append((a, float(got)))
        if first_wrong is None and not _same_value(float(got), want):
            first_wrong = f"08.fp8_value: {call} returned {float(got)!r}, expected {want!r}"
    if first_wrong is None:
        return Report("08.fp8_value", len(args))
    fits = [text for text, decoder in _BITS_MISTAKES if all(_same_value(g, decoder(**a)) for a, g in returned)]
    raise CheckFailed(first_wrong + (f"\n  hint: {fits[0]}" if len(fits) == 1 else ""))


# Two multiple-choice questions; the answer is the pair of letters chosen, in this order (a pair, not a dict: the
# grader's recording of an answer holds numbers, strings, tensors and sequences of them).
FP8_QUESTIONS = {
    "forward_e4m3": (
        "Why can the forward keep Q, K and V in e4m3 when the gradients of the backward need e5m2?",
        {"a": "Gradients are larger than activations, and e4m3 holds nothing above 448.",
         "b": "A scale fixes a tensor's largest value, not its spread: activations lie within about 15 binades of "
              "their maximum, which e4m3 covers with one more mantissa bit; gradients spread over more binades "
              "than e4m3 spans, and only e5m2's 30 keep their small values from flushing to zero.",
         "c": "Tensor cores multiply e4m3 faster than e5m2.",
         "d": "The backward needs infinities, which e4m3fn lacks."}),
    "fnuz": (
        "What does an fnuz format (e4m3fnuz, e5m2fnuz) change?",
        {"a": "It has no NaN at all.",
         "b": "It stores the same numbers with the bytes in another order.",
         "c": "No negative zero: the pattern 0x80 is its one NaN; no infinities; the exponent bias is one more, so "
              "the same bits mean half the value (e4m3fnuz tops out at 240, not 448).",
         "d": "It saturates at its largest number where the fn format gives NaN."}),
}
_FP8_ANSWERS = {"forward_e4m3": "b", "fnuz": "c"}
_WHY_WRONG = {
    ("forward_e4m3", "a"): "a scale moves any tensor's maximum onto 448: size alone never needs e5m2. It is the "
                           "spread between the largest and the smallest values that matters.",
    ("forward_e4m3", "c"): "Hopper's tensor cores take e4m3 and e5m2 at the same rate.",
    ("forward_e4m3", "d"): "nothing in a backward needs infinities; an infinity in a gradient is an overflow, which a "
                           "scale avoids.",
    ("fnuz", "a"): "fnuz has exactly one NaN, the pattern 0x80 that would be -0.",
    ("fnuz", "b"): "the bit layout is the same (sign, exponent, mantissa); what changes is the bias and the special "
                   "values.",
    ("fnuz", "d"): "saturation is a property of a cast, not of a format; fnuz changes the bias and the special values.",
}


def _fp8_choices(fn) -> Report:
    got = learner_call("08.fp8_choices", fn, (), {}, "fp8_choices()")
    if not (isinstance(got, (tuple, list)) and len(got) == len(FP8_QUESTIONS) and all(isinstance(x, str) for x in got)):
        raise CheckFailed(f"08.fp8_choices: fp8_choices() returned {got!r}; expected a pair of letters, the answers to "
                          f"{' and '.join(repr(k) for k in FP8_QUESTIONS)} in that order.")
    for (key, want), letter in zip(_FP8_ANSWERS.items(), got):
        answer = letter.strip().lower()
        if answer not in FP8_QUESTIONS[key][1]:
            raise CheckFailed(f"08.fp8_choices: the answer to {key!r} is {letter!r}; choose one of "
                              f"{', '.join(FP8_QUESTIONS[key][1])}.")
        if answer != want:
            raise CheckFailed(f"08.fp8_choices: {key!r}: {answer!r} is not the answer.\n  hint: "
                              f"{_WHY_WRONG[key, answer]}")
    return Report("08.fp8_choices", len(_FP8_ANSWERS))


EXERCISES = EXERCISES + (
    Exercise("08.fp8_scale", "An fp8 format and its scale from a tensor's absolute maximum", _fp8_scale),
    Exercise("08.score_error", "The worst error of a score from the formats' mantissa bits", _score_error),
    Exercise("08.fp8_value", "The value of a byte in e4m3fn, e5m2 and their fnuz variants", _fp8_value),
    Exercise("08.fp8_choices", "Why e4m3 forward and e5m2 gradients; what fnuz changes", _fp8_choices),
)

DRAWS = {
    "08.fp8_scale": lambda r: (lambda amax: dict(amax=amax, smallest=amax / 2.0 ** r.uniform(0.5, 28)))(
        10.0 ** r.uniform(-4, 5)),
    "08.score_error": lambda r: dict(mantissa_bits=r.choice((2, 3, 7, 10)), abs_dot=round(r.uniform(0.01, 200), 6)),
    "08.fp8_value": lambda r: dict(bits=r.choice(_DRAWN_BITS), fmt=r.choice(sorted(fp8.FORMATS))),
}

# No course function computes these answers from their arguments (the format rule of course.models.fp8 reads a
# tensor, its bound sums float32 roundings, its grid is ordered by value, not by bits), so none is refused; and
# PyTorch itself decodes a byte (a uint8 tensor viewed as an fp8 dtype), which no policy can take away.
MODEL_POLICY = {
    "08.fp8_scale": ModelPolicy(allowed=("course.models.fp8.fmt",)),
    "08.score_error": ModelPolicy(allowed=("course.models.fp8.fmt",)),
    "08.fp8_value": ModelPolicy(allowed=("course.models.fp8.fmt",)),
}

LADDERS = (
    ladder(_FP8,
           "The kernel multiplies the 8-bit tiles as they are. Which factor do Q8·K8ᵀ and P·V8 each miss?",
           "Q8 = Q / dq and K8 = K / dk per head, so Q Kᵀ = dq·dk · Q8 K8ᵀ: fold dq·dk into qk_scale. O = P V / l = "
           "dv · P V8 / l: fold dv into o_scale, and divide out P_SCALE, the power of two P was cast with.",
           "    q_descale = tl.load(q_descale_ptr + b * n_heads + h)\n"
           "    k_descale = tl.load(k_descale_ptr + b * n_kv_heads + kv_h)\n"
           "    v_descale = tl.load(v_descale_ptr + b * n_kv_heads + kv_h)\n"
           "    qk_scale = sm_scale_log2e * q_descale * k_descale\n"
           "    o_scale = v_descale / P_SCALE"),
    ladder("08.fp8_scale",
           "A scale maps amax onto the format's largest number. Which format's largest number: what decides it?",
           "Once amax sits on the format's max, the smallest value that must keep its bits sits at smallest · max / "
           "amax. For e4m3 that must be at least 2^-6 (its smallest normal): amax / smallest ≤ 448 / 2^-6 = 28,672.",
           "    e4m3 = smallest * (448.0 / amax) >= 2.0 ** -6\n"
           "    return (448.0 if e4m3 else 57344.0) / amax",
           cell="08_capstone/fp8_scale"),
    ladder("08.score_error",
           "Rounding to nearest with M mantissa bits moves a normal number by at most what fraction of itself?",
           "u = 2^-(M+1), half a step. Both factors of each product move, each by at most u of itself, so the "
           "product moves by a factor between (1 − u)² and (1 + u)².",
           "The worst product is off by (1 + u)² − 1 of itself; summed over d: `((1 + u) ** 2 - 1) * abs_dot` with "
           "`u = 2.0 ** -(mantissa_bits + 1)`.",
           cell="08_capstone/score_error"),
    ladder("08.fp8_value",
           "Split the byte: sign = bits >> 7, then E exponent bits, then M mantissa bits. What are E, M and the bias "
           "of each format?",
           "e4m3fn: 4, 3, bias 7; e5m2: 5, 2, bias 15; the fnuz variants: the same fields, bias one more (8, 16). "
           "Exponent field 0 is subnormal: 2^(1-bias) · m / 2^M; otherwise 2^(e-bias) · (1 + m / 2^M).",
           "Special values: e4m3fn: S.1111.111 is NaN, nothing else (no inf); e5m2: exponent all ones is inf "
           "(mantissa 0) or NaN; fnuz: only 0x80 is special (NaN), and there is no -0.",
           cell="08_capstone/fp8_value"),
    ladder("08.fp8_choices",
           "A scale moves a tensor's largest value anywhere. What can a scale not change?",
           "The ratio of its largest to its smallest values: how many binades it spans. Compare that with each "
           "format's max / smallest normal. For fnuz: decode 0x80 and 0x7F in e4m3fnuz.",
           "Activations span fewer binades than e4m3's 15 (b); fnuz keeps the fields and changes the bias and the "
           "special values (c): `return (\"b\", \"c\")`.",
           cell="08_capstone/fp8_choices"),
)
