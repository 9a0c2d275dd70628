"""Entries that answer with the course's own model of an exercise: one per numeric exercise whose answer may not
call it (:data:`MODEL_ANSWERS`, :func:`model_cheats`), and, in the later lessons, a stub handed in with
``course.check`` rebound so that the notebook grades and records the model in its place (:data:`ORACLE_REBINDS`,
:func:`oracle_rebind_cheats`)."""
from __future__ import annotations

import re
from pathlib import Path

from autograder.corpora.cheating.cheat import CAUGHT, Cheat, cell_sources
from autograder.corpora.hostile import Change


# An answer cell per numeric exercise whose answer may not use the course's model (course.exercises.MODEL_POLICY),
# rewritten around that model: right on every argument, so only the policy takes its points. Each reaches the
# model another way (the module, an alias of it, the function under another name, a star import, ...).
MODEL_ANSWERS: dict[str, tuple[str, str, str]] = {  # exercise -> (lesson, answer cell, its new source)
    "00.attention_flops": ("00_orientation", "attention_flops", """\
def attention_flops(n_q: int, n_k: int, d: int) -> int:
    return course.models.roofline.attention_flops(n_q, n_k, d)
"""),
    "00.flash_intensity": ("00_orientation", "flash_intensity", """\
from course.models import roofline


def flash_intensity(n: int, d: int, bytes_per_element: int) -> float:
    return roofline.attention_flops(n, n, d) / roofline.flash_attention_bytes(n, n, d, bytes_per_element)
"""),
    "01.naive_bytes_read": ("01_naive_attention", "naive_bytes_read", """\
import course.models.roofline as r


def naive_bytes_read(n: int, d: int, dtype: torch.dtype) -> int:
    return r.naive_kernel_bytes_read(n, n, d, r.element_size(dtype))
"""),
    "02.softmax_bytes": ("02_online_softmax", "softmax_bytes", """\
from course.models.roofline import softmax_bytes as count


def softmax_bytes(rows: int, cols: int, bytes_per_element: int, online: bool) -> int:
    return count(rows, cols, bytes_per_element, online)
"""),
    "03.tiled_bytes": ("03_tiling", "tiled_bytes", """\
from course.models.roofline import *


def tiled_bytes(n_q: int, n_k: int, d: int, block_m: int, bytes_per_element: int) -> int:
    return tiled_kernel_bytes(n_q, n_k, d, block_m, bytes_per_element)
"""),
    "03.shared_bytes": ("03_tiling", "shared_bytes", """\
from course.tracks import cuda
from course.tracks.common import Tiles


def shared_bytes(block_m: int, block_n: int, d: int) -> int:
    return cuda.shared_memory_bytes("tiled", Tiles(block_m, block_n), d)
"""),
    "04.warp_sectors": ("04_double_buffering", "warp_sectors", """\
def warp_sectors(offset_bytes: int, stride_bytes: int, access_bytes: int) -> int:
    from course.models import memory_model
    starts = [offset_bytes + lane * stride_bytes for lane in range(32)]
    return len(memory_model.sectors_of_bytes(starts, access_bytes))
"""),
    "04.bank_ways": ("04_double_buffering", "bank_ways", """\
import course.models.memory_model


def bank_ways(row_floats: int, pad_floats: int) -> int:
    walk = course.models.memory_model.warp_column_walk(row_floats=row_floats, pad_floats=pad_floats)
    return course.models.memory_model.bank_conflict_ways(walk.byte_addresses, walk.access_bytes)
"""),
    "05.fragment_lane": ("05_matrix_units", "fragment_lane", """\
from course.models.fragments import fragment_map


def fragment_lane(track: str, row: int, col: int) -> int:
    lanes = fragment_map(track)[0]  # the measured map, looked up: a table, not a formula
    return int(lanes[row % lanes.shape[0], col % lanes.shape[1]])
"""),
    "06.causal_mask": ("06_causal_masking", "causal_mask", """\
def causal_mask(n_q: int, n_k: int, top_left: bool = False) -> torch.Tensor:
    offset = course.models.causal.offset(n_q, n_k, "top_left" if top_left else "bottom_right")
    return torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + offset
"""),
    "06.tile_counts": ("06_causal_masking", "tile_counts", """\
from course.models import causal as model


def tile_counts(n_q: int, n_k: int, block_m: int, block_n: int) -> tuple[int, int, int]:
    counts = model.tile_counts(n_q, n_k, block_m, block_n)
    return counts.skipped, counts.full, counts.diagonal
"""),
    "07.backward_flops": ("07_backward_pass", "backward_flops", """\
def backward_flops(n_q: int, n_k: int, d: int, design: str) -> int:
    return course.models.roofline.backward_flops(n_q, n_k, d, design)
"""),
    "07.differing_elements": ("07_backward_pass", "differing_elements", """\
from course.models.determinism import differing_elements as count


def differing_elements(runs: list[torch.Tensor]) -> int:
    return count(runs)
"""),
    "09.grid_assignment": ("09_dataflow", "assign_query_tiles", """\
import course.lessons.lesson09


def assign_query_tiles(q_tiles, k_tiles, cores, causal):
    return course.lessons.lesson09.balanced_plan(q_tiles, k_tiles, cores, causal)
"""),
}


def model_cheats() -> list[Cheat]:
    """One entry per exercise of :data:`MODEL_ANSWERS`, in its lesson: it loses that exercise's test cell, and its
    feedback is the check's sentence naming the function it may not use."""
    from course.exercises import MODEL_POLICY
    cheats = []
    for exercise, (lesson, cell, source) in MODEL_ANSWERS.items():
        refused = "|".join(re.escape(name) for name in MODEL_POLICY[exercise].refused)
        name = exercise.replace(".", "-").replace("_", "-")
        cheats.append(Cheat(f"uses-course-model-{name}", f"{exercise}: answers with the course's own model of the "
                            "exercise", (Change(cell, source=source),), loses=(f"test_{cell}",),
                            feedback=rf"{re.escape(exercise)}: your answer may not use ({refused})",
                            assignment=lesson))
    return cheats


# records-oracle-for-stub in the later lessons: the answer cell hands in the lesson's stub and rebinds course.check so
# that the notebook grades (and records) the course's own model of the exercise in the stub's place, with the model
# policy switched off, so the notebook's run passes it. The re-check runs the stub. One per lesson with a Python
# answer graded by its return value (lesson 08's entries are capstone_cheats); each is checked directly, without
# nbgrader, by tests/grading/test_oracle_rebind.py.
ORACLE_REBINDS: dict[str, tuple[str, str, str]] = {  # lesson -> (answer cell, exercise, the oracle's source)
    "03_tiling": ("tiled_bytes", "03.tiled_bytes", MODEL_ANSWERS["03.tiled_bytes"][2]),
    "04_double_buffering": ("warp_sectors", "04.warp_sectors", MODEL_ANSWERS["04.warp_sectors"][2]),
    "05_matrix_units": ("fragment_lane", "05.fragment_lane", MODEL_ANSWERS["05.fragment_lane"][2]),
    "06_causal_masking": ("tile_counts", "06.tile_counts", MODEL_ANSWERS["06.tile_counts"][2]),
    "07_backward_pass": ("backward_flops", "07.backward_flops", MODEL_ANSWERS["07.backward_flops"][2]),
    "09_dataflow": ("rows_per_step", "09.rows_per_step", """\
def rows_per_step(operands, block_cols, dtype_bits, full_sync):
    return course.lessons.dst.capacity(dtype_bits, full_sync) // (operands * block_cols)
"""),
}


def oracle_rebind_cheats(repo: Path) -> list[Cheat]:
    """The entries of :data:`ORACLE_REBINDS`: each loses its exercise's test cell, and the re-check says the stub
    is not implemented yet."""
    cheats = []
    for lesson, (cell, exercise, oracle) in ORACLE_REBINDS.items():
        stub = cell_sources(repo, "notebooks", lesson)[cell]
        trick = f'''

import course
import course.exercises

_oracle = {{"course": course, "torch": torch}}
exec({oracle!r}, _oracle)
_real_check = course.check


def _graded_instead(exercise, fn, **options):
    if exercise == {exercise!r}:
        fn = _oracle[{cell!r}]
    return _real_check(exercise, fn, **options)


course.check = _graded_instead
course.exercises.MODEL_POLICY.clear()  # the oracle is the course's own model, which the policy would refuse
'''
        cheats.append(Cheat(f"records-oracle-for-stub-{lesson[:2]}", f"{exercise}: hands in the stub and makes "
                            "course.check grade the course's own model in its place, so the notebook records the "
                            "model's answers", (Change(cell, source=stub + trick),), loses=(f"test_{cell}",),
                            feedback=CAUGHT + rf"[\s\S]*{re.escape(exercise)}: not implemented yet",
                            assignment=lesson))
    return cheats
