"""Lesson 07's backward widgets: who adds to which dQ rows, worked out by hand and against the mask; bit
comparison of runs (signed zeros, NaNs, ulps across zero); and both widgets redrawing, or staying silent
under the grader."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from course.reference import causal_mask
from course.widgets.backward import (BitDifferences, DqWriters, backward_explorer, bit_differences,
                                     determinism_view, dq_writers)
from course.widgets.base import NotWhileGrading
from widget_support import first_widget, move_first_slider

# (n_q, n_k, block_m, block_n, causal, design), then the grid [query block][step], each dQ program's steps,
# the atomic adds per head-dim column, the adds per row and the pairs. Counted by hand from
# start_j = max(j·BLOCK_N − offset, 0) // BLOCK_M (atomic) and the last key min((b+1)·BLOCK_M − 1 + offset,
# Nk − 1) (split), offset = Nk − Nq.
HAND = [
    # Nq = Nk = 4, 1 × 1 blocks, causal, offset 0: program j starts at query block j and runs to block 3
    # (4, 3, 2, 1 steps). At step s, query block b is reached by program b − s alone, so the lock-step
    # grid has a single writer on and below the diagonal. Row i gets adds from programs 0..i.
    ((4, 4, 1, 1, True, "atomic"), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]],
     [4, 3, 2, 1], 10, [1, 2, 3, 4], 10),
    # Same sizes, split: query block b sees keys 0..b, so b + 1 steps, and stores at its last step b.
    ((4, 4, 1, 1, True, "split"), [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
     [1, 2, 3, 4], 0, [0, 0, 0, 0], 10),
    # Nq = 6, Nk = 4, 2 × 2 blocks, bottom-right offset −2: rows 0-1 see nothing, row 2 sees key 0.
    # Program 0 (keys 0-1) starts at max(0 + 2, 0) // 2 = 1, program 1 (keys 2-3) at (2 + 2) // 2 = 2.
    # Step 0: program 0 at block 1, program 1 at block 2; step 1: program 0 at block 2.
    # Adds: program 0 covers rows 2-5 (4), program 1 rows 4-5 (2): 6. Pairs (1,0), (2,0), (2,1): 3.
    ((6, 4, 2, 2, True, "atomic"), [[0, 0], [1, 0], [1, 1]], [2, 1], 6, [0, 0, 1, 1, 2, 2], 3),
    # Split: block 0's last key is min(1 − 2, 3) = −1 (no step), block 1's min(3 − 2, 3) = 1 (key block 0,
    # 1 step), block 2's min(5 − 2, 3) = 3 (key blocks 0-1, 2 steps).
    ((6, 4, 2, 2, True, "split"), [[0, 0], [1, 0], [0, 1]], [0, 1, 2], 0, [0] * 6, 3),
    # Not causal, Nq = 4, Nk = 6, 2 × 2: the 3 key-block programs all visit query block s at step s, so
    # 3 writers (every program) at once; 3 programs × 4 rows = 12 adds, 2 × 3 = 6 pairs.
    ((4, 6, 2, 2, False, "atomic"), [[3, 0], [0, 3]], [2, 2, 2], 12, [3, 3, 3, 3], 6),
    ((4, 6, 2, 2, False, "split"), [[0, 0, 1], [0, 0, 1]], [3, 3], 0, [0] * 4, 6),
    # Causal but Nk ≫ Nq, Nq = 2, Nk = 6, blocks 1 × 2, offset 4: row 0 sees keys 0..4, so every program
    # starts at 0 (max(4 − 4, 0) = 0 for the last) and the mask staggers nothing: 3 writers at once.
    ((2, 6, 1, 2, True, "atomic"), [[3, 0], [0, 3]], [2, 2, 2], 6, [3, 3], 6),
    # A short last query block: Nq = Nk = 5, BLOCK_M = 2 (rows 2, 2, 1), BLOCK_N = 4. Not causal: 2 programs
    # × 5 real rows = 10 adds (not 2 × 6 padded rows).
    ((5, 5, 2, 4, False, "atomic"), [[2, 0, 0], [0, 2, 0], [0, 0, 2]], [3, 3], 10, [2] * 5, 6),
    # Causal: program 1 (keys 4..) starts at 4 // 2 = 2 and covers the 1 real row of block 2; program 0
    # covers all 5 rows: 6 adds. Step 0 finds program 0 at block 0 and program 1 at block 2.
    ((5, 5, 2, 4, True, "atomic"), [[1, 0, 0], [0, 1, 0], [1, 0, 1]], [3, 1], 6, [1, 1, 1, 1, 2], 4),
    # Split: last keys min(1, 4) = 1, min(3, 4) = 3, min(5, 4) = 4: 1, 1, 2 key blocks.
    ((5, 5, 2, 4, True, "split"), [[1, 0], [1, 0], [0, 1]], [1, 1, 2], 0, [0] * 5, 4),
]


@pytest.mark.parametrize("args, grid, program_steps, atomic_adds, adds_per_row, pairs", HAND)
def test_the_writers_match_counts_by_hand(args, grid, program_steps, atomic_adds, adds_per_row, pairs):
    n_q, n_k, block_m, block_n, causal, design = args
    w = dq_writers(*args)
    assert isinstance(w, DqWriters)
    assert w.grid.tolist() == grid and w.grid.dtype.kind == "i"
    assert w.program_steps == program_steps
    assert (w.atomic_adds, w.adds_per_row, w.pairs) == (atomic_adds, adds_per_row, pairs)
    assert w.peak_writers == max(map(max, grid)) and w.steps == len(grid[0])
    assert (w.query_blocks, w.key_blocks) == (-(-n_q // block_m), -(-n_k // block_n))
    assert w.offset == n_k - n_q
    assert w.matmuls_per_pair == (5 if design == "atomic" else 7) and w.matmuls == w.matmuls_per_pair * pairs


def test_the_two_designs_compute_the_same_pairs_the_mask_lets_through():
    for n_q, n_k, block_m, block_n in itertools.product((1, 5, 16, 33), (1, 7, 16, 40), (1, 4, 16), (2, 8, 16)):
        for causal in (True, False):
            atomic = dq_writers(n_q, n_k, block_m, block_n, causal, "atomic")
            split = dq_writers(n_q, n_k, block_m, block_n, causal, "split")
            mask = causal_mask(n_q, n_k) if causal else torch.ones(n_q, n_k, dtype=torch.bool)
            # a tile is computed iff some element of it is visible (no program visits a blind tile)
            seen = np.array([[bool(mask[b * block_m:(b + 1) * block_m, j * block_n:(j + 1) * block_n].any())
                              for j in range(atomic.key_blocks)] for b in range(atomic.query_blocks)])
            where = (n_q, n_k, block_m, block_n, causal)
            assert atomic.pairs == split.pairs == int(seen.sum()), where
            assert int(atomic.grid.sum()) == atomic.pairs, where
            assert int(split.grid.sum()) == sum(1 for s in split.program_steps if s) == int(seen.any(axis=1).sum())
            assert split.peak_writers == 1 and split.atomic_adds == 0 and set(split.adds_per_row) == {0}
            assert atomic.adds_per_row == [int(seen[i // block_m].sum()) for i in range(n_q)], where
            assert sum(atomic.adds_per_row) == atomic.atomic_adds, where
            assert atomic.peak_writers <= atomic.key_blocks
            if not causal:
                assert atomic.peak_writers == atomic.key_blocks and atomic.steps == atomic.query_blocks


def test_without_the_mask_every_program_visits_every_query_block():
    w = dq_writers(256, 512, 32, 64, causal=False, design="atomic")
    assert w.program_steps == [8] * 8 and w.peak_writers == 8 == w.key_blocks
    assert np.array_equal(w.grid, np.diag([8] * 8)) and w.atomic_adds == 8 * 256


@pytest.mark.parametrize("kwargs, word", [
    (dict(n_q=0), "n_q"), (dict(n_k=-3), "n_k"), (dict(block_m=0), "block_m"), (dict(block_n=2.5), "block_n"),
    (dict(block_m=True), "block_m"), (dict(design="atomics"), "design"), (dict(design="Split"), "design"),
])
def test_bad_arguments_are_refused_with_a_sentence(kwargs, word):
    args = dict(n_q=64, n_k=64, block_m=16, block_n=16, causal=True, design="atomic") | kwargs
    with pytest.raises(ValueError, match=word) as caught:
        dq_writers(**args)
    message = str(caught.value)
    assert message[0].isalpha() and message.endswith(".") and " " in message


def test_the_summary_names_the_contention_the_adds_and_the_price_of_split():
    text = "\n".join(dq_writers(4, 6, 2, 2, False, "atomic").summary())
    assert "4 queries × 6 keys" in text and "no mask" in text
    assert "Up to 3 of them" in text and "12 float32 atomic" in text and "+40%" in text
    causal = "\n".join(dq_writers(4, 4, 1, 1, True, "atomic").summary())
    assert "j ≤ i + 0" in causal and "no two of them" in causal and "lock-step" in causal
    split = "\n".join(dq_writers(6, 4, 2, 2, True, "split").summary())
    assert "j ≤ i − 2" in split and "no atomics" in split and "repeats its bits" in split
    assert "2 extra products per pair" in split and "3 (query block, key block) pairs" in split


F32 = torch.float32
TINY = float(torch.finfo(F32).smallest_normal) * 2.0**-23  # the smallest positive subnormal, 1.4e-45


def bits_to_float(pattern: int) -> float:
    return torch.tensor([pattern], dtype=torch.int32).view(F32).item()


def one_ulp_up(x: float) -> float:
    return torch.nextafter(torch.tensor(x, dtype=F32), torch.tensor(float("inf"), dtype=F32)).item()


def runs_from(dq_runs, dk_runs=None, dv_runs=None):
    """Runs (dq, dk, dv) from per-run value lists; dk and dv default to identical runs."""
    n = len(dq_runs)
    dk_runs = dk_runs or [[1.0, -2.0, 3.0]] * n
    dv_runs = dv_runs or [[0.5, 0.25]] * n
    return [tuple(torch.tensor(values, dtype=F32) for values in run) for run in zip(dq_runs, dk_runs, dv_runs)]


# dQ of two runs. Element 0: 0.0 against -0.0 (same value, other bits: differs, 0 ulps apart); 1 and 5: a NaN
# with the same bits in both runs (identical); 2: one ulp up; 3: the smallest subnormals of opposite sign
# (−1 and +1 on the line, 2 ulps apart); 4: equal.
FIRST = [0.0, float("nan"), 1.0, TINY, 3.0, float("nan")]
SECOND = [-0.0, float("nan"), one_ulp_up(1.0), -TINY, 3.0, float("nan")]


def test_bits_not_values_decide_what_differs():
    result = bit_differences(runs_from([FIRST, SECOND]))
    assert isinstance(result, BitDifferences) and result.runs == 2
    assert result.elements == {"dq": 6, "dk": 3, "dv": 2}
    assert result.differing == {"dq": 3, "dk": 0, "dv": 0}
    assert result.differs["dq"].tolist() == [True, False, True, True, False, False]
    assert result.ulps["dq"].tolist() == [0, 0, 1, 2, 0, 0]
    assert result.max_ulps == {"dq": 2, "dk": 0, "dv": 0}
    # the wrong comparison: by value, -0.0 == 0.0 is missed and each NaN "differs" from itself
    first, second = torch.tensor(FIRST, dtype=F32), torch.tensor(SECOND, dtype=F32)
    by_value = int((first != second).sum())
    assert by_value == 4 and by_value != result.differing["dq"]


def test_ulps_follow_the_float_line_across_zero_and_on_the_negative_side():
    assert bits_to_float(0x00000001) == TINY and bits_to_float(-0x7FFFFFFF) == -TINY  # 0x80000001
    walk = [-3 * TINY]
    for _ in range(6):
        walk.append(one_ulp_up(walk[-1]))
    assert walk[3] == 0.0 and walk[-1] == 3 * TINY
    values = [[-3 * TINY, -1.0, 2.0**-126, -0.0]] + [[w, one_ulp_up(-1.0), 2.0**-126, 0.0] for w in walk[1:]]
    result = bit_differences(runs_from(values))
    # the furthest run from the first: 6 ulps from −3·tiny to +3·tiny; −1.0 one ulp toward zero; -0.0 vs 0.0
    assert result.ulps["dq"].tolist() == [6, 1, 0, 0]
    assert result.differing["dq"] == 3 and result.runs == 7
    assert result.summary()[0] == "dQ: 3 of 4 elements differ in at least one of 7 runs (at most 6 ulps apart)"


def test_the_summary_reads_counts_with_separators_and_identical_gradients():
    base = torch.linspace(-1, 1, 2112, dtype=F32)
    other = base.clone()
    other[:1234] = torch.nextafter(base[:1234], torch.tensor(float("inf")))
    small = torch.ones(3, dtype=F32)
    runs = [(base, small, small), (other, small.clone(), small.clone())]
    assert bit_differences(runs).summary() == [
        "dQ: 1,234 of 2,112 elements differ in at least one of 2 runs (at most 1 ulp apart)",
        "dK: identical bits in every run",
        "dV: identical bits in every run",
    ]


def test_a_nan_with_other_bits_differs_but_has_no_distance():
    quiet, payload = float("nan"), bits_to_float(0x7FC00001)
    assert np.isnan(payload)
    result = bit_differences(runs_from([[1.0, 2.0]] * 2, dv_runs=[[quiet, 0.5], [payload, 0.5]]))
    assert result.differing["dv"] == result.nan_differing["dv"] == 1
    assert result.ulps["dv"].tolist() == [-1, 0] and result.max_ulps["dv"] == 0
    assert "1 of them are NaN in some run" in result.summary()[2]


@pytest.mark.parametrize("runs", [[], [(torch.zeros(2), torch.zeros(2), torch.zeros(2))]])
def test_fewer_than_two_runs_are_refused(runs):
    with pytest.raises(ValueError, match="runs"):
        bit_differences(runs)


def test_other_dtypes_and_shapes_are_refused():
    good = (torch.zeros(2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="float32"):
        bit_differences([good, (torch.zeros(2, dtype=torch.float16), torch.zeros(2), torch.zeros(2))])
    with pytest.raises(ValueError, match="shape"):
        bit_differences([good, (torch.zeros(2), torch.zeros(3), torch.zeros(2))])
    with pytest.raises(ValueError, match="tuple"):
        bit_differences([good, torch.zeros(2)])


def lab_runs():
    atomic = runs_from([FIRST, SECOND, [0.0, float("nan"), one_ulp_up(one_ulp_up(1.0)), TINY, 3.0, float("nan")]],
                       dk_runs=[[1.0, -2.0, 3.0]] * 3, dv_runs=[[0.5, 0.25]] * 3)
    split = runs_from([FIRST] * 3)
    return {"atomic": atomic, "split": split}


def test_while_grading_the_builders_draw_nothing(monkeypatch):
    import course.grading.recording
    monkeypatch.setattr(course.grading.recording, "autograding", lambda: True)
    for builder, args in ((backward_explorer, ()), (determinism_view, (lab_runs(),))):
        placeholder = builder(*args)
        assert isinstance(placeholder, NotWhileGrading)
        assert repr(placeholder).startswith(f"({builder.__name__}: ") and "JupyterLab" in repr(placeholder)


def test_the_first_slider_redraws_the_plot_and_changes_the_text(monkeypatch, shown):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    slider, _, before = move_first_slider(backward_explorer(), shown)
    assert slider.description == "N_q" and "256 queries × 256 keys" in before
    assert len(shown) == 4


def test_the_other_controls_redraw_and_the_text_follows_the_model(monkeypatch, shown):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = backward_explorer()
    (n_q, n_k), (block_m, block_n), (causal, design) = (row.children for row in box.children[:3])
    assert [c.description for c in (n_q, n_k, block_m, block_n)] == ["N_q", "N_k", "BLOCK_M", "BLOCK_N"]
    assert isinstance(causal, w.Checkbox) and isinstance(design, w.ToggleButtons)
    assert list(design.options) == ["atomic", "split"]
    text = first_widget(box, w.HTML)
    n_q.value, n_k.value, block_m.value, block_n.value, causal.value = 128, 512, 48, 32, False
    expected = dq_writers(128, 512, 48, 32, False, "atomic")
    assert f"Up to {expected.peak_writers} of them" in text.value and f"{expected.atomic_adds:,}" in text.value
    design.value = "split"
    assert "no atomics" in text.value and "Atomic design" not in text.value
    assert len(shown) == 7


def test_the_gradient_dropdown_redraws_the_histograms_and_changes_the_text(monkeypatch, shown):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = determinism_view(lab_runs())
    assert isinstance(box, w.VBox) and len(shown) == 1
    dropdown, text = first_widget(box, w.Dropdown), first_widget(box, w.HTML)
    assert dropdown.value == "dq" and [value for _, value in dropdown.options] == ["dq", "dk", "dv"]
    before = text.value
    assert "atomic: dQ: 3 of 6 elements differ in at least one of 3 runs (at most 2 ulps apart)" in before
    assert "split: dQ: identical bits in every run" in before
    dropdown.value = "dk"
    assert len(shown) == 2 and text.value != before and "dK: identical bits in every run" in text.value


def test_the_lab_view_works_outside_jupyterlab(monkeypatch):
    import ipywidgets as w
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert isinstance(determinism_view(lab_runs()), w.VBox)
    with pytest.raises(ValueError, match="runs_by_design"):
        determinism_view({})
