"""What every comparison with the float64 oracle shares: the learner's call, the comparison of a tensor with the
oracle's within the error budget, the report of a passing check.

The checks built on these (:mod:`course.grading.compare_attention`: attention outputs and gradients;
:mod:`course.grading.compare_values`: a softmax, merged softmax states, a number) return a :class:`Report` on
success (``course.check`` prints its one line); on failure they raise :class:`~course.errors.CheckFailed`, whose
message is a short diagnosis: which case failed, where the error is, how big it is against the error budget, and a
hint. In Jupyter the course shows only that message (no traceback); the cell still fails, which is what nbgrader
grades. Each lesson's module (``course/lessons/lessonNN.py``) says which cases and mistakes each of its exercises
uses.

Two rules hold for every message:

* **A hint only with evidence.** A ``hint:`` line names a mistake only when the check has recomputed
  what that mistake produces and found exactly the learner's answer (a number exercise: every value the
  learner's function returned; an attention kernel: the whole output of the failing case;
  :mod:`course.grading.known_mistakes`). Different mistakes that give the same wrong number get no hint, or one
  hint that is true of all of them; a ratio alone is never evidence.
* **Every case can be reproduced from its message**: sizes, kind, dtype, causal, seed, and the scale
  when the check passed one (``Case.describe``).

Checks run with library warnings silenced (:func:`quiet`): a NumPy or PyTorch warning about a wrong
answer's overflow would only put a library path in front of the diagnosis.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from course.errors import CheckFailed, CourseError, learner_traceback, root_cause
from course.grading.racecheck import OutOfBounds, RaceError, Written, interpreter_checks
from course.simt.compiler import blank_comments
from course.solution_regions import BEGIN_SOLUTION, REMOVED_FOR_GRADING, SolutionRegionError, clear_solution_regions
from course.tracks import table

__all__ = ["Report", "quiet", "quietly", "untouched_stub", "learner_call", "compare_tensors", "close", "fmt",
           "fmt_apart"]


@dataclass
class Report:
    """What a passing check measured; truthy so ``assert check(...)`` reads naturally."""

    exercise: str
    cases: int
    worst_ratio: float = 0.0
    tier: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float | None = None
    """How long the check took, shown on the GPU tier (where a check must answer in seconds); None elsewhere."""

    def __bool__(self) -> bool:
        return True

    def _ipython_display_(self) -> None:
        """check() has already printed its one line; a notebook should not echo the object too."""

    def __str__(self) -> str:
        line = f"✓ {self.exercise}: {self.cases} case{'s' * (self.cases != 1)} passed"
        if self.worst_ratio:
            line += f" (worst error {self.worst_ratio:.2f}× of budget)"
        line += f" on the {self.tier}" if self.tier else ""
        return line + (f" in {self.seconds:.1f} s" if self.seconds is not None else "")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Library warnings off while a check runs (NumPy's overflow warnings among them).

    A wrong answer overflows, divides by zero, casts inf to an integer: NumPy and PyTorch warn about
    each, with a path into site-packages, and the warning would land above the diagnosis that says
    the same thing in the course's words. Only the check is silenced: outside it, warnings are as
    the learner set them.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def quietly(check: Callable) -> Callable:
    @functools.wraps(check)
    def run(*args, **kwargs):
        with quiet():
            return check(*args, **kwargs)
    return run


def _code_only(text: str) -> str:
    """C-like source without comments, string contents or whitespace: what two texts share when they differ
    only in comments and layout."""
    return "".join(blank_comments(text).split())


def untouched_stub(exercise: str, code: str) -> bool:
    """Whether ``code`` (a CUDA C or Metal kernel a cell compiled) is the kernel of ``exercise`` as the course
    hands it out: the course's file with every ``BEGIN SOLUTION`` … ``END SOLUTION`` region emptied.

    The release replaces each region with a ``// YOUR CODE HERE`` comment; comments and layout are left
    out of the comparison, so a learner who only edited comments (or deleted the stub line) has still
    written nothing. Any code in a region, or any other change of code, makes it not the stub.
    """
    try:
        path = table.exercise(exercise).path
        reference = path.read_text()
    except (CourseError, OSError):
        return False
    # The grader's sandbox shows kernels/ with each region already cut to one marker line.
    if BEGIN_SOLUTION not in reference and REMOVED_FOR_GRADING not in reference:
        return False
    try:
        emptied = clear_solution_regions(reference, "")
    except SolutionRegionError:
        return False
    kept = [line for line in emptied.split("\n") if REMOVED_FOR_GRADING not in line]
    return _code_only(code) == _code_only("\n".join(kept))


def fmt(x: float) -> str:
    return f"{x:.3g}" if (x == 0 or 1e-3 <= abs(x) < 1e5) else f"{x:.2e}"


def fmt_apart(a: float, b: float) -> tuple[str, str]:
    """Two numbers that differ, shown so that they look different: whole numbers in full, others with as many
    significant digits as it takes (a byte count off by 128 in 69 million is not "6.92e+07" twice)."""
    if a == b or not (math.isfinite(a) and math.isfinite(b)):
        return fmt(a), fmt(b)
    if float(a).is_integer() and float(b).is_integer() and max(abs(a), abs(b)) < 2 ** 53:
        return (fmt(a), fmt(b)) if abs(a) < 1e5 and abs(b) < 1e5 else (f"{int(a):,}", f"{int(b):,}")
    shown = fmt(a), fmt(b)
    digits = 3
    while shown[0] == shown[1] and digits < 17:
        digits += 1
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
    return shown


def _rows(indices: Sequence[int], total: int) -> str:
    shown = ", ".join(str(i) for i in indices[:8]) + (", …" if len(indices) > 8 else "")
    return f"{len(indices)} of {total} rows ({shown})"


def learner_call(exercise: str, fn: Callable[..., Any], args: tuple, kwargs: dict, case_text: str, race: bool = False,
          written: Written | None = None) -> Any:
    """Run the learner's code; with ``race`` (interpreter only) also run the interpreter's checks: accesses out
    of bounds, races between programs, and (into ``written``) the bytes the launches stored."""
    try:
        with interpreter_checks(written) if race else contextlib.nullcontext():
            return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except OutOfBounds as exc:
        raise CheckFailed(f"{exercise}: an out-of-bounds {exc.access} on {case_text}:\n  {exc}") from None
    except RaceError as exc:
        raise CheckFailed(f"{exercise}: a data race on {case_text}:\n  {exc}") from None
    except CourseError as exc:  # e.g. the CPU runtime stopping a CUDA/Metal kernel: its message says why
        raise CheckFailed(f"{exercise}: on {case_text}:\n  {exc}") from None
    except Exception as exc:  # the learner's code failed: show their frames only
        if isinstance(root_cause(exc), NotImplementedError):
            raise CheckFailed(f"{exercise}: not implemented yet (your code raised NotImplementedError).\n"
                              f"  hint: replace the `raise NotImplementedError()` line with your solution.") from None
        raise CheckFailed(f"{exercise}: your code raised an error on {case_text}:\n{learner_traceback(exc)}") from None


def compare_tensors(head: str, label: str, out: Any, ref: torch.Tensor, budget, dtype: torch.dtype, per_row: bool = False
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
        f"  {label} is wrong in {_rows(bad_rows, n_rows)}",
        "  worst: {}: got {}, expected {}".format(where, *fmt_apart(got, want)),
        f"  error {fmt(worst)} vs budget {fmt(budget.allowed)} "
        f"({budget.k:g}× the plain {str(dtype).replace('torch.', '')} error {fmt(budget.plain_error)}, + floor): "
        f"{fmt(budget.ratio(worst))}× over",
    ], bad_rows


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(torch.isfinite(a).all()) and float((a - b).abs().max()) <= tol
