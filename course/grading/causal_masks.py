"""Masking only the diagonal tiles, measured (lesson 06): the element-wise causal mask costs BLOCK_M × BLOCK_N compares
and selects per tile, so only the key tiles the diagonal crosses (and a partial last tile) should go through it.

- Triton: per program, the key tiles it ran a select (``tl.where``) of a whole score tile on after loading them,
  against those the diagonal crosses (:func:`masked_tiles`, :func:`mask_problem`; called by
  :func:`course.grading.causal_tiles.causal_tiles_triton` once the tiles loaded are right);
- CUDA C: the kernel's given code classifies each key tile, ``diagonal`` (the mask's edge crosses it) or not; the
  learner's softmax applies the mask, ``j <= i + offset``, and should do so only where ``diagonal`` holds. Masking
  every tile gives the same numbers, so the measurement runs a copy of the kernel in which, right after the given
  ``diagonal`` flag, ``offset`` is shadowed by one a million keys lower: every tile that goes through the mask then
  hides all its keys, while a tile computed without it keeps them. With Q = K = 0 every score is 0, and with V[j]
  the one-hot vector of j's key tile, row i of O holds, per key tile, the share of i's weight that tile kept: a zero
  where the row sees the tile's keys is a tile that went through the mask (:func:`masked_tiles_simt`,
  :func:`diagonal_masks_simt`; the probe is declared on the step's row).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from course.errors import CheckFailed
from course.grading.measuring import offset_text, simt_forward, step_probe, tiles_text
from course.inputs import Case
from course.models import causal
from course.reference import attention
from course.simt import RawModule

__all__ = ["wrong_rows", "masked_tiles", "mask_problem", "masked_tiles_simt", "diagonal_masks_simt"]


def wrong_rows(returned: list, case: Case, q, k, v) -> set[int]:
    """The query rows whose O (the first output of the one call in ``returned``) is off the float64 oracle on a
    probe; empty when there is no O to compare."""
    try:
        out = returned[0][0] if isinstance(returned[0], (tuple, list)) else returned[0]
        ref = attention(q.cpu(), k.cpu(), v.cpu(), True).o
        err = (out.detach().cpu().double() - ref).abs().reshape(-1, case.n_q, ref.shape[-1]).amax(dim=(0, 2))
    except Exception:  # noqa: BLE001 - not a measurement's to report: the value check that follows does
        return set()
    return set((~(err <= 1e-3 * max(1.0, float(ref.abs().max())))).nonzero().flatten().tolist())


def masked_tiles(launch, argument: str = "k_ptr") -> dict[tuple[int, int, int], set[int]] | None:
    """Per program of a recorded launch (:func:`run_recorded` with ``selects``), the key tiles it masked: those
    it ran a select (``tl.where``) of a whole score tile, BLOCK_M × BLOCK_N, on, after loading them. None when the
    launch has no such argument, no tile sizes, or no record of its selects."""
    tensor = dict(launch.buffers).get(argument)
    block_m, block_n = launch.constants.get("BLOCK_M"), launch.constants.get("BLOCK_N")
    if (tensor is None or tensor.dim() < 2 or not tensor.is_contiguous() or not isinstance(block_m, int)
            or not isinstance(block_n, int) or not hasattr(launch, "selects")):
        return None
    base, size = tensor.data_ptr(), tensor.element_size()
    end = base + tensor.numel() * size
    n_rows, width = tensor.shape[-2], tensor.shape[-1]
    tile_at: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)  # program -> (op index, tile)
    for index, (program, _, kind, _, addresses, _) in enumerate(launch.ops):
        if kind != "r":
            continue
        inside = addresses[(addresses >= np.uint64(base)) & (addresses < np.uint64(end))]
        if inside.size:
            rows = (inside - np.uint64(base)).astype(np.int64) // size // width % n_rows
            tile_at[program].append((index, int(rows.min()) // block_n))
    masked: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    for program, position, shape in launch.selects:
        if shape != (block_m, block_n):
            continue
        loaded = [tile for index, tile in tile_at.get(program, []) if index < position]
        if loaded:
            masked[program].add(loaded[-1])
    return masked


def mask_problem(exercise: str, case: Case, launch, wrong_rows: set[int] = frozenset()) -> str | None:
    """The first program that ran a key tile the diagonal crosses without the mask while its rows come out wrong
    (``wrong_rows``), or masked a key tile its rows all see whole, in words; None when none did.

    A tile needs the element-wise mask when the diagonal crosses it, or when it is the partial last tile (its
    padding keys are hidden by the same select). A tile counts as masked when a select of a whole score tile ran
    after its load; a kernel that masks some other way shows no select, so a tile it left unmasked is only named
    when its rows are wrong."""
    found = masked_tiles(launch)
    if found is None:
        return None
    block_m, block_n = launch.constants["BLOCK_M"], launch.constants["BLOCK_N"]
    n_q, n_k = case.n_q, case.n_k
    diag = n_k - n_q
    tiles = -(-n_k // block_n)
    masked: dict[int, set[int]] = defaultdict(set)
    for program, kts in found.items():
        masked[program[0]] |= kts
    where = f"{exercise}: on {case.describe()}, with {block_m} × {block_n} tiles"
    rule = f"query i sees keys j <= {offset_text(n_q, n_k)}"
    for query_tile in range(-(-n_q // block_m)):
        got = masked.get(query_tile, set())
        kinds = {kt: causal.tile_kind(n_q, n_k, block_m, block_n, query_tile, kt) for kt in range(tiles)}
        crossed = {kt for kt, kind in kinds.items() if kind == "diagonal"}
        r0, r1 = query_tile * block_m, min(n_q, (query_tile + 1) * block_m) - 1
        first_unseen = r0 + diag + 1  # the first key the block's first row does not see
        unmasked = crossed - got
        bad = sorted(r for r in wrong_rows if r0 <= r <= r1)
        if unmasked and bad:
            them = "that tile" if len(unmasked) == 1 else "those tiles"
            text = (f"{where}, the program for query tile {query_tile} (rows {r0}–{r1}) ran "
                    f"{tiles_text('key', unmasked, block_n, n_k)}, which the diagonal crosses, without the element-wise "
                    f"mask, and {len(bad)} of its rows {'comes' if len(bad) == 1 else 'come'} out wrong: row {r0} sees "
                    f"keys up to {first_unseen - 1} only ({rule}), yet every key of {them} reached it.")
            if unmasked == {first_unseen // block_n} and first_unseen >= 0 and (first_unseen + 1) % block_n == 0:
                lo = first_unseen // block_n * block_n
                return (f"{text}\n  hint: the unmasked stage ends one key too late: its bound (lo) is one past the last "
                        f"key the first row sees, {first_unseen - 1} + 1 = {first_unseen}, rounded down to a multiple "
                        f"of BLOCK_N: {lo}. One more, {first_unseen + 1}, is itself a multiple of BLOCK_N, and the "
                        f"unmasked stage takes in key tile {first_unseen // block_n}, whose key {first_unseen} row "
                        f"{r0} must not see.")
            return (f"{text}\n  hint: every tile the diagonal crosses goes through the masked stage: the unmasked one "
                    f"ends at lo, one past the last key the block's first row sees, rounded down to a multiple of "
                    f"BLOCK_N, so that every key before it is seen by every row.")
        needed = set(crossed)
        if n_k % block_n:
            needed.add(tiles - 1)
        extra = {kt for kt in got - needed if kinds.get(kt) == "full"}
        if not extra:
            continue
        crossing = got & crossed
        only = (f"of which only {len(crossing)} {'crosses' if len(crossing) == 1 else 'cross'} the diagonal"
                if crossing else "none of which the diagonal crosses")
        text = (f"{where}, the program for query tile {query_tile} (rows {r0}–{r1}) masked {len(got)} key "
                f"tile{'s' if len(got) != 1 else ''}, {only}: {tiles_text('key', extra, block_n, n_k)} "
                f"{'is' if len(extra) == 1 else 'are'} seen whole by every one of its rows ({rule}), yet went through "
                f"the element-wise mask. The numbers are right, but on a GPU the mask costs BLOCK_M × BLOCK_N compares "
                f"and selects per tile, between the two matrix products, on tiles that need none.")
        last_full = first_unseen // block_n - 1  # the last tile every row sees whole
        if extra == {last_full} and first_unseen > 0 and first_unseen % block_n == 0 and got == set(range(
                last_full, max(got) + 1)):
            return (f"{text}\n  hint: the unmasked stage stops one tile early: the first row, {r0}, sees keys up to "
                    f"{first_unseen - 1}, the last key of key tile {last_full}, so its bound (lo) is one past that "
                    f"key, {first_unseen}, already a multiple of BLOCK_N; rounding {first_unseen - 1} down gives "
                    f"{last_full * block_n} and leaves key tile {last_full} to the masked stage.")
        return (f"{text}\n  hint: split the key axis in two stages: [0, lo) unmasked (MASKED=False), [lo, hi) masked, "
                f"with lo the first key the block's first row cannot see (start_m + Nk − Nq + 1), rounded down to a "
                f"multiple of BLOCK_N.")
    return None


_DIAGONAL_FLAG = "const bool diagonal = causal && j0 + block_n - 1 > row0 + offset;"


_SHADOW = " const int offset = n_k - n_q - (1 << 20);  // the measurement's shadow: a masked tile hides every key"


def masked_tiles_simt(exercise: str, module) -> dict[int, set[int]] | None:
    """Per block of the probe, the key tiles whose keys its rows see but that went through the mask, or None when
    the kernel cannot be measured this way (no given ``diagonal`` flag, a copy that does not compile or run, or a
    mask that does not read ``offset``: then no tile hides its keys)."""
    probe = step_probe(exercise, "diagonal_masks")
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    if module.code.count(_DIAGONAL_FLAG) != 1:
        return None
    try:
        shadowed = RawModule(code=module.code.replace(_DIAGONAL_FLAG, _DIAGONAL_FLAG + _SHADOW),
                             language=module.language, name=module.display_path, first_line=module.first_line)
        q, k, v = (torch.zeros_like(t) for t in case.tensors())
        for j in range(case.n_k):
            v[..., j, j // bn] = 1
        o = simt_forward(exercise, shadowed, bm, bn)(q, k, v, causal=True)[0].float()
    except Exception:  # noqa: BLE001 - the value check reports a kernel that fails; this copy only measures
        return None
    rows = o.reshape(-1, case.n_q, case.d)[0]
    hidden: dict[int, set[int]] = {}
    for block in range(-(-case.n_q // bm)):
        hidden[block] = set()
        for t in range(-(-case.n_k // bn)):
            if causal.tile_kind(case.n_q, case.n_k, bm, bn, block, t) == "skipped":
                continue
            seeing = [r for r in range(block * bm, min(case.n_q, (block + 1) * bm)) if t * bn <= r + case.n_k - case.n_q]
            if any(rows[r, t] == 0 for r in seeing):
                hidden[block].add(t)
    diagonal = {(b, t) for b in hidden for t in hidden[b]
                if causal.tile_kind(case.n_q, case.n_k, bm, bn, b, t) == "diagonal"}
    return hidden if diagonal else None


def diagonal_masks_simt(exercise: str, module) -> None:
    """Lesson 06 (CUDA C): no key tile that every row of its block sees whole goes through the element-wise mask."""
    hidden = masked_tiles_simt(exercise, module)
    if hidden is None:
        return
    probe = step_probe(exercise, "diagonal_masks")
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    for block in sorted(hidden):
        kinds = {t: causal.tile_kind(case.n_q, case.n_k, bm, bn, block, t) for t in hidden[block]}
        extra = {t for t, kind in kinds.items() if kind == "full"}
        if not extra:
            continue
        crossing = len(hidden[block]) - len(extra)
        r0, r1 = block * bm, min(case.n_q, (block + 1) * bm) - 1
        raise CheckFailed(
            f"{exercise}: on Nq={case.n_q}, Nk={case.n_k}, D={case.d} (causal, float16; Q = K = 0 and V marking each "
            f"key's tile), with {bm} × {bn} tiles, the block for query rows {r0}–{r1} masked "
            f"{len(hidden[block])} key tiles, of which only {crossing} {'crosses' if crossing == 1 else 'cross'} the "
            f"diagonal: {tiles_text('key', extra, bn, case.n_k)} {'is' if len(extra) == 1 else 'are'} seen whole by every "
            f"one of its rows (query i sees keys j <= {offset_text(case.n_q, case.n_k)}), yet went through the "
            f"element-wise mask. The numbers are right, but every row pays for the mask on tiles that need none "
            f"(measured by running your softmax with the mask's offset moved a million keys back after the given "
            f"`diagonal` flag: a masked tile then keeps no key).\n"
            f"  hint: apply `j <= i + offset` only when `diagonal` is true: on the other tiles every column c < keys "
            f"is visible.")
