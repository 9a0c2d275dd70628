"""Techniques a lesson is about, graded by measuring what the learner's kernel did.

Right numbers do not prove the technique. A causal kernel that visits every key tile and masks gives
the same O as one that skips the future; a "tensor-core" kernel whose products are broadcasts and sums
gives the same O as one built on ``tl.dot``; a "split" backward whose dQ kernel adds with atomics gives
the same dQ. Each passes a value check and misses its lesson, so each is measured here, and fails with a
sentence that says what was measured and where the technique went missing:

- **causal tile skipping** (lesson 06, the backward of lesson 07): the key tiles each program loads,
  against the tiles its rows see (:mod:`course.models.causal`'s model, bottom-right aligned). Triton kernels
  run on the interpreter under :func:`course.grading.racecheck.interpreter_checks`, which records which program
  read which elements; CUDA C and Metal kernels run on the CPU runtime in counters mode, which counts the
  bytes each buffer was read, on shapes where exactly one block has tiles to skip;
- **matrix units** (lesson 05): both products of every key tile, on 16-bit operands for 16-bit inputs. For
  Triton, every ``tl.dot`` the interpreter ran, with its operands' shapes and dtypes; for CUDA C and Metal,
  the warp-level matrix operations (``wmma::mma_sync``, ``simdgroup_multiply_accumulate``) the CPU runtime
  counts in counters mode, by shape and operand types, against what the two products of the tiles visited
  need;
- **masking only the diagonal tiles** (lesson 06): per program, the key tiles that went through the
  element-wise mask, against those the diagonal crosses. Triton: the selects (``tl.where``) of a whole score
  tile the interpreter ran after each key tile's load; CUDA C: a copy of the kernel whose mask offset is moved
  away after the given ``diagonal`` flag, run on inputs whose output says which key tiles each row kept;
- **ping-pong buffers and float4 loads** (lesson 04, CUDA C and Metal): the barriers each block reaches (one
  per key tile, not the two a single buffer needs) and the width of every load of K and V (16 bytes);
- **the software pipeline** (lesson 04, Triton): the kernel compiled for sm_90 as the compile gate compiles it,
  its TTGIR read: every tile load of the loop that holds the products is an asynchronous copy issued ahead of
  its use, and K and V are copied by the TMA unit (loaded through tensor descriptors);
- **no atomics in the split backward** (lesson 07): the atomic updates of every launch;
- **the course's own models** (numeric exercises): which functions of ``course.models.roofline``, ``course.models.causal``,
  ``course.models.memory_model``, ``course.models.fragments``, ... the learner's function called, where the lesson asks for the
  count or the formula itself (:func:`refusing_model_calls`, :func:`model_references`).

A measurement runs the learner's code on its own small shapes. When that code fails there for another
reason (an exception, a crash of the CPU runtime), the measurement says nothing and the value check
that follows reports the failure as it does for any answer. On the GPU tier the Triton measurement runs
an interpreted copy of the same module on the CPU, since only the interpreter sees single loads.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import torch

from course.models import causal
from course.errors import CheckFailed
from course.inputs import Case
from course.tracks import triton_compile
from course import tiers
from course.grading import isolation
from course.grading.racecheck import OutOfBounds, interpreter_checks, launch_source, running_program
from course.paths import PACKAGE_ROOT
from course.reference import attention
from course.simt import RawModule
from course.simt.kernel import collect_counters
from course.tracks import cuda, metal
from course.tracks.common import Tiles

__all__ = ["CAUSAL_PROBES", "SIMT_PROBES", "MATRIX_PROBES", "PIPELINE_PROBES", "causal_tiles_triton",
           "backward_tiles_triton", "causal_tiles_simt", "matrix_units_triton", "matrix_units_simt",
           "double_buffer_simt", "simt_step_techniques", "PIPELINE_TRITON", "pipelined_loads",
           "pipelining_triton", "interpreted", "model_function", "refusing_model_calls",
           "model_references", "function_source"]

# Shapes a causal kernel is measured on (float32, so the Triton check configs give 64 x 32 forward tiles and
# 32 x 32 backward tiles): Nq = Nk, more queries than keys (the first rows see nothing), more keys than
# queries. No length is a multiple of a tile, so a bound that runs a whole tile past the end shows.
CAUSAL_PROBES = (Case(150, 150, 16, causal=True, seed=61), Case(150, 90, 16, causal=True, seed=62),
                 Case(90, 150, 16, causal=True, seed=63))


def _span(numbers: Iterable[int]) -> str:
    """``[2, 3, 4, 7]`` → ``"2–4 and 7"``: runs of consecutive numbers."""
    values = sorted(set(numbers))
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    parts = [str(a) if a == b else f"{a}–{b}" for a, b in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _lie(tiles: set[int]) -> str:
    return "lies" if len(tiles) == 1 else "lie"


def _tiles(kind: str, tiles: set[int], size: int, n: int) -> str:
    """``key tiles 2–4 (keys 64–149)``: tile numbers and the rows they hold, clipped at n."""
    first, last = min(tiles) * size, min(n, (max(tiles) + 1) * size) - 1
    noun = "tile" if len(tiles) == 1 else "tiles"
    rows = "keys" if kind == "key" else "rows"
    held = f"{rows} {first}–{last}" if len(tiles) == max(tiles) - min(tiles) + 1 else f"within {rows} {first}–{last}"
    return f"{kind} {noun} {_span(tiles)} ({held})"


def _offset_text(n_q: int, n_k: int) -> str:
    shift = n_k - n_q
    return f"i + {shift}" if shift > 0 else f"i − {-shift}" if shift < 0 else "i"


# ------------------------------------------------------------------------------------------------
# Triton: what each program loaded, from the interpreter's record of a launch
# ------------------------------------------------------------------------------------------------

def interpreted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or on the GPU tier the same function from an interpreted copy of its module.

    Only Triton's interpreter runs a kernel one access at a time, so the measurements need it; on a GPU
    machine the module's file is loaded again with ``TRITON_INTERPRET=1`` (the kernels are decorated as
    interpreted functions then) and its wrapper runs them on CPU tensors. ``fn`` may be a course
    wrapper around a learner's kernels (it keeps its module's file in ``path``) or a ``functools.partial``.
    """
    if tiers.triton_interpreted():
        return fn
    inner, keywords = getattr(fn, "fn", fn), {}
    if isinstance(inner, functools.partial):
        inner, keywords = inner.func, dict(inner.keywords)
    code = getattr(inner, "__code__", None)
    if code is None or not os.path.isfile(code.co_filename):
        raise CheckFailed(f"cannot measure {getattr(fn, '__name__', fn)!r}: its module's file is not on disk, and "
                          "the interpreter needs it to run the kernels one access at a time.")
    path = code.co_filename
    name = "course_interpreted." + hashlib.sha256(path.encode()).hexdigest()[:16]
    module = sys.modules.get(name)
    if module is None:
        saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"  # read by @triton.jit as the module's kernels are decorated
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved
    found = getattr(module, inner.__name__)
    return functools.partial(found, **keywords) if keywords else found


def _device():
    """The tier's device: the interpreter copies GPU tensors to the host for the run and back (the GPU tier), and
    on the CPU tier the tensors are made as every Triton launch's are, so the GPU's device rules hold for them."""
    return tiers.device()


class _selects_recorded:
    """Inside interpreter_checks: every ``tl.where`` a program runs is noted on its launch, as ``launch.selects``
    (program, how many accesses the launch had recorded by then, the result's shape), so a select can be placed
    after the load of the tile it works on."""

    def __enter__(self):
        from triton.runtime import interpreter

        self.cls = interpreter.InterpreterBuilder
        self.saved = self.cls.create_select

        def select(builder, cond, lhs, rhs):
            result = self.saved(builder, cond, lhs, rhs)
            running = running_program()
            if running is not None:
                launch, program = running
                if not hasattr(launch, "selects"):
                    launch.selects = []
                launch.selects.append((program, len(launch.ops), tuple(np.shape(result.data))))
            return result
        self.cls.create_select = select
        return self

    def __exit__(self, *exc):
        self.cls.create_select = self.saved
        return False


def _run_recorded(fn: Callable[..., Any], args: tuple, kwargs: dict, selects: bool = False):
    """(launches, None) after running ``fn`` under the interpreter's checks, (None, OutOfBounds) when an
    access left its tensor, (None, None) when ``fn`` failed otherwise (the value check reports that). With
    ``selects``, each launch also holds the selects (``tl.where``) its programs ran (:class:`_selects_recorded`)."""
    import contextlib

    launches: list = []
    try:
        with interpreter_checks(launches=launches), (_selects_recorded() if selects else contextlib.nullcontext()):
            fn(*args, **kwargs)
    except OutOfBounds as exc:
        return None, exc
    except Exception:  # noqa: BLE001 - not a measurement's to report
        return None, None
    return launches, None


def _rows_loaded(launch, argument: str) -> dict[tuple[int, int, int], set[int]] | None:
    """Per program, the rows (second-to-last index) of ``argument`` its loads read; None when the launch has
    no such argument or it is not contiguous (then rows cannot be read off addresses)."""
    tensor = dict(launch.buffers).get(argument)
    if tensor is None or tensor.dim() < 2 or not tensor.is_contiguous():
        return None
    base, size = tensor.data_ptr(), tensor.element_size()
    end = base + tensor.numel() * size
    n_rows, width = tensor.shape[-2], tensor.shape[-1]
    found: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    for program, _, kind, _, addresses, _ in launch.ops:
        if kind != "r":
            continue
        inside = addresses[(addresses >= np.uint64(base)) & (addresses < np.uint64(end))]
        if inside.size:
            elements = (inside - np.uint64(base)).astype(np.int64) // size
            found[program].update(np.unique(elements // width % n_rows).tolist())
    return found


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
    rows = _rows_loaded(launch, argument)
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
        rule = f"query i sees keys j <= {_offset_text(n_q, n_k)}"
        if v.owner == "query":
            r0, r1 = tile * v.block_m, min(n_q, (tile + 1) * v.block_m) - 1
            who = f"the program for query rows {r0}–{r1}"
            last = r1 + n_k - n_q  # the last key its last row sees
            if future:
                stop = (f"after key {last}, the last one its last row sees" if last >= 0 else
                        "before the first tile: none of its rows sees any key")
                text = (f"{where}, {who} loaded {_tiles('key', future, v.block_n, n_k)}, which {_lie(future)} wholly in "
                        f"the future: none of its rows sees any of their keys ({rule}). The loop's upper bound should "
                        f"stop at the diagonal, {stop}.")
            else:
                text = (f"{where}, {who} never loaded {_tiles('key', missing, v.block_n, n_k)}, which its rows see "
                        f"({rule}; its last row, {r1}, sees keys up to {min(last, n_k - 1)}): the loop's bounds stop "
                        f"short of the diagonal.")
        else:
            k0, k1 = tile * v.block_n, min(n_k, (tile + 1) * v.block_n) - 1
            who = f"the dK/dV program for keys {k0}–{k1}"
            first = max(0, k0 - (n_k - n_q))  # the first query row that sees key k0
            if future:
                text = (f"{where}, {who} loaded {_tiles('query', future, v.block_m, n_q)}, none of whose rows "
                        f"sees any of its keys ({rule}). The loop over query blocks should start at the block that "
                        f"holds row {first}, the first row that sees key {k0}.")
            else:
                text = (f"{where}, {who} never loaded {_tiles('query', missing, v.block_m, n_q)}, whose rows see "
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
    return (f"{exercise}: on {case.describe()}, {who} loaded keys {_span(keys)} of {tensor}, past its end (Nk = "
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
        q, k, v = case.tensors(_device())
        returned: list = []
        launches, fault = _run_recorded(lambda *a, **kw: returned.append(run(*a, **kw)), (q, k, v),
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
        wrong = _wrong_rows(returned, case, q, k, v)
        for launch in launches:  # the key tiles it loads are right: now which of them it masked
            if (problem := _mask_problem(exercise, case, launch, wrong)):
                raise CheckFailed(problem)


def _wrong_rows(returned: list, case: Case, q, k, v) -> set[int]:
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
    """Per program of a recorded launch (:func:`_run_recorded` with ``selects``), the key tiles it masked: those
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


def _mask_problem(exercise: str, case: Case, launch, wrong_rows: set[int] = frozenset()) -> str | None:
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
    rule = f"query i sees keys j <= {_offset_text(n_q, n_k)}"
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
                    f"{_tiles('key', unmasked, block_n, n_k)}, which the diagonal crosses, without the element-wise "
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
                f"tile{'s' if len(got) != 1 else ''}, {only}: {_tiles('key', extra, block_n, n_k)} "
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
        args = tuple(t.to(_device()) for t in (q, k, v, forward.o.to(q.dtype), forward.lse.float(), do))
        launches, _ = _run_recorded(run, args, dict(causal=True, scale=case.d ** -0.5))
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


# ------------------------------------------------------------------------------------------------
# Triton: the matrix units (lesson 05)
# ------------------------------------------------------------------------------------------------

_SIXTEEN_BIT = ("fp16", "bf16")


def matrix_units_triton(exercise: str, fn: Callable[..., Any],
                        case: Case = Case(40, 72, 16, dtype=torch.float16, seed=51)) -> None:
    """Lesson 05 (Triton): per key tile a program loads, one tl.dot for S = Q Kᵀ and one for P V, each on
    16-bit operands when the inputs are 16-bit (what makes tl.dot a tensor-core instruction on a GPU)."""
    run = interpreted(fn)
    q, k, v = case.tensors(_device())
    launches, _ = _run_recorded(run, (q, k, v), {})
    if not launches:
        return
    for launch in launches:
        constants = launch.constants
        block_n, block_d = constants.get("BLOCK_N"), constants.get("BLOCK_D")
        rows = _rows_loaded(launch, "k_ptr")
        if rows is None or not isinstance(block_n, int) or not isinstance(block_d, int):
            continue
        dots: dict[tuple[int, int, int], list] = defaultdict(list)
        for dot in launch.dots:
            dots[dot[0]].append(dot)
        block_m = constants.get("BLOCK_M")
        for program in sorted(rows):
            tiles = len({r // block_n for r in rows[program]})
            mine = dots.get(program, [])
            scores = [d for d in mine if len(d[2]) == 2 and d[2][1] == block_d and d[3][1] == block_n]
            values = [d for d in mine if len(d[2]) == 2 and d[2][1] == block_n and d[3][1] == block_d]
            who = f"program {program}"
            if isinstance(block_m, int):
                r0 = program[0] * block_m
                who = f"the program for query rows {r0}–{min(case.n_q, r0 + block_m) - 1}"
            where = (f"{exercise}: on {case.describe()}, {who} loaded {tiles} key "
                     f"tile{'s' if tiles != 1 else ''}")
            for name, found, how in (("S = Q Kᵀ", scores, "s = tl.dot(q, kT)"),
                                     ("O += P V", values, "acc = tl.dot(p.to(v.dtype), v, acc)")):
                if len(found) < tiles:
                    raise CheckFailed(
                        f"{where} but made {len(found)} tl.dot call{'s' if len(found) != 1 else ''} for {name}: that product was computed "
                        f"another way (a broadcast product summed with tl.sum, say), which a GPU runs on its "
                        f"ordinary FMA units, not its tensor cores. Both products of every tile go through tl.dot: "
                        f"{how}.")
            wide = [d for d in scores + values if d[4] not in _SIXTEEN_BIT or d[5] not in _SIXTEEN_BIT]
            if case.dtype in (torch.float16, torch.bfloat16) and wide:
                d = wide[0]
                raise CheckFailed(
                    f"{where}; its tl.dot at {launch_source(launch, d[1])} multiplied {d[4]} by {d[5]} tiles although the "
                    f"inputs are "
                    f"{str(case.dtype).replace('torch.', '')}. Tensor cores multiply 16-bit operands (fp16 in, fp32 "
                    f"accumulate); with a float32 operand the product runs at a fraction of their speed, or on the "
                    f"FMA units. Keep the Q, K and V tiles as loaded, and cast P right before P·V: p.to(v.dtype).")


# ------------------------------------------------------------------------------------------------
# CUDA C and Metal: the bytes of K each launch loaded (counters mode of the CPU runtime)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _SimtProbe:
    block_m: int           # the tiles of the measured kernel (forward: the grading launch's; backward: its #defines)
    block_n: int
    cases: tuple[Case, ...]
    kernel: str = ""       # the one launch measured ("" for a forward step: all of its one launch)


# Each forward probe has exactly one block with tiles to skip (the others see every key tile they load), so
# extra bytes of K that fit no whole schedule still name that block's tiles. The split backward's dQ kernel
# (lesson 07) loads K once per key tile it visits, exactly like a causal forward. A bound one key short loads the
# right tiles except where a block's bound (first row + BLOCK_M + Nk − Nq) is one past a multiple of BLOCK_N: the
# last forward probe is such a shape, where the short bound is neither the top-left nor the unbounded loop. (One key
# long is told apart only where BLOCK_M > BLOCK_N: with square tiles, a block whose long bound loads a tile that is
# not the last leaves a second block with tiles to skip.)
SIMT_PROBES = {
    "06.causal_cuda": _SimtProbe(32, 16, (Case(64, 64, 16, causal=True, dtype=torch.float16, seed=64),
                                          Case(64, 40, 16, causal=True, dtype=torch.float16, seed=65),
                                          Case(40, 88, 16, causal=True, dtype=torch.float16, seed=66),
                                          Case(48, 65, 16, causal=True, dtype=torch.float16, seed=67))),
    "05.mma_metal": _SimtProbe(16, 16, (Case(32, 32, 16, causal=True, dtype=torch.float16, seed=54),
                                        Case(32, 20, 16, causal=True, dtype=torch.float16, seed=55),
                                        Case(24, 56, 16, causal=True, dtype=torch.float16, seed=56),
                                        Case(32, 49, 16, causal=True, dtype=torch.float16, seed=58))),
    # The last two probes of the split backward tell a bound one key off from the other wrong bounds: one long
    # loads a tile on 48 x 48, one short misses one on 48 x 65.
    "07.backward_split_cuda": _SimtProbe(16, 16, (Case(32, 32, 16, causal=True, seed=74),
                                                  Case(24, 56, 16, causal=True, seed=75),
                                                  Case(48, 48, 16, causal=True, seed=78),
                                                  Case(48, 65, 16, causal=True, seed=79)), kernel="backward_dq"),
    "07.backward_split_metal": _SimtProbe(8, 16, (Case(24, 24, 16, causal=True, seed=76),
                                                  Case(24, 56, 16, causal=True, seed=77),
                                                  Case(48, 48, 16, causal=True, seed=78),
                                                  Case(48, 65, 16, causal=True, seed=79)), kernel="backward_dq"),
}


def _simt_forward(exercise: str, module, block_m: int, block_n: int) -> Callable[..., Any]:
    tiles = Tiles(block_m, block_n)
    if module.language == "cuda":
        return cuda.attention_function(module, exercise, tiles)
    return lambda q, k, v, causal=False: metal.FORWARD[exercise](module, q, k, v, causal, tiles=tiles)


def _simt_backward(exercise: str, module) -> Callable[..., Any]:
    """Lesson 07's split backward of a module, called as ``fn(q, k, v, causal=True)`` (O, LSE, dO made here)."""

    def run(q, k, v, causal=True):
        forward = attention(q, k, v, causal)
        do = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
        args = (q, k, v, forward.o.float(), forward.lse.float(), do)
        if module.language == "cuda":
            return cuda.backward_split(module, *args, causal=causal)
        return metal.backward_split(module, *args, causal=causal)
    return run


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
    probe = SIMT_PROBES[exercise]
    bm, bn = probe.block_m, probe.block_n
    fn = _simt_backward(exercise, module) if probe.kernel else _simt_forward(exercise, module, bm, bn)
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
        rule = f"query i sees keys j <= {_offset_text(n_q, n_k)}"
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
            raise CheckFailed(f"{where}: the block for query rows {r0}–{r1} loaded {_tiles('key', future, bn, n_k)}, "
                              f"which {_lie(future)} wholly in the future: none of its rows sees any of their keys "
                              f"({rule}). The tile loop's bound should stop at the diagonal, {stop}.{hint}")
        raise CheckFailed(f"{where}: the block for query rows {r0}–{r1} never loaded {_tiles('key', missing, bn, n_k)}, "
                          f"which its rows see ({rule}; its last row, {r1}, sees keys up to "
                          f"{min(r1 + n_k - n_q, n_k - 1)}): the tile loop's bound stops short of the diagonal.{hint}")


# ------------------------------------------------------------------------------------------------
# CUDA C and Metal: the matrix units (lesson 05), from the matrix operations counters mode counts
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _MatrixProbe:
    block_m: int               # the launch's tiles: query rows per block, keys per K/V tile
    block_n: int
    case: Case                 # non-causal, lengths multiples of the tiles: every block sees every key tile whole
    shape: tuple[int, int, int]  # the track's matrix instruction (M, N, K), named when the kernel ran none
    instruction: str
    units: str
    fix: str


MATRIX_PROBES = {
    "05.mma_cuda": _MatrixProbe(
        32, 16, Case(64, 48, 16, dtype=torch.float16, seed=57), (16, 16, 16), "wmma::mma_sync", "tensor cores",
        "S = Q Kᵀ from the Q strip's and the K tile's fragments, O += P V from the P strip's and the V tile's, "
        "16 × 16 × 16 at a time"),
    "05.mma_metal": _MatrixProbe(
        16, 16, Case(32, 48, 16, dtype=torch.float16, seed=58), (8, 8, 8), "simdgroup_multiply_accumulate",
        "simdgroup matrix units",
        "S = Q Kᵀ from the Q strip's and the K tile's simdgroup_half8x8 matrices, O += P V from the P strip's and "
        "the V tile's, 8 × 8 × 8 at a time"),
}


def _matrix_ops(fn: Callable[..., Any], case: Case) -> list | None:
    """The matrix operations (course.simt.counters.MatrixOps) of the launches of ``fn`` on ``case``, or None when
    it did not run to the end."""
    q, k, v = case.tensors()
    try:
        with collect_counters() as launches:
            fn(q, k, v)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return None
    return [op for launch in launches for op in launch.matrix_ops]


def _needed(n_q: int, n_k: int, d: int, bm: int, bn: int, volume: int) -> tuple[int, int]:
    """(key tiles the blocks visit, matrix operations of ``volume`` multiply-adds each that one product of those
    tiles needs at least): per block and key tile, rows × keys × d multiply-adds, non-causal."""
    tiles = products = 0
    for b in range(-(-n_q // bm)):
        rows = min(n_q, (b + 1) * bm) - b * bm
        for t in range(-(-n_k // bn)):
            keys = min(n_k, (t + 1) * bn) - t * bn
            tiles += 1
            products += -(-rows * keys * d // volume)
    return tiles, products


def _sites(ops: list) -> str:
    """``at line 131 of 05_mma.cu``: where the counted operations were made."""
    lines = sorted({op.line for op in ops if op.line}, key=lambda text: (len(text), text))
    if not lines:
        return ""
    if len(lines) == 1:
        return f", all at {lines[0]}"
    return ", at " + ", ".join(lines[:-1]) + " and " + lines[-1]


def matrix_units_simt(exercise: str, module) -> None:
    """Lesson 05 (CUDA C, Metal): both products of every key tile a block visits go through matrix instructions
    (``wmma::mma_sync``, ``simdgroup_multiply_accumulate``), on 16-bit operands for 16-bit inputs.

    Counters mode counts every warp-level matrix operation of the launch with its shape and operand types. One
    product of a block's key tile is block_m × block_n × d multiply-adds, so it needs at least that many over
    M·N·K-sized matrix operations; a kernel that computes one of the two products with a scalar loop runs half the
    operations the two need, and one with no matrix operation at all runs none. The sentence says how many ran,
    how many the tiles need, and where the operations that ran were made."""
    probe = MATRIX_PROBES[exercise]
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    ops = _matrix_ops(_simt_forward(exercise, module, bm, bn), case)
    if ops is None:
        return
    ran = sum(op.count for op in ops)
    common = max(ops, key=lambda op: op.count) if ops else None
    m, n, k = (common.m, common.n, common.k) if common else probe.shape
    volume = m * n * k
    tiles, one = _needed(case.n_q, case.n_k, case.d, bm, bn, volume)
    done = sum(op.count * op.m * op.n * op.k for op in ops) / volume  # in operations of the common shape
    where = f"{exercise}: on {case.describe()}, with {bm} × {bn} tiles"
    need = (f"the two products of the {tiles} key tiles its blocks visit need at least {2 * one:,} ({one:,} for "
            f"S = Q Kᵀ, {one:,} for O += P V, {m} × {n} × {k} each)")
    if done < 2 * one:
        if ran == 0:
            missing = "so both products went through ordinary arithmetic (loops of multiply-adds, say)"
        elif done >= one:
            missing = ("one product's worth, so the other went through ordinary arithmetic (a loop of "
                       "multiply-adds, say)")
        else:
            missing = ("fewer than even one product needs, so some of the tiles' products went through ordinary "
                       "arithmetic")
        raise CheckFailed(
            f"{where}, your kernel ran {ran:,} matrix operation{'s' if ran != 1 else ''} ({probe.instruction}"
            f"{_sites(ops)}) where {need}: {missing}, which a GPU runs on its FMA units, not its {probe.units}. "
            f"Both products of every tile go through {probe.instruction}: {probe.fix}.")
    if case.dtype in (torch.float16, torch.bfloat16):
        sixteen = sum(op.count * op.m * op.n * op.k for op in ops if op.sixteen_bit) / volume
        wide = [op for op in ops if not op.sixteen_bit]
        if sixteen < 2 * one and wide:
            w = max(wide, key=lambda op: op.count)
            dtype = str(case.dtype).replace("torch.", "")
            raise CheckFailed(
                f"{where}, your kernel ran {ran:,} matrix operations, but only {round(sixteen):,} on 16-bit "
                f"operands where {need}: {sum(op.count for op in wide):,} multiplied {w.a} by {w.b} matrices"
                f"{_sites(wide)}, although the inputs are {dtype}. The {probe.units} multiply 16-bit operands "
                f"(fp16 in, fp32 accumulate); a float32 operand runs at a fraction of their speed. Keep the Q, K "
                f"and V tiles as loaded, in half, and store P as half before P V.")



# ---------------------------------------------------------------------------------------------
# Lesson 04 (CUDA C, Metal): ping-pong buffers and float4 loads, in the barriers and load widths
# ---------------------------------------------------------------------------------------------
# A kernel with one K/V buffer must wait twice per tile: before overwriting it (everyone has finished
# reading the previous tile) and after filling it (the tile is complete). With two buffers the load of tile
# t + 1 goes into the one nobody reads during step t, so a single barrier per tile orders both, plus at most
# one before the loop. Counters mode counts the barriers a block reaches and the width of every load, so a
# single-buffered kernel (right numbers, no race) and one that reads K and V a float at a time both show.

@dataclass(frozen=True)
class _PipelineProbe:
    block_m: int
    block_n: int
    case: Case


# Nk = 160 keys: five key tiles of 32 (CUDA C), twenty of 8 (Metal); float32, D a multiple of 4.
PIPELINE_PROBES = {
    "04.double_buffer_cuda": _PipelineProbe(4, 32, Case(8, 160, 16, seed=41)),
    "04.double_buffer_metal": _PipelineProbe(8, 8, Case(8, 160, 16, seed=42)),
}


def double_buffer_simt(exercise: str, module) -> None:
    """Lesson 04 (CUDA C, Metal): at most one barrier per key tile (plus one before the loop), and K and V read
    from device memory 16 bytes (a float4) per thread per load."""
    probe = PIPELINE_PROBES[exercise]
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    q, k, v = case.tensors()
    try:
        with collect_counters() as launches:
            _simt_forward(exercise, module, bm, bn)(q, k, v)
    except Exception:  # noqa: BLE001 - a kernel that fails here fails its value check, which says why
        return
    tiles = -(-case.n_k // bn)
    where = f"{exercise}: on {case.describe()}, with {bm} × {bn} tiles ({tiles} key tiles per block)"
    barrier = "threadgroup_barrier" if module.language == "metal" else "__syncthreads()"
    for launch in launches:
        blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
        per_block = launch.events.get("barriers", 0) / max(blocks, 1)
        if per_block > tiles + 1:
            raise CheckFailed(
                f"{where}, each block of your kernel reached {per_block:g} barriers ({barrier}) where ping-pong "
                f"buffers need at most {tiles + 1}: one per tile, and one before the loop. {per_block / tiles:.1f} "
                f"per tile is the single-buffer pattern: wait until the tile is no longer read, load the next one "
                f"into the same buffer, wait until it is complete.\n"
                f"  hint: load tile t + 1 into the other buffer (cur ^ 1) while tile t is read from buffer cur; the "
                f"one barrier at the end of the step then says both \"tile t + 1 is complete\" and \"buffer cur is "
                f"free\".")
        narrow = sorted((row for row in launch.rows if row["memory"] == "global" and row["op"] == "load"
                         and row["tensor"] in ("k", "v") and row["width"] < 16), key=lambda row: row["line"])
        if narrow:
            row = narrow[0]
            raise CheckFailed(
                f"{where}, your kernel reads {row['tensor'].upper()} from device memory {row['width']} bytes per "
                f"thread per load (line {row['line']}): this step loads K and V as float4, 16 bytes per thread, so "
                f"a warp's load is four times fewer instructions for the same bytes. Cast the row pointer "
                f"(reinterpret_cast<const float4*> in CUDA C, device const float4* in Metal) and index it in "
                f"float4s.")


# ---------------------------------------------------------------------------------------------
# Lesson 06 (CUDA C): the element-wise mask only on the tiles the diagonal crosses
# ---------------------------------------------------------------------------------------------
# The kernel's given code classifies each key tile, ``diagonal`` (the mask's edge crosses it) or not; the learner's
# softmax applies the mask, ``j <= i + offset``, and should do so only where ``diagonal`` holds. Masking every
# tile gives the same numbers, so the measurement runs a copy of the kernel in which, right after the given
# ``diagonal`` flag, ``offset`` is shadowed by one a million keys lower: every tile that goes through the mask
# then hides all its keys, while a tile computed without it keeps them. With Q = K = 0 every score is 0, and with
# V[j] the one-hot vector of j's key tile, row i of O holds, per key tile, the share of i's weight that tile
# kept: a zero where the row sees the tile's keys is a tile that went through the mask.

_DIAGONAL_FLAG = "const bool diagonal = causal && j0 + block_n - 1 > row0 + offset;"
_SHADOW = " const int offset = n_k - n_q - (1 << 20);  // the measurement's shadow: a masked tile hides every key"
MASK_PROBES_SIMT = {"06.causal_cuda": _PipelineProbe(32, 16, Case(64, 64, 16, causal=True, dtype=torch.float16,
                                                                    seed=68))}


def masked_tiles_simt(exercise: str, module) -> dict[int, set[int]] | None:
    """Per block of the probe, the key tiles whose keys its rows see but that went through the mask, or None when
    the kernel cannot be measured this way (no given ``diagonal`` flag, a copy that does not compile or run, or a
    mask that does not read ``offset``: then no tile hides its keys)."""
    probe = MASK_PROBES_SIMT[exercise]
    case, bm, bn = probe.case, probe.block_m, probe.block_n
    if module.code.count(_DIAGONAL_FLAG) != 1:
        return None
    try:
        shadowed = RawModule(code=module.code.replace(_DIAGONAL_FLAG, _DIAGONAL_FLAG + _SHADOW),
                             language=module.language, name=module.display_path, first_line=module.first_line)
        q, k, v = (torch.zeros_like(t) for t in case.tensors())
        for j in range(case.n_k):
            v[..., j, j // bn] = 1
        o = _simt_forward(exercise, shadowed, bm, bn)(q, k, v, causal=True)[0].float()
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
    probe = MASK_PROBES_SIMT[exercise]
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
            f"diagonal: {_tiles('key', extra, bn, case.n_k)} {'is' if len(extra) == 1 else 'are'} seen whole by every "
            f"one of its rows (query i sees keys j <= {_offset_text(case.n_q, case.n_k)}), yet went through the "
            f"element-wise mask. The numbers are right, but every row pays for the mask on tiles that need none "
            f"(measured by running your softmax with the mask's offset moved a million keys back after the given "
            f"`diagonal` flag: a masked tile then keeps no key).\n"
            f"  hint: apply `j <= i + offset` only when `diagonal` is true: on the other tiles every column c < keys "
            f"is visible.")


def simt_step_techniques(exercise: str, module) -> None:
    """The measurements of a CUDA C / Metal forward step made once its values passed: matrix units (lesson 05),
    ping-pong buffers and float4 loads (lesson 04). (Lesson 06's tile skipping is measured before the values,
    :func:`causal_tiles_simt`: a bound that stops short is named by the tiles it never loaded.)"""
    if exercise in MATRIX_PROBES:
        matrix_units_simt(exercise, module)
    if exercise in PIPELINE_PROBES:
        double_buffer_simt(exercise, module)
    if exercise in MASK_PROBES_SIMT:
        diagonal_masks_simt(exercise, module)


# ---------------------------------------------------------------------------------------------
# Lesson 04 (Triton): the software pipeline, in the compiled kernel
# ---------------------------------------------------------------------------------------------
# Triton writes the ping-pong itself: with num_stages >= 2 its pipeliner turns each tile load of a loop into an
# asynchronous copy into shared memory, issued for a later iteration (a copy of the first tiles before the loop,
# the prologue, and in the loop the copy of tile t + 1 while tile t is computed on). The interpreter runs none of
# that, so the kernel is compiled, as the compile gate compiles it (the check's configuration, fp16, D = 64, for
# sm_90: an H100), and its TTGIR read: every load of the loop that holds the tl.dot calls must be such a copy,
# with its prologue before the loop. On sm_90 a tile loaded through a tensor descriptor is copied by the TMA unit
# (ttng.async_tma_copy_global_to_local); one loaded through a tensor of pointers by the threads (cp.async,
# ttg.async_copy_global_to_local).

PIPELINE_TRITON = {"04.double_buffer_triton": "04_double_buffer"}
_PIPELINE_TARGET = 90
_ASYNC_COPIES = ("ttg.async_copy_global_to_local", "ttng.async_tma_copy_global_to_local", "ttng.async_tma_gather")
_TILE_LOADS = ("tt.load", "tt.descriptor_load", "tt.descriptor_gather") + _ASYNC_COPIES
_TTGIR_OP = re.compile(r"^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?\"?([a-z_]+\.[a-z_0-9.]+)")


def pipelined_loads(ttgir: str) -> list[dict]:
    """The loops of a compiled kernel that hold a matrix product, each with the loads in its body: per load, the
    operation, its source line and whether the pipeliner made it an asynchronous copy for a later iteration (the
    same load's copy also sits before the loop: the prologue)."""
    lines = ttgir.splitlines()
    aliases = {}
    for line in lines:
        found = re.match(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$", line)
        if found:
            aliases[found.group(1)] = found.group(2)

    def expand(text: str, depth: int = 0) -> str:
        if depth > 64:
            return text
        return re.sub(r"#loc\d*\b", lambda m: "(" + expand(aliases.get(m.group(0), "?"), depth + 1) + ")", text)

    def where(line: str) -> str:
        found = re.search(r"\bloc\((.*)\)\s*$", line)
        return expand(found.group(1)) if found else ""

    ops: list[tuple[int, str, str]] = []
    stack: list[tuple[str, int]] = []
    loops: list[tuple[str, int, int, str]] = []
    for i, line in enumerate(lines):
        if line.startswith("#"):
            continue
        found = _TTGIR_OP.match(line)
        op = found.group(1) if found else ""
        ops.append((i, op, line))
        opens, closes = line.count("{"), line.count("}")
        for _ in range(opens - closes):
            stack.append((op, i))
        for _ in range(closes - opens):
            if not stack:
                break
            kind, start = stack.pop()
            if kind in ("scf.for", "scf.while"):
                loops.append((kind, start, i, lines[start]))
    found_loops = []
    for kind, start, end, head in sorted(loops, key=lambda loop: loop[1]):
        body = [(op, line) for i, op, line in ops if start <= i <= end]
        if not any(op == "tt.dot" or op.endswith("warp_group_dot") or op.endswith("tc_gen5_mma") for op, _ in body):
            continue
        prologue = {where(line) for i, op, line in ops if i < start and op in _ASYNC_COPIES}
        loads = []
        for op, line in body:
            if op in _TILE_LOADS:
                loc = where(line)
                place = re.search(r"\"([^\"]+)\":(\d+):\d+", loc)
                loads.append({"op": op, "file": place.group(1) if place else "", "line": int(place.group(2)) if place else 0,
                              "pipelined": op in _ASYNC_COPIES and loc in prologue})
        stages = re.search(r"tt\.num_stages\s*=\s*(\d+)", lines[end] + head)
        found_loops.append({"kind": kind, "num_stages": int(stages.group(1)) if stages else None, "loads": loads})
    return found_loops


def _pipeline_worker() -> None:
    """In a process of its own (TRITON_INTERPRET=0): compile the lesson file named on stdin as the compile gate does,
    for sm_90, and print what :func:`pipelined_loads` reads off each kernel's TTGIR, as JSON."""
    import json
    import tempfile
    from pathlib import Path

    request = json.loads(sys.stdin.read())
    path, stem = Path(request["path"]), request["stem"]
    answer: dict[str, Any] = {"kernels": []}
    with tempfile.TemporaryDirectory(prefix="course-pipeline-") as folder:
        if path.stem != stem:  # the gate finds a lesson's file by its name
            os.symlink(path, Path(folder) / f"{stem}.py")
            path = Path(folder) / f"{stem}.py"
        matrix = triton_compile.Matrix(lessons=(stem,), dtypes=("fp16",), head_dims=(64,), head_dims_by_dtype=(),
                                       causal=(False,), targets=(_PIPELINE_TARGET,))
        try:
            compiled = triton_compile.compile_in_process(matrix, path.parent)
        except triton_compile.Unsupported as exc:
            print(json.dumps({"limit": str(exc)}))
            return
    answer["failed"] = [r.error for r, _ in compiled if not r.ok]
    for result, kernel in compiled:
        if kernel is not None:
            answer["kernels"].append({"name": result.kernel, "config": result.config,
                                      "loops": pipelined_loads(kernel.asm["ttgir"])})
    print(json.dumps(answer))


def _compiled_loops(path: str, stem: str) -> dict | None:
    """What :func:`_pipeline_worker` found for the file ``path``, or None when it could not say. Once per text, in the
    notebook and in the re-check alike: a check runs in a forked child (course.grading.isolation), which hands what
    it found back to the process that forked it, so the next check of the same file starts with it."""
    import json
    import subprocess
    from pathlib import Path

    text = Path(path).read_text(encoding="utf-8")

    def compile_and_read() -> dict:
        env = dict(os.environ, TRITON_INTERPRET="0")
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            done = subprocess.run([sys.executable, "-c", "from course.grading.measured import _pipeline_worker; _pipeline_worker()"],
                                  input=json.dumps({"path": str(path), "stem": stem}), capture_output=True, text=True,
                                  env=env, cwd=PACKAGE_ROOT, timeout=300)
            lines = done.stdout.strip().splitlines()
            return json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-2000:]}
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            return {"error": str(exc)}

    found = isolation.kept("pipeline " + hashlib.sha256(f"{stem}\n{text}".encode()).hexdigest(), compile_and_read)
    return None if "error" in found or "limit" in found or found.get("failed") else found


def _module_file(fn: Callable[..., Any]) -> str | None:
    """The file of the module whose wrapper ``fn`` is (a course wrapper around a learner's kernels keeps it in
    ``path``)."""
    path = getattr(fn, "path", None)
    if path is not None:
        return str(path)
    inner = getattr(fn, "fn", fn)
    inner = inner.func if isinstance(inner, functools.partial) else inner
    code = getattr(inner, "__code__", None)
    return code.co_filename if code is not None and os.path.isfile(code.co_filename) else None


def _quoted(path: str, line: int) -> str:
    import linecache
    text = linecache.getline(path, line).split("  #")[0].strip()
    return f"line {line} (`{text}`)" if text else f"line {line}"


def pipelining_triton(exercise: str, fn: Callable[..., Any]) -> None:
    """Lesson 04 (Triton): compiled for sm_90 with the check's configuration, every tile the key loop loads is an
    asynchronous copy issued ahead of its use (Triton's software pipeline), and a K/V tile is copied by the TMA
    unit, as a tile loaded through a tensor descriptor is.

    A kernel that fails to compile is not measured here: the compile gate and the value check report it."""
    path = _module_file(fn)
    if path is None:
        return
    found = _compiled_loops(path, PIPELINE_TRITON[exercise])
    if found is None:
        return
    where = f"{exercise}: compiled for sm_{_PIPELINE_TARGET} (an H100) as a check launches it (float16, D = 64"
    for kernel in found["kernels"]:
        config = re.match(r"M(\d+) N(\d+) w(\d+) s(\d+)$", kernel["config"] or "")
        here = (f"{where}, {config[1]} × {config[2]} tiles, {config[3]} warps, num_stages = {config[4]})" if config
                else f"{where})")
        for loop in kernel["loops"]:
            waiting = [load for load in loop["loads"] if not load["pipelined"]]
            if waiting:
                lines = sorted({load["line"] for load in waiting if load["line"]})
                named = " and ".join(_quoted(path, n) for n in lines) or "its tile loads"
                if loop["kind"] == "scf.while":
                    why = ("a while loop is never pipelined: the compiler cannot tell how many iterations follow, so it "
                           "cannot issue the copies of later tiles ahead")
                    fix = "write the loop as `for start_n in tl.range(0, N_CTX_K, BLOCK_N):`"
                elif loop["num_stages"] is not None and loop["num_stages"] < 2:
                    why = (f"the loop's tl.range(..., num_stages={loop['num_stages']}) turns the pipeline off, whatever "
                           f"the launch's num_stages says")
                    fix = ("leave num_stages out of tl.range (the launch's configuration sets it), or give it 2 or "
                           "more")
                else:
                    why = "the compiler found no way to issue those copies ahead of their use"
                    fix = ("loop with `for start_n in tl.range(0, N_CTX_K, BLOCK_N):` and load each tile whole, "
                           "k_desc.load([start_n, 0]) and v_desc.load([start_n, 0]), at the top of the loop")
                raise CheckFailed(
                    f"{here}, your kernel's key loop loads its tiles at {named} and waits for each one before "
                    f"computing on it: the loads were not software-pipelined, so every tile pays the full memory "
                    f"latency before its math can start. With num_stages = 2 Triton copies tile t + 1 into shared "
                    f"memory while tile t is computed on; here {why}.\n  hint: {fix}.")
            threads = sorted({load["line"] for load in loop["loads"] if load["op"] == "ttg.async_copy_global_to_local"
                              and load["line"]})
            if threads:
                raise CheckFailed(
                    f"{here}, your kernel's key loop loads tiles through a tensor of pointers (tl.load) at "
                    f"{' and '.join(_quoted(path, n) for n in threads)}: they are pipelined, but on a Hopper GPU each "
                    f"thread computes and copies its own addresses (cp.async) where the TMA unit could copy the whole "
                    f"tile. Load K and V through their tensor descriptors, k_desc.load([start_n, 0]) and "
                    f"v_desc.load([start_n, 0]): the descriptor knows the tile is a dense rectangle, which is what "
                    f"lets the compiler hand the copy to the TMA unit (and emit 16-byte loads on GPUs without one).")


# ---------------------------------------------------------------------------------------------
# The course's own model functions in a numeric answer
# ---------------------------------------------------------------------------------------------
# course.models.roofline, course.models.causal, course.models.memory_model, course.models.fragments, ... compute exactly what some
# numeric exercises ask. Each numeric exercise declares (course.exercises.MODEL_POLICY) which of them
# its answer may call, where the lesson's point is to use them, and which it may not, where the lesson
# asks for the count or the formula itself. A refused one is caught twice:
# - where the answer runs (the learner's lab, the grader's notebook run): each call of the answer runs
#   with a profile hook that sees every function entered while it runs, so a call through any alias,
#   import, helper or other course function is seen; an answer that replaces the hook is refused too;
# - where the grade is decided (course.grading.recheck, which never runs the answer): the answer cell as handed
#   in is read, so an answer cell that also switches the first check off in the notebook still loses.

def model_function(name: str) -> Callable[..., Any]:
    """The course function a dotted name (``"course.models.roofline.attention_flops"``) names."""
    import importlib
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def refusing_model_calls(fn: Callable[..., Any], refused: Iterable[str],
                         sentence: Callable[[str], str]) -> Callable[..., Any]:
    """``fn``, watched: if one of the ``refused`` functions (dotted names) runs while ``fn`` does, whoever
    called it (the answer, a helper, another course function), the check fails with ``sentence(name)``."""
    codes = {model_function(name).__code__: name for name in refused}

    def answer(*args: Any, **kwargs: Any) -> Any:
        called: list[str] = []

        def watch(frame, event, arg):
            if event == "call" and frame.f_code in codes:
                called.append(codes[frame.f_code])
        previous = sys.getprofile()
        sys.setprofile(watch)
        try:
            result = fn(*args, **kwargs)
        except Exception:
            if called:
                raise CheckFailed(sentence(called[0])) from None
            raise
        finally:
            replaced = sys.getprofile() is not watch
            sys.setprofile(previous if callable(previous) else None)
        if called:
            raise CheckFailed(sentence(called[0]))
        if replaced:
            raise CheckFailed(sentence(" or ".join(sorted(codes.values())))
                              .replace("may not use", "replaced the profile hook (sys.setprofile) with which the "
                                                      "check sees whether it uses", 1))
        return result
    answer.__name__ = getattr(fn, "__name__", "answer")
    answer.__qualname__ = getattr(fn, "__qualname__", answer.__name__)
    answer.__wrapped__ = fn  # type: ignore[attr-defined]
    return answer


def _attribute_path(node) -> list[str] | None:
    """``a.b.c`` → ["a", "b", "c"]; None for anything not rooted in a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _course_object(dotted: str) -> Any:
    """What a dotted name under ``course`` is (modules imported as needed); None when it is nothing."""
    import importlib
    parts = dotted.split(".")
    if parts[0] != "course" or any(part.startswith("_") for part in parts):  # the public course only
        return None
    module, depth = None, 0
    for i in range(len(parts), 0, -1):
        try:
            module, depth = importlib.import_module(".".join(parts[:i])), i
            break
        except ImportError:
            continue
    if module is None:
        return None
    value: Any = module
    for attribute in parts[depth:]:
        value = getattr(value, attribute, None)
        if value is None:
            return None
    return value


def model_references(source: str, refused: Iterable[str], line: int | None = None) -> list[str]:
    """The ``refused`` functions (dotted names) that ``source`` refers to: through ``course.x.f``, a module
    imported under any name (``import course.models.roofline as r``, ``from course import roofline``), the function
    imported under any name, or a star import. With ``line``, only inside the function defined there
    (imports anywhere in ``source`` still count)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    wanted = {id(model_function(name)): name for name in refused}
    aliases = {"course": "course"}
    aliases.update({name.rsplit(".", 2)[-2]: name.rsplit(".", 1)[0] for name in wanted.values()})  # `roofline`
    starred: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    starred.append(node.module)
                else:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    scope: ast.AST = tree
    if line is not None:
        defined = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                   and line in (n.lineno, *(d.lineno for d in getattr(n, "decorator_list", ())))]
        if not defined:
            return []
        scope = ast.Module(body=[ast.Expr(n) if isinstance(n, ast.Lambda) else n for n in defined], type_ignores=[])
    found: list[str] = []
    for node in ast.walk(scope):
        path = _attribute_path(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if not path:
            continue
        if path[0] in aliases:
            candidates = [".".join([aliases[path[0]], *path[1:]])]
        else:
            candidates = [".".join([module, *path]) for module in starred]
        for dotted in candidates:
            value = _course_object(dotted)
            if value is not None and id(value) in wanted and wanted[id(value)] not in found:
                found.append(wanted[id(value)])
    return found


def function_source(fn: Callable[..., Any]) -> tuple[str, int] | None:
    """(the text of the cell or file that defined ``fn``, the line its definition starts on), when known."""
    import linecache
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines = linecache.getlines(code.co_filename)
    return ("".join(lines), code.co_firstlineno) if lines else None
