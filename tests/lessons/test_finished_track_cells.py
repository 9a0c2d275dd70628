"""A demonstration cell that measures "your kernel" measures the track the learner finished.

Lesson 04's counters cell compares step 03 with step 04. A learner who studies Metal, or Triton (whose
counters are bytes only), finishes Exercise 3 in that language and leaves the CUDA C cell as handed out:
the cell must still run, on the Metal kernel or on the course's CUDA C file, and say which. The numbers
the lesson's prose states about that table are checked here against what the cell prints.
"""
from __future__ import annotations

import contextlib
import io
import re

import nbformat

from course.kernels import kernel_path
from course.paths import REPO
from course.simt import RawModule

LESSON = "04_double_buffering"
MARK = "course.counters.first_finished(q, k, v, cuda=double_buffer_cuda, metal=float4_metal)"


def _cells(folder: str) -> list:
    return nbformat.read(REPO / folder / LESSON / f"{LESSON}.ipynb", as_version=4).cells


def _counters_cell() -> str:
    found = [c.source for c in _cells("solutions") if c.cell_type == "code" and MARK in c.source]
    assert len(found) == 1, "lesson 04's counters cell is not where this test looks"
    return found[0]


def _handed_out(grade_id: str, language: str) -> RawModule:
    """The %%cuda / %%metal cell as the student notebook hands it out, compiled as the magic would."""
    cell = next(c for c in _cells("notebooks") if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    magic, _, body = cell.source.partition("\n")
    assert magic.startswith(f"%%{language}"), magic
    name = magic.split()[1]
    return RawModule(code=body, language=language, name=f"{name}.{'cu' if language == 'cuda' else 'metal'}",
                     first_line=2)


def _run(**answers) -> str:
    import course
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(compile(_counters_cell(), "<lesson 04 counters cell>", "exec"), {"course": course, **answers})
    return shown.getvalue()


def _table(text: str) -> dict[str, tuple[int, int]]:
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^(\S.*?)\s{2,}([\d,]+)\s+([\d,]+)$", line)
        if match:
            rows[match.group(1)] = (int(match.group(2).replace(",", "")), int(match.group(3).replace(",", "")))
    return rows


def _prose_claims(rows: dict[str, tuple[int, int]], language: str) -> None:
    """What the markdown above the cell says of the table."""
    before, after = rows["global load sectors (32 B)"]
    assert before == after                                        # sectors: equal
    before, after = rows["global load instructions (requests)"]
    assert after * 4 == before                                    # a quarter of the load instructions
    before, after = rows["bank conflicts (loads and stores)"]
    if language == "CUDA C":
        assert before == after == 0                               # 0 in both CUDA C kernels
    else:
        assert before > after > 0                                 # Metal: many, fewer in step 04
    before, after = rows["barriers"]
    blocks = 4 if language == "CUDA C" else 2                     # the launcher's grid at N = 64
    tiles = 2                                                     # 64 keys in K/V tiles of 32
    assert before == blocks * 2 * tiles                           # two per tile in step 03
    assert after == blocks * (tiles + (1 if language == "CUDA C" else 0))  # one per tile (+ one in CUDA C)


def test_a_metal_learner_sees_their_metal_kernel_measured():
    cuda_stub = _handed_out("double_buffer_kernel_cuda", "cuda")
    metal = RawModule(path=kernel_path("metal/04_double_buffer"), compile_now=None)
    text = _run(double_buffer_cuda=cuda_stub, float4_metal=metal)
    assert text.startswith("Metal: the course's step 03 against your step 04"), text
    _prose_claims(_table(text), "Metal")


def test_with_neither_simt_track_finished_the_course_kernel_is_measured_and_named():
    text = _run(double_buffer_cuda=_handed_out("double_buffer_kernel_cuda", "cuda"),
                float4_metal=_handed_out("double_buffer_kernel_metal", "metal"))
    assert text.startswith("CUDA C: the course's step 03 against the course's step 04"), text
    _prose_claims(_table(text), "CUDA C")


def test_a_cuda_learner_sees_their_kernel():
    cuda = RawModule(path=kernel_path("cuda/04_double_buffer"), compile_now=None)
    text = _run(double_buffer_cuda=cuda, float4_metal=_handed_out("double_buffer_kernel_metal", "metal"))
    assert text.startswith("CUDA C: the course's step 03 against your step 04"), text
    _prose_claims(_table(text), "CUDA C")
