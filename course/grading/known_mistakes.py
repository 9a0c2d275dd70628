"""The usual mistakes of an attention kernel, recomputed: what a kernel with each mistake returns, in float64, and
the hint when exactly one of them (or one family) gives the learner's output.

A hint rests on this evidence only (:mod:`course.grading.comparison` has the rule): every guess here is an output
computed the way the mistaken kernel computes it, compared with the learner's whole output within a small part of
its scale (:func:`reproduction_tolerance`), and dropped when it is the right answer too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from course.grading.comparison import close
from course.inputs import Case
from course.reference import causal_mask

__all__ = ["LOG2E", "BLOCKS", "Guess", "pick_hint", "reproduction_tolerance", "fits", "attend", "paddings",
           "case_masks", "masked_scores", "row_sets", "nonfinite_hint", "pattern_hint", "lse_hint", "gradients_with",
           "backward_hint"]


LOG2E = 1.4426950408889634


BLOCKS = (1, 8, 16, 32, 64, 128)
"""Keys (or columns) per step of the course's kernels: one key at a time (lesson 01), the tiles of the
CUDA and Metal steps (8 to 64, grading and default tiles), the Triton tiles (16 to 64) and the 128
columns of lesson 02's softmax. A mistake in the online update is recomputed with each of them."""


@dataclass(frozen=True)
class Guess:
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


def pick_hint(fitting: list[Guess]) -> str | None:
    """The hint for the guesses that fit: one text, or one family's, else none (the evidence is ambiguous)."""
    texts = {g.text for g in fitting}
    if len(texts) == 1:
        return texts.pop()
    families = {g.family for g in fitting}
    if len(families) == 1 and "" not in families:
        return _FAMILIES[families.pop()]
    return None


def reproduction_tolerance(dtype: torch.dtype) -> float:
    """How closely a kernel with a mistake reproduces that mistake recomputed in float64, relative to the
    output's scale: float32 arithmetic (or TF32 matmuls) stays well within 0.2 %; 16-bit inputs within 1 %."""
    return 2e-3 if dtype in (torch.float32, torch.float64) else 1e-2


def fits(out: torch.Tensor, guess: torch.Tensor | None, ref: torch.Tensor, tol: float, rel: float = 1e-2) -> bool:
    """``out`` is the guess (within ``tol``, or ``rel`` of the guess's own scale) and the guess is not the right
    answer (it is farther than ``tol`` from ``ref``)."""
    if guess is None or guess.shape != out.shape or not bool(torch.isfinite(guess).all()):
        return False
    own = max(tol, rel * float(guess.abs().max()) if guess.numel() else 0.0)
    return close(out, guess, own) and not close(guess, ref, tol)


def attend(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
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


def paddings(n: int) -> list[int]:
    """How many padding keys (or columns) the course's block sizes add after n, each once (0 left out)."""
    pads = {(-n) % b for b in BLOCKS if b > 1} | {(1 << max(n - 1, 0).bit_length()) - n}
    return sorted(p for p in pads if p > 0)


def case_masks(n_q: int, n_k: int) -> dict[str, torch.Tensor | None]:
    """The mask a mistake uses instead of the right one (bottom-right causal: j <= i + Nk - Nq)."""
    i = torch.arange(n_q)[:, None]
    j = torch.arange(n_k)[None, :]
    return {"none": None, "causal": j <= i + (n_k - n_q), "top-left": j <= i, "diagonal-hidden": j < i + (n_k - n_q)}


def masked_scores(raw: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    s = raw * scale
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def _attention_guesses(q, k, v, case: Case, scale: float, explicit_scale: bool) -> list[Guess]:
    """The usual mistakes in an attention forward pass, each as the output it would give."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    raw = q64 @ k64.transpose(-1, -2)
    masks = case_masks(n_q, n_k)
    mask = masks["causal"] if case.causal else None
    s = masked_scores(raw, mask, scale)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    zeros = "zeros_causal" if case.causal else "zeros_one_key" if n_k == 1 else "zeros"
    guesses = [
        Guess(_ZEROS, lambda: torch.zeros_like(s[..., :1]) * v64[..., :1, :], zeros),
        Guess("every row is the plain mean of V (over the keys it sees): the weights are uniform, so the scores "
               "never reached the softmax.", lambda: attend(masked_scores(raw, mask, 0.0), v64)),
        Guess("O is acc / l: the division by the row sum l is missing.", lambda: torch.exp(s - m) @ v64),
        Guess("each row is the right answer times exp(m), m its largest score: the weights were exponentiated "
               "without subtracting the max that l was summed against; use exp(s − m) for both.",
               lambda: attend(s, v64) * torch.exp(m)),
        Guess(_WRONG_AXIS, lambda: torch.softmax(s, dim=-2).nan_to_num(0.0) @ v64),
        Guess(_WRONG_AXIS, lambda: (torch.exp(s - m) / torch.exp(s - m).sum(dim=-2, keepdim=True)).nan_to_num(0.0)
               @ v64),
        Guess("the scale was applied twice.", lambda: attend(masked_scores(raw, mask, scale * scale), v64)),
        Guess("the scores carry log2(e) but are exponentiated with exp: with log2(e) folded into the scale, use "
               "exp2 (or leave the factor out and use exp).", lambda: attend(masked_scores(raw, mask, scale * LOG2E), v64)),
    ]
    if scale != 1.0:
        guesses.append(Guess("this is attention without the scale (1/sqrt(D) unless one is given): multiply the "
                              "scores by `scale` before the softmax.", lambda: attend(masked_scores(raw, mask, 1.0), v64)))
    if explicit_scale and not math.isclose(scale, 1.0 / math.sqrt(d)):
        guesses.append(Guess(f"the scale you were given ({scale!r}) is ignored: this is attention with the default "
                              "1/sqrt(D). Use `scale` when it is passed.",
                              lambda: attend(masked_scores(raw, mask, 1.0 / math.sqrt(d)), v64)))
    if case.causal:
        guesses += [
            Guess("the causal mask is missing: query i may only see keys j ≤ i + (Nk − Nq).",
                   lambda: attend(masked_scores(raw, None, scale), v64)),
            Guess("the causal mask is aligned top-left (j ≤ i); here it is aligned bottom-right: query i sees keys "
                   "j ≤ i + (Nk − Nq).", lambda: attend(masked_scores(raw, masks["top-left"], scale), v64)),
            Guess("the causal mask hides the diagonal: query i sees keys j ≤ i + (Nk − Nq), the key j = i + (Nk − Nq) "
                   "included.", lambda: attend(masked_scores(raw, masks["diagonal-hidden"], scale), v64), zeros),
        ]
    else:
        guesses.append(Guess("this is causal attention; this exercise wants every query to see every key.",
                              lambda: attend(masked_scores(raw, masks["causal"], scale), v64)))
    if n_k > 1 or not case.causal:
        guesses.append(Guess("the last key is left out: the loop over the keys stops one early.",
                              lambda: attend(s[..., :-1], v64[..., :-1, :]) if n_k > 1 else
                              torch.zeros_like(s[..., :1]) * v64[..., :1, :], zeros))
    if not case.causal:
        for pad in paddings(n_k):
            def padded(pad=pad):
                zeros = torch.zeros(*s.shape[:-1], pad, dtype=torch.float64)
                return attend(torch.cat([s, zeros], dim=-1),
                               torch.cat([v64, torch.zeros(*v64.shape[:-2], pad, d, dtype=torch.float64)], dim=-2))
            guesses.append(Guess("the padding keys of the last block count in the softmax (a score of 0, not −inf): "
                                  "mask the keys past the end with −inf before the max and the exp.", padded))
        if 1 not in paddings(n_k):  # else the guess above, with one padding key, says it
            def one_past():
                zeros = torch.zeros(*s.shape[:-1], 1, dtype=torch.float64)
                return attend(torch.cat([s, zeros], dim=-1),
                               torch.cat([v64, torch.zeros(*v64.shape[:-2], 1, d, dtype=torch.float64)], dim=-2))
            guesses.append(Guess("one key past the last counts in the softmax (a padding key, score 0): keys run from "
                                  "0 to Nk − 1, so the mask keeps key j when j < Nk, not j <= Nk.", one_past))
        if n_q < n_k:
            guesses.append(Guess("only the first Nq keys count: the mask compares key positions with the number of "
                                  "queries (N_CTX_Q) where it means the number of keys (N_CTX_K).",
                                  lambda: attend(s[..., :n_q], v64[..., :n_q, :])))
    for block in BLOCKS:
        if block >= n_k and block > 1:
            continue  # one block holds every key: nothing is ever rescaled
        b = block
        guesses += [
            Guess("l and acc are not rescaled when the max grows: multiply both by exp(m_old − m_new) before adding "
                   "the new terms.", lambda b=b: _online(s, v64, b, rescale_l=False, rescale_acc=False), "rescale"),
            Guess("acc is not rescaled when the max grows: multiply it by exp(m_old − m_new) before adding the new "
                   "terms, as l is.", lambda b=b: _online(s, v64, b, rescale_acc=False), "rescale"),
            Guess("l is not rescaled when the max grows: multiply it by exp(m_old − m_new) before adding the new "
                   "terms, as acc is.", lambda b=b: _online(s, v64, b, rescale_l=False), "rescale"),
            Guess("only the last step's keys count: each step wipes out the ones before, as it does when the "
                   "running max m is never updated to m_new (the rescale factor exp(m − m_new) stays exp(−inf) = 0).",
                   lambda b=b: _online(s, v64, b, keep_max=False)),
        ]
    return guesses


def _hard_max(q, k, v, case: Case, scale: float) -> torch.Tensor:
    """Each row's V at its largest visible score (0 for a row that sees no key): what attention tends to as the
    scores grow."""
    mask = causal_mask(q.shape[-2], k.shape[-2]) if case.causal else None
    s = masked_scores(q.double() @ k.double().transpose(-1, -2), mask, scale)
    pick = torch.nn.functional.one_hot(s.argmax(dim=-1), s.shape[-1]).double()
    return (pick * torch.isfinite(s).any(dim=-1, keepdim=True)) @ v.double()


def row_sets(bad: torch.Tensor) -> set[int]:
    """Indices (over the flattened leading dims and rows) of the rows where ``bad`` holds."""
    return set(bad.reshape(-1, bad.shape[-1]).any(dim=-1).nonzero().flatten().tolist()) if bad.dim() > 1 else set(
        bad.nonzero().flatten().tolist())


def nonfinite_hint(out64: torch.Tensor, q, k, v, case: Case, scale: float, blocked: bool = True) -> str | None:
    """A hint for NaN/Inf rows, when a known mistake gives non-finite values in exactly those rows. ``blocked``: the
    answer loops over blocks of keys with a running max, sum and accumulator (the tiled kernels, lesson 03 on), whose
    two ways to make every row NaN the last hint names."""
    bad = row_sets(~torch.isfinite(out64))
    raw = q.double() @ k.double().transpose(-1, -2)
    mask = causal_mask(q.shape[-2], k.shape[-2]) if case.causal else None
    s = masked_scores(raw, mask, scale)
    fitting: list[Guess] = []
    if case.causal:
        empty = row_sets(torch.isinf(s).all(dim=-1, keepdim=True).expand_as(s))
        if bad and bad <= empty:
            fitting.append(Guess("the NaN rows are rows that see no key (Nq > Nk): their max stays −inf, and "
                                  "exp(s − m) = exp(−inf + inf) is NaN. Guard m = −inf (such a row's O is 0, its LSE "
                                  "−inf).", lambda: None))
    if case.kind == "peaky":
        for dtype in {torch.float32, case.dtype}:
            if not dtype.is_floating_point or torch.finfo(dtype).bits > 32:
                continue
            # exp() without the max: rows whose largest score passes the dtype's range become inf / inf.
            over = row_sets(torch.isinf(torch.exp(s.to(dtype))) & torch.isfinite(s))
            if over and bad == over:
                fitting.append(Guess("exp() overflows on large scores: subtract the row max before exponentiating.",
                                      lambda: None, "range"))
            # A max taken over the unscaled scores: every weight of a row underflows, and l = 0.
            m_raw = masked_scores(raw, mask, 1.0).amax(dim=-1, keepdim=True)
            under = (torch.exp((s - m_raw).to(dtype)).sum(dim=-1, keepdim=True) == 0) & torch.isfinite(m_raw)
            under_rows = row_sets(under.expand_as(s))
            if scale != 1.0 and under_rows and bad == under_rows:
                fitting.append(Guess("every weight of these rows underflows to 0, so l = 0 and O = 0/0: the max "
                                      "subtracted is larger than every score. Take the max of the scaled scores, "
                                      "scale · q·k.", lambda: None, "range"))
    rows = row_sets(torch.ones_like(out64, dtype=torch.bool))
    if blocked and not fitting and bad == rows and not (case.causal and empty):
        return (f"every row is NaN: O = acc / l with l still 0 or made NaN. Either no key was ever added (the loop "
                f"over the key blocks never ran: it starts at key 0 and runs while a block's first key is < Nk, at "
                f"least once for Nk = {k.shape[-2]}), or the first rescale multiplied l = 0 by inf (alpha = "
                "exp(m_old − m_new) is exp(−inf) = 0 on the first step; exp(m_new − m_old) is inf).")
    return pick_hint(fitting)


def pattern_hint(out: torch.Tensor, q, k, v, case: Case, scale: float, ref: torch.Tensor, tol: float,
                  explicit_scale: bool = False) -> str | None:
    """Recognise the usual mistakes by recomputing what they would have produced; None unless exactly one
    mistake (or one family of them) gives the learner's output."""
    fitting = []
    for guess in _attention_guesses(q, k, v, case, scale, explicit_scale):
        output = guess.output()
        if fits(out, output, ref, tol, reproduction_tolerance(case.dtype)):
            fitting.append((guess, output))
    # On peaky rows many mistakes leave each row ≈ the V row of its largest score (the other weights vanish,
    # or underflow along with it). A guess that gives that too is no evidence against the others.
    hard = _hard_max(q, k, v, case, scale)
    if close(out, hard, tol):
        fitting = [(g, o) for g, o in fitting if not close(o, hard, max(tol, reproduction_tolerance(case.dtype) * float(o.abs().max())))]
    fitting = [g for g, _ in fitting]
    if not bool(out.any()):  # nothing at all came back: only the mistakes that leave O exactly 0 explain that
        fitting = [g for g in fitting if g.family.startswith("zeros")]
    # Row i holding row i ± 1's answer, and a transposed square output, are read off the output itself.
    shifted = out.shape[-2] > 1 and (close(out[..., 1:, :], ref[..., :-1, :], tol)
                                     or close(out[..., :-1, :], ref[..., 1:, :], tol))
    if shifted:
        fitting.append(Guess("row i holds the answer for a neighbouring row: an off-by-one in the row index.",
                              lambda: None))
    square = out.shape[-1] == out.shape[-2]
    if square and close(out.transpose(-1, -2).contiguous(), ref, tol) and not close(out, ref, tol):
        fitting.append(Guess("the output is transposed.", lambda: None))
    return pick_hint(fitting)


def lse_hint(lse: Any, ref: torch.Tensor, m: torch.Tensor, tol: float, rel: float) -> str | None:
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
        Guess("the LSE is in base-2 units: multiply it by ln 2 (divide by log2(e)) for natural-log units.",
               lambda: want * LOG2E),
        Guess("LSE_i = m_i + log(l_i): the running max m_i is missing.", lambda: want - m),
        Guess("LSE_i = m_i + log(l_i): the log(l_i) term is missing.", lambda: m),
        Guess("the LSE is too large by each row's max, counted twice: with P = exp(S) and nothing subtracted, l "
               "already holds e^m, and m + log(l) adds m again. Subtract the running max before exponentiating: "
               "P = exp(S − m).", lambda: want + m),
    ]
    return pick_hint([g for g in guesses if fits(got, g.output(), want, tol, rel)])


def gradients_with(q, k, v, o, lse, do, mask, p_scale: float, grad_scale: float, *, use_lse: bool = True,
                   delta: bool = True, dq_keys: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FlashAttention backward in float64 from the given O and LSE, with the choices a mistake changes:
    the mask, the scale inside P and on dQ/dK, P rebuilt without the LSE, Δ left out, the keys dQ sums over
    (``dq_keys``, 1 for a key that counts)."""
    q64, k64, v64, o64, do64 = (t.detach().to("cpu", torch.float64) for t in (q, k, v, o, do))
    s = masked_scores(q64 @ k64.transpose(-1, -2), mask, p_scale)
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


def backward_hint(result, wanted, args, case: Case, scale: float, wrong: list[str], tols: dict[str, float]
                   ) -> str | None:
    """A hint when one known backward mistake explains every wrong gradient (the right ones are left as they are)."""
    got = {name: g.detach().to("cpu", torch.float64) for name, g in zip(("dq", "dk", "dv"), result)}
    if not all(bool(torch.isfinite(got[name]).all()) for name in wrong):
        # NaN in exactly the rows of dQ whose LSE is -inf: exp(S - LSE) was taken there unguarded.
        empty = set(torch.isneginf(args[4].detach().cpu()).reshape(-1).nonzero().flatten().tolist())
        if empty and "dq" in wrong and row_sets(~torch.isfinite(got["dq"])) == empty:
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
        Guess("dS = P ∘ (dP − Δ) with Δ_i = Σ_d dO_id · O_id: the Δ term is missing.", recomputed(delta=False)),
        Guess("P is rebuilt as exp(S) without the saved LSE: P = exp(scale · Q Kᵀ − LSE).", recomputed(use_lse=False)),
        Guess("the backward uses scale 1 instead of the forward's scale: P = exp(scale · Q Kᵀ − LSE), dQ = scale · dS K "
               "and dK = scale · dSᵀ Q.", recomputed(p_scale=1.0, grad_scale=1.0)),
        Guess("dQ is missing the factor scale: dQ = scale · dS K.", triple(right[0] / scale, right[1], right[2])),
        Guess("dK is missing the factor scale: dK = scale · dSᵀ Q.", triple(right[0], right[1] / scale, right[2])),
        Guess("dK and dV are swapped.", triple(right[0], right[2], right[1])),
    ] + [Guess(f"{name} is all zeros: is it ever written (or returned), and does anything ever add to it (the loop "
                "over the blocks that feed it)?",
                triple(*(torch.zeros_like(g) if n == name else g for n, g in zip(("dq", "dk", "dv"), right))))
         for name in ("dq", "dk", "dv")]
    # dQ summed over one key less in every block of keys (a loop over the block's keys that stops one early).
    for block in BLOCKS:
        if 1 < block < case.n_k:
            dropped = torch.arange(case.n_k) % block == block - 1
            guesses.append(Guess("dQ leaves out one key of every block of keys, its last: the sum of dS_ij K_j over the "
                                  "block's keys stops one early (j < BLOCK_N − 1 where j < BLOCK_N is meant).",
                                  recomputed(dq_keys=~dropped)))
    if case.causal:
        guesses += [
            Guess("the backward runs without the causal mask the forward used.", recomputed(mask=None)),
            Guess("the backward's causal mask hides the diagonal key (j < i + (Nk − Nq)); the forward let it through "
                   "(j ≤ i + (Nk − Nq)).", recomputed(mask=masks["diagonal-hidden"])),
        ]
    fitting = []
    for guess in guesses:
        grads = guess.output()
        if all(fits(got[name], grads[name], want[name], tols[name], reproduction_tolerance(case.dtype)) for name in wrong):
            fitting.append(guess)
    return pick_hint(fitting)
