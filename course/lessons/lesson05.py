"""Lesson 05's checks: which lane holds an element of a fragment, and both matmuls on the matrix units.
"""
from __future__ import annotations

from typing import Iterable

import torch

from course.grading.checks import F16, tiled, track_step
from course.grading.engines import Mistake, Report, check_values
from course.grading.exercise import Exercise, ModelPolicy, ladder

__all__ = ["EXERCISES", "LADDERS", "ENUMERATED", "MODEL_POLICY"]


def _fragment_map_entry(which: int):
    """The lane (0) or slot (1) the course's runtime stores at (row, col) of a track's accumulator fragment."""
    def entry(track: str, row: int, col: int) -> int:
        from course.models.fragments import fragment_map  # here, not on top: +1 ms to `import course`
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
    from course.models.fragments import FRAGMENTS  # here, not on top: +1 ms to `import course`
    args = arguments or [dict(track=track, row=r, col=c) for track, shape in FRAGMENTS.items()
                         for r in range(shape.rows) for c in range(shape.cols)]
    return check_values("05.fragment_lane", fn, _fragment_lane_expected, args, _FRAGMENT_MISTAKES)


EXERCISES = (
    Exercise("05.mma_cuda", "Both matmuls on tensor cores with wmma (CUDA C)", track_step("05.mma_cuda"),
             isolated=True, takes="kernel module"),
    Exercise("05.mma_metal", "simdgroup matrices, spill-scale-reload and causal masking (Metal)",
             track_step("05.mma_metal"), isolated=True, takes="kernel module"),
    Exercise("05.fragment_lane", "Which lane holds an element of a matrix fragment, found by experiment",
             _fragment_lane),
    Exercise("05.mma_triton", "Both matmuls on tensor cores (fp16 in, fp32 accumulate)",
             lambda fn, cases=None: tiled("05.mma_triton", fn, cases, dtype_mix=(F16, torch.float32)), isolated=True),
)

# Why the hidden tests draw nothing here, and which course functions an answer may call (course.exercises reads both).
ENUMERATED = {"05.fragment_lane": "its visible check asks for every element of every fragment: there is nothing left "
                                  "to draw"}

MODEL_POLICY = {
    "05.fragment_lane": ModelPolicy(("course.models.fragments.fragment_map", "course.models.fragments.lane_cells"),
                                    "it looks the lane up in the measured map, and the exercise asks for a formula, "
                                    "not a table"),
}


_SPILL = (
    "The online update needs row r of the O accumulator multiplied by alpha_r. Can a lane tell which row its "
    "fragment elements belong to?",
    "It cannot (the layout is not specified), so go through shared memory, where element (r, c) has a known "
    "address: spill, scale, reload, with a barrier after the spill and after the scale.",
)

LADDERS = (
    ladder("05.fragment_lane",
           "Print the stored lane map of each fragment and look along a row: when does the lane number change?",
           "CUDA (16 × 16, 8 elements a lane on this runtime): two lanes share a row. Metal (8 × 8, 2 a lane): "
           "write the lane's bits out and see which bits give the row and which the column.",
           "Write a formula per track from row and col (integer division, modulo, bit tests) and compare it with "
           "the map for every cell before you check it.",
           cell="05_matrix_units/fragment_lane"),
    ladder("05.mma_triton",
           "Keep the Q, K and V tiles in their 16-bit dtype: `tl.dot` runs on the tensor cores only when its inputs "
           "are fp16/bf16.",
           "`s = tl.dot(q, tl.trans(k))` accumulates in fp32; p is fp32 too: cast it with `p.to(v.dtype)` right before "
           "`tl.dot(p, v, acc)`.",
           "`acc = acc * alpha[:, None]` is fine here: Triton knows which row each register of acc holds, so no "
           "spill is needed."),
    ladder("05.mma_cuda", *_SPILL,
           "CUDA C: `store_matrix_sync` each O fragment to the warp's O strip (`mem_row_major`), `__syncwarp()`, lanes "
           "2r and 2r + 1 scale row r by alpha_r, `__syncwarp()`, `load_matrix_sync` it back."),
    ladder("05.mma_metal", *_SPILL,
           "Metal: simdgroup_store each O matrix to threadgroup memory, simdgroup_barrier, the lanes of row r scale "
           "it by correction_r, simdgroup_barrier, simdgroup_load it back."),
)
