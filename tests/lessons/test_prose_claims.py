"""What the lessons' prose says about the numbers beside it, checked against what the cells compute.

Every number or comparison a paragraph states is either printed by the cell next to it or checked here,
computed the way the cell computes it: prose cannot drift from the cells it describes.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest
import torch

import course
from course.paths import REPO


def _cells(lesson: str) -> list[dict]:
    return json.loads((REPO / "solutions" / lesson / f"{lesson}.ipynb").read_text())["cells"]


def _cell(lesson: str, marker: str, kind: str = "code") -> str:
    found = ["".join(c["source"]) for c in _cells(lesson) if c["cell_type"] == kind and marker in "".join(c["source"])]
    assert len(found) == 1, f"{lesson}: {len(found)} {kind} cells hold {marker!r}"
    return found[0]


def _run(source: str, namespace: dict) -> str:
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(compile(source, "<lesson cell>", "exec"), namespace)
    return shown.getvalue()


def _solution(lesson: str, grade_id: str) -> dict:
    namespace = {"course": course}
    for cell in _cells(lesson):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") in ("setup", grade_id):
            _run("".join(cell["source"]), namespace)
    return namespace


def test_lesson_05_tf32_rounded_is_fp16s_error_and_truncated_several_times_it():
    prose = _cell("05_matrix_units", "is by default **TF32**", "markdown")
    assert "its error is fp16's" in prose and '"TF32 cut" column' in prose and "several times" in prose
    table = _run(_cell("05_matrix_units", "def to_tf32("), _solution("05_matrix_units", "setup"))
    header, *rows = table.strip().splitlines()
    assert header.split() == ["inputs", "TF32", "inputs", "TF32", "cut", "inputs", "fp16", "inputs", "bf16", "inputs"]
    errors = {row.split()[0]: [float(x) for x in row.split()[1:5]] for row in rows}
    for kind, (tf32, cut, fp16, bf16) in errors.items():
        assert tf32 == pytest.approx(fp16, rel=0.1), (kind, tf32, fp16)   # rounded: fp16's error
    tf32, cut, fp16, _ = errors["normal"]
    assert cut > 2 * fp16, errors                                         # truncated: several times it


def test_lesson_05_tf32_conversion_rounds_to_nearest_and_the_cut_truncates():
    namespace = _solution("05_matrix_units", "setup")
    _run(_cell("05_matrix_units", "def to_tf32(").split("roundings =")[0], namespace)
    to_tf32 = namespace["to_tf32"]
    x = torch.randn(10_000, dtype=torch.float32)
    ulp = torch.ldexp(torch.ones_like(x), torch.frexp(x)[1] - 11)  # one unit of a 10-bit mantissa
    rounded, cut = (to_tf32(x) - x).abs() / ulp, (to_tf32(x, rounded=False) - x).abs() / ulp
    assert float(rounded.max()) <= 0.5 and float(cut.max()) < 1 and float(cut.max() / rounded.max()) > 1.9


def test_lesson_07_run_to_run_differences_are_few_ulps_with_a_tail_on_tiny_sums():
    """The lab's atomic dQ: most elements a few ulps apart, a tail of thousands of ulps on elements whose sum is
    tiny, and no element moved by a millionth of the largest |dQ|."""
    prose = _cell("07_backward_pass", "Every run's dQ is equally accurate", "markdown")
    for claim in ("a few units in the last place", "thousands of ulps", "shares nearly cancel",
                  "a millionth of the largest |dQ|"):
        assert claim in prose.replace("\n", " "), claim
    from course.models.determinism import block_order_runs
    from course.widgets.backward import bit_differences
    runs = block_order_runs("atomic", runs=8)  # what the lab cell runs
    found = bit_differences(runs)
    ulps, differs = found.ulps["dq"], found.differs["dq"]
    dq = torch.stack([r[0] for r in runs]).reshape(len(runs), -1)
    assert differs.sum() > 0.9 * differs.size
    assert np.median(ulps[differs]) <= 4                                  # a few ulps
    assert 1_000 <= found.max_ulps["dq"] < 1_000_000                      # thousands
    far = ulps >= 1_000
    assert bool((dq[0, torch.from_numpy(far)].abs() < 0.01 * dq.abs().max()).all())  # on tiny sums
    assert float((dq - dq[0]).abs().max()) < 1e-6 * float(dq.abs().max())          # under a millionth


def test_lesson_03_footprint_names_what_the_largest_tensor_is():
    prose = _cell("03_tiling", "The same function, watched.", "markdown")
    assert "no larger than Q or O themselves" in prose
    namespace = _solution("03_tiling", "tiled_torch")
    text = _run(_cell("03_tiling", "from course.grading.footprint import watch"), namespace)
    standard, tiled = text.strip().splitlines()
    assert "1024 × 1024" in standard and "N × N, the whole score matrix" in standard
    assert re.search(r"largest tensor\s+1024 × 64 .*N × D, the size of Q and O", tiled), tiled


def test_lesson_09_timeline_controls_are_the_ones_the_prose_names(monkeypatch):
    import ipywidgets as w
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    prose = _cell("09_dataflow", "### Reading the trace: double buffering", "markdown")
    named = {"run", "window", "also plot", "core"}
    assert all(f"**{name}**" in prose for name in named), prose
    namespace = _solution("09_dataflow", "one_core_attention")
    from course.lessons import dataflow
    from course.widgets import dataflow_timeline
    q, k, v = (torch.randn(64, 64) for _ in range(3))
    runs = {f"{n} buffers": dataflow.run(dataflow.variant(namespace["one_core_attention"], KV_BUFFERS=n), q, k, v)
            for n in (1, 2)}
    box = dataflow_timeline(runs)

    def controls(widget):
        for child in getattr(widget, "children", ()):
            yield child
            yield from controls(child)
    shown = {c.description for c in controls(box) if isinstance(c, (w.IntSlider, w.Dropdown))}
    assert shown == named - {"core"}, shown  # one core: no core slider, as the prose says
    window = next(c for c in controls(box) if isinstance(c, w.IntSlider) and c.description == "window")
    assert (window.min, window.max) == (0, 4)


def test_lesson_09_a_finite_start_and_bias_give_zero_where_minus_infinity_could_give_nan():
    prose = _cell("09_dataflow", "The initial $m$ is $-10^{30}$", "markdown")
    assert "$m'$ also $-\\infty$" in prose
    m_new = torch.tensor([3.0, float("-inf")])
    assert torch.exp(torch.tensor(float("-inf")) - m_new[0]) == 0          # -inf alone: harmless
    assert torch.isnan(torch.exp(torch.tensor(float("-inf")) - m_new[1]))  # -inf - -inf: NaN
    assert torch.exp(torch.tensor(-1.0e30) - torch.tensor([3.0, -1.0e30 + 0.0])).tolist()[0] == 0.0
    from course.lessons.dataflow import causal_bias_tile
    assert float(causal_bias_tile().min()) == float(torch.tensor(-1.0e30)) and bool(torch.isfinite(causal_bias_tile()).all())
