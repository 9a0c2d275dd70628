"""Lesson 04's checks: the 32-byte sectors of a warp's access, the bank conflicts of a column walk, and the
double-buffered, pipelined kernels.
"""
from __future__ import annotations

from typing import Iterable

from course.grading.checks import tiled, track_step
from course.grading.comparison import Report
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, ModelPolicy, TILED_RUNGS, ladder
from course.grading.step_exercises import step_exercises, step_ladders
from course.models.memory_model import WARP, bank_conflict_ways, sectors_of_bytes, warp_column_walk

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _sectors_expected(offset_bytes: int, stride_bytes: int, access_bytes: int) -> int:
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


EXERCISES = (
    # The pipelined forward in every track its rows declare (course/tracks/table.py): ids such as 04.double_buffer_cuda.
    *step_exercises("04", "double_buffer", {"triton": "The forward pass with tensor descriptors and pipelining",
                                            "cuda": "float4 accesses and double-buffered tiles (CUDA C)",
                                            "metal": "float4 loads and ping-pong threadgroup tiles (Metal)"},
                    {"triton": lambda exercise: lambda fn, cases=None: tiled(exercise, fn, cases),
                     "cuda": track_step, "metal": track_step}),
    Exercise("04.warp_sectors", "32-byte sectors a warp's access touches", _warp_sectors),
    Exercise("04.bank_ways", "Bank conflicts of a column walk through a padded shared tile", _bank_ways),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {
    # Any offset, stride and width: straddles of a sector boundary among them.
    "04.warp_sectors": lambda r: dict(offset_bytes=r.randint(0, 255), stride_bytes=r.choice((0, r.randint(1, 300))),
                                      access_bytes=r.choice((1, 2, 4, 8, 12, 16))),
    "04.bank_ways": lambda r: dict(row_floats=r.randint(1, 256), pad_floats=r.randint(0, 8)),
}

MODEL_POLICY = {
    "04.warp_sectors": ModelPolicy(("course.models.memory_model.sectors_of_bytes", "course.models.memory_model.sectors_touched",
                                    "course.models.memory_model.coalescing"),
                                   "it is the course's memory model, and the exercise is to count the sectors yourself"),
    "04.bank_ways": ModelPolicy(("course.models.memory_model.bank_conflict_ways", "course.models.memory_model.bank_access",
                                 "course.models.memory_model.warp_column_walk"),
                                "it is the course's memory model, and the exercise is to work out the conflict "
                                "yourself"),
}


_PING_PONG = (
    "Two buffers for K and two for V: tile t is computed on in buffer t % 2. Which buffer does the copy of tile "
    "t + 1 go to, and when may it start?",
    "One barrier per tile is enough: it publishes the tile about to be read (read-after-write) and retires the "
    "buffer about to be overwritten, whose last reader was the previous step (write-after-read).",
)

LADDERS = (
    ladder("04.warp_sectors",
           "List the byte ranges the 32 lanes read: lane i reads access_bytes bytes from offset + i · stride.",
           "A byte at address a lies in sector a // 32. A lane's access may cover more than one sector.",
           "Collect every sector of every lane's bytes in a set (first byte // 32 .. last byte // 32) and count "
           "the set.",
           cell="04_double_buffering/warp_sectors"),
    ladder("04.bank_ways",
           "Lane j reads word j · (row_floats + pad_floats) of the tile. Which bank is that word in?",
           "Bank = word % 32. Count, for each bank, how many different words the 32 lanes ask it for.",
           "The degree is the largest of those counts; it equals gcd(row_floats + pad_floats, 32).",
           cell="04_double_buffering/bank_ways"),
    *step_ladders("04", "double_buffer", (), {
        "triton": (
            *TILED_RUNGS[:1],
            "Write the loop with `tl.range` over the K/V tiles: the compiler pipelines it num_stages deep. Load the "
            "tiles with `k_desc.load([start_n, 0])` and `v_desc.load([start_n, 0])`.",
            "The descriptor pads missing keys with zeros, which would score 0: set scores of keys past `N_CTX_K` to "
            "-inf. The softmax is in base 2 here (`tl.exp2`, the scale already holds log2 e)."),
        "cuda": (
            *_PING_PONG,
            "CUDA C: `load_tile` the next tile into buffer (t + 1) % 2 at the top of step t, compute on buffer "
            "t % 2, then one `__syncthreads()` at the end of the step."),
        "metal": (
            *_PING_PONG,
            "Metal: threadgroup_barrier(mem_flags::mem_threadgroup) at the top of each step, then the copy of tile "
            "t + 1 into buffer (t + 1) % 2, then the compute on buffer t % 2."),
    }),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "banks", "widget": "course.widgets.memory:memory_access_explorer"},
                       {"name": "pipeline", "widget": "course.widgets.memory:pipeline_explorer"})}
