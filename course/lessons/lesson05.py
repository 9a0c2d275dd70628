"""Lesson 05's checks: which lane holds an element of a fragment, and both matmuls on the matrix units.
"""
from __future__ import annotations

from typing import Iterable

import torch

from course.errors import CheckFailed
from course.grading.checks import F16, tiled, track_step
from course.grading.comparison import Report
from course.grading.compare_values import Mistake, check_values
from course.grading.exercise import Exercise, ModelPolicy, ladder
from course.grading.step_exercises import step_exercises, step_ladders

__all__ = ["EXERCISES", "LADDERS", "DRAWS", "MODEL_POLICY"]


def _fragment_map_entry(which: int):
    """The lane (0) or slot (1) the course's runtime stores at (row, col) of a tile of a track's accumulator
    fragments: every fragment of the tile is laid out like the measured one, so (row, col) is looked up at its place
    inside its own fragment."""
    def entry(track: str, row: int, col: int) -> int:
        from course.models.fragments import fragment_map  # here, not on top: +1 ms to `import course`
        found = fragment_map(track)[which]
        return int(found[row % found.shape[0], col % found.shape[1]])
    return entry


_fragment_lane_expected = _fragment_map_entry(0)

_FRAGMENT_MISTAKES = [
    Mistake("rows and columns are swapped: the stored map's row index is the fragment's row.",
            lambda track, row, col: _fragment_lane_expected(track, col, row)),
    Mistake("that is the element (slot) number inside the lane, the second map; the question is the lane.",
            _fragment_map_entry(1)),
]

# Elements past the first fragment, in the tile's fragments (0..3, 0..3): the visible check asks for these beside every
# element of the first fragment, so a learner sees the tile; the hidden test's draws lie in fragments further out.
_VISIBLE_FURTHER = ((0, 1, 3, 5), (1, 0, 0, 0), (1, 1, 7, 2), (2, 3, 1, 6), (3, 2, 4, 1), (0, 3, 6, 7), (3, 0, 2, 3))
_DRAWN_FROM = 4  # a drawn element lies in a fragment (i, j) with max(i, j) >= 4: never one the visible check asks for
_DRAWN_UP_TO = 256  # ... and i, j < 256: tiles of up to 4096 × 4096 elements on CUDA, 2048 × 2048 on Metal


def _place(track: str, row: int, col: int) -> tuple[int, int, int, int]:
    """(fragment row, row inside it, fragment column, column inside it) of element (row, col) of a track's tile."""
    from course.models.fragments import FRAGMENTS  # here, not on top: +1 ms to `import course`
    shape = FRAGMENTS[track]
    return row // shape.rows, row % shape.rows, col // shape.cols, col % shape.cols


def _visible_fragment_arguments() -> list[dict]:
    """Every element of the first fragment of each track (the maps the notebook prints), and a few further into the
    tile."""
    from course.models.fragments import FRAGMENTS  # here, not on top: +1 ms to `import course`
    first = [dict(track=track, row=r, col=c) for track, shape in FRAGMENTS.items()
             for r in range(shape.rows) for c in range(shape.cols)]
    further = [dict(track=track, row=fi * shape.rows + r % shape.rows, col=fj * shape.cols + c % shape.cols)
               for track, shape in FRAGMENTS.items() for fi, fj, r, c in _VISIBLE_FURTHER]
    return first + further


def _draw_fragment_element(rng) -> dict:
    """An element of a fragment the visible check never asks about, in a tile far larger than any table of the maps."""
    from course.models.fragments import FRAGMENTS  # here, not on top: +1 ms to `import course`
    track = rng.choice(sorted(FRAGMENTS))
    shape = FRAGMENTS[track]
    far, any_ = rng.randrange(_DRAWN_FROM, _DRAWN_UP_TO), rng.randrange(_DRAWN_UP_TO)
    fi, fj = (far, any_) if rng.random() < 0.5 else (any_, far)
    return dict(track=track, row=fi * shape.rows + rng.randrange(shape.rows),
                col=fj * shape.cols + rng.randrange(shape.cols))


def _fragment_lane(fn, arguments: Iterable[dict] | None = None) -> Report:
    args = list(arguments) if arguments else _visible_fragment_arguments()
    in_first = [_place(a["track"], a["row"], a["col"])[::2] == (0, 0) for a in args]
    first = [a for a, inside in zip(args, in_first) if inside]
    further = [a for a, inside in zip(args, in_first) if not inside]
    if first:
        check_values("05.fragment_lane", fn, _fragment_lane_expected, first, _FRAGMENT_MISTAKES)
    if further:
        try:
            check_values("05.fragment_lane", fn, _fragment_lane_expected, further, _FRAGMENT_MISTAKES)
        except CheckFailed as failed:
            raise CheckFailed(f"{failed}\n  {_past_the_map(str(failed), further)}") from None
    return Report("05.fragment_lane", len(args))


def _past_the_map(message: str, further: list[dict]) -> str:
    """The sentence under a wrong answer past the first fragment: which element it was, and where a table ends."""
    from course.models.fragments import FRAGMENTS  # here, not on top: +1 ms to `import course`
    named = next((a for a in further if f"track={a['track']}, row={a['row']}, col={a['col']})" in message), further[0])
    shape = FRAGMENTS[named["track"]]
    fi, r, fj, c = _place(named["track"], named["row"], named["col"])
    return (f"element ({named['row']}, {named['col']}) of the {named['track']} tile is element ({r}, {c}) of its "
            f"fragment ({fi}, {fj}), past the {shape.rows} × {shape.cols} map the notebook prints: every fragment of "
            f"the tile is laid out like that map, so its lane follows from the element's place inside its fragment. "
            f"A table of the map's entries ends at the map's edge.")


EXERCISES = (
    # The tensor-core forward in every track its rows declare (course/tracks/table.py): ids such as 05.mma_cuda.
    *step_exercises("05", "mma", {"triton": "Both matmuls on tensor cores (fp16 in, fp32 accumulate)",
                                  "cuda": "Both matmuls on tensor cores with wmma (CUDA C)",
                                  "metal": "simdgroup matrices, spill-scale-reload and causal masking (Metal)"},
                    {"triton": lambda exercise: lambda fn, cases=None: tiled(exercise, fn, cases,
                                                                             dtype_mix=(F16, torch.float32)),
                     "cuda": track_step, "metal": track_step}),
    Exercise("05.fragment_lane", "Which lane holds an element of a matrix fragment, found by experiment",
             _fragment_lane),
)

# What the hidden tests draw, and which course functions an answer may call (course.exercises reads both).
DRAWS = {"05.fragment_lane": _draw_fragment_element}

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
           "the map for every cell before you check it. Past the first fragment, start from the element's place "
           "inside its own fragment: (row % 16, col % 16) for CUDA, (row % 8, col % 8) for Metal.",
           cell="05_matrix_units/fragment_lane"),
    *step_ladders("05", "mma", (), {
        "triton": (
            "Keep the Q, K and V tiles in their 16-bit dtype: `tl.dot` runs on the tensor cores only when its inputs "
            "are fp16/bf16.",
            "`s = tl.dot(q, tl.trans(k))` accumulates in fp32; p is fp32 too: cast it with `p.to(v.dtype)` right before "
            "`tl.dot(p, v, acc)`.",
            "`acc = acc * alpha[:, None]` is fine here: Triton knows which row each register of acc holds, so no "
            "spill is needed."),
        "cuda": (
            *_SPILL,
            "CUDA C: `store_matrix_sync` each O fragment to the warp's O strip (`mem_row_major`), `__syncwarp()`, lanes "
            "2r and 2r + 1 scale row r by alpha_r, `__syncwarp()`, `load_matrix_sync` it back."),
        "metal": (
            *_SPILL,
            "Metal: simdgroup_store each O matrix to threadgroup memory, simdgroup_barrier, the lanes of row r scale "
            "it by correction_r, simdgroup_barrier, simdgroup_load it back.",
            "Causal, your other region, `causal_block_skip`: the tile loop visits keys 0 .. `kv_end` − 1, so `kv_end` "
            "is one past the last key the threadgroup's last row sees, `row0 + block_m + offset`, clamped to 0 .. "
            "`n_k`. In `softmax_and_rescale`, only a tile the diagonal crosses needs the mask: there row `row` keeps "
            "column c while `j0 + c <= row + offset`."),
    }),
)


# What this lesson's slide deck shows besides its kernel files (course.slides.decks reads it): its pictures, the
# widgets' own drawings with the controls set in order.
SLIDES = {"pictures": ({"name": "fragment-wmma", "widget": "course.widgets.fragments:fragment_explorer",
                        "controls": (("lane", 5),)},
                       {"name": "fragment-simdgroup", "widget": "course.widgets.fragments:fragment_explorer",
                        "controls": (("fragment", "metal"), ("lane", 5))})}
