"""Attention outputs and gradients against the float64 oracle: :func:`check_attention` (O, and the LSE) and
:func:`check_backward` (dQ, dK, dV), within the error budget (:mod:`course.grading.budget`), with a hint when a
known mistake (:mod:`course.grading.known_mistakes`) gives exactly the learner's answer."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch

from course.errors import CheckFailed
from course.grading.budget import attention_budget, plain_attention
from course.grading.comparison import Report, compare_tensors, learner_call, quietly
from course.grading.isolation import note_progress
from course.grading.known_mistakes import (backward_hint, lse_hint, masked_scores, nonfinite_hint, pattern_hint,
                                           reproduction_tolerance)
from course.grading.racecheck import Unwritten, Written
from course.inputs import Case
from course.reference import attention, attention_backward, causal_mask
from course.tracks import table

__all__ = ["check_attention", "check_backward"]


def _diagnose_attention(exercise: str, out: Any, case: Case, q, k, v, scale: float, oracle, budget,
                        explicit_scale: bool = False, key_blocks: bool = True) -> str | None:
    """None when ``out`` is within budget, else a few lines saying what is wrong."""
    ref = oracle.o
    head = f"{exercise}: wrong answer on {case.describe(scale if explicit_scale else None)}"
    lines, bad_rows = compare_tensors(head, "the output", out, ref, budget, case.dtype)
    if lines is None:
        return None
    if isinstance(out, torch.Tensor) and out.shape == ref.shape:
        out64 = out.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(out64).all()):
            hint = nonfinite_hint(out64, q, k, v, case, scale, blocked=key_blocks)
        else:
            # A mistake recognised within a small part of the answer's scale is still that mistake, just noisy.
            tol = max(budget.allowed * 4, reproduction_tolerance(case.dtype) * max(float(ref.abs().max()), 1e-6))
            hint = pattern_hint(out64, q, k, v, case, scale, ref, tol, explicit_scale)
        if hint:
            lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def _plain_lse(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """LSE computed the textbook way at the inputs' precision: the yardstick for an LSE's error."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


@quietly
def check_attention(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, scale: float | None = None,
                    pass_scale: bool = False, pass_causal: bool = False, with_lse: bool = False, race: bool = False,
                    device: str = "cpu", k: float = 2.0, tier: str = "", key_blocks: bool | None = None) -> Report:
    """Call ``fn(q, k, v[, causal=...][, scale=...])`` on every case; compare O (and LSE) with the float64 oracle.

    ``with_lse``: ``fn`` returns ``(o, lse)``. ``race``: run Triton's interpreter checks on the launches
    (accesses out of bounds, races between programs) and require every element of an ``o`` a kernel was
    given to fill to have been stored. ``tier`` names where a kernel ran; plain PyTorch answers leave it empty.
    Every message about a case names the scale whenever ``fn`` is given one (``pass_scale``) or the
    check uses one other than 1/sqrt(D): what the message names is what reproduces the case.
    ``key_blocks``: the answer walks the keys in blocks and divides by l at the end (an output NaN in every row then
    gets a hint about l); None: what the exercise's kernel row declares, or True for an exercise with no row.
    """
    cases = list(cases)
    if key_blocks is None:
        row = table.find(exercise)
        key_blocks = row.key_blocks if row is not None else True
    worst_ratio = 0.0
    for case in cases:
        s = scale if scale is not None else 1.0 / math.sqrt(case.d)
        named = s if (pass_scale or scale is not None) else None
        text = case.describe(named)
        note_progress(text)
        q, kk, v = case.tensors()
        kwargs = ({"causal": case.causal} if pass_causal else {}) | ({"scale": s} if pass_scale else {})
        args = tuple(t.to(device) for t in (q, kk, v))
        written = Written() if race else None
        result = learner_call(exercise, fn, args, kwargs, text, race=race, written=written)
        out, lse = result, None
        if with_lse:
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise CheckFailed(f"{exercise}: on {text} your function returned {type(result).__name__}; "
                                  "expected a pair (o, lse).")
            out, lse = result
        if written is not None:
            try:
                written.require({"o": out})  # only an `o` the kernel was given to fill: never PyTorch's own
            except Unwritten as exc:
                raise CheckFailed(f"{exercise}: part of the output is never written on {text}:\n  {exc}") from None
        oracle = attention(q, kk, v, case.causal, scale=s)
        budget = attention_budget(oracle.o, plain_attention(q, kk, v, case.causal, scale=s), case.dtype, k=k)
        problem = _diagnose_attention(exercise, out, case, q, kk, v, s, oracle, budget, explicit_scale=named is not None,
                                      key_blocks=key_blocks)
        if problem:
            raise CheckFailed(problem)
        worst_ratio = max(worst_ratio, budget.ratio(float((out.detach().cpu().double() - oracle.o).abs().max())))
        if with_lse:
            finite_ref = torch.where(torch.isinf(oracle.lse), torch.zeros_like(oracle.lse), oracle.lse)
            plain = _plain_lse(q, kk, case.causal, s).double()
            plain = torch.where(torch.isinf(plain), torch.zeros_like(plain), plain)
            lse_budget = attention_budget(finite_ref, plain, case.dtype, k=k)
            lines, _ = compare_tensors(f"{exercise}: wrong LSE on {text}", "the LSE", lse, oracle.lse, lse_budget,
                                case.dtype, per_row=True)
            if lines:
                row_max = masked_scores(q.double() @ kk.double().transpose(-1, -2),
                                  causal_mask(case.n_q, case.n_k) if case.causal else None, s).amax(dim=-1)
                tol = max(lse_budget.allowed * 4, reproduction_tolerance(case.dtype) * max(float(finite_ref.abs().max()), 1.0))
                hint = lse_hint(lse, oracle.lse, row_max, tol, reproduction_tolerance(case.dtype))
                if hint:
                    lines.append(f"  hint: {hint}")
                raise CheckFailed("\n".join(lines))
    return Report(exercise, len(cases), worst_ratio, tier)


def _random_like(case: Case, shape: tuple[int, ...], salt: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(case.seed * 7919 + salt)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(case.dtype)


def _plain_grads(q, k, v, do, causal: bool, scale: float) -> tuple[torch.Tensor, ...]:
    """Gradients by autograd through textbook attention at the inputs' precision (one yardstick)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    plain_attention(*leaves, causal, scale=scale).backward(do)
    return tuple(t.grad.nan_to_num(0.0) for t in leaves)


def _plain_rebuild_grads(q, k, v, o, lse, do, causal: bool, scale: float) -> tuple[torch.Tensor, ...]:
    """The backward FlashAttention does, written plainly at the inputs' precision (the other yardstick).

    P is rebuilt from the saved float32 LSE rather than normalised row by row, so it carries the
    LSE's rounding: on peaky rows (LSE in the hundreds) that alone is a relative error of ~1e-5 in
    P, which autograd's softmax does not have and no kernel given this LSE can avoid.
    """
    dt = q.dtype
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    finite_lse = torch.where(torch.isinf(lse), torch.full_like(lse, float("inf")), lse)
    p = torch.exp(s - finite_lse[..., None]).to(dt)
    dv = p.transpose(-1, -2) @ do
    dp = (do @ v.transpose(-1, -2)).float()
    delta = (do.float() * o.float()).sum(dim=-1, keepdim=True)
    ds = (p.float() * (dp - delta)).to(dt)
    return (ds @ k) * scale, (ds.transpose(-1, -2) @ q) * scale, dv


@quietly
def check_backward(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, scale: float | None = None,
                   race: bool = False, device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(q, k, v, o, lse, do, causal=..., scale=...)`` → (dq, dk, dv); compare with the float64 oracle.

    O and LSE come from the oracle (O rounded to the inputs' dtype, LSE in float32), so only the
    backward pass is under test. The budget is k × the error of the sloppier of two plain PyTorch
    backwards at the inputs' precision: autograd through textbook attention, and the rebuild of P
    from the given LSE that FlashAttention itself does. ``scale`` (default 1/sqrt(D)) is the softmax
    scale of the forward pass, passed to ``fn`` always, so every message about a case names it.
    """
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        s = scale if scale is not None else 1.0 / math.sqrt(case.d)
        text = case.describe(s)
        note_progress(text)
        q, kk, v = case.tensors()
        do = _random_like(case, tuple(q.shape[:-1]) + (v.shape[-1],), salt=1)
        forward = attention(q, kk, v, case.causal, scale=s)
        args = tuple(t.to(device) for t in (q, kk, v, forward.o.to(case.dtype), forward.lse.float(), do))
        result = learner_call(exercise, fn, args, dict(causal=case.causal, scale=s), text, race=race)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            raise CheckFailed(f"{exercise}: on {text} your function returned {type(result).__name__}; "
                              "expected three gradients (dq, dk, dv).")
        oracle = attention_backward(q, kk, v, do, case.causal, scale=s)
        autograd = _plain_grads(q, kk, v, do, case.causal, s)
        rebuilt = _plain_rebuild_grads(*(t.cpu() for t in args), case.causal, s)
        failures, tols = [], {}
        for name, got, want, plain_a, plain_b in zip(("dq", "dk", "dv"), result, oracle, autograd, rebuilt):
            # The budget follows the sloppier of the two textbook ways to get this gradient.
            budget = max(attention_budget(want, plain_a, case.dtype, k=k), attention_budget(want, plain_b, case.dtype, k=k),
                         key=lambda b: b.allowed)
            tols[name] = max(budget.allowed * 4, reproduction_tolerance(case.dtype) * max(float(want.abs().max()), 1e-6))
            lines, _ = compare_tensors(f"{exercise}: wrong {name} on {text}", name, got, want, budget, case.dtype)
            if lines:
                failures.append((name, lines))
            else:
                worst_ratio = max(worst_ratio, budget.ratio(float((got.detach().cpu().double() - want).abs().max())))
        if failures:
            lines = failures[0][1]
            wrong = [name for name, _ in failures]
            if len(wrong) > 1:
                lines.append(f"  also wrong: {', '.join(wrong[1:])}")
            else:
                lines.append(f"  {' and '.join(n for n in ('dq', 'dk', 'dv') if n not in wrong)} are right.")
            shaped = all(isinstance(g, torch.Tensor) and g.shape == w.shape for g, w in zip(result, oracle))
            hint = backward_hint(result, oracle, args, case, s, wrong, tols) if shaped else None
            if hint:
                lines.append(f"  hint: {hint}")
            raise CheckFailed("\n".join(lines))
    return Report(exercise, len(cases), worst_ratio, tier)
