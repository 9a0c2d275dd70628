"""A softmax, merged softmax states and numbers (FLOPs, bytes, ...) against the right values: :func:`check_softmax`,
:func:`check_merge_states`, :func:`check_values` with the :class:`Mistake` s a lesson names for its formula."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from course.errors import CheckFailed
from course.grading.budget import attention_budget
from course.grading.comparison import Report, compare_tensors, fmt, fmt_apart, learner_call, quietly
from course.grading.isolation import note_progress
from course.grading.known_mistakes import BLOCKS, Guess, fits, paddings, pick_hint, reproduction_tolerance
from course.inputs import Case

__all__ = ["check_softmax", "check_merge_states", "check_values", "Mistake"]


def _scores(case: Case) -> torch.Tensor:
    """Scaled scores Q Kᵀ/sqrt(D) of a case, float64: realistic rows for a softmax (peaky ones too)."""
    q, k, _ = case.tensors()
    return (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(case.d)


def _softmax_hint(out: torch.Tensor, x: torch.Tensor, case: Case, ref: torch.Tensor, tol: float) -> str | None:
    """A hint when a known softmax mistake gives exactly the learner's output, else a fact the output shows."""
    out = out.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(out).all()):
        if case.kind != "peaky":
            return None
        bad = ~torch.isfinite(out)
        # exp() without the max: the entries whose exp passes the range become inf / inf, the rest 0.
        for dtype in {torch.float32, case.dtype}:
            if bool(torch.equal(bad, torch.isinf(torch.exp(x.to(dtype))))):
                return "exp() overflows on large scores: subtract the running max before exponentiating."
        return None
    n = x.shape[-1]
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - m)

    def no_rescale(block: int) -> torch.Tensor:
        l = torch.zeros_like(m)
        m_run = torch.full_like(m, float("-inf"))
        for j in range(0, n, block):
            m_run = torch.maximum(m_run, x[..., j:j + block].amax(dim=-1, keepdim=True))
            l = l + torch.exp(x[..., j:j + block] - m_run).sum(dim=-1, keepdim=True)
        return e / l

    def padded(pad: int) -> torch.Tensor:
        top = m.clamp(min=0.0)
        return torch.exp(x - top) / (torch.exp(x - top).sum(dim=-1, keepdim=True) + pad * torch.exp(-top))

    guesses = [
        Guess("each row is the right softmax times exp(m), m the row's max: the second pass exponentiates x without "
               "subtracting the max that l was summed against; use exp(x − m) / l.", lambda: ref * torch.exp(m)),
        Guess("the division by the row sum is missing: y = exp(x − m) / l.", lambda: e),
    ] + [Guess("l is not rescaled when the running max grows: multiply it by exp(m_old − m_new) before adding a "
                "block's terms.", lambda b=b: no_rescale(b)) for b in BLOCKS if b < n] + [
        Guess("the padding of the last block counts in l (loaded as 0 instead of −inf): load the columns past the end "
               "of the row as −inf.", lambda p=p: padded(p)) for p in paddings(n)]
    rel = reproduction_tolerance(case.dtype)
    hint = pick_hint([g for g in guesses if fits(out, g.output(), ref, tol, rel)])
    if hint is None:
        sums = out.sum(dim=-1, keepdim=True)
        if fits(out, ref * sums, ref, tol, rel):
            shown = ", ".join(fmt(float(t)) for t in sums.flatten()[:3])
            more = ", …" if sums.numel() > 3 else ""
            hint = (f"every row is the right softmax times a constant (the rows sum to {shown}{more}, not 1): the "
                    "exponentials are right; the row sum they are divided by is not.")
    return hint


@quietly
def check_softmax(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, race: bool = False,
                  device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(x)`` on rows of attention scores (Nq × Nk) and compare with a float64 softmax."""
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        text = f"the {case.n_q} × {case.n_k} scores Q·Kᵀ/sqrt(D) of {case.describe()}"
        note_progress(text)
        x64 = _scores(case)
        x = x64.to(case.dtype)
        out = learner_call(exercise, fn, (x.to(device),), {}, text, race=race)
        ref = torch.softmax(x.double(), dim=-1)
        budget = attention_budget(ref, torch.softmax(x, dim=-1), case.dtype, k=k)
        lines, bad_rows = compare_tensors(f"{exercise}: wrong answer on {text}", "the softmax", out, ref, budget, case.dtype)
        if lines:
            if isinstance(out, torch.Tensor) and out.shape == ref.shape:
                tol = max(budget.allowed * 4, reproduction_tolerance(case.dtype) * float(ref.abs().max()))
                hint = _softmax_hint(out, x.double(), case, ref, tol)
                if hint:
                    lines.append(f"  hint: {hint}")
            raise CheckFailed("\n".join(lines))
        worst_ratio = max(worst_ratio, budget.ratio(float((out.detach().cpu().double() - ref).abs().max())))
    return Report(exercise, len(cases), worst_ratio, tier)


def _state(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, l) of rows of x in float32; an empty row gives (-inf, 0)."""
    if x.shape[-1] == 0:
        shape = x.shape[:-1]
        return torch.full(shape, float("-inf")), torch.zeros(shape)
    m = x.amax(dim=-1)
    return m.float(), torch.exp(x - m[..., None]).sum(dim=-1).float()


def _merge_hint(lse: torch.Tensor, states: tuple[torch.Tensor, ...], ref: torch.Tensor, tol: float) -> str | None:
    """A hint when a known merge mistake gives the learner's m + log(l) in every row."""
    m_a, l_a, m_b, l_b = (t.double() for t in states)
    if bool(torch.isnan(lse).any()):
        empty_half = torch.isneginf(m_a) | torch.isneginf(m_b)
        if bool(empty_half[torch.isnan(lse)].all()):
            return ("the NaN rows are the rows where one half is empty (m = −inf, l = 0): an exp() of −inf − (−inf) "
                    "or ∞ · 0 gives NaN there. Take the new max m = max(m_a, m_b) first and rescale with exp(m_a − m), "
                    "exp(m_b − m).")
        return None
    m = torch.maximum(m_a, m_b)
    scale_a, scale_b = torch.exp(m_a - m), torch.exp(m_b - m)
    guesses = [
        Guess("l_b is not rescaled to the new max: l = l_a·exp(m_a − m) + l_b·exp(m_b − m).",
               lambda: m + torch.log(l_a * scale_a + l_b)),
        Guess("l_a is not rescaled to the new max: l = l_a·exp(m_a − m) + l_b·exp(m_b − m).",
               lambda: m + torch.log(l_a + l_b * scale_b)),
        Guess("the sums are added as they are, as if they shared a max: rescale each to the new max first, "
               "l = l_a·exp(m_a − m) + l_b·exp(m_b − m).", lambda: m + torch.log(l_a + l_b)),
    ]
    return pick_hint([g for g in guesses if fits(lse, g.output(), ref, tol, 1e-3)])


@quietly
def check_merge_states(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, race: bool = False,
                       device: str = "cpu", tier: str = "") -> Report:
    """Call ``fn(m_a, l_a, m_b, l_b)`` → (m, l) on the states of two halves of score rows.

    The merged state must describe the whole row: m + log(l) is compared with the float64
    logsumexp. Halves are cut at several places (including an empty half), so (-inf, 0) states occur.
    """
    cases = list(cases)
    worst_ratio = 0.0
    checked = 0
    for case in cases:
        x = _scores(case)
        n = x.shape[-1]
        for cut in sorted({0, n // 3, n // 2, n}):
            text = f"the score rows Q·Kᵀ/sqrt(D) of {case.describe()}, split after column {cut} of {n}"
            note_progress(text)
            (m_a, l_a), (m_b, l_b) = _state(x[..., :cut]), _state(x[..., cut:])
            result = learner_call(exercise, fn, tuple(t.to(device) for t in (m_a, l_a, m_b, l_b)), {}, text, race=race)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise CheckFailed(f"{exercise}: on {text} your function returned {type(result).__name__}; expected (m, l).")
            m, l = (torch.as_tensor(t).detach().cpu().double() for t in result)
            ref = torch.logsumexp(x, dim=-1)
            lse = m + torch.log(l)
            plain = m_a.double().maximum(m_b.double())  # merging in float32 costs a few ulps of the LSE at most
            budget = attention_budget(ref, ref + 4 * torch.finfo(torch.float32).eps * plain.abs().clamp(min=1), torch.float32)
            lines, _ = compare_tensors(f"{exercise}: wrong merged state on {text}", "m + log(l)", lse, ref, budget, torch.float32,
                                per_row=True)
            if lines:
                if lse.shape == ref.shape:
                    tol = max(budget.allowed * 4, 1e-3 * max(float(ref.abs().max()), 1.0))
                    hint = _merge_hint(lse, (m_a, l_a, m_b, l_b), ref, tol)
                    if hint:
                        lines.append(f"  hint: {hint}")
                raise CheckFailed("\n".join(lines))
            worst_ratio = max(worst_ratio, budget.ratio(float((lse - ref).abs().max())))
            checked += 1
        # Two empty states merge into an empty state, with no NaN.
        empty = (torch.full((3,), float("-inf")), torch.zeros(3))
        m, l = (torch.as_tensor(t).detach().cpu() for t in learner_call(exercise, fn, tuple(t.to(device) for t in empty * 2), {},
                                                                 "two empty states", race=race))
        if not (bool(torch.isneginf(m).all()) and bool((l == 0).all())):
            message = (f"{exercise}: merging two empty states (m = -inf, l = 0) gave m = {m.tolist()}, l = {l.tolist()}; "
                       "expected (-inf, 0).")
            if bool(torch.isneginf(m).all()) and bool(torch.isnan(l).any()):
                message += ("\n  hint: with m = −inf, the rescale factor exp(m_a − m) is exp(−inf − (−inf)) = NaN: "
                            "guard it when m is −inf.")
            raise CheckFailed(message)
    return Report(exercise, checked, worst_ratio, tier)


@dataclass(frozen=True)
class Mistake:
    """A mistake in a formula, as the function a learner making it would write, and the hint that names it."""

    text: str
    formula: Callable[..., float]


def _value_hint(mistakes: Sequence[Mistake], returned: list[tuple[dict, float]], rel: float) -> str | None:
    """The text of the one mistake whose formula gives every value the learner returned; None otherwise.

    Evidence is all the values: a mistake that fits the first wrong value but not another is not this
    learner's. Two mistakes can fit every value when their formulas agree on every argument set (counting
    one matmul, and counting a multiply-add as 1 FLOP, are both half the FLOPs everywhere); the check then
    cannot tell them apart and shows no hint. An exercise where that happens lists the two as one
    Mistake whose text is true of both.
    """
    def gives(mistake: Mistake, args: dict, got: float) -> bool:
        try:
            value = float(mistake.formula(**args))
        except Exception:  # a formula that cannot take these arguments is no evidence
            return False
        return math.isclose(got, value, rel_tol=max(rel, 1e-12), abs_tol=0.0)

    texts = {m.text for m in mistakes if all(gives(m, args, got) for args, got in returned)}
    return texts.pop() if len(texts) == 1 else None


@quietly
def check_values(exercise: str, fn: Callable[..., Any], expected: Callable[..., float], arguments: Iterable[dict],
                 mistakes: Sequence[Mistake] = (), rel: float = 1e-9) -> Report:
    """Call ``fn(**args)`` for each argument set and compare with ``expected(**args)``.

    The function is called on every argument set before anything is reported, so a hint can rest on
    all of its values (see :func:`_value_hint`); the message names the first set whose value is wrong.
    """
    arguments = list(arguments)
    returned: list[tuple[dict, float]] = []
    first_wrong: tuple[str, float, float] | None = None
    for args in arguments:
        call = ", ".join(f"{name}={value}" for name, value in args.items())
        try:
            got = learner_call(exercise, fn, (), dict(args), f"{fn.__name__}({call})")
        except CheckFailed:
            if first_wrong is None:
                raise
            break  # the wrong value found first is the news; without every value there is no hint
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            if first_wrong is None:
                raise CheckFailed(f"{exercise}: {fn.__name__}({call}) returned {type(got).__name__} {got!r}; "
                                  "expected a number.")
            break
        returned.append((args, float(got)))
        want = expected(**args)
        if first_wrong is None and not math.isclose(got, want, rel_tol=rel, abs_tol=0.0):
            first_wrong = (call, float(got), float(want))
    if first_wrong is None:
        return Report(exercise, len(arguments))
    call, got, want = first_wrong
    lines = ["{}: {}({}) returned {}, expected {}".format(exercise, fn.__name__, call, *fmt_apart(got, want))]
    if want and got:
        lines[0] += f" ({fmt_apart(got / want, 1.0)[0]}× the right value)"
    hint = _value_hint(mistakes, returned, rel) if len(returned) == len(arguments) else None
    if hint:
        lines.append(f"  hint: {hint}")
    raise CheckFailed("\n".join(lines))
