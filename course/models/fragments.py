"""Lesson 05: who holds what in a matrix fragment, found by experiment.

A warp-wide matrix (a CUDA ``wmma`` accumulator fragment, a Metal ``simdgroup_matrix``) is spread over
the 32 lanes: each lane keeps a few of its elements in registers. Which ones is a fact about the
hardware (and, here, about the course's CPU runtime), so the course does not state it: it measures it.
Each lane writes its lane id into every element it holds, the warp stores the matrix, and the stored
matrix is the map of owners. A second matrix, filled with each element's slot number instead, says which
of its slots the lane keeps each one in.

:func:`fragment_map` runs that experiment on the CPU runtime (once per process);
:func:`experiment_source` is the kernel it runs, and :func:`owner_text` says what the vendors document.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from course.simt import RawModule

__all__ = ["FragmentShape", "FRAGMENTS", "fragment_map", "lane_cells", "experiment_source", "owner_text"]


@dataclass(frozen=True)
class FragmentShape:
    """One kind of fragment the lesson looks at."""

    track: str             # "cuda" or "metal"
    label: str             # how the widget names it
    rows: int
    cols: int
    per_lane: int          # elements each of the 32 lanes holds
    kernel: str            # the experiment's kernel name


FRAGMENTS = {
    "cuda": FragmentShape("cuda", "CUDA wmma accumulator 16×16 (float)", 16, 16, 8, "who_owns"),
    "metal": FragmentShape("metal", "Metal simdgroup_float8x8", 8, 8, 2, "who_owns"),
}

LANES = 32

# Valid CUDA: nvcc compiles it unchanged, and on a GPU it shows that GPU's map.
CUDA_EXPERIMENT = r"""#include <mma.h>
using namespace nvcuda;

// One warp of 32 threads. Every lane writes its own lane id into each element it holds of
// `owner`, and the number of the slot (0 .. num_elements-1) into the same element of `slot`.
// Stored, `owner` is the map of which lane holds each (row, col), and `slot` says where in
// that lane's x[] the element sits.
__global__ void who_owns(float *owner_of, float *slot_of) {
    const int lane = threadIdx.x % 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> owner, slot;
    for (int e = 0; e < owner.num_elements; ++e) {
        owner.x[e] = float(lane);
        slot.x[e] = float(e);
    }
    wmma::store_matrix_sync(owner_of, owner, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(slot_of, slot, 16, wmma::mem_row_major);
}
"""

# Valid MSL: on a Mac it shows that GPU's map.
METAL_EXPERIMENT = r"""#include <metal_stdlib>
using namespace metal;

// One simdgroup of 32 threads. thread_elements() is this lane's two elements of the 8x8 matrix.
// Every lane writes its own lane id into both of them in `owner`, and the slot number (0 or 1)
// into `slot`. Stored, `owner` is the map of which lane holds each (row, col), and `slot`
// says which of the lane's two elements it is.
kernel void who_owns(device float *owner_of [[buffer(0)]], device float *slot_of [[buffer(1)]],
                     uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 owner, slot;
    thread float2 &mine = owner.thread_elements();
    thread float2 &where = slot.thread_elements();
    for (int e = 0; e < 2; ++e) {
        mine[e] = float(lane);
        where[e] = float(e);
    }
    simdgroup_store(owner, owner_of, 8);
    simdgroup_store(slot, slot_of, 8);
}
"""

_SOURCES = {"cuda": CUDA_EXPERIMENT, "metal": METAL_EXPERIMENT}
_FILE_NAMES = {"cuda": "fragment_map.cu", "metal": "fragment_map.metal"}


def _shape(track: str) -> FragmentShape:
    if track not in FRAGMENTS:
        raise ValueError(f"fragment maps are measured for the tracks {sorted(FRAGMENTS)}, not {track!r}")
    return FRAGMENTS[track]


def experiment_source(track: str) -> str:
    """The source of the kernel :func:`fragment_map` runs for ``track`` ("cuda" or "metal")."""
    _shape(track)
    return _SOURCES[track]


def _as_indices(stored: np.ndarray, top: int, what: str) -> np.ndarray:
    whole = np.rint(stored).astype(np.int64)
    if not np.array_equal(whole, stored) or whole.min() < 0 or whole.max() >= top:
        raise RuntimeError(f"the experiment stored something other than {what} (0 .. {top - 1}): "
                           f"{np.unique(stored)[:8]} ...")
    return whole


@functools.cache
def _measure(track: str, source: str) -> tuple[np.ndarray, np.ndarray]:
    shape = _shape(track)
    module = RawModule(code=source, language=track, name=_FILE_NAMES[track])
    # Start from a value no lane writes, so that a cell nobody stores to shows up.
    owner = np.full((shape.rows, shape.cols), -1.0, np.float32)
    slot = np.full((shape.rows, shape.cols), -1.0, np.float32)
    module.get_function(shape.kernel)(1, LANES, (owner, slot))
    lane, element = _as_indices(owner, LANES, "lane ids"), _as_indices(slot, shape.per_lane, "slot numbers")
    lane.setflags(write=False)
    element.setflags(write=False)
    return lane, element


def fragment_map(track: str) -> tuple[np.ndarray, np.ndarray]:
    """Measure which lane holds each element of a fragment on the course's CPU runtime.

    Returns ``(lane, element)``, two int arrays of the fragment's shape ((16, 16) for "cuda", a wmma
    16×16×16 float accumulator; (8, 8) for "metal", a ``simdgroup_float8x8``): ``lane[r, c]`` is the lane
    that holds element (r, c) and ``element[r, c]`` the slot it keeps it in (``x[e]`` in CUDA,
    ``thread_elements()[e]`` in Metal). The experiment runs once per process; the arrays are copies.
    """
    lane, element = _measure(track, experiment_source(track))
    return lane.copy(), element.copy()


def lane_cells(track: str, lane: int) -> list[tuple[int, int, int]]:
    """The (element, row, col) of every element ``lane`` holds, in slot order."""
    if not 0 <= lane < LANES:
        raise ValueError(f"a lane is 0 .. {LANES - 1}, not {lane}")
    owner, slot = fragment_map(track)
    rows, cols = np.nonzero(owner == lane)
    return sorted((int(slot[r, c]), int(r), int(c)) for r, c in zip(rows, cols))


_VENDOR = {
    "cuda": ("NVIDIA documents the thread-to-element layouts of the PTX mma.sync instructions "
             "(the fragment figures of the PTX ISA, e.g. for m16n8k16), but not for nvcuda::wmma: "
             "the CUDA C++ Programming Guide says the mapping of matrix elements into a fragment's storage is "
             "unspecified and may change with the architecture, and in practice it differs between GPU "
             "generations. So wmma code may only do the same thing to every x[e] (fill, scale, "
             "convert); code that needs to know which row a value belongs to uses mma.sync with "
             "its documented layout, or stores the fragment to memory."),
    "metal": ("To the best of our knowledge, Apple does not specify in the Metal Shading Language specification "
              "which of the 32 threads of a simdgroup holds which elements of a simdgroup_matrix "
              "(nor which two thread_elements() returns). Public Metal code (MLX, for one) relies on "
              "a layout found on Apple GPUs; the course's runtime uses that layout, but nothing promises it on "
              "another GPU or OS version."),
}


def owner_text(track: str) -> str:
    """One paragraph (plain text) on what the vendor documents about the map, and whose map the lesson shows."""
    shape = _shape(track)
    return (f"{_VENDOR[track]} The map shown for the {shape.label} was measured on the course's CPU runtime "
            f"by the experiment kernel: it is this runtime's layout, and a real GPU's may differ. Run the same "
            f"kernel on a GPU to see that GPU's map.")
