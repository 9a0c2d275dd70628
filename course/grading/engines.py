"""The engines behind ``course.check`` (course/exercises.py): comparing a learner's answer with the oracle.

``check_attention`` runs an attention function on cases and compares it with the float64 oracle within the error
budget; ``check_values`` compares a numeric answer with the right formula and with known mistakes. On success a check
returns a :class:`Report` (``check`` prints its one line); on failure it raises :class:`~course.errors.CheckFailed`
whose message is a short diagnosis: which case failed, where the error is, how big it is against the error budget,
and a hint. In Jupyter the course shows only that message (no traceback); the cell still fails, which is what
nbgrader grades.

The engines here are generic; each lesson's module (``course/lessons/lessonNN.py``) says which cases and mistakes
each of its exercises uses.

Two rules hold for every message:

* **A hint only with evidence.** A ``hint:`` line names a mistake only when the check has recomputed
  what that mistake produces and found exactly the learner's answer (a number exercise: every value the
  learner's function returned; an attention kernel: the whole output of the failing case). Different
  mistakes that give the same wrong number get no hint, or one hint that is true of all of them; a
  ratio alone is never evidence.
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
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from course.grading.budget import attention_budget, plain_attention
from course.errors import CheckFailed, CourseError, learner_traceback, root_cause
from course.inputs import Case
from course.grading.isolation import note_progress
from course.grading.racecheck import OutOfBounds, RaceError, Unwritten, Written, interpreter_checks
from course.reference import attention, attention_backward, causal_mask
from course.simt.compiler import blank_comments
from course.solution_regions import BEGIN_SOLUTION, REMOVED_FOR_GRADING, SolutionRegionError, clear_solution_regions
from course.tracks import table

__all__ = ["Report", "check_attention", "check_backward", "check_softmax", "check_merge_states", "check_values",
           "Mistake", "quiet", "untouched_stub", "learner_call", "gradients_with", "case_masks"]

LOG2E = 1.4426950408889634
BLOCKS = (1, 8, 16, 32, 64, 128)
"""Keys (or columns) per step of the course's kernels: one key at a time (lesson 01), the tiles of the
CUDA and Metal steps (8 to 64, grading and default tiles), the Triton tiles (16 to 64) and the 128
columns of lesson 02's softmax. A mistake in the online update is recomputed with each of them."""


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


def _quietly(check: Callable) -> Callable:
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


def _fmt(x: float) -> str:
    return f"{x:.3g}" if (x == 0 or 1e-3 <= abs(x) < 1e5) else f"{x:.2e}"


def _fmt_apart(a: float, b: float) -> tuple[str, str]:
    """Two numbers that differ, shown so that they look different: whole numbers in full, others with as many
    significant digits as it takes (a byte count off by 128 in 69 million is not "6.92e+07" twice)."""
    if a == b or not (math.isfinite(a) and math.isfinite(b)):
        return _fmt(a), _fmt(b)
    if float(a).is_integer() and float(b).is_integer() and max(abs(a), abs(b)) < 2 ** 53:
        return (_fmt(a), _fmt(b)) if abs(a) < 1e5 and abs(b) < 1e5 else (f"{int(a):,}", f"{int(b):,}")
    shown = _fmt(a), _fmt(b)
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


# ----------------------------------------------------------------------------------------------
# Attention outputs
# ----------------------------------------------------------------------------------------------

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
        f"  {label} is wrong in {_rows(bad_rows, n_rows)}",
        "  worst: {}: got {}, expected {}".format(where, *_fmt_apart(got, want)),
        f"  error {_fmt(worst)} vs budget {_fmt(budget.allowed)} "
        f"({budget.k:g}× the plain {str(dtype).replace('torch.', '')} error {_fmt(budget.plain_error)}, + floor): "
        f"{_fmt(budget.ratio(worst))}× over",
    ], bad_rows


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(torch.isfinite(a).all()) and float((a - b).abs().max()) <= tol


@dataclass(frozen=True)
class _Guess:
    """A mistake, recomputed: ``output()`` is what a kernel with that mistake returns (float64)."""

    text: str
    output: Callable[[], "torch.Tensor | None"]
    family: str = ""
    """Guesses of one family (the same mistake at different block sizes, or close variants) may fit
    together; the family's text is then shown, which is true of each of them."""


_WRONG_AXIS = ("the softmax is normalised over the wrong axis: divide each row of exp(S) by its own sum (over the keys, "
               "dim=-1).")
_ZEROS = ("the output is all zeros: is it ever written (or returned), and does any key reach it (the loop over the "
          "keys, the mask)?")
_FAMILIES = {
    # A row that sees no key gives O = 0: with the diagonal masked (causal, one key per row), or with the
    # last key left out of a row of one key.
    "zeros": _ZEROS,
    # The same where the case names the mistake: no row sees a key before its diagonal one (causal), or the
    # case has one key (the loop over the keys stopped one early).
    "zeros_causal": "the output is all zeros: is it ever written (or returned)? No row of this case sees a key "
                    "before its diagonal one, so a causal mask that hides the diagonal gives zeros too: query i sees keys "
                    "j ≤ i + (Nk − Nq), the key j = i + (Nk − Nq) included.",
    "zeros_one_key": "the output is all zeros: is it ever written (or returned)? This case has one key, so a loop over "
                     "the keys (or key tiles) that stops one early never reaches it.",
    # exp() of unshifted scores overflows; shifted by a max larger than the scores (the unscaled ones), it
    # underflows. Where every score is in the hundreds both give NaN in the same rows.
    "range": "exp() leaves float32's range on these rows, whose scores reach the hundreds: subtract the row max of "
             "the scaled scores, m = max_j scale · q·k_j, and exponentiate s − m.",
    "rescale": "the running sums are not rescaled when the max grows: multiply l and acc by exp(m_old − m_new) "
               "before adding the new terms.",
}


def _pick(fitting: list[_Guess]) -> str | None:
    """The hint for the guesses that fit: one text, or one family's, else none (the evidence is ambiguous)."""
    texts = {g.text for g in fitting}
    if len(texts) == 1:
        return texts.pop()
    families = {g.family for g in fitting}
    if len(families) == 1 and "" not in families:
        return _FAMILIES[families.pop()]
    return None


def _rel(dtype: torch.dtype) -> float:
    """How closely a kernel with a mistake reproduces that mistake recomputed in float64, relative to the
    output's scale: float32 arithmetic (or TF32 matmuls) stays well within 0.2 %; 16-bit inputs within 1 %."""
    return 2e-3 if dtype in (torch.float32, torch.float64) else 1e-2


def _fits(out: torch.Tensor, guess: torch.Tensor | None, ref: torch.Tensor, tol: float, rel: float = 1e-2) -> bool:
    """``out`` is the guess (within ``tol``, or ``rel`` of the guess's own scale) and the guess is not the right
    answer (it is farther than ``tol`` from ``ref``)."""
    if guess is None or guess.shape != out.shape or not bool(torch.isfinite(guess).all()):
        return False
    own = max(tol, rel * float(guess.abs().max()) if guess.numel() else 0.0)
    return _close(out, guess, own) and not _close(guess, ref, tol)


def _attend(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(s) V in float64; a row with no finite score gives 0."""
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    return (p @ v) / torch.where(l == 0, torch.ones_like(l), l)


def _online(s: torch.Tensor, v: torch.Tensor, block: int, *, rescale_l: bool = True, rescale_acc: bool = True,
            keep_max: bool = True) -> torch.Tensor:
    """O of a one-pass kernel that walks the keys ``block`` at a time, in float64, with parts of its update
    left out: l or acc not multiplied by exp(m_old − m_new) when the max grows, or m never updated.

    A key block that a row cannot see at all (masked, as a causal kernel skips it) leaves that row alone.
    """
    n_k = s.shape[-1]
    m = torch.full(s.shape[:-1], float("-inf"), dtype=torch.float64)
    l = torch.zeros(s.shape[:-1], dtype=torch.float64)
    acc = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=torch.float64)
    for j in range(0, n_k, block):
        sb = s[..., j:j + block]
        seen = torch.isfinite(sb).any(dim=-1)
        m_new = torch.maximum(m, sb.amax(dim=-1))
        m_sub = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        c = torch.exp(m - m_sub)
        p = torch.exp(sb - m_sub[..., None])
        l_next = (l * c if rescale_l else l) + p.sum(dim=-1)
        acc_next = (acc * c[..., None] if rescale_acc else acc) + p @ v[..., j:j + block, :]
        l = torch.where(seen, l_next, l)
        acc = torch.where(seen[..., None], acc_next, acc)
        if keep_max:
            m = torch.where(seen, m_new, m)
    return acc / torch.where(l == 0, torch.ones_like(l), l)[..., None]


def _paddings(n: int) -> list[int]:
    """How many padding keys (or columns) the course's block sizes add after n, each once (0 left out)."""
    pads = {(-n) % b for b in BLOCKS if b > 1} | {(1 << max(n - 1, 0).bit_length()) - n}
    return sorted(p for p in pads if p > 0)


def case_masks(n_q: int, n_k: int) -> dict[str, torch.Tensor | None]:
    """The mask a mistake uses instead of the right one (bottom-right causal: j <= i + Nk - Nq)."""
    i = torch.arange(n_q)[:, None]
    j = torch.arange(n_k)[None, :]
    return {"none": None, "causal": j <= i + (n_k - n_q), "top-left": j <= i, "diagonal-hidden": j < i + (n_k - n_q)}


def _masked(raw: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    s = raw * scale
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def _attention_guesses(q, k, v, case: Case, scale: float, explicit_scale: bool) -> list[_Guess]:
    """The usual mistakes in an attention forward pass, each as the output it would give."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    raw = q64 @ k64.transpose(-1, -2)
    masks = case_masks(n_q, n_k)
    mask = masks["causal"] if case.causal else None
    s = _masked(raw, mask, scale)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    zeros = "zeros_causal" if case.causal else "zeros_one_key" if n_k == 1 else "zeros"
    guesses = [
        _Guess(_ZEROS, lambda: torch.zeros_like(s[..., :1]) * v64[..., :1, :], zeros),
        _Guess("every row is the plain mean of V (over the keys it sees): the weights are uniform, so the scores "
               "never reached the softmax.", lambda: _attend(_masked(raw, mask, 0.0), v64)),
        _Guess("O is acc / l: the division by the row sum l is missing.", lambda: torch.exp(s - m) @ v64),
        _Guess("each row is the right answer times exp(m), m its largest score: the weights were exponentiated "
               "without subtracting the max that l was summed against; use exp(s − m) for both.",
               lambda: _attend(s, v64) * torch.exp(m)),
        _Guess(_WRONG_AXIS, lambda: torch.softmax(s, dim=-2).nan_to_num(0.0) @ v64),
        _Guess(_WRONG_AXIS, lambda: (torch.exp(s - m) / torch.exp(s - m).sum(dim=-2, keepdim=True)).nan_to_num(0.0)
               @ v64),
        _Guess("the scale was applied twice.", lambda: _attend(_masked(raw, mask, scale * scale), v64)),
        _Guess("the scores carry log2(e) but are exponentiated with exp: with log2(e) folded into the scale, use "
               "exp2 (or leave the factor out and use exp).", lambda: _attend(_masked(raw, mask, scale * LOG2E), v64)),
    ]
    if scale != 1.0:
        guesses.append(_Guess("this is attention without the scale (1/sqrt(D) unless one is given): multiply the "
                              "scores by `scale` before the softmax.", lambda: _attend(_masked(raw, mask, 1.0), v64)))
    if explicit_scale and not math.isclose(scale, 1.0 / math.sqrt(d)):
        guesses.append(_Guess(f"the scale you were given ({scale!r}) is ignored: this is attention with the default "
                              "1/sqrt(D). Use `scale` when it is passed.",
                              lambda: _attend(_masked(raw, mask, 1.0 / math.sqrt(d)), v64)))
    if case.causal:
        guesses += [
            _Guess("the causal mask is missing: query i may only see keys j ≤ i + (Nk − Nq).",
                   lambda: _attend(_masked(raw, None, scale), v64)),
            _Guess("the causal mask is aligned top-left (j ≤ i); here it is aligned bottom-right: query i sees keys "
                   "j ≤ i + (Nk − Nq).", lambda: _attend(_masked(raw, masks["top-left"], scale), v64)),
            _Guess("the causal mask hides the diagonal: query i sees keys j ≤ i + (Nk − Nq), the key j = i + (Nk − Nq) "
                   "included.", lambda: _attend(_masked(raw, masks["diagonal-hidden"], scale), v64), zeros),
        ]
    else:
        guesses.append(_Guess("this is causal attention; this exercise wants every query to see every key.",
                              lambda: _attend(_masked(raw, masks["causal"], scale), v64)))
    if n_k > 1 or not case.causal:
        guesses.append(_Guess("the last key is left out: the loop over the keys stops one early.",
                              lambda: _attend(s[..., :-1], v64[..., :-1, :]) if n_k > 1 else
                              torch.zeros_like(s[..., :1]) * v64[..., :1, :], zeros))
    if not case.causal:
        for pad in _paddings(n_k):
            def padded(pad=pad):
                zeros = torch.zeros(*s.shape[:-1], pad, dtype=torch.float64)
                return _attend(torch.cat([s, zeros], dim=-1),
                               torch.cat([v64, torch.zeros(*v64.shape[:-2], pad, d, dtype=torch.float64)], dim=-2))
            guesses.append(_Guess("the padding keys of the last block count in the softmax (a score of 0, not −inf): "
                                  "mask the keys past the end with −inf before the max and the exp.", padded))
        if 1 not in _paddings(n_k):  # else the guess above, with one padding key, says it
            def one_past():
                zeros = torch.zeros(*s.shape[:-1], 1, dtype=torch.float64)
                return _attend(torch.cat([s, zeros], dim=-1),
                               torch.cat([v64, torch.zeros(*v64.shape[:-2], 1, d, dtype=torch.float64)], dim=-2))
            guesses.append(_Guess("one key past the last counts in the softmax (a padding key, score 0): keys run from "
                                  "0 to Nk − 1, so the mask keeps key j when j < Nk, not j <= Nk.", one_past))
        if n_q < n_k:
            guesses.append(_Guess("only the first Nq keys count: the mask compares key positions with the number of "
                                  "queries (N_CTX_Q) where it means the number of keys (N_CTX_K).",
                                  lambda: _attend(s[..., :n_q], v64[..., :n_q, :])))
    for block in BLOCKS:
        if block >= n_k and block > 1:
            continue  # one block holds every key: nothing is ever rescaled
        b = block
        guesses += [
            _Guess("l and acc are not rescaled when the max grows: multiply both by exp(m_old − m_new) before adding "
                   "the new terms.", lambda b=b: _online(s, v64, b, rescale_l=False, rescale_acc=False), "rescale"),
            _Guess("acc is not rescaled when the max grows: multiply it by exp(m_old − m_new) before adding the new "
                   "terms, as l is.", lambda b=b: _online(s, v64, b, rescale_acc=False), "rescale"),
            _Guess("l is not rescaled when the max grows: multiply it by exp(m_old − m_new) before adding the new "
                   "terms, as acc is.", lambda b=b: _online(s, v64, b, rescale_l=False), "rescale"),
            _Guess("only the last step's keys count: each step wipes out the ones before, as it does when the "
                   "running max m is never updated to m_new (the rescale factor exp(m − m_new) stays exp(−inf) = 0).",
                   lambda b=b: _online(s, v64, b, keep_max=False)),
        ]
    return guesses


def _hard_max(q, k, v, case: Case, scale: float) -> torch.Tensor:
    """Each row's V at its largest visible score (0 for a row that sees no key): what attention tends to as the
    scores grow."""
    mask = causal_mask(q.shape[-2], k.shape[-2]) if case.causal else None
    s = _masked(q.double() @ k.double().transpose(-1, -2), mask, scale)
    pick = torch.nn.functional.one_hot(s.argmax(dim=-1), s.shape[-1]).double()
    return (pick * torch.isfinite(s).any(dim=-1, keepdim=True)) @ v.double()


def _row_sets(bad: torch.Tensor) -> set[int]:
    """Indices (over the flattened leading dims and rows) of the rows where ``bad`` holds."""
    return set(bad.reshape(-1, bad.shape[-1]).any(dim=-1).nonzero().flatten().tolist()) if bad.dim() > 1 else set(
        bad.nonzero().flatten().tolist())


def _nonfinite_hint(out64: torch.Tensor, q, k, v, case: Case, scale: float, blocked: bool = True) -> str | None:
    """A hint for NaN/Inf rows, when a known mistake gives non-finite values in exactly those rows. ``blocked``: the
    answer loops over blocks of keys with a running max, sum and accumulator (the tiled kernels, lesson 03 on), whose
    two ways to make every row NaN the last hint names."""
    bad = _row_sets(~torch.isfinite(out64))
    raw = q.double() @ k.double().transpose(-1, -2)
    mask = causal_mask(q.shape[-2], k.shape[-2]) if case.causal else None
    s = _masked(raw, mask, scale)
    fitting: list[_Guess] = []
    if case.causal:
        empty = _row_sets(torch.isinf(s).all(dim=-1, keepdim=True).expand_as(s))
        if bad and bad <= empty:
            fitting.append(_Guess("the NaN rows are rows that see no key (Nq > Nk): their max stays −inf, and "
                                  "exp(s − m) = exp(−inf + inf) is NaN. Guard m = −inf (such a row's O is 0, its LSE "
                                  "−inf).", lambda: None))
    if case.kind == "peaky":
        for dtype in {torch.float32, case.dtype}:
            if not dtype.is_floating_point or torch.finfo(dtype).bits > 32:
                continue
            # exp() without the max: rows whose largest score passes the dtype's range become inf / inf.
            over = _row_sets(torch.isinf(torch.exp(s.to(dtype))) & torch.isfinite(s))
            if over and bad == over:
                fitting.append(_Guess("exp() overflows on large scores: subtract the row max before exponentiating.",
                                      lambda: None, "range"))
            # A max taken over the unscaled scores: every weight of a row underflows, and l = 0.
            m_raw = _masked(raw, mask, 1.0).amax(dim=-1, keepdim=True)
            under = (torch.exp((s - m_raw).to(dtype)).sum(dim=-1, keepdim=True) == 0) & torch.isfinite(m_raw)
            under_rows = _row_sets(under.expand_as(s))
            if scale != 1.0 and under_rows and bad == under_rows:
                fitting.append(_Guess("every weight of these rows underflows to 0, so l = 0 and O = 0/0: the max "
                                      "subtracted is larger than every score. Take the max of the scaled scores, "
                                      "scale · q·k.", lambda: None, "range"))
    rows = _row_sets(torch.ones_like(out64, dtype=torch.bool))
    if blocked and not fitting and bad == rows and not (case.causal and empty):
        return (f"every row is NaN: O = acc / l with l still 0 or made NaN. Either no key was ever added (the loop "
                f"over the key blocks never ran: it starts at key 0 and runs while a block's first key is < Nk, at "
                f"least once for Nk = {k.shape[-2]}), or the first rescale multiplied l = 0 by inf (alpha = "
                "exp(m_old − m_new) is exp(−inf) = 0 on the first step; exp(m_new − m_old) is inf).")
    return _pick(fitting)


def _diagnose_attention(exercise: str, out: Any, case: Case, q, k, v, scale: float, oracle, budget,
                        explicit_scale: bool = False, key_blocks: bool = True) -> str | None:
    """None when ``out`` is within budget, else a few lines saying what is wrong."""
    ref = oracle.o
    head = f"{exercise}: wrong answer on {case.describe(scale if explicit_scale else None)}"
    lines, bad_rows = _compare(head, "the output", out, ref, budget, case.dtype)
    if lines is None:
        return None
    if isinstance(out, torch.Tensor) and out.shape == ref.shape:
        out64 = out.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(out64).all()):
            hint = _nonfinite_hint(out64, q, k, v, case, scale, blocked=key_blocks)
        else:
            # A mistake recognised within a small part of the answer's scale is still that mistake, just noisy.
            tol = max(budget.allowed * 4, _rel(case.dtype) * max(float(ref.abs().max()), 1e-6))
            hint = _pattern_hint(out64, q, k, v, case, scale, ref, tol, explicit_scale)
        if hint:
            lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def _pattern_hint(out: torch.Tensor, q, k, v, case: Case, scale: float, ref: torch.Tensor, tol: float,
                  explicit_scale: bool = False) -> str | None:
    """Recognise the usual mistakes by recomputing what they would have produced; None unless exactly one
    mistake (or one family of them) gives the learner's output."""
    fitting = []
    for guess in _attention_guesses(q, k, v, case, scale, explicit_scale):
        output = guess.output()
        if _fits(out, output, ref, tol, _rel(case.dtype)):
            fitting.append((guess, output))
    # On peaky rows many mistakes leave each row ≈ the V row of its largest score (the other weights vanish,
    # or underflow along with it). A guess that gives that too is no evidence against the others.
    hard = _hard_max(q, k, v, case, scale)
    if _close(out, hard, tol):
        fitting = [(g, o) for g, o in fitting if not _close(o, hard, max(tol, _rel(case.dtype) * float(o.abs().max())))]
    fitting = [g for g, _ in fitting]
    if not bool(out.any()):  # nothing at all came back: only the mistakes that leave O exactly 0 explain that
        fitting = [g for g in fitting if g.family.startswith("zeros")]
    # Row i holding row i ± 1's answer, and a transposed square output, are read off the output itself.
    shifted = out.shape[-2] > 1 and (_close(out[..., 1:, :], ref[..., :-1, :], tol)
                                     or _close(out[..., :-1, :], ref[..., 1:, :], tol))
    if shifted:
        fitting.append(_Guess("row i holds the answer for a neighbouring row: an off-by-one in the row index.",
                              lambda: None))
    square = out.shape[-1] == out.shape[-2]
    if square and _close(out.transpose(-1, -2).contiguous(), ref, tol) and not _close(out, ref, tol):
        fitting.append(_Guess("the output is transposed.", lambda: None))
    return _pick(fitting)


def _plain_lse(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """LSE computed the textbook way at the inputs' precision: the yardstick for an LSE's error."""
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def _lse_hint(lse: Any, ref: torch.Tensor, m: torch.Tensor, tol: float, rel: float) -> str | None:
    """A hint when a known LSE mistake gives exactly the learner's LSE (rows that see no key left out)."""
    if not isinstance(lse, torch.Tensor) or lse.shape != ref.shape:
        return None
    got = lse.detach().to("cpu", torch.float64)
    seen = torch.isfinite(ref)
    if not bool(torch.isfinite(got[seen]).all()):
        if bool((got[seen] == float("-inf")).all()):  # O was right (it is checked first), so l > 0: m is −inf
            return ("the output is right but the LSE is −inf in rows that see keys: m + log(l) was taken with the "
                    "running max m still −inf. Is m updated to m_new at the end of every step?")
        return None
    zero = torch.zeros_like(ref)
    got, want, m = (torch.where(seen, t, zero) for t in (got, ref, m))
    guesses = [
        _Guess("the LSE is in base-2 units: multiply it by ln 2 (divide by log2(e)) for natural-log units.",
               lambda: want * LOG2E),
        _Guess("LSE_i = m_i + log(l_i): the running max m_i is missing.", lambda: want - m),
        _Guess("LSE_i = m_i + log(l_i): the log(l_i) term is missing.", lambda: m),
        _Guess("the LSE is too large by each row's max, counted twice: with P = exp(S) and nothing subtracted, l "
               "already holds e^m, and m + log(l) adds m again. Subtract the running max before exponentiating: "
               "P = exp(S − m).", lambda: want + m),
    ]
    return _pick([g for g in guesses if _fits(got, g.output(), want, tol, rel)])


@_quietly
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
            lines, _ = _compare(f"{exercise}: wrong LSE on {text}", "the LSE", lse, oracle.lse, lse_budget,
                                case.dtype, per_row=True)
            if lines:
                row_max = _masked(q.double() @ kk.double().transpose(-1, -2),
                                  causal_mask(case.n_q, case.n_k) if case.causal else None, s).amax(dim=-1)
                tol = max(lse_budget.allowed * 4, _rel(case.dtype) * max(float(finite_ref.abs().max()), 1.0))
                hint = _lse_hint(lse, oracle.lse, row_max, tol, _rel(case.dtype))
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


def gradients_with(q, k, v, o, lse, do, mask, p_scale: float, grad_scale: float, *, use_lse: bool = True,
                   delta: bool = True, dq_keys: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FlashAttention backward in float64 from the given O and LSE, with the choices a mistake changes:
    the mask, the scale inside P and on dQ/dK, P rebuilt without the LSE, Δ left out, the keys dQ sums over
    (``dq_keys``, 1 for a key that counts)."""
    q64, k64, v64, o64, do64 = (t.detach().to("cpu", torch.float64) for t in (q, k, v, o, do))
    s = _masked(q64 @ k64.transpose(-1, -2), mask, p_scale)
    if use_lse:
        lse64 = lse.detach().to("cpu", torch.float64)[..., None]
        p = torch.where(torch.isfinite(lse64) & torch.isfinite(s), torch.exp(s - lse64), torch.zeros_like(s))
    else:
        p = torch.exp(s)
    dv = p.transpose(-1, -2) @ do64
    dp = do64 @ v64.transpose(-1, -2)
    d_row = (do64 * o64).sum(dim=-1, keepdim=True) if delta else 0.0
    ds = p * (dp - d_row)
    ds_q = ds if dq_keys is None else ds * dq_keys.to(torch.float64)
    return grad_scale * ds_q @ k64, grad_scale * ds.transpose(-1, -2) @ q64, dv


def _backward_hint(result, wanted, args, case: Case, scale: float, wrong: list[str], tols: dict[str, float]
                   ) -> str | None:
    """A hint when one known backward mistake explains every wrong gradient (the right ones are left as they are)."""
    got = {name: g.detach().to("cpu", torch.float64) for name, g in zip(("dq", "dk", "dv"), result)}
    if not all(bool(torch.isfinite(got[name]).all()) for name in wrong):
        # NaN in exactly the rows of dQ whose LSE is -inf: exp(S - LSE) was taken there unguarded.
        empty = set(torch.isneginf(args[4].detach().cpu()).reshape(-1).nonzero().flatten().tolist())
        if empty and "dq" in wrong and _row_sets(~torch.isfinite(got["dq"])) == empty:
            return ("the NaN rows of dQ are the rows that see no key: their LSE is −inf, and exp(S − LSE) is "
                    "exp(−inf + inf) = NaN there. Where the LSE is −inf, subtract +inf instead (torch.where), so "
                    "those rows of P are 0.")
        return None
    want = dict(zip(("dq", "dk", "dv"), wanted))
    q, k, v, o, lse, do = args
    masks = case_masks(case.n_q, case.n_k)
    mask = masks["causal"] if case.causal else None
    right = gradients_with(*args, mask, scale, scale)

    def triple(*grads):
        return lambda: dict(zip(("dq", "dk", "dv"), grads))

    def recomputed(mask=mask, p_scale=scale, grad_scale=scale, **options):
        return lambda: dict(zip(("dq", "dk", "dv"), gradients_with(*args, mask, p_scale, grad_scale, **options)))

    guesses = [
        _Guess("dS = P ∘ (dP − Δ) with Δ_i = Σ_d dO_id · O_id: the Δ term is missing.", recomputed(delta=False)),
        _Guess("P is rebuilt as exp(S) without the saved LSE: P = exp(scale · Q Kᵀ − LSE).", recomputed(use_lse=False)),
        _Guess("the backward uses scale 1 instead of the forward's scale: P = exp(scale · Q Kᵀ − LSE), dQ = scale · dS K "
               "and dK = scale · dSᵀ Q.", recomputed(p_scale=1.0, grad_scale=1.0)),
        _Guess("dQ is missing the factor scale: dQ = scale · dS K.", triple(right[0] / scale, right[1], right[2])),
        _Guess("dK is missing the factor scale: dK = scale · dSᵀ Q.", triple(right[0], right[1] / scale, right[2])),
        _Guess("dK and dV are swapped.", triple(right[0], right[2], right[1])),
    ] + [_Guess(f"{name} is all zeros: is it ever written (or returned), and does anything ever add to it (the loop "
                "over the blocks that feed it)?",
                triple(*(torch.zeros_like(g) if n == name else g for n, g in zip(("dq", "dk", "dv"), right))))
         for name in ("dq", "dk", "dv")]
    # dQ summed over one key less in every block of keys (a loop over the block's keys that stops one early).
    for block in BLOCKS:
        if 1 < block < case.n_k:
            dropped = torch.arange(case.n_k) % block == block - 1
            guesses.append(_Guess("dQ leaves out one key of every block of keys, its last: the sum of dS_ij K_j over the "
                                  "block's keys stops one early (j < BLOCK_N − 1 where j < BLOCK_N is meant).",
                                  recomputed(dq_keys=~dropped)))
    if case.causal:
        guesses += [
            _Guess("the backward runs without the causal mask the forward used.", recomputed(mask=None)),
            _Guess("the backward's causal mask hides the diagonal key (j < i + (Nk − Nq)); the forward let it through "
                   "(j ≤ i + (Nk − Nq)).", recomputed(mask=masks["diagonal-hidden"])),
        ]
    fitting = []
    for guess in guesses:
        grads = guess.output()
        if all(_fits(got[name], grads[name], want[name], tols[name], _rel(case.dtype)) for name in wrong):
            fitting.append(guess)
    return _pick(fitting)


@_quietly
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
            tols[name] = max(budget.allowed * 4, _rel(case.dtype) * max(float(want.abs().max()), 1e-6))
            lines, _ = _compare(f"{exercise}: wrong {name} on {text}", name, got, want, budget, case.dtype)
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
            hint = _backward_hint(result, oracle, args, case, s, wrong, tols) if shaped else None
            if hint:
                lines.append(f"  hint: {hint}")
            raise CheckFailed("\n".join(lines))
    return Report(exercise, len(cases), worst_ratio, tier)


# ----------------------------------------------------------------------------------------------
# Softmax and its partial states
# ----------------------------------------------------------------------------------------------

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
        _Guess("each row is the right softmax times exp(m), m the row's max: the second pass exponentiates x without "
               "subtracting the max that l was summed against; use exp(x − m) / l.", lambda: ref * torch.exp(m)),
        _Guess("the division by the row sum is missing: y = exp(x − m) / l.", lambda: e),
    ] + [_Guess("l is not rescaled when the running max grows: multiply it by exp(m_old − m_new) before adding a "
                "block's terms.", lambda b=b: no_rescale(b)) for b in BLOCKS if b < n] + [
        _Guess("the padding of the last block counts in l (loaded as 0 instead of −inf): load the columns past the end "
               "of the row as −inf.", lambda p=p: padded(p)) for p in _paddings(n)]
    rel = _rel(case.dtype)
    hint = _pick([g for g in guesses if _fits(out, g.output(), ref, tol, rel)])
    if hint is None:
        sums = out.sum(dim=-1, keepdim=True)
        if _fits(out, ref * sums, ref, tol, rel):
            shown = ", ".join(_fmt(float(t)) for t in sums.flatten()[:3])
            more = ", …" if sums.numel() > 3 else ""
            hint = (f"every row is the right softmax times a constant (the rows sum to {shown}{more}, not 1): the "
                    "exponentials are right; the row sum they are divided by is not.")
    return hint


@_quietly
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
        lines, bad_rows = _compare(f"{exercise}: wrong answer on {text}", "the softmax", out, ref, budget, case.dtype)
        if lines:
            if isinstance(out, torch.Tensor) and out.shape == ref.shape:
                tol = max(budget.allowed * 4, _rel(case.dtype) * float(ref.abs().max()))
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
        _Guess("l_b is not rescaled to the new max: l = l_a·exp(m_a − m) + l_b·exp(m_b − m).",
               lambda: m + torch.log(l_a * scale_a + l_b)),
        _Guess("l_a is not rescaled to the new max: l = l_a·exp(m_a − m) + l_b·exp(m_b − m).",
               lambda: m + torch.log(l_a + l_b * scale_b)),
        _Guess("the sums are added as they are, as if they shared a max: rescale each to the new max first, "
               "l = l_a·exp(m_a − m) + l_b·exp(m_b − m).", lambda: m + torch.log(l_a + l_b)),
    ]
    return _pick([g for g in guesses if _fits(lse, g.output(), ref, tol, 1e-3)])


@_quietly
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
            lines, _ = _compare(f"{exercise}: wrong merged state on {text}", "m + log(l)", lse, ref, budget, torch.float32,
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


# ----------------------------------------------------------------------------------------------
# Numbers (FLOPs, bytes, …)
# ----------------------------------------------------------------------------------------------

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


@_quietly
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
    lines = ["{}: {}({}) returned {}, expected {}".format(exercise, fn.__name__, call, *_fmt_apart(got, want))]
    if want and got:
        lines[0] += f" ({_fmt_apart(got / want, 1.0)[0]}× the right value)"
    hint = _value_hint(mistakes, returned, rel) if len(returned) == len(arguments) else None
    if hint:
        lines.append(f"  hint: {hint}")
    raise CheckFailed("\n".join(lines))
