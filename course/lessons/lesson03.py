"""Lesson 03's checks: the tiled forward in PyTorch (O and LSE, never the N×N matrix: watched in the notebook,
under a memory limit in the re-check), its traffic, the shared memory of a block, and the tiled kernels.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch

from course.errors import CheckFailed, CourseError
from course.grading.answer_process import AnswerError, LiveAnswer, MemoryLimitHit
from course.grading.checks import learner_call, tiled, track_step
from course.grading.counters import Counters, counters
from course.grading.comparison import Report
from course.grading.compare_attention import check_attention
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, HEAD_DIMS, ModelPolicy, TILED_RUNGS, draw_size, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.grading.recording import Recorder, Replay
from course.inputs import Case, make_qkv
from course.models import roofline
from course.reference import attention

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY", "MEASURED_SIZE", "MEASURED_EXERCISES", "check_measured"]


def _tiled_torch_cases() -> list[Case]:
    return [Case(1, 1, 16), Case(17, 17, 32, kind="peaky", seed=1), Case(70, 33, 16, seed=2),
            Case(33, 70, 64, kind="peaky", seed=3), Case(40, 40, 16, kind="constant_rows", seed=4),
            Case(24, 50, 32, dtype=torch.float16, seed=5)]


# Block sizes the check hands the learner's function: square, tall and wide tiles, none dividing every N.
_TILE_SIZES = ((16, 16), (32, 16), (16, 64))
# The case whose run is watched: big enough that the N×N matrix is larger than any tensor a tiled loop needs (inputs
# of N × D, a BLOCK_M × BLOCK_N × D product). A strip of scores, rows by all the keys, is refused whatever its rows
# (the watch's ``keys``): a matrix product as wide as all the keys, or any such tensor not shaped like K or V.
_WATCHED = Case(448, 384, 16, seed=6)
_WATCHED_TILES = (32, 16)


def _with_tiles(fn, block_m: int, block_n: int):
    def call(q, k, v, **kwargs):
        return fn(q, k, v, block_m=block_m, block_n=block_n, **kwargs)
    call.__name__ = getattr(fn, "__name__", "tiled_attention_torch")
    return call


def _tiling_hint(n_k: int) -> str:
    return (f"  hint: loop over K/V tiles of block_n keys inside the loop over Q tiles, and carry m, l and the "
            f"accumulator from one K/V tile to the next; nothing as wide as all {n_k} keys may exist.")


def _check_footprint(exercise: str, fn) -> None:
    """Run ``fn`` on the watched case and fail if it built what a tiled loop never needs."""
    from course.grading.footprint import watch  # here, not on top: +1.4 ms to `import course`
    case, (bm, bn) = _WATCHED, _WATCHED_TILES
    if isinstance(fn, Recorder):  # watch the learner's function, not the recording's hashing of its arguments
        fn = fn.fn
    q, k, v = case.tensors()
    n_q, n_k, d = case.n_q, case.n_k, case.d
    limit = max(n_q * d, n_k * d, bm * bn * d)
    pairs = -(-n_q // bm) * -(-n_k // bn)
    where = f"on Nq={n_q}, Nk={n_k}, D={d} with block_m={bm}, block_n={bn}"
    # Errors of the learner's code read as in any check (their frames only, a stub says so).
    _, seen = learner_call(exercise, lambda: watch(fn, q, k, v, block_m=bm, block_n=bn, max_elements=limit,
                                                   max_products=2 * pairs + 2, keys=(n_k, d)), (), {}, where)
    if seen.fused_attention:
        raise CheckFailed(f"{exercise}: your function calls PyTorch's own attention ({', '.join(seen.fused_attention)}) "
                          f"{where}. This exercise is the tiled loop itself: Q tiles, K/V tiles, the running m, l "
                          f"and accumulator, written with plain tensor operations.")
    if seen.largest > limit:
        shape = " × ".join(map(str, seen.largest_shape))
        rows = seen.largest // n_k if n_k in seen.largest_shape else n_q
        strip = f" (that is {rows} rows of scores by every key: a strip of the score matrix)" if rows < n_q else ""
        raise CheckFailed(
            f"{exercise}: {where} your function built a tensor of {shape} = {seen.largest:,} elements "
            f"(by {seen.largest_op}){strip}; a tiled loop never needs more than a Q tile, a K/V tile, a "
            f"{bm} × {bn} score tile and the {n_q} × {d} output.\n"
            f"{_tiling_hint(n_k)}")
    if seen.wide_shape:
        shape = " × ".join(map(str, seen.wide_shape))
        raise CheckFailed(
            f"{exercise}: {where} your function built a tensor of {shape} (by {seen.wide_op}), as wide as all "
            f"{n_k} keys: scores of a strip of rows by every key. A tiled loop holds nothing that wide but K and V "
            f"themselves: a Q tile, a K/V tile, a {bm} × {bn} score tile and the {n_q} × {d} output.\n"
            f"{_tiling_hint(n_k)}")
    if seen.outside_torch_bytes >= n_q * n_k * 4:
        raise CheckFailed(f"{exercise}: {where} your function allocated {seen.outside_torch_bytes:,} bytes outside "
                          f"PyTorch (numpy arrays or Python lists), as much as the whole {n_q} × {n_k} score "
                          f"matrix in float32. Work on torch tensors, one tile at a time.")
    if seen.products > 2 * pairs + 2:
        raise CheckFailed(f"{exercise}: {where} your function made more than {2 * pairs + 2:,} matrix products; tiles of "
                          f"{bm} × {bn} need two per pair of tiles, {2 * pairs:,} in all. Use the block_m and "
                          f"block_n it is given: a Q tile of block_m rows against a K/V tile of block_n keys.")


# Where the grade is decided (course.grading.recheck) the learner's function runs in its answer process, which its own
# code controls, so no watch inside it can be trusted; the process's memory is limited from outside instead: its
# address space (every mapping of every thread) may grow by 48 MiB past what the setup left, from before the first
# answer cell runs, and it may start no other process (course.grading.answer_process.call_within).
# The case has few queries, very many keys and D = 1, so that scores as wide as all the keys dwarf everything a
# tiled loop holds: Q, K and V are 8 MiB, and even a float64 copy of K and V adds only 16 MiB, while one strip of
# 8 rows by all the keys is 32 MiB, and a softmax taken over it at once needs two or three of them. Growth measured
# with this limit (the cells, a warm-up call and the call): the lesson's tiled loop 13 MiB, tiles on float64 copies
# of Q, K and V 30 MiB; strips of 8 rows 110 MiB, of block_m = 32 rows 398 MiB; the score matrix in a shared mapping
# on a worker thread 597 MiB. Strips of 1 or 2 rows in float32 come too close to the tiled loop to tell apart by
# memory at this size; the notebook's watch above refuses every strip, so this refuses nothing the notebook's own
# run passed.
# The keys repeat a block of 1024 (so the grader's own answer for the case is that block's attention), and the
# call's arguments cross the pipe compressed to almost nothing, costing the answer process no more than the inputs.
_LIVE_N_Q, _LIVE_N_K, _LIVE_D, _LIVE_TILES, _LIVE_EXTRA_BYTES = 64, 1 << 20, 1, (32, 1024), 48 << 20
# float32 sums over 2^20 keys, against a float64 answer: loose enough for any honest loop, far below a wrong one.
_LIVE_TOLERANCE = 1e-3


def _long_keys(n_q: int, n_k: int, d: int, seed: int, period: int = 1024) -> tuple[torch.Tensor, ...]:
    q, k, v = Case(n_q, period, d, seed=seed).tensors()
    return q, k.repeat(-(-n_k // period), 1)[:n_k].contiguous(), v.repeat(-(-n_k // period), 1)[:n_k].contiguous()


def _check_footprint_live(exercise: str, fn: LiveAnswer) -> None:
    n_q, n_k, d, (bm, bn) = _LIVE_N_Q, _LIVE_N_K, _LIVE_D, _LIVE_TILES
    tiles = dict(block_m=bm, block_n=bn)
    inputs = _long_keys(n_q, n_k, d, seed=6)
    try:
        answer = fn.process.call_within(fn.name, inputs, tiles, _LIVE_EXTRA_BYTES,
                                        warmup=(_long_keys(2 * bm, 4 * bn, d, seed=7), tiles))
    except MemoryLimitHit:
        held = sum(t.numel() * t.element_size() for t in inputs) >> 20
        strip = bm * n_k * 4
        raise CheckFailed(
            f"{exercise}: on Nq={n_q}, Nk={n_k:,}, D={d} with block_m={bm}, block_n={bn}, your function needed more "
            f"than {_LIVE_EXTRA_BYTES >> 20} MiB for the call (its inputs and output are {held} MiB of that; measured "
            f"from outside your code, with a memory limit). A tiled loop needs only a Q tile, a K/V tile and a "
            f"{bm} × {bn} score tile besides them, where a strip of scores {bm} rows by every key is already "
            f"{strip >> 20} MiB: your function built the score matrix, or strips of it with the softmax taken over "
            f"all the keys at once.\n"
            f"{_tiling_hint(n_k)}") from None
    except (AnswerError, NotImplementedError) as exc:
        # The rule is measured at this size only: a function that does not answer here (whatever it raised, a stub's
        # NotImplementedError or an error a worker thread turned into another) has not shown that it keeps to it.
        raise CheckFailed(
            f"{exercise}: on Nq={n_q}, Nk={n_k:,}, D={d} with block_m={bm}, block_n={bn}, the case where the grader "
            f"measures the memory your function needs (from outside your code), it did not return an answer: "
            f"{str(exc)[:300] or type(exc).__name__}. A tiled loop answers this case like any other.\n"
            f"{_tiling_hint(n_k)}") from None
    _check_long_keys_answer(exercise, answer, inputs, f"on Nq={n_q}, Nk={n_k:,}, D={d}")


def _check_long_keys_answer(exercise: str, answer: Any, inputs: tuple[torch.Tensor, ...], where: str) -> None:
    """The measured call's answer must be the attention of its case, so that a function that answers that one case
    cheaply (zeros, or anything but the work) gains nothing from passing under the memory limit. Its keys repeat one
    block of 1024 (:func:`_long_keys`), so O is the attention over that block and the LSE that block's plus
    log(repeats): the grader's own float64 answer, without an N × N matrix of its own."""
    q, k, v = inputs
    period = 1024
    expected = attention(q, k[:period], v[:period])
    expected_lse = expected.lse + math.log(k.shape[0] // period)
    o, lse = answer if isinstance(answer, (tuple, list)) and len(answer) == 2 else (answer, None)
    if not isinstance(o, torch.Tensor) or not isinstance(lse, torch.Tensor) or o.shape != q.shape \
            or lse.shape != (q.shape[0],):
        raise CheckFailed(f"{exercise}: {where}, the case the grader measures memory on, your function did not return "
                          f"(O of shape {tuple(q.shape)}, LSE of shape ({q.shape[0]},)).")
    error = max(float((o.double() - expected.o).abs().max()), float((lse.double() - expected_lse).abs().max()))
    if not error <= _LIVE_TOLERANCE:
        raise CheckFailed(f"{exercise}: {where}, the case the grader measures memory on, your function's O or LSE is "
                          f"off by {error:.3g} (at most {_LIVE_TOLERANCE:g} passes): the memory it needed counts only "
                          f"for an answer that is right there too.")


def _tiled_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _tiled_torch_cases()
    # A first small case says "not implemented yet" to a stub and names a wrong formula before the
    # watched run, whose messages are about what the loop builds.
    check_attention("03.tiled_torch", _with_tiles(fn, 16, 16), [Case(17, 17, 32, kind="peaky", seed=1)], with_lse=True)
    if isinstance(fn, LiveAnswer):  # the re-check: the answer runs in another process, under a memory limit
        _check_footprint_live("03.tiled_torch", fn)
    elif not isinstance(fn, Replay):  # a recording holds answers, not the run that made them
        _check_footprint("03.tiled_torch", fn)
    report = None
    for bm, bn in _TILE_SIZES:
        tiled = _with_tiles(fn, bm, bn)
        result = check_attention("03.tiled_torch", tiled, cases, with_lse=True)
        report = report or result
    check_attention("03.tiled_torch", _with_tiles(fn, 16, 32), [Case(20, 40, 32, seed=9)], scale=0.3,
                    pass_scale=True, with_lse=True)
    return report


def _tiled_bytes_mistakes() -> list[Mistake]:
    def count(q_reads=1, kv=2, o=1, lse=4, programs=None, per_element=True):
        def formula(n_q, n_k, d, block_m, bytes_per_element):
            b = bytes_per_element if per_element else 1
            p = programs(n_q, block_m) if programs else -(-n_q // block_m)
            return b * (q_reads * n_q * d + p * kv * n_k * d + o * n_q * d) + (lse if per_element else 1) * n_q
        return formula
    return [
        Mistake("elements, not bytes: multiply by the bytes per element (and LSE is float32, 4 bytes a row).",
                count(per_element=False)),
        Mistake("K and V are read once per *query tile*, not once in total: each of the ceil(Nq / BLOCK_M) programs "
                "streams all of K and V.", count(programs=lambda n, m: 1)),
        Mistake("the last query tile is partial but still a program: there are ceil(Nq / BLOCK_M) programs, "
                "not Nq // BLOCK_M.", count(programs=lambda n, m: n // m)),
        Mistake("that is one program per query row (the naive kernel's traffic): with tiles, K and V are read "
                "once per BLOCK_M rows.", count(programs=lambda n, m: n)),
        Mistake("the LSE is written too: one float32 (4 bytes) per query row.", count(lse=0)),
        Mistake("the LSE is stored as float32 whatever the inputs are: 4 bytes a row, not bytes_per_element.",
                lambda n_q, n_k, d, block_m, bytes_per_element: roofline.tiled_kernel_bytes(
                    n_q, n_k, d, block_m, bytes_per_element) - 4 * n_q + bytes_per_element * n_q),
        Mistake("O is written once (N × D elements): the count has reads only.", count(o=0)),
        Mistake("both K and V are streamed: each program reads 2 · Nk · D elements of them.", count(kv=1)),
    ]


def _tiled_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n_q=1, n_k=1, d=16, block_m=16, bytes_per_element=4),
                         dict(n_q=4096, n_k=4096, d=128, block_m=128, bytes_per_element=2),
                         dict(n_q=1000, n_k=300, d=64, block_m=64, bytes_per_element=4),
                         dict(n_q=200, n_k=4096, d=64, block_m=32, bytes_per_element=2)]
    return check_values("03.tiled_bytes", fn, roofline.tiled_kernel_bytes, args, _tiled_bytes_mistakes())


def _shared_bytes_expected(block_m: int, block_n: int, d: int) -> int:
    from course.tracks.common import Tiles  # here, not on top: +0.5 ms to `import course`
    from course.tracks.cuda import shared_memory_bytes  # here, not on top: +6 ms to `import course`
    return shared_memory_bytes("tiled", Tiles(block_m, block_n), d)


def _shared_mistake(text: str, pad: int = 1, q: bool = True, v_pad: int = 0, size: int = 4, buffers: int = 1):
    return Mistake(text, lambda block_m, block_n, d: size * ((block_m * d if q else 0)
                                                             + buffers * block_n * (2 * d + pad + v_pad)))


_SHARED_MISTAKES = [
    _shared_mistake("K's rows are padded by one float (d + 1 floats a row): the padding is what keeps the 32 lanes "
                    "of a warp in 32 different banks.", pad=0),
    _shared_mistake("bytes, not floats: each float of a tile takes 4 bytes.", size=1),
    _shared_mistake("the Q tile lives in shared memory too (block_m × d floats), beside the K and V tiles.", q=False),
    _shared_mistake("only K's rows are padded; V is read along its rows and needs no padding.", v_pad=1),
    _shared_mistake("this kernel holds one K and one V tile at a time (two of each is lesson 04's double buffering).",
                    buffers=2),
]


def _shared_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(block_m=16, block_n=32, d=64), dict(block_m=4, block_n=32, d=128),
                         dict(block_m=32, block_n=64, d=16), dict(block_m=8, block_n=96, d=32)]
    return check_values("03.shared_bytes", fn, _shared_bytes_expected, args, _SHARED_MISTAKES)


EXERCISES = (
    # The tiled forward in every track its rows declare (course/tracks/table.py): ids such as 03.tiled_cuda.
    *step_exercises("03", "tiled", {"triton": "The tiled FlashAttention-2 forward pass",
                                    "cuda": "K/V tiles through shared memory, O and LSE (CUDA C)",
                                    "metal": "Threadgroup tiles, O and LSE (Metal)"},
                    {"triton": lambda exercise: lambda fn, cases=None: tiled(exercise, fn, cases),
                     "cuda": track_step, "metal": track_step}),
    Exercise("03.tiled_torch", "The tiled forward in PyTorch: O and LSE, no N×N matrix", _tiled_torch),
    Exercise("03.tiled_bytes", "Global-memory traffic of the tiled kernel", _tiled_bytes),
    Exercise("03.shared_bytes", "Shared memory a block of the tiled kernel needs", _shared_bytes),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    "03.tiled_bytes": lambda r: dict(n_q=draw_size(r), n_k=draw_size(r), d=r.choice(HEAD_DIMS),
                                     block_m=r.choice((16, 32, 64, 128)), bytes_per_element=r.choice((2, 4))),
    "03.shared_bytes": lambda r: dict(block_m=r.choice((4, 8, 16, 32, 64)), block_n=r.choice((16, 32, 48, 64, 96)),
                                      d=r.choice(HEAD_DIMS)),
}

MODEL_POLICY = {
    "03.tiled_bytes": ModelPolicy(("course.models.roofline.tiled_kernel_bytes",),
                                  "it is the course's own count, and the exercise is to count the tiled kernel's "
                                  "traffic yourself"),
    "03.shared_bytes": ModelPolicy(("course.tracks.cuda.shared_memory_bytes",),
                                   "it is the launcher's own count, and the exercise is to lay out the three tiles "
                                   "yourself"),
}

LADDERS = (
    ladder("03.tiled_torch",
           "Two loops: over Q tiles of block_m rows (outside), over K/V tiles of block_n keys (inside). What must a "
           "Q tile carry from one K/V tile to the next?",
           "Per Q tile (`for i in range(0, n_q, block_m):`, `q_i = q[i:i + block_m]`): m (block_m,) at -inf, l "
           "(block_m,) at 0, acc (block_m, D) at 0. Per K/V tile (`for j in range(0, n_k, block_n):`, "
           "`k_j, v_j = k[j:j + block_n], v[j:j + block_n]`): `s = q_i @ k_j.T * scale`, a (block_m, block_n) score "
           "tile, and lesson 02's online update row by row.",
           "`m_new = torch.maximum(m, s.amax(1))`; `a = torch.exp(m - m_new)`; `p = torch.exp(s - m_new[:, None])`; "
           "`l = l * a + p.sum(1)`; `acc = acc * a[:, None] + p @ v_j`; `m = m_new`. After the last K/V tile: O_i = acc "
           "/ l, row by row, and LSE_i = m + log(l).",
           cell="03_tiling/tiled_torch"),
    ladder("03.tiled_bytes",
           "Count per program (one Q tile of BLOCK_M rows), then multiply by the number of programs. How many "
           "programs cover Nq rows?",
           "ceil(Nq / BLOCK_M) programs; each reads its Q tile once and every K and V row once (2·Nk·D elements).",
           "bytes = b·(Nq·D [Q] + ceil(Nq/BLOCK_M)·2·Nk·D [K, V] + Nq·D [O]) + 4·Nq [LSE, float32].",
           cell="03_tiling/tiled_bytes"),
    ladder("03.shared_bytes",
           "Which tiles does one block keep in shared memory at the same time, and how big is each, in floats?",
           "The Q tile (block_m × d), one K tile and one V tile (block_n rows each). K's rows carry one float of "
           "padding.",
           "4 · (block_m·d + block_n·(d + 1) + block_n·d) bytes.",
           cell="03_tiling/shared_bytes"),
    *step_ladders("03", "tiled", (), {
        "triton": (
            *TILED_RUNGS,
            "In Triton: `keys = start_n + tl.arange(0, BLOCK_N)`; load K and V tiles with the mask `keys < n_k`; "
            "`s = tl.dot(q, tl.trans(k), input_precision=\"ieee\") * scale`; mask keys past n_k with -inf; "
            "`acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=\"ieee\")`."),
        "cuda": (
            *TILED_RUNGS,
            "In CUDA C: `__syncthreads()` before the copy (nobody still reads the old tile) and after it (the tile is "
            "complete); the copy is a loop `for (int i = threadIdx.x; i < block_n * d; i += blockDim.x)`; then step 02's "
            "warp update on each chunk of 32 keys of the tile, reading K and V from shared memory."),
        "metal": (
            *TILED_RUNGS,
            "In Metal: threadgroup_barrier(mem_flags::mem_threadgroup) before and after the cooperative copy of the "
            "tile into threadgroup memory; then each thread runs the online update over the tile's keys."),
    }),
)


# ------------------------------------------------------------------------------------------------
# Exercise 2 against the learner's own kernel: course.check("03.tiled_bytes", fn, kernel=...)
# ------------------------------------------------------------------------------------------------

# The size the kernel is measured at: not a multiple of any tile, so a partial tile of queries and of keys
# is counted too; float32, so bytes_per_element is 4.
MEASURED_SIZE = dict(n_q=40, n_k=72, d=16)
MEASURED_EXERCISES = ("03.tiled_bytes",)


def _kernel_programs(result: Counters) -> int:
    """Blocks (CUDA C, Metal) or programs (Triton) along the query rows of the launch that wrote O."""
    grids = [launch.grid for launch in result.launches]
    return max(grid[0] for grid in grids)


def check_measured(exercise: str, fn: Callable[..., Any], kernel: Any) -> str:
    """Compare the learner's traffic formula with what their own ``kernel`` was measured to move.

    Raises CheckFailed with the per-tensor breakdown when they disagree; returns the line to print when
    they agree. ``kernel`` is a %%cuda / %%metal module of lesson 03 or 04, or a function ``f(q, k, v)``
    launching Triton kernels (lesson 03's or 04's, with LSE)."""
    if exercise not in MEASURED_EXERCISES:
        raise CheckFailed(f"{exercise}: kernel= grades a traffic formula against a kernel's measured traffic, which "
                          f"exists for {', '.join(MEASURED_EXERCISES)} only.")
    n_q, n_k, d = MEASURED_SIZE["n_q"], MEASURED_SIZE["n_k"], MEASURED_SIZE["d"]
    q, k, v = make_qkv(n_q, d, n_k=n_k, seed=3)
    try:
        result = counters(kernel, q, k, v)
    except CourseError as e:
        raise CheckFailed(f"{exercise}: could not measure your kernel: {e}") from None
    programs = _kernel_programs(result)
    block_m = -(-n_q // programs)  # a tile height giving that many programs (the formula needs no other)
    measured = result.by_tensor
    moved = sum(t["load_bytes"] + t["store_bytes"] + t["atomic_bytes"] for t in measured.values())
    args = dict(n_q=n_q, n_k=n_k, d=d, block_m=block_m, bytes_per_element=4)
    theirs = fn(**args)
    lesson = roofline.tiled_kernel_bytes(**args)
    parts = ", ".join(f"{name} {t['load_bytes'] + t['atomic_bytes']:,} B read" if t["load_bytes"]
                      else f"{name} {t['store_bytes'] + t['atomic_bytes']:,} B written"
                      for name, t in measured.items())
    where = (f"n_q={n_q}, n_k={n_k}, d={d}, float32, {programs} program(s) of block_m={block_m}")
    if moved != lesson:
        raise CheckFailed(
            f"{exercise}: your kernel moved {moved:,} bytes at {where} ({parts}), but the lesson's count for a tiled "
            f"kernel is {lesson:,}: Q read once, K and V once per program, O and the float32 LSE written once.\n"
            f"  hint: a tensor whose bytes are off is read or written more (or less) often than that; "
            f"course.grading.counters(your_kernel, q, k, v) shows which source line does it.")
    if theirs != moved:
        raise CheckFailed(f"{exercise}: at {where} your formula gives {theirs!r} bytes, but your kernel was measured to "
                          f"move {moved:,} ({parts}).")
    return f"{exercise}: your formula agrees with your kernel's measured traffic at {where}: {moved:,} bytes ({parts})."


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "tiling", "widget": "course.widgets.tiling:tiling_explorer",
                        "controls": (("key tile", 3), ("query tile", 1))},)}
