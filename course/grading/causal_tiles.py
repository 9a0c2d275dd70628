"""Causal tile skipping, measured: a causal kernel loads exactly the key tiles its rows see.

A kernel that visits every key tile and masks gives the same O as one that skips the future, so the tiles are
measured (lesson 06; the backward of lesson 07), against the tiles the rows see under the course's causal mask
(:mod:`course.models.causal`, bottom-right aligned):

- Triton: the key tiles each program loads, from the interpreter's record of which program read which elements
  (:func:`causal_tiles_triton`, :func:`backward_tiles_triton`; the split backward must also make no atomic update);
- CUDA C and Metal: counters mode counts the bytes each buffer was read, not per block, so the bytes of K are
  compared with whole schedules (the right bound, a top-left one, no bound, one key short or long) on shapes
  where exactly one block has tiles to skip (:func:`causal_tiles_simt`; the probes are declared on the step's row).

Once a Triton forward loads the right tiles, which of them it masked is measured too (:mod:`course.grading.causal_masks`).
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from course.errors import CheckFailed
from course.grading import causal_masks
from course.grading.measuring import (lie, offset_text, rows_loaded, run_recorded, simt_backward, simt_forward, span,
                                      step_probe, tier_device, interpreted, tiles_text)
from course.inputs import Case
from course.models import causal
from course.reference import attention
from course.simt.kernel import collect_counters

__all__ = ["CAUSAL_PROBES", "causal_tiles_triton", "backward_tiles_triton", "causal_tiles_simt"]


# Shapes a causal kernel is measured on (float32, so the Triton check configs give 64 x 32 forward tiles and
# 32 x 32 backward tiles): Nq = Nk, more queries than keys (the first rows see nothing), more keys than
# queries. No length is a multiple of a tile, so a bound that runs a whole tile past the end shows.
CAUSAL_PROBES = (Case(150, 150, 16, causal=True, seed=61), Case(150, 90, 16, causal=True, seed=62),
                 Case(90, 150, 16, causal=True, seed=63))


@dataclass(frozen=True)
class _Visits:
    """What the programs of one launch loaded, as tiles of the score matrix."""
    owner: str             # "query": a program owns a query tile and loads key tiles; "key": the other way
    block_m: int
    block_n: int
    loaded: dict[int, set[int]]  # owned tile -> tiles of the other side it loaded (over every head)


def _visits(launch, owner: str, argument: str) -> _Visits | None:
    constants = launch.constants
    block_m, block_n = constants.get("BLOCK_M"), constants.get("BLOCK_N")
    rows = rows_loaded(launch, argument)
    if rows is None or not isinstance(block_m, int) or not isinstance(block_n, int):
        return None
    other = block_n if owner == "query" else block_m
    loaded: dict[int, set[int]] = {x: set() for x in range(launch.grid[0])}
    for program, found in rows.items():
        loaded.setdefault(program[0], set()).update(r // other for r in found)
    return _Visits(owner, block_m, block_n, loaded)


def _seen(v: _Visits, n_q: int, n_k: int, tile: int, alignment: str = "bottom_right") -> set[int]:
    """The tiles of the other side that some row (or key) of ``tile`` pairs with under the causal mask."""
    if v.owner == "query":
        if tile * v.block_m >= n_q:
            return set()
        return {kt for kt in range(-(-n_k // v.block_n))
                if causal.tile_kind(n_q, n_k, v.block_m, v.block_n, tile, kt, alignment) != "skipped"}
    if tile * v.block_n >= n_k:
        return set()
    return {qt for qt in range(-(-n_q // v.block_m))
            if causal.tile_kind(n_q, n_k, v.block_m, v.block_n, qt, tile, alignment) != "skipped"}


def _tile_problem(exercise: str, case: Case, v: _Visits, kernel: str) -> str | None:
    """The first owned tile whose loads differ from the tiles it needs, in words; None when none does."""
    n_q, n_k = case.n_q, case.n_k
    top_left = all(v.loaded[t] == _seen(v, n_q, n_k, t, "top_left") for t in v.loaded)
    for tile in sorted(v.loaded):
        need, got = _seen(v, n_q, n_k, tile), v.loaded[tile]
        future, missing = got - need, need - got
        if not future and not missing:
            continue
        where = f"{exercise}: on {case.describe()}, with {v.block_m} × {v.block_n} tiles"
        rule = f"query i sees keys j <= {offset_text(n_q, n_k)}"
        if v.owner == "query":
            r0, r1 = tile * v.block_m, min(n_q, (tile + 1) * v.block_m) - 1
            who = f"the program for query rows {r0}–{r1}"
            last = r1 + n_k - n_q  # the last key its last row sees
            if future:
                stop = (f"after key {last}, the last one its last row sees" if last >= 0 else
                        "before the first tile: none of its rows sees any key")
                text = (f"{where}, {who} loaded {tiles_text('key', future, v.block_n, n_k)}, which {lie(future)} wholly in "
                        f"the future: none of its rows sees any of their keys ({rule}). The loop's upper bound should "
                        f"stop at the diagonal, {stop}.")
            else:
                text = (f"{where}, {who} never loaded {tiles_text('key', missing, v.block_n, n_k)}, which its rows see "
                        f"({rule}; its last row, {r1}, sees keys up to {min(last, n_k - 1)}): the loop's bounds stop "
                        f"short of the diagonal.")
        else:
            k0, k1 = tile * v.block_n, min(n_k, (tile + 1) * v.block_n) - 1
            who = f"the dK/dV program for keys {k0}–{k1}"
            first = max(0, k0 - (n_k - n_q))  # the first query row that sees key k0
            if future:
                text = (f"{where}, {who} loaded {tiles_text('query', future, v.block_m, n_q)}, none of whose rows "
                        f"sees any of its keys ({rule}). The loop over query blocks should start at the block that "
                        f"holds row {first}, the first row that sees key {k0}.")
            else:
                text = (f"{where}, {who} never loaded {tiles_text('query', missing, v.block_m, n_q)}, whose rows see "
                        f"its keys ({rule}): the loop over query blocks starts too late or ends too early.")
        if kernel:
            text = text.replace(f"{who} ", f"{who} ({kernel}) ", 1)
        if top_left and n_q != n_k:
            text += ("\n  hint: these tiles are those of a mask aligned top-left (j <= i). The course aligns the "
                     "causal mask bottom-right: query i sees keys j <= i + (Nk − Nq), so with Nq ≠ Nk the "
                     "diagonal, and with it every loop bound, moves by Nk − Nq.")
        elif v.owner == "query":
            text += _one_key_off(v, tile, n_q, n_k, future, missing)
        return text
    return None


def _one_key_off(v: _Visits, tile: int, n_q: int, n_k: int, future: set[int], missing: set[int]) -> str:
    """The hint for a query tile's key loop whose upper bound is one key off, when the tiles it loaded say so: the
    one tile it never loaded starts with the last key its last row sees (a bound one short), or the one tile too
    many starts one key past it (a bound one long). Other tiles look like any loop bound: no hint."""
    last = min(n_q, (tile + 1) * v.block_m) - 1 + n_k - n_q  # the last key the tile's last row sees
    bound = last + 1                                        # what the bound must be: one past it
    if missing == {last // v.block_n} and not future and last >= 0 and last % v.block_n == 0:
        return (f"\n  hint: the loop stops one key early: its bound must be one past the last key the block's last "
                f"row sees, {last} + 1 = {bound}. At {last} it ends before key tile {last // v.block_n}, whose first "
                f"key, {last}, is that last key, so the last key column is never reached.")
    if future == {bound // v.block_n} and not missing and 0 <= bound < n_k and bound % v.block_n == 0:
        return (f"\n  hint: the loop runs one key too far: its bound must be one past the last key the block's last "
                f"row sees, {last} + 1 = {bound}, the first key of key tile {bound // v.block_n}. One more, and the "
                f"loop takes in that tile, which no row of the block sees.")
    return ""


def _bound_overrun(exercise: str, case: Case, exc, block_m: int | None) -> str | None:
    """An out-of-bounds load of K or V past its end in a causal forward, said as the loop bound it is."""
    if exc.access != "load" or exc.argument not in ("k_ptr", "v_ptr") or len(exc.shape) < 2:
        return None
    width, rows = exc.shape[-1], exc.shape[-2]
    keys = sorted({e // width for e in exc.elements})
    if not keys or keys[0] < rows:  # only a run past the end of K or V is a loop bound's doing
        return None
    who, hint = "a program", ""
    if block_m:
        r0 = exc.program[0] * block_m
        who = f"the program for query rows {r0}–{min(case.n_q, r0 + block_m) - 1}"
        # The first key some row of the block cannot see, top-left aligned (j <= i) and bottom-right: past Nk
        # only in the first, this is a top-left bound.
        if case.n_q != case.n_k and r0 + 1 >= case.n_k and max(r0 + case.n_k - case.n_q + 1, 0) < case.n_k:
            hint = ("\n  hint: that bound is aligned top-left (j <= i). The course aligns the causal mask "
                    "bottom-right: query i sees keys j <= i + (Nk − Nq), so with Nq ≠ Nk every bound moves by "
                    "Nk − Nq.")
    tensor = "K" if exc.argument == "k_ptr" else "V"
    return (f"{exercise}: on {case.describe()}, {who} loaded keys {span(keys)} of {tensor}, past its end (Nk = "
            f"{case.n_k}), at {exc.source or f'line {exc.line}'}. Masking that load is not the fix: it belongs to the stage that runs "
            f"without a mask, and its loop bound went a tile too far. The unmasked stage covers only whole key "
            f"tiles every row of the block sees, so its bound (lo) is rounded down to a multiple of BLOCK_N; the "
            f"masked stage takes the tiles from there to hi, the diagonal.{hint}")


def _block_m(fn: Callable[..., Any], case: Case) -> int | None:
    """The forward's BLOCK_M on a case, from the kernel file's check config (for naming rows)."""
    inner = getattr(fn, "fn", fn)
    inner = inner.func if isinstance(inner, functools.partial) else inner
    module = sys.modules.get(getattr(inner, "__module__", ""))
    config = getattr(module, "check_config", None)
    try:
        found = config(case.d, case.dtype) if config else None
    except Exception:  # noqa: BLE001 - a name for a message only
        return None
    found = found.get("causal_attention_kernel") if isinstance(found, dict) else found
    return getattr(found, "kwargs", {}).get("BLOCK_M")


def causal_tiles_triton(exercise: str, fn: Callable[..., Any], probes: Iterable[Case] = CAUSAL_PROBES) -> None:
    """Lesson 06 (Triton): on each probe, every program must load exactly the key tiles its rows see."""
    run = interpreted(fn)
    for case in probes:
        q, k, v = case.tensors(tier_device())
        returned: list = []
        launches, fault = run_recorded(lambda *a, **kw: returned.append(run(*a, **kw)), (q, k, v),
                                        dict(causal=True), selects=True)
        if fault is not None:
            if (text := _bound_overrun(exercise, case, fault, _block_m(run, case))):
                raise CheckFailed(text)
            return  # another out-of-bounds access: the value check names it
        if launches is None:
            return
        for launch in launches:
            found = _visits(launch, "query", "k_ptr")
            if found is not None and (problem := _tile_problem(exercise, case, found, "")):
                raise CheckFailed(problem)
        wrong = causal_masks.wrong_rows(returned, case, q, k, v)
        for launch in launches:  # the key tiles it loads are right: now which of them it masked
            if (problem := causal_masks.mask_problem(exercise, case, launch, wrong)):
                raise CheckFailed(problem)


_BACKWARD_LAUNCHES = {"dkdv_kernel": ("key", "q_ptr"), "dq_kernel": ("query", "k_ptr")}


def backward_tiles_triton(exercise: str, fn: Callable[..., Any], split: bool,
                          probes: Iterable[Case] = CAUSAL_PROBES[1:]) -> None:
    """Lesson 07 (Triton): the dK/dV programs skip the query blocks above their keys, the dQ programs the key
    blocks past their diagonal; in the split design no launch updates memory atomically."""
    run = interpreted(fn)
    for case in probes:
        q, k, v = case.tensors()
        forward = attention(q, k, v, True)
        do = torch.randn(q.shape, generator=torch.Generator().manual_seed(case.seed + 1))
        args = tuple(t.to(tier_device()) for t in (q, k, v, forward.o.to(q.dtype), forward.lse.float(), do))
        launches, _ = run_recorded(run, args, dict(causal=True, scale=case.d ** -0.5))
        if launches is None:
            return  # the value check reports what went wrong
        for launch in launches:
            if split:
                atomics = [op for op in launch.ops if op[2] == "a"]
                if atomics:
                    line = atomics[0][3]
                    raise CheckFailed(
                        f"{exercise}: on {case.describe()}, {launch.kernel} made {len(atomics)} atomic update(s) "
                        f"(the first at line {line}). The split design has no atomics at all: each dQ program owns "
                        f"its query rows, sums dS K over the key blocks in registers, in one fixed order, and "
                        f"writes its rows once with tl.store. That is what makes two runs give the same bits.")
            if launch.kernel in _BACKWARD_LAUNCHES:
                owner, argument = _BACKWARD_LAUNCHES[launch.kernel]
                found = _visits(launch, owner, argument)
                if found is not None and (problem := _tile_problem(exercise, case, found, launch.kernel)):
                    raise CheckFailed(problem)


def _key_bytes(fn: Callable[..., Any], case: Case, kernel: str = "") -> int | None:
    """Bytes of K the launches of ``fn`` on ``case`` loaded (only those of ``kernel`` when it is named), or None
    when it did not run to the end."""
    q, k, v = case.tensors()
    try:
        with collect_counters() as launches:
            fn(q, k, v, causal=True)
        return sum(launch.by_tensor.get("k", {}).get("load_bytes", 0) for launch in launches
                   if not kernel or launch.kernel == kernel)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return None


def _schedules(n_q: int, n_k: int, bm: int, bn: int) -> dict[str, dict[int, set[int]]]:
    """Per block, the key tiles it loads when its loop is bounded bottom-right (right), top-left, or not at all, and
    with the bottom-right bound (the block's first row + BLOCK_M + Nk − Nq, clamped to 0 .. Nk) one key short or
    one key long."""
    tiles = range(-(-n_k // bn))
    blocks = range(-(-n_q // bm))

    def bounded(shift: int):
        return lambda b, t: t * bn < max(0, min(n_k, b * bm + bm + n_k - n_q + shift))
    return {name: {b: {t for t in tiles if rule(b, t)} for b in blocks} for name, rule in (
        ("bottom_right", lambda b, t: causal.tile_kind(n_q, n_k, bm, bn, b, t) != "skipped"),
        ("top_left", lambda b, t: causal.tile_kind(n_q, n_k, bm, bn, b, t, "top_left") != "skipped"),
        ("every", lambda b, t: True),
        ("one_short", bounded(-1)),
        ("one_long", bounded(+1)))}


# What a whole schedule other than the right one says about the tile loop's bound (causal_tiles_simt).
_SCHEDULE_HINTS = {
    "one_short": "the tile loop stops one key early: its bound must be one past the last key the block's last row "
                 "sees (first row + BLOCK_M + Nk − Nq, at most Nk). One less, and a block whose last key opens a "
                 "tile never loads that tile: the last key column is never reached.",
    "one_long": "the tile loop runs one key too far: its bound must be one past the last key the block's last row "
                "sees (first row + BLOCK_M + Nk − Nq, at most Nk). One more, and a block whose bound falls on a "
                "tile's start loads that tile, which none of its rows sees.",
}


def causal_tiles_simt(exercise: str, module) -> None:
    """Lesson 06 (CUDA C, Metal) and lesson 07's split dQ kernel: the bytes of K a launch loads must be those of
    the key tiles its blocks see.

    Counters mode counts bytes per buffer, not per block. The bytes are compared with five schedules (the
    bottom-right bound, a top-left one, no bound at all, the bottom-right one a key short and a key long) and,
    failing those, with the one block of the probe that has tiles to skip; the sentence names the block and tiles
    that account for the difference. A bound one key off is named when every probe loads its schedule's bytes."""
    probe = step_probe(exercise, "causal_tiles")
    bm, bn = probe.block_m, probe.block_n
    fn = simt_backward(exercise, module) if probe.kernel else simt_forward(exercise, module, bm, bn)
    runs = []  # (case, bytes measured, schedules, bytes of each schedule, bytes of each key tile), up to a failed run
    for case in probe.cases:
        measured = _key_bytes(fn, case, probe.kernel)
        if measured is None:
            break
        per_key = case.d * torch.tensor([], dtype=case.dtype).element_size()
        tile_bytes = {t: (min(case.n_k, (t + 1) * bn) - t * bn) * per_key for t in range(-(-case.n_k // bn))}
        schedules = _schedules(case.n_q, case.n_k, bm, bn)
        total = {name: sum(tile_bytes[t] for tiles in s.values() for t in tiles) for name, s in schedules.items()}
        runs.append((case, measured, schedules, total, tile_bytes))
    # A bound one key off loads that schedule's bytes on every probe, and some probe tells it from the others.
    one_off = next((name for name in _SCHEDULE_HINTS if all(measured == total[name] for _, measured, _, total, _ in runs)
                    and any(s[name] not in (s["bottom_right"], s["top_left"], s["every"]) for _, _, s, _, _ in runs)),
                   None)
    for case, measured, schedules, total, tile_bytes in runs:
        n_q, n_k = case.n_q, case.n_k
        right = schedules["bottom_right"]
        if measured == total["bottom_right"]:
            continue
        who = f"your {probe.kernel}" if probe.kernel else "your kernel"
        where = (f"{exercise}: on {case.describe()}, with {bm} × {bn} tiles, {who} loaded {measured:,} bytes "
                 f"of K where the key tiles its blocks see hold {total['bottom_right']:,}")
        rule = f"query i sees keys j <= {offset_text(n_q, n_k)}"
        loaded = next((s for name, s in schedules.items() if name != "bottom_right" and total[name] == measured), None)
        skipping = [b for b in right if len(right[b]) < len(tile_bytes)]
        if loaded is None and len(skipping) == 1:  # the one block with tiles to skip: a run too many or too few
            extra = measured - total["bottom_right"]
            b = skipping[0]
            order = sorted(set(tile_bytes) - right[b]) if extra > 0 else sorted(right[b], reverse=True)
            running = 0
            for i, t in enumerate(order):
                running += tile_bytes[t]
                if running == abs(extra):
                    named = set(order[:i + 1])
                    loaded = dict(right)
                    loaded[b] = right[b] | named if extra > 0 else right[b] - named
                    break
        if loaded is None:
            more = "loaded key tiles none of its rows sees" if measured > total["bottom_right"] else \
                "never loaded key tiles its rows see"
            raise CheckFailed(f"{where}: some block {more} ({rule}), or loaded a tile more than once. The tile loop "
                              f"of a block stops after the last key its last row sees.")
        b = next(b for b in sorted(loaded) if loaded[b] != right[b])
        r0, r1 = b * bm, min(n_q, (b + 1) * bm) - 1
        future, missing = loaded[b] - right[b], right[b] - loaded[b]
        hint = ("" if n_q == n_k or loaded != schedules["top_left"] else
                "\n  hint: these tiles are those of a mask aligned top-left (j <= i). The course aligns the causal "
                "mask bottom-right: query i sees keys j <= i + (n_k − n_q), so the loop's bound moves by n_k − n_q too.")
        hint = hint or (f"\n  hint: {_SCHEDULE_HINTS[one_off]}" if one_off else "")
        if future:
            last = r1 + n_k - n_q
            stop = f"after key {last}, the last one its last row sees" if last >= 0 else \
                "before the first tile: none of its rows sees any key"
            raise CheckFailed(f"{where}: the block for query rows {r0}–{r1} loaded {tiles_text('key', future, bn, n_k)}, "
                              f"which {lie(future)} wholly in the future: none of its rows sees any of their keys "
                              f"({rule}). The tile loop's bound should stop at the diagonal, {stop}.{hint}")
        raise CheckFailed(f"{where}: the block for query rows {r0}–{r1} never loaded {tiles_text('key', missing, bn, n_k)}, "
                          f"which its rows see ({rule}; its last row, {r1}, sees keys up to "
                          f"{min(r1 + n_k - n_q, n_k - 1)}): the tile loop's bound stops short of the diagonal.{hint}")
