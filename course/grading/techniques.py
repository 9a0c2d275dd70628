"""Techniques a lesson is about, graded by measuring what the learner's kernel did.

Right numbers do not prove the technique. A causal kernel that visits every key tile and masks gives the same O as
one that skips the future; a "tensor-core" kernel whose products are broadcasts and sums gives the same O as one
built on ``tl.dot``; a "split" backward whose dQ kernel adds with atomics gives the same dQ. Each passes a value
check and misses its lesson, so each is measured, and fails with a sentence that says what was measured and where
the technique went missing:

- **causal tile skipping** (lesson 06, the backward of lesson 07; :mod:`course.grading.causal_tiles`): the key tiles
  each program or block loads, against the tiles its rows see; no atomics in the split backward;
- **masking only the diagonal tiles** (lesson 06; :mod:`course.grading.causal_masks`);
- **matrix units** (lesson 05; :mod:`course.grading.matrix_units`): both products of every key tile, on 16-bit
  operands for 16-bit inputs;
- **ping-pong buffers and float4 loads** (lesson 04, CUDA C and Metal) and **the software pipeline** (lesson 04,
  Triton; :mod:`course.grading.pipelining`);
- **the course's own models** in a numeric answer (:mod:`course.grading.model_policy`).

Which technique a step is measured for is declared on its row of ``course/tracks/table.py``: ``technique_probe``
names a Triton step's probe (:func:`triton_probe`), ``simt_probes`` a CUDA C or Metal step's, each with the tiles and
cases it runs on (:func:`before_values`, :func:`after_values`). What the measurements share is in
:mod:`course.grading.measuring`. On the GPU tier the Triton measurement runs an interpreted copy of the same module on
the CPU, since only the interpreter sees single loads.
"""
from __future__ import annotations

from typing import Any, Callable

from course.errors import CourseError
from course.grading import causal_masks, causal_tiles, matrix_units, pipelining
from course.tracks import table

__all__ = ["triton_probe", "simt_probe", "before_values", "after_values", "TRITON_PROBES", "SIMT_TECHNIQUES"]

TRITON_PROBES = ("matrix_units_triton", "pipelining_triton")
"""The probes a Triton step's row may name (``technique_probe``)."""

SIMT_TECHNIQUES = ("causal_tiles", "matrix_units", "double_buffer", "diagonal_masks")
"""The techniques a CUDA C or Metal step's row may declare a probe of (``simt_probes``); ``causal_tiles`` is measured
before the values (a bound that stops short is named by the tiles it never loaded), the others after them."""


def triton_probe(name: str) -> Callable[[str, Callable[..., Any]], None]:
    """The probe a Triton step's row names (``technique_probe``), called as ``probe(exercise, fn)``."""
    # Looked up when called, so that a test may replace one probe in its module.
    probes = {"matrix_units_triton": matrix_units.matrix_units_triton, "pipelining_triton": pipelining.pipelining_triton}
    if name not in probes:
        raise CourseError(f"no Triton technique probe {name!r}: a row's technique_probe is one of "
                          f"{', '.join(TRITON_PROBES)}")
    return probes[name]


def simt_probe(technique: str) -> Callable[[str, Any], None]:
    """The measurement of ``technique`` in a CUDA C or Metal module, called as ``measure(exercise, module)``."""
    measures = {"causal_tiles": causal_tiles.causal_tiles_simt, "matrix_units": matrix_units.matrix_units_simt,
                "double_buffer": pipelining.double_buffer_simt, "diagonal_masks": causal_masks.diagonal_masks_simt}
    if technique not in measures:
        raise CourseError(f"no technique {technique!r} to measure in a CUDA C or Metal step: a row's simt_probes "
                          f"measure one of {', '.join(SIMT_TECHNIQUES)}")
    return measures[technique]


def before_values(exercise: str, module: Any) -> None:
    """The measurements of a CUDA C / Metal step made before its values are checked: causal tile skipping, where the
    step declares it (a loop bound that stops short is named by the tiles it never loaded)."""
    row = table.find(exercise)
    if row is not None and row.simt_probe("causal_tiles") is not None:
        simt_probe("causal_tiles")(exercise, module)


def after_values(exercise: str, module: Any) -> None:
    """The measurements of a CUDA C / Metal step made once its values passed, in the order its row declares them:
    matrix units, ping-pong buffers and float4 loads, masks only on the diagonal tiles."""
    row = table.find(exercise)
    for probe in row.simt_probes if row is not None else ():
        if probe.technique != "causal_tiles":
            simt_probe(probe.technique)(exercise, module)
