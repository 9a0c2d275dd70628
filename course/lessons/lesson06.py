"""Lesson 06's checks: the causal mask's alignments, causal attention in PyTorch, the skipped, full and diagonal
tiles, and the causal kernels (tile skipping measured before the values).
"""
from __future__ import annotations

from typing import Iterable

import torch

from course.errors import CheckFailed
from course.grading.checks import F16, check_explicit_scale, kernel_options, learner_call, track_step
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.inputs import Case

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _mask(n_q: int, n_k: int, shift: int, strict: bool = False) -> torch.Tensor:
    i, j = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    return j < i + shift if strict else j <= i + shift


_MASK_MISTAKES = [
    ("the alignments are swapped: bottom-right shifts the diagonal by Nk − Nq, so the last query sees every key; "
     "top-left starts it at the first key.", lambda n_q, n_k, top_left: _mask(n_q, n_k, 0 if not top_left else n_k - n_q)),
    ("query i sees key j when j <= i + offset: the key on the diagonal is its own position and is visible (j < i "
     "hides it).", lambda n_q, n_k, top_left: _mask(n_q, n_k, 0 if top_left else n_k - n_q, strict=True)),
    ("this is the bottom-right mask for both: with top_left=True the offset is 0.",
     lambda n_q, n_k, top_left: _mask(n_q, n_k, n_k - n_q)),
    ("this is the top-left mask for both: the course's convention (top_left=False) is bottom-right, offset Nk − Nq.",
     lambda n_q, n_k, top_left: _mask(n_q, n_k, 0)),
]


def _causal_mask(fn, arguments: Iterable[dict] | None = None) -> Report:
    """Masks compared element by element; the hint names the one mistake that gives every mask returned."""
    args = arguments or [dict(n_q=n_q, n_k=n_k, top_left=top_left) for n_q, n_k in ((4, 4), (3, 7), (7, 3), (1, 5), (5, 1))
                         for top_left in (False, True)]
    returned, first_wrong = [], None
    for a in args:
        call = ", ".join(f"{name}={value}" for name, value in a.items())
        got = learner_call("06.causal_mask", fn, (), dict(a), f"{getattr(fn, '__name__', 'causal_mask')}({call})")
        want = _mask(a["n_q"], a["n_k"], 0 if a["top_left"] else a["n_k"] - a["n_q"])
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckFailed(f"06.causal_mask: causal_mask({call}) returned {shape}; expected a bool tensor of shape "
                              f"{tuple(want.shape)} (Nq, Nk).")
        got = got.to(torch.bool).cpu()
        returned.append((a, got))
        if first_wrong is None and not torch.equal(got, want):
            i, j = (got != want).nonzero()[0].tolist()
            first_wrong = (f"06.causal_mask: causal_mask({call}) is wrong at query {i}, key {j}: it says "
                           f"{'visible' if got[i, j] else 'hidden'}, the key is {'visible' if want[i, j] else 'hidden'}")
    if first_wrong is None:
        return Report("06.causal_mask", len(args))
    fits = [text for text, formula in _MASK_MISTAKES if all(torch.equal(g, formula(**a)) for a, g in returned)]
    raise CheckFailed(first_wrong + (f"\n  hint: {fits[0]}" if len(fits) == 1 else ""))


def _causal_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    # Nq > Nk with bottom-right alignment leaves the first Nq − Nk rows without a key: O = 0, LSE = −inf.
    cases = list(cases) if cases is not None else [
        Case(1, 1, 16, causal=True), Case(17, 17, 32, kind="peaky", causal=True, seed=1),
        Case(10, 30, 16, causal=True, seed=2), Case(30, 10, 16, causal=True, seed=3),
        Case(40, 1, 32, causal=True, seed=4), Case(24, 24, 64, dtype=torch.float16, causal=True, seed=5)]
    return check_attention("06.causal_torch", fn, cases, with_lse=True)


def _tile_count(part: int, alignment: str = "bottom_right"):
    """One of the (skipped, full, diagonal) counts, as a function of the sizes."""
    def count(n_q: int, n_k: int, block_m: int, block_n: int) -> int:
        from course.models.causal import tile_counts  # here, not on top: +1 ms to `import course`
        counts = tile_counts(n_q, n_k, block_m, block_n, alignment)
        return (counts.skipped, counts.full, counts.diagonal)[part]
    return count


def _counted(part: int, skipped=lambda r0, r1, c0, c1, offset: c0 > r1 + offset,
             full=lambda r0, r1, c0, c1, offset: c1 <= r0 + offset, clipped: bool = True):
    """One of the (skipped, full, diagonal) counts as a learner's loop with these two tests gives it: the right ones
    by default, a mistake's when one of them is changed (``clipped=False``: tile edges not clipped at N)."""
    def count(n_q: int, n_k: int, block_m: int, block_n: int) -> int:
        offset, counts = n_k - n_q, [0, 0, 0]
        for r0 in range(0, n_q, block_m):
            r1 = (min(n_q, r0 + block_m) if clipped else r0 + block_m) - 1
            for c0 in range(0, n_k, block_n):
                c1 = (min(n_k, c0 + block_n) if clipped else c0 + block_n) - 1
                counts[0 if skipped(r0, r1, c0, c1, offset) else 1 if full(r0, r1, c0, c1, offset) else 2] += 1
        return counts[part]
    return count


# The mistakes of a tile count, each as the loop that makes it (the tests of a tile's rows r0..r1 and keys c0..c1).
_TILE_MISTAKES = [
    ("the tiles the diagonal crosses are counted as skipped. A tile is skipped only when not even its last row sees "
     "its first key, c0 > r1 + offset; one that some rows see in part is diagonal (computed, with the mask).",
     dict(skipped=lambda r0, r1, c0, c1, offset: c1 > r0 + offset)),
    ("the tiles the diagonal crosses are counted as full. A tile is full only when even its first row sees its last "
     "key, c1 <= r0 + offset; one that some rows see in part is diagonal.",
     dict(full=lambda r0, r1, c0, c1, offset: c0 <= r1 + offset)),
    ("the skip test is one key off: the last row r1 sees key r1 + offset itself (j <= i + offset), so a tile is "
     "skipped when c0 > r1 + offset.", dict(skipped=lambda r0, r1, c0, c1, offset: c0 >= r1 + offset)),
    ("the skip test is one key off: key r1 + offset + 1 is the first that the last row r1 does not see, so a tile is "
     "skipped when c0 > r1 + offset.", dict(skipped=lambda r0, r1, c0, c1, offset: c0 > r1 + offset + 1)),
    ("the full test is one key off: the first row r0 sees key r0 + offset itself (j <= i + offset), so a tile is "
     "full when c1 <= r0 + offset.", dict(full=lambda r0, r1, c0, c1, offset: c1 < r0 + offset)),
    ("the full test is one key off: key r0 + offset + 1 is already hidden from the first row r0, so a tile is full "
     "when c1 <= r0 + offset.", dict(full=lambda r0, r1, c0, c1, offset: c1 <= r0 + offset + 1)),
    ("whether a tile is skipped is up to its last row r1, which sees the most keys: skip it when c0 > r1 + offset, "
     "not when the first row misses it.", dict(skipped=lambda r0, r1, c0, c1, offset: c0 > r0 + offset)),
    ("whether a tile is full is up to its first row r0, which sees the fewest keys: it is full when c1 <= r0 + "
     "offset, not when the last row sees all of it.", dict(full=lambda r0, r1, c0, c1, offset: c1 <= r1 + offset)),
    ("a partial tile ends at the matrix's edge: its last row is min(Nq, r0 + block_m) − 1 and its last key "
     "min(Nk, c0 + block_n) − 1, not the padded edges.", dict(clipped=False)),
]


def _tile_counts(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n_q=4, n_k=4, block_m=1, block_n=1), dict(n_q=256, n_k=256, block_m=64, block_n=64),
                         dict(n_q=256, n_k=256, block_m=64, block_n=32), dict(n_q=100, n_k=300, block_m=32, block_n=64),
                         dict(n_q=300, n_k=100, block_m=64, block_n=32), dict(n_q=130, n_k=130, block_m=64, block_n=64),
                         # the last query tile is one row, which sees every key: the partial last key tile is full
                         dict(n_q=129, n_k=100, block_m=64, block_n=64)]
    probe = learner_call("06.tile_counts", fn, (), dict(args[0]), "tile_counts(...)")
    if not (isinstance(probe, (tuple, list)) and len(probe) == 3):
        raise CheckFailed(f"06.tile_counts: tile_counts returned {probe!r}; expected three numbers "
                          "(skipped, full, diagonal).")
    report = None
    for part, name in enumerate(("skipped", "full", "diagonal")):
        def one(part=part, **kwargs):
            return fn(**kwargs)[part]
        one.__name__ = f"tile_counts[{name}]"
        mistakes = [Mistake("the mask is bottom-right aligned (offset Nk − Nq): these are the top-left counts.",
                            _tile_count(part, "top_left"))]
        mistakes += [Mistake(text, _counted(part, **tests)) for text, tests in _TILE_MISTAKES]
        report = check_values("06.tile_counts", one, _tile_count(part), args, mistakes)
    return report


_BOUND_PROBES = (Case(34, 97, 16, causal=True, seed=67), Case(35, 97, 16, causal=True, seed=68))


def _causal(exercise: str):
    """The check of the Triton causal kernel (its id comes from its row)."""
    def run(fn, cases: Iterable[Case] | None = None) -> Report:
        cases = cases or [Case(1, 1, 16, causal=True), Case(17, 17, 32, kind="peaky", causal=True, seed=1),
                          Case(129, 129, 64, causal=True, seed=2), Case(17, 129, 16, causal=True, seed=3),
                          Case(129, 17, 32, causal=True, seed=4), Case(40, 40, 16, dtype=F16, causal=True, seed=5),
                          Case(65, 33, 16, causal=False, seed=6)]
        from course.grading import causal_tiles  # here, not on top: +20 ms to `import course`
        # The key tiles each program loads and masks, before the values: the course's probes and two where a bound
        # one key off changes a tile (64 × 32 tiles: the last key a block sees opens a tile, and the first row's last
        # key ends one, or is one short of it).
        causal_tiles.causal_tiles_triton(exercise, fn, causal_tiles.CAUSAL_PROBES + _BOUND_PROBES)
        report = check_attention(exercise, fn, cases, with_lse=True, pass_causal=True, **kernel_options())
        check_explicit_scale(exercise, fn, Case(9, 40, 32, causal=True, seed=9), 0.3, pass_causal=True,
                             with_lse=True, **kernel_options())
        return report
    return run


EXERCISES = (
    # The causal step in every track its rows declare (course/tracks/table.py): ids such as 06.causal_cuda.
    *step_exercises("06", "causal", {"triton": "Causal masking with the stage split",
                                     "cuda": "Causal masking: skip the future, mask the diagonal (CUDA C)"},
                    {"triton": _causal, "cuda": track_step}),
    Exercise("06.causal_mask", "The causal mask, bottom-right and top-left", _causal_mask),
    Exercise("06.causal_torch", "Causal attention in PyTorch, rows that see no key included", _causal_torch),
    Exercise("06.tile_counts", "Skipped, full and diagonal tiles of causal attention", _tile_counts),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "06.causal_mask": lambda r: dict(n_q=r.randint(1, 12), n_k=r.randint(1, 12), top_left=r.random() < 0.5),
    "06.tile_counts": lambda r: dict(n_q=draw_size(r, high=600), n_k=draw_size(r, high=600),
                                     block_m=r.choice((16, 32, 64, 128)), block_n=r.choice((16, 32, 64, 128))),
}

MODEL_POLICY = {
    "06.causal_mask": ModelPolicy(("course.models.causal.offset",),
                                  "it is the course's offset of each alignment, which the exercise asks you to work "
                                  "out"),
    "06.tile_counts": ModelPolicy(("course.models.causal.tile_counts", "course.models.causal.tile_kind",
                                   "course.models.causal.visible_key_tiles", "course.models.causal.program_work"),
                                  "it is the course's own tile model, and the exercise is to count the tiles yourself "
                                  "(course.models.causal.offset may give you the offset)",
                                  allowed=("course.models.causal.offset",)),
}

LADDERS = (
    ladder("06.causal_mask",
           "Query i sees key j when j <= i + offset. What is the offset of each alignment?",
           "Bottom-right: offset = Nk − Nq (the last query sees every key). Top-left: offset = 0.",
           "Rows against columns, by broadcasting:\n"
           "    offset = 0 if top_left else n_k - n_q\n"
           "    i = torch.arange(n_q)[:, None]\n"
           "    j = torch.arange(n_k)[None, :]\n"
           "    return j <= i + offset",
           cell="06_causal_masking/causal_mask"),
    ladder("06.causal_torch",
           "Lesson 01's attention with the masked scores set to -inf before the softmax. What happens to a row that "
           "sees no key?",
           "Its scores are all -inf: logsumexp gives -inf, and exp(s - lse) is exp(-inf + inf) = NaN.",
           "Subtract 0 instead of the LSE where the LSE is -inf (`torch.where`): P is 0 there, O = P @ V = 0, and the "
           "LSE stays -inf.",
           cell="06_causal_masking/causal_torch"),
    ladder("06.tile_counts",
           "A tile's rows are r0 .. r1 and its keys c0 .. c1 (clip both at N). Which row sees the most keys, and which "
           "the fewest?",
           "Skipped: even the last row r1 does not reach the first key, c0 > r1 + offset. Full: even the first row "
           "sees the last key, c1 <= r0 + offset.",
           "Loop over every (query tile, key tile), classify it with those two tests (diagonal otherwise) and count; "
           "offset = Nk − Nq.",
           cell="06_causal_masking/tile_counts"),
    *step_ladders("06", "causal", (), {
        "triton": (
            "Three kinds of key tiles for a query block: skipped (never loaded), full (no mask), diagonal (masked). Two "
            "numbers split the key axis between them, `lo` and `hi`: which row of the block decides each, and which "
            "keys does the masked stage hide?",
            "`hi` is one past the last key the block's last real row sees: that row is min(start_m + BLOCK_M, Nq) − 1 "
            "and sees keys up to it + (Nk − Nq); never below 0. `lo` ends the tiles every row sees in full: the "
            "first row, start_m, sees keys up to start_m + (Nk − Nq), so round one past that down to a multiple of "
            "`BLOCK_N`. The masked stage keeps key j for row i when j < Nk and, causal, j <= i + (Nk − Nq); a row "
            "whose max is still -inf subtracts 0 instead (2^(-inf − (-inf)) is NaN).",
            "The masked stage, in `attend_key_blocks`:\n"
            "    visible = key_ok[None, :]\n"
            "    if CAUSAL:\n"
            "        visible = visible & (key_idx[None, :] <= rows[:, None] + diagonal)\n"
            "    s = tl.where(visible, s, float(\"-inf\"))\n"
            "    m_new = tl.maximum(m, tl.max(s, axis=1))\n"
            "    m_sub = tl.where(m_new == float(\"-inf\"), 0.0, m_new)",
            "The bounds, in `causal_attention_kernel` (`diagonal` is Nk − Nq):\n"
            "    hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)\n"
            "    lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N"),
        "cuda": (
            "Three kinds of key tiles for a block: skipped (never loaded), full (no mask), diagonal (mask). Where does "
            "the tile loop have to stop?",
            "The loop visits keys 0 .. `kv_end` − 1, so `kv_end` is one past the last key the block's last row sees: "
            "that row, `row0 + block_m - 1`, sees keys up to `row0 + block_m - 1 + offset`, so "
            "`kv_end = row0 + block_m + offset`, clamped to 0 .. `n_k` (`offset` is `n_k - n_q`). Mask keys "
            "j > i + `offset` on tiles the diagonal crosses.",
            "Rows that have seen no key yet keep m = -inf: subtract `m_use = m_new == NEG_INF ? 0.0f : m_new` instead "
            "of m_new, so every p and alpha is exp(-inf) = 0 and the row stays empty (the epilogue, given, writes "
            "O = 0 and LSE = -inf for a row that never saw a key)."),
    }, functions={"triton": ("attend_key_blocks", "causal_attention_kernel")}),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order; and where its Metal step lives: in
# lesson 05's file, whose causal parts the deck shows.
SLIDES = {"pictures": ({"name": "causal-tiles", "widget": "course.widgets.causal:causal_explorer",
                        "controls": (("N_q", 192), ("programs", 3))},),
          "borrowed": {"metal": "metal/05_mma.metal"}}
