"""Every graded exercise of the course: its id, its cases and its hints.

``course.check("01.attention_torch", attention_torch)`` looks the id up here. Test cells in the
notebooks call the same function, sometimes with extra ``cases`` (the hidden tests do), so what a
learner runs and what the grader runs can never disagree.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from course.lessons import lesson09
from course.models import roofline
from course import tiers
from course.grading.engines import _call as learner_call
from course.grading.engines import (Mistake, Report, check_attention, check_backward, check_merge_states, check_softmax,
                            check_values, quiet, untouched_stub)
from course.errors import CheckFailed
from course.grading.isolation import run_isolated
from course.grading.answer_process import LiveAnswer
from course.grading.recording import Recorder, Replay, autograding, emit
from course.inputs import Case, standard_cases

__all__ = ["Exercise", "EXERCISES", "MODEL_POLICY", "ModelPolicy", "check"]


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    run: Callable[..., Report]
    isolated: bool = False
    """Run in a child process: for learner kernels, which can crash the process that runs them."""
    takes: str = "function"
    """What the learner hands in: a Python function, or the kernel module a %%cuda / %%metal cell made."""
    probe: str | None = None
    """The course probe (:data:`course.lessons.capstone.PROBES`) the checks call around the learner's function, when what
    they need is more than its return value (the capstone's gradients and training run). Where the grade is
    decided it runs inside the answer process, around the function the handed-in cell defines."""


# -- lesson 00 ----------------------------------------------------------------------------------

_FLOP_ARGS = [dict(n_q=1, n_k=1, d=1), dict(n_q=128, n_k=128, d=64), dict(n_q=17, n_k=129, d=32),
              dict(n_q=4096, n_k=4096, d=128), dict(n_q=1000, n_k=10, d=16)]


def _flops(factor: int, lengths: str = "qk", d_power: int = 1):
    """The FLOP count a learner writes: factor · (two lengths) · D^d_power, "qq" / "kk" using one length twice."""
    def count(n_q: int, n_k: int, d: int) -> int:
        a, b = {"qk": (n_q, n_k), "qq": (n_q, n_q), "kk": (n_k, n_k)}[lengths]
        return factor * a * b * d ** d_power
    return count


# Each mistake is the formula a learner with it would write; check_values shows a hint only when one
# of them gives every value the learner's function returned.
_FLOP_MISTAKES = [
    # One matmul at 2 FLOPs per multiply-add, or both at 1: the same number, so one text for both.
    Mistake("that is half: there are two matmuls (Q·Kᵀ and P·V) of Nq·Nk·D multiply-adds each, and a multiply-add "
            "is 2 FLOPs; either a matmul is missing or a multiply-add was counted as 1 FLOP.", _flops(2)),
    Mistake("that is the multiply-adds of one matmul: a multiply-add is 2 FLOPs, and there are two matmuls "
            "(Q·Kᵀ and P·V).", _flops(1)),
    Mistake("the count grows as D²: each of the Nq·Nk scores is one dot product of length D, so the FLOPs grow "
            "linearly in D.", _flops(4, d_power=2)),
    Mistake("D is missing: each of the Nq·Nk scores is a dot product of length D, and P·V does Nq·Nk·D "
            "multiply-adds too.",
            _flops(4, d_power=0)),
    Mistake("Nq is used for both lengths: S is Nq × Nk.", _flops(4, "qq")),
    Mistake("Nk is used for both lengths: S is Nq × Nk.", _flops(4, "kk")),
]


def _attention_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("00.attention_flops", fn, lambda n_q, n_k, d: roofline.attention_flops(n_q, n_k, d),
                        arguments or _FLOP_ARGS, _FLOP_MISTAKES)


def _intensity_with(flops=None, elements=None, per_element: bool = True, inverted: bool = False):
    """The intensity a learner computes with other FLOPs or another element count than the right ones."""
    def intensity(n: int, d: int, bytes_per_element: int) -> float:
        f = (flops or roofline.attention_flops)(n, n, d)
        moved = (elements(n, d) if elements else 4 * n * d) * (bytes_per_element if per_element else 1)
        return moved / f if inverted else f / moved
    return intensity


_INTENSITY_MISTAKES = [
    Mistake("remember the bytes per element: bytes = elements × bytes_per_element.",
            _intensity_with(per_element=False)),
    Mistake("Q is read and O is written too: a fused kernel moves four N × D tensors (Q, K, V and O), not only K and V.",
            _intensity_with(elements=lambda n, d: 2 * n * d)),
    Mistake("O is written once too: a fused kernel reads Q, K, V and writes O, four N × D tensors.",
            _intensity_with(elements=lambda n, d: 3 * n * d)),
    Mistake("S never reaches global memory in a fused kernel: count Q, K, V and O only (4·N·D elements).",
            _intensity_with(elements=lambda n, d: 4 * n * d + n * n)),
    Mistake("that is the traffic of unfused attention (S and P written and read back); a fused kernel moves only "
            "Q, K, V and O.", lambda n, d, bytes_per_element: roofline.attention_flops(n, n, d)
            / roofline.standard_attention_bytes(n, n, d, bytes_per_element)),
    Mistake("the FLOPs are half the right count: attention_flops(N, N, D) counts both matmuls.",
            _intensity_with(flops=lambda n_q, n_k, d: 2 * n_q * n_k * d)),
    Mistake("intensity is FLOPs per byte: divide the FLOPs by the bytes, not the bytes by the FLOPs.",
            _intensity_with(inverted=True)),
]


def _intensity(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=128, d=64, bytes_per_element=2), dict(n=4096, d=128, bytes_per_element=2),
                         dict(n=1000, d=16, bytes_per_element=4), dict(n=1, d=32, bytes_per_element=4)]

    def expected(n: int, d: int, bytes_per_element: int) -> float:
        return roofline.arithmetic_intensity(roofline.attention_flops(n, n, d),
                                             roofline.flash_attention_bytes(n, n, d, bytes_per_element))
    return check_values("00.flash_intensity", fn, expected, args, _INTENSITY_MISTAKES, rel=1e-6)


# -- lesson 01 ----------------------------------------------------------------------------------

def _lesson01_cases() -> list[Case]:
    return standard_cases(head_dims=(16, 64), lengths=(1, 17, 65), kinds=("normal", "peaky"))


def _attention_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _lesson01_cases() + [Case(33, 33, 32, kind="constant_rows", seed=7)]
    report = check_attention("01.attention_torch", fn, cases)
    # The same function must honour an explicit scale too.
    check_attention("01.attention_torch", fn, [Case(17, 20, 32, seed=11)], scale=0.5, pass_scale=True)
    return report


def _naive_bytes_mistakes() -> list[Mistake]:
    """Wrong counts of the naive kernel's reads, built from the right one: b·N·(D + r·N·D), where r is how
    many N × D tensors of K and V each program reads (roofline.naive_kernel_bytes_read says)."""
    r = roofline.naive_kernel_bytes_read(1, 1, 1, 1) - 1
    size = roofline.element_size

    def reads(n, d, dtype, programs=None, q_row=1, kv=r, per_element=True) -> int:
        return (size(dtype) if per_element else 1) * (n if programs is None else programs) * (q_row * d + kv * n * d)
    kv_text = ("all of K twice (once for the max, once for the sums) and all of V once" if r == 3
               else "all of K and all of V" if r == 2 else f"{r}·N·D elements of K and V")
    return [
        Mistake("elements, not bytes: multiply by the element size of the dtype.",
                lambda n, d, dtype: reads(n, d, dtype, per_element=False)),
        Mistake("each program also reads its own query row (D elements).", lambda n, d, dtype: reads(n, d, dtype, q_row=0)),
        Mistake(f"every program reads {kv_text}, plus its query row.",
                lambda n, d, dtype: reads(n, d, dtype, kv=r - 1)),
        Mistake("K and V are read by every query row's program, not once in total: that is what makes the kernel naive.",
                lambda n, d, dtype: size(dtype) * (n * d + r * n * d)),
        Mistake("that is what one program reads; there are N programs, one per query row.",
                lambda n, d, dtype: reads(n, d, dtype, programs=1)),
        Mistake("this counts bytes read only; O is written, not read.", lambda n, d, dtype: reads(n, d, dtype, q_row=2)),
    ]


def _naive_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(n=1, d=16, dtype=torch.float32), dict(n=1024, d=64, dtype=torch.float16),
                         dict(n=17, d=128, dtype=torch.float32), dict(n=4096, d=128, dtype=torch.bfloat16)]

    def expected(n: int, d: int, dtype: torch.dtype) -> int:
        return roofline.naive_kernel_bytes_read(n, n, d, roofline.element_size(dtype))
    return check_values("01.naive_bytes_read", fn, expected, args, _naive_bytes_mistakes())


def _row_kernel_cases() -> list[Case]:
    # Kept small: the interpreter runs the programs (one per query row) one after the other, a block
    # of 32 keys per step. 33 and 40 keys cross a block boundary with a ragged last block.
    return [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(17, 17, 64, seed=2),
            Case(33, 33, 64, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(40, 6, 16, seed=6),
            Case(24, 24, 32, dtype=torch.float16, seed=21)]


def _row_kernel(exercise: str, more: tuple[Case, ...] = ()):
    """A Triton kernel with one program per query row (lesson 01's two passes, lesson 02's one sweep)."""
    def run(fn, cases: Iterable[Case] | None = None) -> Report:
        cases = list(cases) if cases is not None else _row_kernel_cases() + list(more)
        where = _kernel_options()
        report = check_attention(exercise, fn, cases, **where)
        check_attention(exercise, fn, [Case(9, 12, 16, seed=5)], scale=0.3, pass_scale=True, **where)
        return report
    return run


_naive_triton = _row_kernel("01.naive_triton")


def _naive_simt(exercise: str):
    """A one-thread-per-row kernel in CUDA C or Metal (lesson 01, Metal's lesson 02), run on the CPU SIMT
    runtime with memcheck, racecheck and a random schedule (``module`` is the RawModule a ``%%cuda`` /
    ``%%metal`` cell made)."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda as cuda_track
        fn = cuda_track.attention_function(module, exercise, **cuda_track.GRADING_LAUNCH)
        if cases is None:
            cases = [Case(1, 1, 16), Case(17, 17, 16, kind="peaky", seed=1), Case(65, 65, 64, seed=2),
                     Case(33, 33, 128, kind="peaky", seed=3), Case(5, 40, 32, seed=4), Case(70, 6, 16, seed=6),
                     Case(24, 24, 32, kind="constant_rows", seed=7)]
        tier = "CPU SIMT runtime (memcheck + racecheck, random schedule)"
        report = check_attention(exercise, fn, cases, tier=tier)
        check_attention(exercise, fn, [Case(9, 12, 16, seed=5)], scale=0.3, pass_scale=True, tier=tier)
        return report
    return run


def _track_step(exercise: str):
    """A step of the CUDA C or Metal track on the CPU SIMT runtime (the track's ``check_step``): its own
    cases, or the given ones under memcheck + racecheck and a random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda, metal
        from course.tracks.table import exercise as row
        track = metal if row(exercise).track == "metal" else cuda
        from course.grading import measured
        if exercise in measured.SIMT_PROBES:  # lesson 06's tile skipping, measured before the values
            measured.causal_tiles_simt(exercise, module)
        if cases is None:
            report = track.check_step(exercise, module)
        else:
            report = track.check_step(exercise, module, checked_cases=list(cases), plain_cases=())
        measured.simt_step_techniques(exercise, module)  # lessons 04 and 05: the technique, measured
        return report
    return run


def _backward_simt(exercise: str, kind: str):
    """Lesson 07's backward in CUDA C on the CPU SIMT runtime: memcheck, racecheck, random schedule."""
    def run(module, cases: Iterable[Case] | None = None) -> Report:
        from course.tracks import cuda as cuda_track
        launch = cuda_track.backward_atomic if kind == "atomic" else cuda_track.backward_split
        if kind == "split":  # the dQ kernel's key tiles, measured before the values (course.grading.measured)
            from course.grading import measured
            measured.causal_tiles_simt(exercise, module)
        cases = cases or [Case(17, 40, 16, causal=True, seed=1), Case(1, 1, 16),
                          Case(65, 17, 32, causal=True, seed=2), Case(33, 20, 128, kind="peaky", seed=3)]

        def fn(*args, **kwargs):
            return launch(module, *args, **kwargs, **cuda_track.GRADING_LAUNCH)
        return check_backward(exercise, fn, cases, tier="CPU SIMT runtime (memcheck + racecheck, random schedule)")
    return run


# -- lesson 03: tiling ---------------------------------------------------------------------------

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
    from course.grading.footprint import watch
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
# code controls, so no watch inside it can be trusted; the process's memory can be limited from outside instead.
# The case has few queries, very many keys and D = 1, so that scores as wide as all the keys dwarf everything a
# tiled loop holds: Q, K and V are 8 MiB, and even a float64 copy of K and V adds only 16 MiB, while one strip of
# 8 rows by all the keys is 32 MiB, and a softmax taken over it at once needs two or three of them. The least
# growth each passes under, measured with this limit: the lesson's tiled loop 13 MiB, tiles on float64 copies of
# Q, K and V 25 MiB; strips of block_m = 32 rows 394 MiB, of 8 rows 76 (softmax in place) to 108 MiB, of 4 rows
# 46 (in place) to 134 MiB, of 1 row in float64 68 MiB; strips of 1 or 2 rows in float32 only 30 to 32 MiB, too
# close to the tiled loop to tell apart by memory at this size. So 48 MiB past what a first small call left
# allocated passes those tiled loops with room to spare and refuses block_m strips, strips of 8 rows or more and
# strips in float64, whatever the learner's code does inside. The notebook's watch above refuses every strip, the
# narrow ones included, so this refuses nothing the notebook's own run passed.
# The keys repeat a block of 1024 (the values are not checked here), so the call's arguments cross the pipe
# compressed to almost nothing, and decoding them costs the answer process no more than the inputs themselves.
_LIVE_N_Q, _LIVE_N_K, _LIVE_D, _LIVE_TILES, _LIVE_EXTRA_BYTES = 64, 1 << 20, 1, (32, 1024), 48 << 20


def _long_keys(n_q: int, n_k: int, d: int, seed: int, period: int = 1024) -> tuple[torch.Tensor, ...]:
    q, k, v = Case(n_q, period, d, seed=seed).tensors()
    return q, k.repeat(-(-n_k // period), 1)[:n_k].contiguous(), v.repeat(-(-n_k // period), 1)[:n_k].contiguous()


def _check_footprint_live(exercise: str, fn: LiveAnswer) -> None:
    from course.grading.answer_process import AnswerError, MemoryLimitHit
    n_q, n_k, d, (bm, bn) = _LIVE_N_Q, _LIVE_N_K, _LIVE_D, _LIVE_TILES
    tiles = dict(block_m=bm, block_n=bn)
    inputs = _long_keys(n_q, n_k, d, seed=6)
    try:
        fn.process.call_within(fn.name, inputs, tiles, _LIVE_EXTRA_BYTES,
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
    except (AnswerError, NotImplementedError):
        return  # a function that fails here fails its value checks too, which say why


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
    from course.tracks.common import Tiles
    from course.tracks.cuda import shared_memory_bytes
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


# -- lesson 04: memory transactions and banks -----------------------------------------------------

def _sectors_expected(offset_bytes: int, stride_bytes: int, access_bytes: int) -> int:
    from course.models.memory_model import WARP, sectors_of_bytes
    return len(sectors_of_bytes([offset_bytes + lane * stride_bytes for lane in range(WARP)], access_bytes))


_SECTOR_MISTAKES = [
    Mistake("a sector is 32 bytes wherever the lanes' bytes are: count the distinct 32-byte-aligned segments "
            "they touch, not the bytes they ask for divided by 32.",
            lambda offset_bytes, stride_bytes, access_bytes: -(-32 * access_bytes // 32)),
    Mistake("lanes share a sector when their bytes fall in the same 32-byte segment: one sector per lane is "
            "the worst case, not the rule.", lambda offset_bytes, stride_bytes, access_bytes: 32),
    Mistake("that counts every sector between the first and the last byte; sectors that no lane touches are "
            "not moved.", lambda offset_bytes, stride_bytes, access_bytes:
            (offset_bytes + 31 * stride_bytes + access_bytes - 1) // 32 - offset_bytes // 32 + 1),
    Mistake("the offset matters: sectors start at multiples of 32 bytes, so a run that starts 4 bytes late "
            "reaches into one more sector.", lambda offset_bytes, stride_bytes, access_bytes:
            _sectors_expected(0, stride_bytes, access_bytes)),
    Mistake("a lane's bytes can straddle a sector boundary: count every sector from the one its first byte is in to "
            "the one its last byte is in, not only the sector where its access starts.",
            lambda offset_bytes, stride_bytes, access_bytes: len({(offset_bytes + lane * stride_bytes) // 32
                                                                  for lane in range(32)})),
]

# The cases lesson 04's questions raise, each in the visible check: a run 4 bytes late, float4s that straddle a
# sector boundary (offset 8: every lane's 16 bytes end in the next sector, 17 sectors where counting start
# sectors gives 16), a column walk, every other float, all lanes on one address, and float4s in a row.
_SECTOR_ARGS = [dict(offset_bytes=0, stride_bytes=4, access_bytes=4),
                dict(offset_bytes=4, stride_bytes=4, access_bytes=4),
                dict(offset_bytes=0, stride_bytes=16, access_bytes=16),
                dict(offset_bytes=8, stride_bytes=16, access_bytes=16),
                dict(offset_bytes=0, stride_bytes=256, access_bytes=4),
                dict(offset_bytes=0, stride_bytes=8, access_bytes=4),
                dict(offset_bytes=64, stride_bytes=0, access_bytes=4),
                dict(offset_bytes=16, stride_bytes=16, access_bytes=16)]


def _warp_sectors(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("04.warp_sectors", fn, _sectors_expected, arguments or _SECTOR_ARGS, _SECTOR_MISTAKES)


def _bank_ways_expected(row_floats: int, pad_floats: int) -> int:
    from course.models.memory_model import bank_conflict_ways, warp_column_walk
    walk = warp_column_walk(row_floats=row_floats, pad_floats=pad_floats)
    return bank_conflict_ways(walk.byte_addresses, walk.access_bytes)


_BANK_MISTAKES = [
    Mistake("the padding is part of the row: lane j's word is j · (row_floats + pad_floats), not j · row_floats.",
            lambda row_floats, pad_floats: _bank_ways_expected(row_floats, 0)),
    Mistake("conflicts are not all or nothing: lanes j and j' meet in a bank when (j − j') · stride is a multiple "
            "of 32 words, so the degree is gcd(stride, 32), which can be 2, 4, 8 or 16.",
            lambda row_floats, pad_floats: 32 if (row_floats + pad_floats) % 32 == 0 else 1),
    Mistake("that is the number of different banks the warp uses; the conflict degree is how many lanes share "
            "each of them: 32 divided by that.", lambda row_floats, pad_floats:
            32 // _bank_ways_expected(row_floats, pad_floats)),
]


def _bank_ways(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(row_floats=64, pad_floats=0), dict(row_floats=64, pad_floats=1),
                         dict(row_floats=64, pad_floats=4), dict(row_floats=16, pad_floats=0),
                         dict(row_floats=33, pad_floats=0), dict(row_floats=24, pad_floats=0),
                         dict(row_floats=64, pad_floats=2), dict(row_floats=128, pad_floats=8)]
    return check_values("04.bank_ways", fn, _bank_ways_expected, args, _BANK_MISTAKES)


# -- lesson 05: who holds which element of a fragment ------------------------------------------------

def _fragment_map_entry(which: int):
    """The lane (0) or slot (1) the course's runtime stores at (row, col) of a track's accumulator fragment."""
    def entry(track: str, row: int, col: int) -> int:
        from course.models.fragments import fragment_map
        return int(fragment_map(track)[which][row, col])
    return entry


_fragment_lane_expected = _fragment_map_entry(0)

_FRAGMENT_MISTAKES = [
    Mistake("rows and columns are swapped: the stored map's row index is the fragment's row.",
            lambda track, row, col: _fragment_lane_expected(track, col, row)),
    Mistake("that is the element (slot) number inside the lane, the second map; the question is the lane.",
            _fragment_map_entry(1)),
]


def _fragment_lane(fn, arguments: Iterable[dict] | None = None) -> Report:
    from course.models.fragments import FRAGMENTS
    args = arguments or [dict(track=track, row=r, col=c) for track, shape in FRAGMENTS.items()
                         for r in range(shape.rows) for c in range(shape.cols)]
    return check_values("05.fragment_lane", fn, _fragment_lane_expected, args, _FRAGMENT_MISTAKES)


# -- lesson 06: causal masking ----------------------------------------------------------------------

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
        from course.models.causal import tile_counts
        counts = tile_counts(n_q, n_k, block_m, block_n, alignment)
        return (counts.skipped, counts.full, counts.diagonal)[part]
    return count


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
        report = check_values("06.tile_counts", one, _tile_count(part), args, mistakes)
    return report


# -- lessons 02-08: the Triton track ------------------------------------------------------------
# Kernels run on the best tier there is; on Triton's interpreter every launch is also watched for
# races between programs (the interpreter runs programs one by one, so a race would go unseen).
# Case sizes stay small because the interpreter executes each program in Python.

F16 = torch.float16


def _kernel_options() -> dict:
    return dict(device=tiers.device(), tier=tiers.active_tier(), race=tiers.triton_interpreted())


def _online_softmax(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = cases or [Case(1, 1, 16), Case(17, 300, 16, kind="peaky", seed=1), Case(5, 129, 32, seed=2),
                      Case(9, 33, 16, dtype=F16, seed=3), Case(4, 70, 16, kind="constant_rows", seed=4)]
    return check_softmax("02.online_softmax_triton", fn, cases, **_kernel_options())


def _softmax_mistake(text: str, online_passes: int, safe_passes: int, write: int = 1, per_element: bool = True
                     ) -> Mistake:
    """A byte count with the given numbers of passes over the matrix (and writes of the result)."""
    def count(rows: int, cols: int, bytes_per_element: int, online: bool) -> int:
        passes = online_passes if online else safe_passes
        return (passes + write) * rows * cols * (bytes_per_element if per_element else 1)
    return Mistake(text, count)


_SOFTMAX_MISTAKES = [
    _softmax_mistake("elements, not bytes: multiply by bytes_per_element.", 2, 3, per_element=False),
    # No write of the result, or one read too few in both versions: the same numbers, so one text for both.
    _softmax_mistake("one sweep of the matrix short in both versions: the safe softmax reads it 3 times and the online "
                     "one 2 times, and each writes the result once.", 2, 3, write=0),
    _softmax_mistake("the online softmax reads the matrix twice, not three times: m and l come from one sweep, then "
                     "one sweep normalises.", 3, 3),
    _softmax_mistake("the online softmax still reads the matrix twice: one sweep finds m and l together, a second one "
                     "normalises (and the write of the result comes on top).", 1, 3),
    _softmax_mistake("the safe softmax reads the matrix three times: once for the max, once for the sum, once to "
                     "normalise.", 2, 2),
    _softmax_mistake("the two are swapped: the safe softmax reads the matrix three times, the online one twice.",
                     3, 2),
]


def _softmax_bytes(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = arguments or [dict(rows=1, cols=1, bytes_per_element=4, online=False),
                         dict(rows=4096, cols=4096, bytes_per_element=2, online=True),
                         dict(rows=17, cols=300, bytes_per_element=4, online=False),
                         dict(rows=1024, cols=129, bytes_per_element=2, online=True)]
    return check_values("02.softmax_bytes", fn, roofline.softmax_bytes, args, _SOFTMAX_MISTAKES)


def _merge_states(fn, cases: Iterable[Case] | None = None, exercise: str = "02.online_softmax_merge_triton") -> Report:
    cases = cases or [Case(7, 40, 16), Case(5, 129, 16, kind="peaky", seed=1)]
    # The PyTorch version runs in-process; the Triton kernel with the tier's options.
    options = _kernel_options() if exercise == "02.online_softmax_merge_triton" else {}
    return check_merge_states(exercise, fn, cases, **options)


def _forward_cases(dtype_mix: tuple[torch.dtype, torch.dtype] = (torch.float32, F16)) -> list[Case]:
    main, other = dtype_mix
    return [Case(1, 1, 16, dtype=main), Case(17, 17, 32, kind="peaky", dtype=main, seed=1),
            Case(129, 129, 64, dtype=main, seed=2), Case(17, 129, 16, dtype=main, seed=3),
            Case(129, 17, 128, dtype=main, seed=4), Case(70, 70, 16, kind="constant_rows", dtype=main, seed=5),
            Case(33, 65, 64, kind="peaky", dtype=other, seed=6)]


def _tiled(exercise: str, fn, cases: Iterable[Case] | None, dtype_mix=(torch.float32, F16)) -> Report:
    cases = list(cases) if cases is not None else _forward_cases(dtype_mix)
    report = check_attention(exercise, fn, cases, with_lse=True, **_kernel_options())
    check_attention(exercise, fn, [Case(9, 40, 32, seed=9)], scale=0.3, pass_scale=True, with_lse=True, **_kernel_options())
    if exercise == "05.mma_triton":  # the lesson's technique, measured: both products on tl.dot, 16-bit operands
        from course.grading import measured
        measured.matrix_units_triton(exercise, fn)
    if exercise == "04.double_buffer_triton":  # the lesson's technique, measured: the compiled loop is pipelined
        from course.grading import measured
        measured.pipelining_triton(exercise, fn)
    return report


def _causal(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = cases or [Case(1, 1, 16, causal=True), Case(17, 17, 32, kind="peaky", causal=True, seed=1),
                      Case(129, 129, 64, causal=True, seed=2), Case(17, 129, 16, causal=True, seed=3),
                      Case(129, 17, 32, causal=True, seed=4), Case(40, 40, 16, dtype=F16, causal=True, seed=5),
                      Case(65, 33, 16, causal=False, seed=6)]
    from course.grading import measured
    measured.causal_tiles_triton("06.causal_triton", fn)  # the key tiles each program loads, before the values
    report = check_attention("06.causal_triton", fn, cases, with_lse=True, pass_causal=True, **_kernel_options())
    check_attention("06.causal_triton", fn, [Case(9, 40, 32, causal=True, seed=9)], scale=0.3, pass_scale=True,
                    pass_causal=True, with_lse=True, **_kernel_options())
    return report


def _backward_cases() -> list[Case]:
    return [Case(1, 1, 16), Case(17, 17, 32, causal=True, seed=1), Case(65, 65, 16, kind="peaky", seed=2),
            Case(17, 65, 64, causal=True, seed=3), Case(65, 17, 16, causal=True, seed=4),
            Case(33, 40, 32, seed=5), Case(40, 40, 16, dtype=F16, causal=True, seed=6)]


def _backward(exercise: str, fn, cases: Iterable[Case] | None, deterministic: bool = False) -> Report:
    cases = list(cases) if cases is not None else _backward_cases()
    from course.grading import measured
    measured.backward_tiles_triton(exercise, fn, split=deterministic)  # tiles skipped; no atomics when split
    report = check_backward(exercise, fn, cases, **_kernel_options())
    if deterministic:
        # Same inputs, same bits: a dQ built without atomics has one summation order.
        case = cases[-1]
        q, k, v = case.tensors()
        from course.reference import attention
        fwd = attention(q, k, v, case.causal)
        do = torch.randn_like(q)
        args = [t.to(tiers.device()) for t in (q, k, v, fwd.o.to(case.dtype), fwd.lse.float(), do)]
        first, second = fn(*args, causal=case.causal), fn(*args, causal=case.causal)
        for name, a, b in zip(("dq", "dk", "dv"), first, second):
            if not torch.equal(a, b):
                raise CheckFailed(f"{exercise}: two runs on the same inputs gave different {name} bits on "
                                  f"{case.describe()}; the atomic-free backward must be deterministic.")
    return report


# -- lesson 07: the backward pass in PyTorch, its FLOPs, and the determinism lab ---------------------

def _backward_torch_cases() -> list[Case]:
    # Bottom-right with Nq > Nk leaves rows without a key: their LSE is -inf and P must come out 0, not NaN.
    return [Case(1, 1, 16), Case(17, 17, 32, kind="peaky", seed=1), Case(20, 33, 16, causal=True, seed=2),
            Case(33, 20, 16, causal=True, seed=3), Case(24, 40, 64, dtype=torch.float16, causal=True, seed=4)]


def _backward_torch(fn, cases: Iterable[Case] | None = None) -> Report:
    cases = list(cases) if cases is not None else _backward_torch_cases()
    report = check_backward("07.backward_torch", fn, cases)
    _uses_what_it_is_given("07.backward_torch", fn)
    return report


def _uses_what_it_is_given(exercise: str, fn) -> None:
    """Hand ``fn`` an O and an LSE that its Q, K, V did not produce, and expect the gradients the
    FlashAttention formulas give from exactly those (P = exp(scale·Q Kᵀ − LSE), Δ = rowsum(dO ∘ O)).

    A kernel reads O and the LSE from memory and cannot tell where they came from; an answer that runs
    autograd through attention, or renormalises P row by row, ignores them, and this is where it shows.
    """
    from course.grading.engines import _grads_with, _masks
    from course.reference import attention, attention_backward
    case = Case(12, 20, 16, causal=True, seed=71)
    q, k, v = case.tensors()
    forward = attention(q, k, v, case.causal)
    gen = torch.Generator().manual_seed(72)
    o = (forward.o + 0.5 * torch.randn(forward.o.shape, generator=gen, dtype=torch.float64)).float()
    lse = (forward.lse + torch.rand(forward.lse.shape, generator=gen, dtype=torch.float64)).float()
    do = torch.randn(q.shape, generator=gen)
    scale = case.d ** -0.5
    text = f"{case.describe()} with an O and an LSE these inputs did not produce"
    got = learner_call(exercise, fn, (q, k, v, o, lse, do), dict(causal=True, scale=scale), text)
    want = _grads_with(q, k, v, o, lse, do, _masks(case.n_q, case.n_k)["causal"], scale, scale)
    recomputed = attention_backward(q, k, v, do, True, scale)

    def near(a, b) -> bool:
        return (isinstance(a, torch.Tensor) and a.shape == b.shape
                and bool(torch.allclose(a.detach().cpu().double(), b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))))

    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        raise CheckFailed(f"{exercise}: on {text} your function returned {type(got).__name__}; expected (dq, dk, dv).")
    for name, g, w, r in zip(("dq", "dk", "dv"), got, want, recomputed):
        if near(g, w):
            continue
        if near(g, r):
            raise CheckFailed(f"{exercise}: on {text}, your {name} is the gradient of softmax(scale · Q Kᵀ) V "
                              "recomputed from Q, K and V, not the one the given O and LSE make. The backward "
                              "must use them as they are: P = exp(scale · Q Kᵀ − LSE) with no renormalising, and "
                              "Δ = rowsum(dO ∘ O) with the O it is handed (a kernel reads both from memory).")
        raise CheckFailed(f"{exercise}: wrong {name} on {text} (the other gradients are checked after it). "
                          "Rebuild P from the given LSE and take Δ from the given O.")


_BACKWARD_FLOP_ARGS = [dict(n_q=n_q, n_k=n_k, d=d, design=design) for n_q, n_k, d in ((1, 1, 1), (4096, 4096, 128),
                                                                                       (17, 129, 64))
                       for design in ("stored_p", "atomic", "split")]


def _products(counts: dict[str, int], per_product: int = 2):
    """A FLOP count with ``counts[design]`` products of Nq·Nk·D multiply-adds, ``per_product`` FLOPs each."""
    def count(n_q: int, n_k: int, d: int, design: str) -> int:
        return per_product * counts[design] * n_q * n_k * d
    return count


_BACKWARD_FLOP_MISTAKES = [
    Mistake("a multiply-add is 2 FLOPs: each product of the backward is 2 · Nq · Nk · D FLOPs.",
            _products(roofline.BACKWARD_MATMULS, per_product=1)),
    Mistake("with P stored there is nothing to recompute: dV = Pᵀ dO, dP = dO Vᵀ, dK = dSᵀ Q and dQ = dS K are 4 "
            "products.", _products(dict(roofline.BACKWARD_MATMULS, stored_p=5))),
    Mistake("without P, the backward must first recompute S = Q Kᵀ to rebuild it: 1 + 4 = 5 products in the atomic "
            "design.", _products(dict(roofline.BACKWARD_MATMULS, atomic=4))),
    Mistake("the split design's dQ kernel recomputes S = Q Kᵀ and dP = dO Vᵀ before dQ = dS K: 3 products, on top of "
            "the 4 of the dK/dV kernel (which no longer adds dQ): 7.", _products(dict(roofline.BACKWARD_MATMULS, split=6))),
    Mistake("the split design's dK/dV kernel does 4 products and its dQ kernel 3 (S and dP again, then dQ): 7, not "
            "5 + 3.", _products(dict(roofline.BACKWARD_MATMULS, split=8))),
    Mistake("that is the forward's count (2 products) scaled by 2.5: count the backward's products one by one (4 with "
            "P stored, 5 without, 7 split).", _products(dict(stored_p=5, atomic=5, split=5))),
]


def _backward_flops(fn, arguments: Iterable[dict] | None = None) -> Report:
    return check_values("07.backward_flops", fn, roofline.backward_flops, arguments or _BACKWARD_FLOP_ARGS,
                        _BACKWARD_FLOP_MISTAKES)


def _bit_cases() -> list[tuple[str, list[torch.Tensor]]]:
    """(what the runs hold, the runs): float32 tensors of one gradient from repeated runs."""
    gen = torch.Generator().manual_seed(73)
    base = torch.randn(6, 8, generator=gen)

    def nudged(t: torch.Tensor, where: list[int], ulps: int = 1) -> torch.Tensor:
        bits = t.clone().view(torch.int32).view(-1)
        bits[where] += ulps
        return bits.view(torch.float32).view(t.shape)

    zeros, negzeros = base.clone(), base.clone()
    zeros.view(-1)[[3, 10, 40]] = 0.0
    negzeros.view(-1)[[3, 10, 40]] = -0.0
    nans = base.clone()
    nans.view(-1)[[5, 6]] = float("nan")
    mixed = [base.clone(), nudged(base, [1]), nudged(base, [1, 2], 2), base.clone(), nudged(base, [9])]
    wide = torch.randn(32, 16, generator=gen)
    picks = torch.randperm(wide.numel(), generator=gen)
    many = [wide] + [nudged(wide, picks[i * 40:(i + 1) * 40].tolist() + picks[:10].tolist()) for i in range(7)]
    return [
        ("3 runs with the same bits", [base.clone() for _ in range(3)]),
        ("2 runs, one element 1 ulp apart", [base.clone(), nudged(base, [17])]),
        ("2 runs where three zeros change sign (0.0 and -0.0)", [zeros, negzeros]),
        ("3 runs with two NaNs of the same bits in each, and one element 1 ulp apart",
         [nans.clone(), nans.clone(), nudged(nans, [0])]),
        ("5 runs that differ from the first in different elements, some more than once", mixed),
        ("8 runs of a 32 × 16 gradient, 7 of them moved in different places", many),
    ]


_BIT_MISTAKES = [
    ("compare bits, not values: -0.0 == 0.0 although their bits differ, and NaN != NaN although the bits are the "
     "same. View the tensors as integers (t.view(torch.int32)) and compare those.",
     lambda runs: int((torch.stack(runs) != runs[0]).any(dim=0).sum())),
    ("every run must be compared, not only the first two.",
     lambda runs: int((runs[1].view(torch.int32) != runs[0].view(torch.int32)).sum())),
    ("count elements, not (run, element) pairs: an element that differs in three runs counts once.",
     lambda runs: int(sum(int((r.view(torch.int32) != runs[0].view(torch.int32)).sum()) for r in runs[1:]))),
]


def _differing_elements(fn, cases: list | None = None) -> Report:
    from course.models.determinism import differing_elements
    cases = cases or _bit_cases()
    returned, first_wrong = [], None
    for text, runs in cases:
        got = learner_call("07.differing_elements", fn, ([r.clone() for r in runs],), {}, text)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int) or isinstance(got, bool):
            raise CheckFailed(f"07.differing_elements: on {text} your function returned {type(got).__name__} "
                              f"{got!r}; expected a whole number of elements.")
        want = differing_elements(runs)
        returned.append((runs, got))
        if first_wrong is None and got != want:
            first_wrong = f"07.differing_elements: on {text} your function returned {got}, expected {want}"
    if first_wrong is None:
        return Report("07.differing_elements", len(cases))
    fits = [hint for hint, formula in _BIT_MISTAKES if all(formula(runs) == got for runs, got in returned)]
    raise CheckFailed(first_wrong + (f"\n  hint: {fits[0]}" if len(fits) == 1 else ""))


# -- lesson 08: the capstone ------------------------------------------------------------------------
# The learner's flash_attention is called through course.lessons.capstone's probe: one forward and backward, with
# what the run saved for its backward and what it built in PyTorch, all returned as data. Under the re-check
# the probe runs in the answer process around the handed-in cell's function, once that cell's text has been
# read (course.lessons.capstone.refused_reach), and only its data comes back.

def _capstone_cases() -> list[Case]:
    return [Case(17, 17, 32, batch=(2, 3), causal=True, seed=1), Case(65, 33, 16, batch=(1, 2), seed=2),
            Case(33, 65, 64, batch=(2, 1), kind="peaky", causal=True, seed=3),
            Case(40, 40, 16, batch=(1, 2), dtype=F16, causal=True, seed=4),
            # keys outnumber D by far: a score matrix (Nq × Nk per head) is larger than anything else the call
            # may build in PyTorch (the kernels' copies of Q, K, V and the gradients)
            Case(128, 128, 16, batch=(1, 2), causal=True, seed=5)]


def _built_by_wrapper(exercise: str, text: str, products: int, fused: int) -> None:
    """Refuse a wrapper that computes attention in PyTorch instead of calling the kernels."""
    if fused:
        raise CheckFailed(f"{exercise}: on {text} flash_attention calls PyTorch's fused attention "
                          "(scaled_dot_product_attention). The capstone runs the course's kernels: lesson 06's forward "
                          "and lesson 07's backward.")
    if products:
        raise CheckFailed(f"{exercise}: on {text} flash_attention makes {products} matrix product(s) in PyTorch. The "
                          "attention's arithmetic belongs to the kernels (lesson 06's forward, lesson 07's backward); "
                          "the wrapper only shapes tensors, maps heads and sums gradients.")


def _probe_outputs(exercise: str, result: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, text: str,
                   backward: bool) -> tuple:
    """(o, dq, dk, dv) of a probe's result, after the rules on what the call saved and built."""
    if not (isinstance(result, (tuple, list)) and len(result) == 6):
        raise CheckFailed(f"{exercise}: the probe of your function returned {type(result).__name__}; expected six items.")
    o, dq, dk, dv, saved, (largest, products, fused) = result
    _built_by_wrapper(exercise, text, products, fused)
    if not isinstance(o, torch.Tensor):
        raise CheckFailed(f"{exercise}: on {text} flash_attention returned {type(o).__name__}; expected the output tensor.")
    b, h, n_q, d = q.shape
    limit = 4 * b * h * max(n_q, k.shape[2]) * d  # bytes of an (expanded) input, as the interpreter copies them
    if largest > limit:
        raise CheckFailed(f"{exercise}: on {text} a PyTorch operator inside flash_attention returned {largest:,} "
                          f"elements, more than the inputs ({limit:,} bytes) and than anything the kernels' wrapper "
                          "needs: is the Nq × Nk score matrix built outside the kernels?")
    if saved is None:
        raise CheckFailed(f"{exercise}: on {text} the output has no torch.autograd.Function behind it: flash_attention "
                          "must return what FlashAttention.apply(...) returns, so that its own backward runs.")
    allowed = {tuple(q.shape), tuple(k.shape), tuple(v.shape), (b, h, n_q)}
    extra = [tuple(shape) for shape in saved if tuple(shape) not in allowed]
    if extra or len(saved) > 5:
        what = f"a tensor of shape {extra[0]}" if extra else f"{len(saved)} tensors"
        if extra and extra[0][1] == h and extra[0][2] == k.shape[2] and k.shape[1] != h:
            what += (" (K or V repeated over the query heads: save them as given, with their own heads: the "
                     "backward reads each K/V head for its group of query heads)")
        raise CheckFailed(f"{exercise}: on {text} the forward keeps {what} for the backward. FlashAttention's forward "
                          f"saves the inputs, O and one LSE per query row ({(b, h, n_q)}), and nothing else: the "
                          "backward rebuilds P from the LSE.")
    if backward and not all(isinstance(g, torch.Tensor) for g in (dq, dk, dv)):
        raise CheckFailed(f"{exercise}: on {text} the backward left a gradient of q, k or v empty: does backward "
                          "return (dq, dk, dv, None, None, None)?")
    return o, dq, dk, dv


def _flash_attention(probe, cases: Iterable[Case] | None = None) -> Report:
    exercise = "08.flash_attention_triton"
    cases = list(cases) if cases is not None else _capstone_cases()
    options = dict(device=tiers.device(), tier=tiers.active_tier())

    def forward(q, k, v, causal=False, scale=None):
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        return _probe_outputs(exercise, probe(q, k, v, None, causal=causal, scale=scale), q, k, v, text, False)[0]

    def gradients(q, k, v, o, lse, do, causal=False, scale=None):
        text = f"q {tuple(q.shape)}, k {tuple(k.shape)}"
        return _probe_outputs(exercise, probe(q, k, v, do, causal=causal, scale=scale), q, k, v, text, True)[1:]

    forward.__name__ = gradients.__name__ = getattr(probe, "__name__", "flash_attention")
    report = check_attention(exercise, forward, cases, pass_causal=True, pass_scale=True, **options)
    check_backward(exercise, gradients, cases, **options)
    _grouped_query_heads(exercise, probe, options["device"])
    return report


def _grouped_query_heads(exercise: str, probe, device) -> None:
    """Four query heads over two K/V heads: query head h reads K/V head h // 2, and dK, dV sum over each group."""
    from course.reference import attention
    gen = torch.Generator().manual_seed(81)
    q = torch.randn(1, 4, 20, 16, generator=gen)
    k, v = torch.randn(1, 2, 33, 16, generator=gen), torch.randn(1, 2, 33, 16, generator=gen)
    do = torch.randn(1, 4, 20, 16, generator=gen)
    text = "grouped-query heads (q has 4 heads, k and v 2; Nq=20, Nk=33, D=16, causal)"
    args = [t.to(device) for t in (q, k, v, do)]
    result = learner_call(exercise, probe, tuple(args), dict(causal=True, scale=None), text)
    got = _probe_outputs(exercise, result, *args[:3], text, True)
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    want_o = attention(leaves[0], leaves[1].repeat_interleave(2, dim=1), leaves[2].repeat_interleave(2, dim=1),
                       True).o
    want_o.backward(do.double())
    for name, g, w in zip(("o", "dq", "dk", "dv"), got, (want_o.detach(), *(t.grad for t in leaves))):
        if not (isinstance(g, torch.Tensor) and g.shape == w.shape):
            raise CheckFailed(f"{exercise}: with {text}, {name} has shape "
                              f"{tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__}; expected "
                              f"{tuple(w.shape)} (the gradient of k and v has k's and v's own 2 heads).")
        err = float((g.detach().cpu().double() - w).abs().max())
        if not err <= 1e-4 * max(1.0, float(w.abs().max())):
            raise CheckFailed(f"{exercise}: wrong {name} with {text}: off by up to {err:.3g}. Query head h reads K/V head "
                              "h // (H / H_kv), and the gradient of a K/V head is the sum over the query heads that "
                              "read it.")


def _training(probe, steps: int = 8, seed: int = 0) -> Report:
    """Losses of a short training run with the learner's attention against the same run with PyTorch's."""
    from course.lessons.capstone import sdpa_attention, train_losses
    text = f"a {steps}-step training run (seed {seed})"
    result = learner_call("08.training", probe, (steps, seed), {}, text)
    if not (isinstance(result, (list, tuple)) and len(result) == 2):
        raise CheckFailed(f"08.training: the training run returned {type(result).__name__}; expected (losses, built).")
    got, (products, fused) = result
    _built_by_wrapper("08.training", text, products, fused)
    want = train_losses(sdpa_attention, steps=steps, seed=seed)
    if not (isinstance(got, (list, tuple)) and all(isinstance(x, float) for x in got)):
        raise CheckFailed(f"08.training: the training run returned {type(got).__name__}; expected a list of losses.")
    for step, (a, b) in enumerate(zip(got, want)):
        if not abs(a - b) <= 1e-4 * max(1.0, abs(b)):
            raise CheckFailed(f"08.training: at step {step} the loss with your flash_attention is {a:.6g}, with PyTorch's "
                              f"attention {b:.6g} (steps before it agree). "
                              + ("The very first loss differs: the forward is wrong for this model (causal, grouped "
                                 "heads)." if step == 0 else "The forward agreed, so the gradients differ: check the "
                                 "backward (causal, scale, the sum over grouped heads)."))
    if len(got) != len(want):
        raise CheckFailed(f"08.training: the run stopped after {len(got)} of {len(want)} steps (a loss was not finite).")
    return Report("08.training", steps)


# -- numeric exercises: arguments drawn when the grader checks -----------------------------------
# A lookup table of the visible arguments passes a visible check and nothing else: a hidden test adds
# ``drawn=N``, N argument sets drawn at random (os.urandom) within the lesson's valid range. Under the
# grader the seed goes into the recording, so the re-check, which replays the learner's answers, draws
# the very same sets (course.grading.recording).

_D = (16, 32, 48, 64, 80, 96, 128)  # head dims a lesson uses


def _draw_sizes(rng, low: int = 1, high: int = 8192) -> int:
    """A length, mostly not a multiple of any tile (1, 17, 129, ... as often as 128)."""
    return rng.choice([rng.randint(low, 64), rng.randint(low, high)])


DRAWS: dict[str, Callable[[Any], dict | tuple]] = {
    "00.attention_flops": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D)),
    "00.flash_intensity": lambda r: dict(n=_draw_sizes(r), d=r.choice(_D), bytes_per_element=r.choice((2, 4))),
    "01.naive_bytes_read": lambda r: dict(n=_draw_sizes(r), d=r.choice(_D),
                                          dtype=r.choice((torch.float32, torch.float16, torch.bfloat16))),
    "02.softmax_bytes": lambda r: dict(rows=_draw_sizes(r), cols=_draw_sizes(r), bytes_per_element=r.choice((2, 4)),
                                       online=r.random() < 0.5),
    "03.tiled_bytes": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D),
                                     block_m=r.choice((16, 32, 64, 128)), bytes_per_element=r.choice((2, 4))),
    "03.shared_bytes": lambda r: dict(block_m=r.choice((4, 8, 16, 32, 64)), block_n=r.choice((16, 32, 48, 64, 96)),
                                      d=r.choice(_D)),
    # Any offset, stride and width: straddles of a sector boundary among them.
    "04.warp_sectors": lambda r: dict(offset_bytes=r.randint(0, 255), stride_bytes=r.choice((0, r.randint(1, 300))),
                                      access_bytes=r.choice((1, 2, 4, 8, 12, 16))),
    "04.bank_ways": lambda r: dict(row_floats=r.randint(1, 256), pad_floats=r.randint(0, 8)),
    "06.causal_mask": lambda r: dict(n_q=r.randint(1, 12), n_k=r.randint(1, 12), top_left=r.random() < 0.5),
    "06.tile_counts": lambda r: dict(n_q=_draw_sizes(r, high=600), n_k=_draw_sizes(r, high=600),
                                     block_m=r.choice((16, 32, 64, 128)), block_n=r.choice((16, 32, 64, 128))),
    "07.backward_flops": lambda r: dict(n_q=_draw_sizes(r), n_k=_draw_sizes(r), d=r.choice(_D),
                                        design=r.choice(("stored_p", "atomic", "split"))),
    "09.rows_per_step": lambda r: dict(operands=r.randint(1, 6), block_cols=r.randint(1, 4), dtype_bits=r.choice((16, 32)),
                                       full_sync=r.random() < 0.5),
    "09.grid_assignment": lambda r: (lambda q: (q, q + r.randint(0, 8), r.randint(1, 8), r.random() < 0.8))(
        r.randint(1, 64)),
}
"""Exercise id → one argument set drawn from a ``random.Random``, in the form its check takes."""

ENUMERATED = {"05.fragment_lane": "its visible check asks for every element of every fragment: there is nothing left "
                                  "to draw"}
"""Numeric exercises with no draws, and why."""

_DRAWN_SEED = "drawn-seed:"  # recording key of a test's seed (beside the call digests, which are 32 hex digits)


def drawn_arguments(exercise: str, count: int, seed: int) -> list:
    """``count`` argument sets of ``exercise`` drawn with ``seed`` (the same seed, the same sets)."""
    import random
    if exercise not in DRAWS:
        raise CheckFailed(f"{exercise}: this exercise draws no arguments" + (f" ({ENUMERATED[exercise]})"
                                                                             if exercise in ENUMERATED else "") + ".")
    rng = random.Random(seed)
    return [DRAWS[exercise](rng) for _ in range(count)]


def _draw(exercise: str, count: Any, options: dict, candidate: Any) -> tuple[list, str, int]:
    """(the drawn sets, the recording key, the seed): a fresh seed, or the recorded one for a replayed recording."""
    from course.grading.recording import call_key
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CheckFailed(f"{exercise}: drawn= takes a number of argument sets to draw, at least 1; got {count!r}.")
    key = _DRAWN_SEED + call_key(exercise, (), {"arguments": options.get("arguments"), "drawn": count})
    if isinstance(candidate, Replay):
        seed = candidate.recordings.get(exercise, {}).get(key)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise CheckFailed(f"{exercise}: the notebook holds no drawn arguments for this test: the check that should "
                              "have recorded them did not run, or did not run as the course wrote it.")
    else:
        seed = int.from_bytes(os.urandom(8), "little")
    return drawn_arguments(exercise, count, seed), key, seed


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.attention_flops", "FLOPs of the attention forward pass", _attention_flops),
    Exercise("00.flash_intensity", "Arithmetic intensity of a fused attention kernel", _intensity),
    Exercise("01.attention_torch", "Standard attention in PyTorch", _attention_torch),
    Exercise("01.naive_bytes_read", "Bytes read by the naive kernel", _naive_bytes),
    Exercise("01.naive_triton", "The naive attention kernel in Triton", _naive_triton, isolated=True),
    Exercise("01.naive_cuda", "The naive attention kernel in CUDA C", _naive_simt("01.naive_cuda"), isolated=True,
             takes="kernel module"),
    Exercise("01.naive_metal", "The naive attention kernel in Metal", _naive_simt("01.naive_metal"), isolated=True,
             takes="kernel module"),
    Exercise("02.online_softmax_cuda", "One warp per query row with warp shuffles (CUDA C)",
             _track_step("02.online_softmax_cuda"), isolated=True, takes="kernel module"),
    Exercise("02.online_softmax_metal", "One sweep over the keys with the online softmax (Metal)",
             _naive_simt("02.online_softmax_metal"), isolated=True, takes="kernel module"),
    Exercise("03.tiled_cuda", "K/V tiles through shared memory, O and LSE (CUDA C)", _track_step("03.tiled_cuda"),
             isolated=True, takes="kernel module"),
    Exercise("04.double_buffer_cuda", "float4 accesses and double-buffered tiles (CUDA C)",
             _track_step("04.double_buffer_cuda"), isolated=True, takes="kernel module"),
    Exercise("05.mma_cuda", "Both matmuls on tensor cores with wmma (CUDA C)", _track_step("05.mma_cuda"),
             isolated=True, takes="kernel module"),
    Exercise("06.causal_cuda", "Causal masking: skip the future, mask the diagonal (CUDA C)",
             _track_step("06.causal_cuda"), isolated=True, takes="kernel module"),
    Exercise("07.backward_atomic_cuda", "The backward pass with dQ by atomicAdd (CUDA C)",
             _backward_simt("07.backward_atomic_cuda", "atomic"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_cuda", "The atomic-free backward: dK/dV and dQ in separate kernels (CUDA C)",
             _backward_simt("07.backward_split_cuda", "split"), isolated=True, takes="kernel module"),
    Exercise("03.tiled_metal", "Threadgroup tiles, O and LSE (Metal)", _track_step("03.tiled_metal"),
             isolated=True, takes="kernel module"),
    Exercise("04.double_buffer_metal", "float4 loads and ping-pong threadgroup tiles (Metal)",
             _track_step("04.double_buffer_metal"), isolated=True, takes="kernel module"),
    Exercise("05.mma_metal", "simdgroup matrices, spill-scale-reload and causal masking (Metal)",
             _track_step("05.mma_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_atomic_metal", "The backward pass with compare-and-swap float atomics (Metal)",
             _track_step("07.backward_atomic_metal"), isolated=True, takes="kernel module"),
    Exercise("07.backward_split_metal", "The atomic-free backward in separate kernels (Metal)",
             _track_step("07.backward_split_metal"), isolated=True, takes="kernel module"),
    Exercise("02.softmax_bytes", "Memory traffic of the safe and the online softmax", _softmax_bytes),
    Exercise("02.online_softmax_triton", "A row softmax with the online normalizer", _online_softmax, isolated=True),
    Exercise("02.merge_torch", "Merging two partial softmax states in PyTorch",
             lambda fn, cases=None: _merge_states(fn, cases, "02.merge_torch")),
    Exercise("02.online_softmax_merge_triton", "Merging two partial softmax states in a Triton kernel", _merge_states,
             isolated=True),
    Exercise("02.online_softmax_attention_triton", "One sweep over the keys with the online softmax (Triton)",
             _row_kernel("02.online_softmax_attention_triton", (Case(6, 129, 16, kind="peaky", seed=8),)),
             isolated=True),
    Exercise("03.tiled_torch", "The tiled forward in PyTorch: O and LSE, no N×N matrix", _tiled_torch),
    Exercise("03.tiled_bytes", "Global-memory traffic of the tiled kernel", _tiled_bytes),
    Exercise("03.shared_bytes", "Shared memory a block of the tiled kernel needs", _shared_bytes),
    Exercise("03.tiled_triton", "The tiled FlashAttention-2 forward pass",
             lambda fn, cases=None: _tiled("03.tiled_triton", fn, cases), isolated=True),
    Exercise("04.warp_sectors", "32-byte sectors a warp's access touches", _warp_sectors),
    Exercise("04.bank_ways", "Bank conflicts of a column walk through a padded shared tile", _bank_ways),
    Exercise("04.double_buffer_triton", "The forward pass with tensor descriptors and pipelining",
             lambda fn, cases=None: _tiled("04.double_buffer_triton", fn, cases), isolated=True),
    Exercise("05.fragment_lane", "Which lane holds an element of a matrix fragment, found by experiment",
             _fragment_lane),
    Exercise("05.mma_triton", "Both matmuls on tensor cores (fp16 in, fp32 accumulate)",
             lambda fn, cases=None: _tiled("05.mma_triton", fn, cases, dtype_mix=(F16, torch.float32)), isolated=True),
    Exercise("06.causal_mask", "The causal mask, bottom-right and top-left", _causal_mask),
    Exercise("06.causal_torch", "Causal attention in PyTorch, rows that see no key included", _causal_torch),
    Exercise("06.tile_counts", "Skipped, full and diagonal tiles of causal attention", _tile_counts),
    Exercise("06.causal_triton", "Causal masking with the stage split", _causal, isolated=True),
    Exercise("07.backward_torch", "The backward pass in PyTorch from O and the LSE", _backward_torch),
    Exercise("07.backward_flops", "FLOPs of the backward: P stored, atomic dQ, split dQ", _backward_flops),
    Exercise("07.differing_elements", "Counting the elements whose bits differ between runs", _differing_elements),
    Exercise("07.backward_atomic_triton", "The backward pass, dQ accumulated with atomics",
             lambda fn, cases=None: _backward("07.backward_atomic_triton", fn, cases), isolated=True),
    Exercise("07.backward_split_triton", "The backward pass, dQ in its own atomic-free kernel",
             lambda fn, cases=None: _backward("07.backward_split_triton", fn, cases, deterministic=True), isolated=True),
    Exercise("08.flash_attention_triton", "FlashAttention as a torch.autograd.Function", _flash_attention,
             probe="autograd_probe"),
    Exercise("08.training", "Training a tiny model with flash_attention in place of PyTorch's attention", _training,
             probe="training_probe"),
    Exercise("09.one_core_tt", "FlashAttention on one Tensix core: the online-softmax update in TT-Lang",
             lambda fn, cases=None: lesson09.one_core(fn, cases), takes="tt operation"),
    Exercise("09.rows_per_step", "The DST budget: rows of tiles per compute step", lesson09.rows_per_step),
    Exercise("09.grid_assignment", "Query tiles to cores, balanced under a causal mask", lesson09.grid_assignment),
    Exercise("09.grid_causal_tt", "FlashAttention on a grid of cores, causal, in TT-Lang",
             lambda fn, cases=None: lesson09.grid_causal(fn, cases), takes="tt operation"),
]}


# -- the course's own models as answers ---------------------------------------------------------------
# Some numeric exercises ask for exactly what a course module computes (course.models.roofline, course.models.causal, ...).
# Each declares which of those functions its answer may call (where the lesson's point is to use them) and
# which it may not (where the lesson asks for the count or the formula itself). A refused call fails the
# check with one sentence; course.grading.measured says how it is seen, and that the re-check reads the answer cell
# as handed in, so an answer cell that switches the notebook's watch off gains nothing.

@dataclass(frozen=True)
class ModelPolicy:
    refused: tuple[str, ...] = ()
    """Course functions (dotted names) that compute what the exercise asks: its answer may not call them."""
    why: str = ""
    """Why not, completing the sentence "your answer may not use f: ..."."""
    allowed: tuple[str, ...] = ()
    """Course functions the lesson hands the learner for this exercise."""

    def sentence(self, exercise: str, name: str) -> str:
        return f"{exercise}: your answer may not use {name}: {self.why}."


MODEL_POLICY: dict[str, ModelPolicy] = {
    "00.attention_flops": ModelPolicy(("course.models.roofline.attention_flops",),
                                      "it is the course's own count, and the exercise is to count the FLOPs of the two "
                                      "matmuls yourself"),
    "00.flash_intensity": ModelPolicy(("course.models.roofline.flash_attention_bytes",),
                                      "it is the course's own count of the fused kernel's bytes, which the exercise asks "
                                      "you to count (the FLOPs may come from course.models.roofline.attention_flops)",
                                      allowed=("course.models.roofline.attention_flops", "course.models.roofline.arithmetic_intensity")),
    "01.naive_bytes_read": ModelPolicy(("course.models.roofline.naive_kernel_bytes_read",),
                                       "it is the course's own count, and the exercise is to count the naive kernel's "
                                       "reads yourself"),
    "02.softmax_bytes": ModelPolicy(("course.models.roofline.softmax_bytes",),
                                    "it is the course's own count, and the exercise is to count the passes' bytes "
                                    "yourself"),
    "03.tiled_bytes": ModelPolicy(("course.models.roofline.tiled_kernel_bytes",),
                                  "it is the course's own count, and the exercise is to count the tiled kernel's "
                                  "traffic yourself"),
    "03.shared_bytes": ModelPolicy(("course.tracks.cuda.shared_memory_bytes",),
                                   "it is the launcher's own count, and the exercise is to lay out the three tiles "
                                   "yourself"),
    "04.warp_sectors": ModelPolicy(("course.models.memory_model.sectors_of_bytes", "course.models.memory_model.sectors_touched",
                                    "course.models.memory_model.coalescing"),
                                   "it is the course's memory model, and the exercise is to count the sectors yourself"),
    "04.bank_ways": ModelPolicy(("course.models.memory_model.bank_conflict_ways", "course.models.memory_model.bank_access",
                                 "course.models.memory_model.warp_column_walk"),
                                "it is the course's memory model, and the exercise is to work out the conflict "
                                "yourself"),
    "05.fragment_lane": ModelPolicy(("course.models.fragments.fragment_map", "course.models.fragments.lane_cells"),
                                    "it looks the lane up in the measured map, and the exercise asks for a formula, "
                                    "not a table"),
    "06.causal_mask": ModelPolicy(("course.models.causal.offset",),
                                  "it is the course's offset of each alignment, which the exercise asks you to work "
                                  "out"),
    "06.tile_counts": ModelPolicy(("course.models.causal.tile_counts", "course.models.causal.tile_kind",
                                   "course.models.causal.visible_key_tiles", "course.models.causal.program_work"),
                                  "it is the course's own tile model, and the exercise is to count the tiles yourself "
                                  "(course.models.causal.offset may give you the offset)",
                                  allowed=("course.models.causal.offset",)),
    "07.backward_flops": ModelPolicy(("course.models.roofline.backward_flops",),
                                     "it is the course's own count, and the exercise is to count the backward's "
                                     "products yourself"),
    "07.differing_elements": ModelPolicy(("course.models.determinism.differing_elements",),
                                         "it is the course's own count, and the exercise is to compare the runs' bits "
                                         "yourself"),
    # The lesson hands out DST's capacity (course/lessons/dst.py): the exercise is what fits in it.
    "09.rows_per_step": ModelPolicy(allowed=("course.lessons.dst.capacity",)),
    "09.grid_assignment": ModelPolicy(("course.lessons.lesson09.balanced_plan",),
                                      "it is the course's own assignment, the one yours is measured against",
                                      allowed=("course.lessons.lesson09.key_tiles_seen",)),
}
"""Numeric exercise id → which of the course's model functions its answer may call, and which not."""


def _refused_models(exercise: str, candidate: Any, graded: Any) -> Any:
    """``graded``, watched for calls of the exercise's refused model functions (course.grading.measured); or CheckFailed
    at once when the answer's text names one (the answer cell as handed in, under the re-check)."""
    policy = MODEL_POLICY.get(exercise)
    if policy is None or not policy.refused:
        return graded
    from course.grading.measured import function_source, model_references, refusing_model_calls
    if isinstance(candidate, (Replay, LiveAnswer)):
        source = getattr(candidate, "answer_source", None)  # set by course.grading.recheck from the notebook handed in
        named = model_references(source, policy.refused) if isinstance(source, str) else []
    else:
        found = function_source(candidate)
        named = model_references(found[0], policy.refused, line=found[1]) if found else []
    if named:
        raise CheckFailed(policy.sentence(exercise, named[0]))
    if isinstance(candidate, (Replay, LiveAnswer)):  # it runs elsewhere: its text is what can be read here
        return graded
    return refusing_model_calls(graded, policy.refused, lambda name: policy.sentence(exercise, name))


def check(exercise: str, candidate: Any, **options: Any) -> Report:
    """Check ``candidate`` for ``exercise`` (an id such as ``"01.attention_torch"``); print and return a Report.

    Raises CheckFailed (shown in Jupyter as a short diagnosis) when the answer is wrong. ``kernel=``, for a
    traffic-counting exercise (course.grading.counters.MEASURED_EXERCISES), also runs that kernel (a %%cuda /
    %%metal module, or a function launching Triton kernels) in counters mode and requires the learner's
    formula to give the bytes it was measured to move.
    """
    measured_with = options.pop("kernel", None)
    drawn = options.pop("drawn", None)
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise CheckFailed(f"unknown exercise {exercise!r}; the exercises are: {known}")
    chosen = EXERCISES[exercise]
    from course.grading.answers import FailedCell
    if isinstance(candidate, FailedCell):
        raise CheckFailed(f"{exercise}: {candidate.message}")
    if chosen.takes == "kernel module":
        from course.simt import RawModule
        from course.simt.magic import CompileFailed
        if isinstance(candidate, CompileFailed):
            shown = f"\n{candidate.error}" if getattr(candidate, "error", "") else ""
            raise CheckFailed(f"{exercise}: your %%{candidate.language} {candidate.name} cell did not compile, so "
                              f"there is no kernel to check. Fix the error that cell shows and run it again.{shown}")
        if not isinstance(candidate, RawModule):
            raise CheckFailed(f"{exercise}: expected the kernels your %%cuda / %%metal cell compiled (the name after "
                              f"the magic), got {type(candidate).__name__}. Run that cell first.")
        if untouched_stub(exercise, candidate.code):
            cell = os.path.splitext(os.path.basename(candidate.display_path))[0]
            raise CheckFailed(f"{exercise}: not implemented yet: your %%{candidate.language} {cell} cell still holds the "
                              f"kernel as handed out (nothing is written where it says `// YOUR CODE HERE`).\n"
                              f"  hint: complete the region marked `// YOUR CODE HERE`, run the cell, then this check "
                              f"again.")
    elif not callable(candidate):
        raise CheckFailed(f"{exercise}: expected your function, got {type(candidate).__name__} {candidate!r}.")
    if isinstance(candidate, LiveAnswer) and chosen.probe is not None:
        # Where the grade is decided: the cell as handed in is read first, then the course's probe runs around the
        # learner's function inside the answer process, and only its data comes back (course.lessons.capstone).
        from course.lessons.capstone import refuse_reach
        refuse_reach(exercise, candidate.answer_source)
        candidate = candidate.around(chosen.probe)
    elif chosen.probe is not None and not isinstance(candidate, Replay):
        from course.lessons.capstone import PROBES
        candidate = PROBES[chosen.probe](candidate)
    graded, learner, row = _triton_kernels(exercise, candidate)
    if learner is not None and _gate_wanted(row, learner):
        from course.tracks.triton_answer import gate
        gate(row, graded, learner)  # before anything runs: on the interpreter a kernel body is Python
    if isinstance(candidate, Replay):
        graded = candidate.for_exercise(exercise)
    graded = _refused_models(exercise, candidate, graded)
    draw = None
    if drawn is not None:  # checked on the given arguments (if any) and on sets drawn now
        draw = _draw(exercise, drawn, options, candidate)
        options["arguments"] = list(options.get("arguments") or []) + draw[0]
    recorder = None
    if ((row is None or row.learner_wrapper) and chosen.takes == "function" and not chosen.isolated and autograding()
            and not isinstance(candidate, Replay)):
        # Under the grader: the grade comes from replaying these answers elsewhere (course.grading.recording).
        recorder = graded = Recorder(exercise, graded, getattr(candidate, "__name__", exercise))
        if draw is not None:  # the re-check draws the same sets from the same seed
            recorder.calls[draw[1]] = draw[2]
    from course.tracks.triton import autotune
    started = time.perf_counter()
    try:
        # A check grades correctness on each kernel's check config: it never autotunes (an autotuner times
        # configs, which is a benchmark's work, and its buffers would count as the learner's), even when
        # the caller is inside course.tracks.triton.autotune().
        with quiet(), autotune(False):  # and no library warning about a wrong answer lands above the diagnosis
            if chosen.isolated:
                report = run_isolated(lambda: chosen.run(graded, **options), exercise)
            else:
                report = chosen.run(graded, **options)
            if measured_with is not None:
                from course.grading.counters import check_measured
                agreed = check_measured(exercise, graded, measured_with)
    finally:
        if recorder is not None:
            emit(recorder)
    if report.tier and not tiers.triton_interpreted() and isinstance(report, Report):
        report.seconds = time.perf_counter() - started  # on a GPU a check must answer in seconds: show it
    print(report)
    if chosen.takes == "kernel module":  # on a GPU machine, the same kernel on the GPU: a line, never points
        from course.tracks.cuda_gpu import gpu_note
        if note := gpu_note(exercise, candidate):
            print(note)
    if measured_with is not None:
        print(agreed)
    return report


def _triton_kernels(exercise: str, candidate: Any):
    """(what to run, the learner's kernels, the table row) for a Triton kernel exercise: the course's wrapper
    around the learner's @triton.jit functions (course.tracks.triton_answer). Other exercises run as given."""
    from course.tracks import table
    row = table.find(exercise)
    if row is None or row.track != "triton" or row.learner_wrapper:
        return candidate, None, row
    from course.tracks.triton_answer import graded_function, is_course_wrapped, learner_kernels
    if is_course_wrapped(candidate):
        return candidate, None, row
    learner = learner_kernels(candidate)
    if learner is None:
        raise CheckFailed(f"{exercise}: cannot read the source of {getattr(candidate, '__name__', candidate)!r}. Hand in "
                          f"the function your Triton cell defines; the course launches the kernels of that cell.")
    return graded_function(row, learner), learner, row


def _gate_wanted(row, learner) -> bool:
    """Compile with the real compiler, except the course's own files (the compile gate covers those) and the
    notebook run of the grader (its re-check compiles)."""
    if autograding():
        return False
    from course.kernels import kernel_path
    return learner.text != kernel_path(row.kernel_file).read_text(encoding="utf-8")
