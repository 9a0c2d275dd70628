"""What a learner calls in a notebook: ``check(exercise_id, their_function)``.

On success it prints one line and returns a :class:`Report`. On failure it raises
:class:`~course.errors.CheckFailed` whose message is a short diagnosis: which case failed, where
the error is, how big it is against the error budget, and a hint. In Jupyter the course shows only
that message (no traceback); the cell still fails, which is what nbgrader grades.

The two engines here are generic; ``course.exercises`` says which cases and hints each exercise uses.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from course.budget import attention_budget, plain_attention
from course.errors import CheckFailed, CourseError, learner_traceback, root_cause
from course.inputs import Case
from course.isolation import note_progress
from course.racecheck import RaceError, racecheck
from course.reference import attention, attention_backward, causal_mask

__all__ = ["Report", "check_attention", "check_backward", "check_softmax", "check_merge_states", "check_values", "ValueHint"]


@dataclass
class Report:
    """What a passing check measured; truthy so ``assert check(...)`` reads naturally."""

    exercise: str
    cases: int
    worst_ratio: float = 0.0
    tier: str = ""
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return True

    def _ipython_display_(self) -> None:
        """check() has already printed its one line; a notebook should not echo the object too."""

    def __str__(self) -> str:
        line = f"✓ {self.exercise}: {self.cases} case{'s' * (self.cases != 1)} passed"
        if self.worst_ratio:
            line += f" (worst error {self.worst_ratio:.2f}× of budget)"
        return line + (f" on the {self.tier}" if self.tier else "")


def _fmt(x: float) -> str:
    return f"{x:.3g}" if (x == 0 or 1e-3 <= abs(x) < 1e5) else f"{x:.2e}"


def _rows(indices: Sequence[int], total: int) -> str:
    shown = ", ".join(str(i) for i in indices[:8]) + (", …" if len(indices) > 8 else "")
    return f"{len(indices)} of {total} rows ({shown})"


def _call(exercise: str, fn: Callable[..., Any], args: tuple, kwargs: dict, case_text: str, race: bool = False) -> Any:
    """Run the learner's code; with ``race`` (interpreter only) also look for races between programs."""
    try:
        with racecheck() if race else contextlib.nullcontext():
            return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except RaceError as exc:
        raise CheckFailed(f"{exercise}: a data race on {case_text}:\n  {exc}") from None
    except CourseError as exc:  # e.g. the CPU runtime stopping a CUDA/Metal kernel: its message says why
        raise CheckFailed(f"{exercise}: on {case_text}:\n  {exc}") from None
    except Exception as exc:  # the learner's code failed: show their frames only
        if isinstance(root_cause(exc), NotImplementedError):
            raise CheckFailed(f"{exercise}: not implemented yet (your code raised NotImplementedError).\n"
                              f"  hint: replace the `raise NotImplementedError()` line with your solution.") from None
        raise CheckFailed(f"{exercise}: your code raised an error on {case_text}:\n{learner_traceback(exc)}") from None


# ----------------------------------------------------------------------------------------------
# Attention outputs
# ----------------------------------------------------------------------------------------------

def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(torch.isfinite(a).all()) and float((a - b).abs().max()) <= tol


def _pattern_hint(out: torch.Tensor, q, k, v, case: Case, scale: float, ref: torch.Tensor, tol: float) -> str | None:
    """Recognise the usual mistakes by recomputing what they would have produced."""
    if not bool(out.any()):
        return "the output is all zeros: is the result ever written (or returned)?"
    if _close(out, v.double().mean(dim=-2, keepdim=True).expand_as(ref), tol):
        return "every row is the plain mean of V: the weights are uniform, so the scores never reached the softmax."
    if scale != 1.0 and _close(out, attention(q, k, v, case.causal, scale=1.0).o, tol):
        return "this is attention without the 1/sqrt(D) scale: multiply the scores by `scale` before the softmax."
    if _close(out, attention(q, k, v, case.causal, scale=scale * scale).o, tol):
        return "the scale was applied twice."
    if case.causal != True and _close(out, attention(q, k, v, True, scale=scale).o, tol):
        return "this is causal attention; this exercise wants every query to see every key."
    if out.shape[-2] > 1 and (_close(out[..., 1:, :], ref[..., :-1, :], tol) or _close(out[..., :-1, :], ref[..., 1:, :], tol)):
        return "row i holds the answer for a neighbouring row: an off-by-one in the row index."
    if _close(out.transpose(-1, -2).contiguous(), ref, tol) if out.shape[-1] == out.shape[-2] else False:
        return "the output is transposed."
    return None


def _compare(head: str, label: str, out: Any, ref: torch.Tensor, budget, dtype: torch.dtype, per_row: bool = False
             ) -> tuple[list[str] | None, list[int]]:
    """Lines saying how ``out`` misses ``ref`` (None when within budget), and the wrong rows.

    Rows are dim -2 of a matrix, or dim -1 when ``per_row`` says there is one value per row (an LSE).
    """
    if not isinstance(out, torch.Tensor):
        return [head, f"  {label} is a {type(out).__name__}; expected a torch.Tensor of shape {tuple(ref.shape)}."], []
    if tuple(out.shape) != tuple(ref.shape):
        hint = " (it looks transposed)" if tuple(out.shape) == tuple(ref.shape)[::-1] and ref.dim() > 1 else ""
        return [head, f"  {label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}{hint}."], []
    out64, ref = out.detach().to("cpu", torch.float64), ref
    if ref.dim() == 1 or per_row:  # a value per row (an LSE): make it a column so rows are rows
        out64, ref = out64[..., None], ref[..., None]
    shaped = lambda t: t.reshape(-1, *t.shape[-2:])  # noqa: E731
    n_rows, n_cols = shaped(ref).shape[-2:]
    # Infinities the reference has (LSE of a row with no visible key) must be matched exactly.
    expected_inf = torch.isinf(ref)
    matched_inf = expected_inf & (out64 == ref)
    finite = torch.isfinite(out64) | matched_inf
    if not bool(finite.all()):
        bad_rows = shaped(~finite).any(dim=0).any(dim=-1).nonzero().flatten().tolist()
        kinds = "NaN" if bool(torch.isnan(out64).any()) else "Inf"
        return [head, f"  {label}: {kinds} in {_rows(bad_rows, n_rows)}."], bad_rows
    if bool((expected_inf & ~matched_inf).any()):
        bad_rows = shaped(expected_inf & ~matched_inf).any(dim=0).any(dim=-1).nonzero().flatten().tolist()
        return [head, f"  {label}: {_rows(bad_rows, n_rows)} should be -inf (those query rows see no key at all)."], bad_rows
    err = torch.where(expected_inf, torch.zeros_like(out64), (out64 - ref).abs())
    worst = float(err.max()) if err.numel() else 0.0
    if worst <= budget.allowed:
        return None, []
    flat = shaped(err)
    bad_rows = (flat > budget.allowed).any(dim=0).any(dim=-1).nonzero().flatten().tolist()
    row, col = divmod(int(flat.amax(dim=0).argmax()), n_cols)
    b = int(flat.amax(dim=(1, 2)).argmax())
    got, want = float(shaped(out64)[b, row, col]), float(shaped(ref)[b, row, col])
    where = f"row {row}" if n_cols == 1 else f"row {row}, column {col}"
    return [
        head,
        f"  {label} wrong in {_rows(bad_rows, n_rows)}",
        f"  worst: {where}: got {_fmt(got)}, expected {_fmt(want)}",
        f"  error {_fmt(worst)} vs budget {_fmt(budget.allowed)} "
        f"({budget.k:g}× the plain {str(dtype).replace('torch.', '')} error {_fmt(budget.plain_error)}, + floor): "
        f"{_fmt(budget.ratio(worst))}× over",
    ], bad_rows


def _diagnose_attention(exercise: str, out: Any, case: Case, q, k, v, scale: float, oracle, budget) -> str | None:
    """None when ``out`` is within budget, else a few lines saying what is wrong."""
    ref = oracle.o
    head = f"{exercise}: wrong answer on {case.describe()}"
    lines, bad_rows = _compare(head, "the output", out, ref, budget, case.dtype)
    if lines is None:
        return None
    if isinstance(out, torch.Tensor) and out.shape == ref.shape:
        out64 = out.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(out64).all()):
            hint = ("exp() overflows on large scores: subtract the running row max before exponentiating."
                    if case.kind == "peaky" else "look for a division by zero (an empty row sum) or exp() of a huge score.")
        else:
            # A mistake recognised at 1% of the answer's scale is still that mistake, just noisy.
            tol = max(budget.allowed * 4, 1e-2 * max(float(ref.abs().max()), 1e-6))
            hint = _pattern_hint(out64, q, k, v, case, scale, ref, tol)
            if hint is None and len(bad_rows) < ref.shape[-2]:
                hint = "only some rows are wrong: check the rows at the edges and any loop bounds over keys."
        if hint:
            lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def _plain_lse(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """LSE computed the textbook way at the inputs' precision: the yardstick for an LSE's error."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def check_attention(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, scale: float | None = None,
                    pass_scale: bool = False, pass_causal: bool = False, with_lse: bool = False, race: bool = False,
                    device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(q, k, v[, causal=...][, scale=...])`` on every case; compare O (and LSE) with the float64 oracle.

    ``with_lse``: ``fn`` returns ``(o, lse)``. ``race``: watch the launch for races between programs
    (Triton's interpreter only). ``tier`` names where a kernel ran; plain PyTorch answers leave it empty.
    """
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        note_progress(case.describe())
        q, kk, v = case.tensors()
        s = scale if scale is not None else 1.0 / math.sqrt(case.d)
        kwargs = ({"causal": case.causal} if pass_causal else {}) | ({"scale": s} if pass_scale else {})
        args = tuple(t.to(device) for t in (q, kk, v))
        result = _call(exercise, fn, args, kwargs, case.describe(), race=race)
        out, lse = result, None
        if with_lse:
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise CheckFailed(f"{exercise}: on {case.describe()} your function returned {type(result).__name__}; "
                                  "expected a pair (o, lse).")
            out, lse = result
        oracle = attention(q, kk, v, case.causal, scale=s)
        budget = attention_budget(oracle.o, plain_attention(q, kk, v, case.causal, scale=s), case.dtype, k=k)
        problem = _diagnose_attention(exercise, out, case, q, kk, v, s, oracle, budget)
        if problem:
            raise CheckFailed(problem)
        worst_ratio = max(worst_ratio, budget.ratio(float((out.detach().cpu().double() - oracle.o).abs().max())))
        if with_lse:
            finite_ref = torch.where(torch.isinf(oracle.lse), torch.zeros_like(oracle.lse), oracle.lse)
            plain = _plain_lse(q, kk, case.causal, s).double()
            plain = torch.where(torch.isinf(plain), torch.zeros_like(plain), plain)
            lse_budget = attention_budget(finite_ref, plain, case.dtype, k=k)
            lines, _ = _compare(f"{exercise}: wrong LSE on {case.describe()}", "the LSE", lse, oracle.lse, lse_budget,
                                case.dtype, per_row=True)
            if lines:
                lines.append("  hint: LSE_i = m_i + log(l_i) with the final running max and sum, in natural-log units; "
                             "if you work in base 2, convert back (divide by log2(e)).")
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


_GRAD_HINTS = {
    "dq": "dK and dV are right but dQ is not: look at how dQ is accumulated across key blocks (and atomics).",
    "dk": "dQ and dV are right but dK is not: dK = scale · dSᵀ Q, summed over every query block.",
    "dv": "dV = Pᵀ dO: check that P is recomputed with the same scale and LSE as the forward pass.",
}


def check_backward(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, race: bool = False,
                   device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(q, k, v, o, lse, do, causal=..., scale=...)`` → (dq, dk, dv); compare with the float64 oracle.

    O and LSE come from the oracle (O rounded to the inputs' dtype, LSE in float32), so only the
    backward pass is under test. The budget is k × the error of the sloppier of two plain PyTorch
    backwards at the inputs' precision: autograd through textbook attention, and the rebuild of P
    from the given LSE that FlashAttention itself does.
    """
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        note_progress(case.describe())
        q, kk, v = case.tensors()
        s = 1.0 / math.sqrt(case.d)
        do = _random_like(case, tuple(q.shape[:-1]) + (v.shape[-1],), salt=1)
        forward = attention(q, kk, v, case.causal, scale=s)
        args = tuple(t.to(device) for t in (q, kk, v, forward.o.to(case.dtype), forward.lse.float(), do))
        result = _call(exercise, fn, args, dict(causal=case.causal, scale=s), case.describe(), race=race)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            raise CheckFailed(f"{exercise}: on {case.describe()} your function returned {type(result).__name__}; "
                              "expected three gradients (dq, dk, dv).")
        oracle = attention_backward(q, kk, v, do, case.causal, scale=s)
        autograd = _plain_grads(q, kk, v, do, case.causal, s)
        rebuilt = _plain_rebuild_grads(*(t.cpu() for t in args), case.causal, s)
        failures = []
        for name, got, want, plain_a, plain_b in zip(("dq", "dk", "dv"), result, oracle, autograd, rebuilt):
            # The budget follows the sloppier of the two textbook ways to get this gradient.
            budget = max(attention_budget(want, plain_a, case.dtype, k=k), attention_budget(want, plain_b, case.dtype, k=k),
                         key=lambda b: b.allowed)
            lines, _ = _compare(f"{exercise}: wrong {name} on {case.describe()}", name, got, want, budget, case.dtype)
            if lines:
                failures.append((name, lines))
            else:
                worst_ratio = max(worst_ratio, budget.ratio(float((got.detach().cpu().double() - want).abs().max())))
        if failures:
            lines = failures[0][1]
            wrong = [name for name, _ in failures]
            if len(wrong) > 1:
                lines.append(f"  also wrong: {', '.join(wrong[1:])}")
            elif wrong[0] in _GRAD_HINTS:
                lines.append(f"  hint: {_GRAD_HINTS[wrong[0]]}")
            raise CheckFailed("\n".join(lines))
    return Report(exercise, len(cases), worst_ratio, tier)


# ----------------------------------------------------------------------------------------------
# Softmax and its partial states
# ----------------------------------------------------------------------------------------------

def _scores(case: Case) -> torch.Tensor:
    """Scaled scores Q Kᵀ/sqrt(D) of a case, float64: realistic rows for a softmax (peaky ones too)."""
    q, k, _ = case.tensors()
    return (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(case.d)


def check_softmax(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, race: bool = False,
                  device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(x)`` on rows of attention scores (Nq × Nk) and compare with a float64 softmax."""
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        text = f"a {case.n_q} × {case.n_k} score matrix ({case.kind}, {str(case.dtype).replace('torch.', '')})"
        note_progress(text)
        x64 = _scores(case)
        x = x64.to(case.dtype)
        out = _call(exercise, fn, (x.to(device),), {}, text, race=race)
        ref = torch.softmax(x.double(), dim=-1)
        budget = attention_budget(ref, torch.softmax(x, dim=-1), case.dtype, k=k)
        lines, bad_rows = _compare(f"{exercise}: wrong answer on {text}", "the softmax", out, ref, budget, case.dtype)
        if lines:
            if isinstance(out, torch.Tensor) and out.shape == ref.shape and bool(torch.isfinite(out).all()):
                sums = out.detach().double().sum(dim=-1)
                if float((sums - 1).abs().max()) > 1e-3:
                    lines.append("  hint: rows do not sum to 1: divide by the final running sum l, after the max "
                                 "has stopped growing (and rescale l whenever the max grows).")
            elif case.kind == "peaky":
                lines.append("  hint: exp() overflows on large scores: subtract the running max before exponentiating.")
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
            text = f"{case.n_q} score rows of {n} columns ({case.kind}) split after column {cut}"
            note_progress(text)
            (m_a, l_a), (m_b, l_b) = _state(x[..., :cut]), _state(x[..., cut:])
            result = _call(exercise, fn, tuple(t.to(device) for t in (m_a, l_a, m_b, l_b)), {}, text, race=race)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise CheckFailed(f"{exercise}: on {text} your function returned {type(result).__name__}; expected (m, l).")
            m, l = (torch.as_tensor(t).detach().cpu().double() for t in result)
            ref = torch.logsumexp(x, dim=-1)
            lse = m + torch.log(l)
            plain = m_a.double().maximum(m_b.double())  # merging in float32 costs a few ulps of the LSE at most
            budget = attention_budget(ref, ref + 4 * torch.finfo(torch.float32).eps * plain.abs().clamp(min=1), torch.float32)
            lines, _ = _compare(f"{exercise}: wrong merged state on {text}", "m + log(l)", lse, ref, budget, torch.float32,
                                per_row=True)
            if lines:
                if bool(torch.isnan(lse).any()):
                    lines.append("  hint: an empty half has m = -inf and l = 0; exp(-inf - (-inf)) is NaN, so take the "
                                 "new max first and rescale only with finite differences.")
                else:
                    lines.append("  hint: both sums must be rescaled to the new max: l = l_a·exp(m_a - m) + l_b·exp(m_b - m).")
                raise CheckFailed("\n".join(lines))
            worst_ratio = max(worst_ratio, budget.ratio(float((lse - ref).abs().max())))
            checked += 1
        # Two empty states merge into an empty state, with no NaN.
        empty = (torch.full((3,), float("-inf")), torch.zeros(3))
        m, l = (torch.as_tensor(t).detach().cpu() for t in _call(exercise, fn, tuple(t.to(device) for t in empty * 2), {},
                                                                 "two empty states", race=race))
        if not (bool(torch.isneginf(m).all()) and bool((l == 0).all())):
            raise CheckFailed(f"{exercise}: merging two empty states (m = -inf, l = 0) gave m = {m.tolist()}, l = {l.tolist()}; "
                              "expected (-inf, 0).\n  hint: guard the rescale factor exp(m_a - m) when m is -inf.")
    return Report(exercise, checked, worst_ratio, tier)


# ----------------------------------------------------------------------------------------------
# Numbers (FLOPs, bytes, …)
# ----------------------------------------------------------------------------------------------

ValueHint = Callable[[float, float, dict], "str | None"]


def check_values(exercise: str, fn: Callable[..., Any], expected: Callable[..., float], arguments: Iterable[dict],
                 hints: Sequence[ValueHint] = (), rel: float = 1e-9) -> Report:
    """Call ``fn(**args)`` for each argument set and compare with ``expected(**args)``."""
    arguments = list(arguments)
    for args in arguments:
        call = ", ".join(f"{name}={value}" for name, value in args.items())
        got = _call(exercise, fn, (), dict(args), f"{fn.__name__}({call})")
        want = expected(**args)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(f"{exercise}: {fn.__name__}({call}) returned {type(got).__name__} {got!r}; expected a number.")
        if math.isclose(got, want, rel_tol=rel, abs_tol=0.0):
            continue
        lines = [f"{exercise}: {fn.__name__}({call}) returned {_fmt(got)}, expected {_fmt(want)}"]
        if want and got:
            lines[0] += f" ({_fmt(got / want)}× the right value)"
        for hint in hints:
            text = hint(float(got), float(want), args)
            if text:
                lines.append(f"  hint: {text}")
                break
        raise CheckFailed("\n".join(lines))
    return Report(exercise, len(arguments))
