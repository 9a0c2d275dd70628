"""What a learner calls in a notebook: ``check(exercise_id, their_function)``.

On success it prints one line and returns a :class:`Report`. On failure it raises
:class:`~course.errors.CheckFailed` whose message is a short diagnosis: which case failed, where
the error is, how big it is against the error budget, and a hint. In Jupyter the course shows only
that message (no traceback); the cell still fails, which is what nbgrader grades.

The two engines here are generic; ``course.exercises`` says which cases and hints each exercise uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from .budget import attention_budget, plain_attention
from .errors import CheckFailed, learner_traceback, root_cause
from .inputs import Case
from .isolation import note_progress
from .reference import attention

__all__ = ["Report", "check_attention", "check_values", "ValueHint"]


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


def _call(exercise: str, fn: Callable[..., Any], args: tuple, kwargs: dict, case_text: str) -> Any:
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
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


def _diagnose_attention(exercise: str, out: Any, case: Case, q, k, v, scale: float, oracle, budget) -> str | None:
    """None when ``out`` is within budget, else a few lines saying what is wrong."""
    ref = oracle.o
    head = f"{exercise}: wrong answer on {case.describe()}"
    if not isinstance(out, torch.Tensor):
        return f"{head}\n  your function returned {type(out).__name__}; expected a torch.Tensor of shape {tuple(ref.shape)}."
    if tuple(out.shape) != tuple(ref.shape):
        hint = " (it looks transposed)" if tuple(out.shape) == tuple(ref.shape)[::-1] else ""
        return f"{head}\n  output shape {tuple(out.shape)}, expected {tuple(ref.shape)}{hint}."
    out64 = out.detach().to("cpu", torch.float64)
    n_rows = ref.shape[-2]
    finite = torch.isfinite(out64)
    if not bool(finite.all()):
        bad_rows = (~finite).reshape(-1, n_rows, ref.shape[-1]).any(dim=0).any(dim=-1).nonzero().flatten().tolist()
        kinds = "NaN" if bool(torch.isnan(out64).any()) else "Inf"
        hint = ("exp() overflows on large scores: subtract the running row max before exponentiating."
                if case.kind == "peaky" else "look for a division by zero (an empty row sum) or exp() of a huge score.")
        return f"{head}\n  {kinds} in {_rows(bad_rows, n_rows)}.\n  hint: {hint}"
    err = (out64 - ref).abs()
    worst = float(err.max())
    if worst <= budget.allowed:
        return None
    flat = err.reshape(-1, n_rows, ref.shape[-1])
    bad_rows = (flat > budget.allowed).any(dim=0).any(dim=-1).nonzero().flatten().tolist()
    idx = divmod(int(flat.amax(dim=0).argmax()), ref.shape[-1])
    b = int(flat.amax(dim=(1, 2)).argmax())
    got, want = float(out64.reshape(flat.shape)[b, idx[0], idx[1]]), float(ref.reshape(flat.shape)[b, idx[0], idx[1]])
    lines = [
        head,
        f"  wrong: {_rows(bad_rows, n_rows)}",
        f"  worst: row {idx[0]}, column {idx[1]}: got {_fmt(got)}, expected {_fmt(want)}",
        f"  error {_fmt(worst)} vs budget {_fmt(budget.allowed)} "
        f"({budget.k:g}× the plain {str(case.dtype).replace('torch.', '')} error {_fmt(budget.plain_error)}, + floor): "
        f"{_fmt(budget.ratio(worst))}× over",
    ]
    # A mistake recognised at 1% of the answer's scale is still that mistake, just noisy.
    tol = max(budget.allowed * 4, 1e-2 * max(float(ref.abs().max()), 1e-6))
    hint = _pattern_hint(out64, q, k, v, case, scale, ref, tol)
    if hint is None and len(bad_rows) < n_rows:
        hint = "only some rows are wrong: check the rows at the edges and any loop bounds over keys."
    if hint:
        lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def check_attention(exercise: str, fn: Callable[..., Any], cases: Iterable[Case], *, scale: float | None = None,
                    pass_scale: bool = False, device: str = "cpu", k: float = 2.0, tier: str = "") -> Report:
    """Call ``fn(q, k, v[, scale=...])`` on every case and compare O with the float64 oracle.

    ``tier`` names where a kernel ran, for the report; plain PyTorch answers leave it empty.
    """
    cases = list(cases)
    worst_ratio = 0.0
    for case in cases:
        note_progress(case.describe())
        q, kk, v = case.tensors()
        s = scale if scale is not None else 1.0 / math.sqrt(case.d)
        kwargs = {"scale": s} if pass_scale else {}
        args = tuple(t.to(device) for t in (q, kk, v))
        out = _call(exercise, fn, args, kwargs, case.describe())
        oracle = attention(q, kk, v, case.causal, scale=s)
        budget = attention_budget(oracle.o, plain_attention(q, kk, v, case.causal, scale=s), case.dtype, k=k)
        problem = _diagnose_attention(exercise, out, case, q, kk, v, s, oracle, budget)
        if problem:
            raise CheckFailed(problem)
        worst_ratio = max(worst_ratio, budget.ratio(float((out.detach().cpu().double() - oracle.o).abs().max())))
    return Report(exercise, len(cases), worst_ratio, tier)


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
