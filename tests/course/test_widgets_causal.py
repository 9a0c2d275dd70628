"""Lesson 06's causal widget: tile kinds and counts worked out by hand, the visible share against the mask,
pairing against contiguous runs, and the built widget redrawing when its first slider moves."""
from __future__ import annotations

import re

import itertools

import pytest
import torch

from course.models.causal import TileCounts
from course.reference import causal_mask
from course.widgets.base import NotWhileGrading
from course.widgets.causal import CausalPicture, causal_explorer, causal_picture
from widget_support import first_widget, move_first_slider

S, F, D = "skipped", "full", "diagonal"

# (n_q, n_k, block_m, block_n, alignment, programs), then the grid of kinds, the score elements inside
# computed tiles, the visible score elements, the rows that see nothing, and each program's key tiles
# (contiguous, paired). Every entry was counted by hand from j <= i + offset.
HAND = [
    # 1 × 1 tiles, Nq = Nk = 4: an element is seen or not, so no tile is crossed by the edge; the lower
    # triangle with its diagonal (10 elements) is full, the 6 above skipped. Query tile t computes t + 1
    # key tiles: contiguous [1+2, 3+4], paired (0 with 3, 1 with 2) [1+4, 2+3].
    ((4, 4, 1, 1, "bottom_right", 2), [[F, S, S, S], [F, F, S, S], [F, F, F, S], [F, F, F, F]],
     10, 10, 0, [3, 7], [5, 5]),
    # 2 × 2 tiles of the same matrix: the two tiles on the diagonal are crossed by the edge.
    ((4, 4, 2, 2, "bottom_right", 2), [[D, S], [F, D]], 12, 10, 0, [1, 2], [1, 2]),
    # Nq = 8 = Nk, 1 × 1 tiles, 2 programs of 4 query tiles: contiguous [1+2+3+4, 5+6+7+8], paired
    # (0,7,1,6 | 2,5,3,4) [18, 18].
    ((8, 8, 1, 1, "bottom_right", 2), [[F if j <= i else S for j in range(8)] for i in range(8)],
     36, 36, 0, [10, 26], [18, 18]),
    # Nq = 6 > Nk = 4, tiles of 4 × 3 (short last query tile of 2 rows, short last key tile of 1 key).
    # Bottom-right, offset −2: rows 0 and 1 see nothing, rows 2..5 see 1, 2, 3, 4 keys (10 of 24).
    # Tile (0,0) rows 0-3 × keys 0-2: row 3 sees key 1 but not 2 → diagonal; (0,1) key 3 is past row 3's
    # last key 1 → skipped; (1,0) rows 4-5 see keys 0-2 → full; (1,1) row 4 misses key 3, row 5 sees it.
    # Computed elements 4·3 + 2·3 + 2·1 = 20.
    ((6, 4, 4, 3, "bottom_right", 2), [[D, S], [F, D]], 20, 10, 2, [1, 2], [1, 2]),
    # The same top-left (offset 0): rows see 1, 2, 3, 4, 4, 4 keys (18); row 3 reaches key 3, so (0,1) is
    # diagonal; rows 4-5 see every key, so the second query tile is full throughout. Nothing is skipped.
    ((6, 4, 4, 3, "top_left", 2), [[D, D], [F, F]], 24, 18, 0, [2, 2], [2, 2]),
    # Nq = 4 < Nk = 8, 2 × 2 tiles. Bottom-right, offset 4: rows see 5, 6, 7, 8 keys (26 of 32).
    # Rows 0-1 see keys 0..4 / 0..5: key tiles 0, 1 full, 2 (keys 4-5) diagonal, 3 (keys 6-7) skipped.
    # Rows 2-3 see 0..6 / 0..7: key tiles 0-2 full, 3 diagonal.
    ((4, 8, 2, 2, "bottom_right", 2), [[F, F, D, S], [F, F, F, D]], 28, 26, 0, [3, 4], [3, 4]),
    # The same top-left, offset 0: rows see 1, 2, 3, 4 keys (10), the keys 4..7 by nobody.
    ((4, 8, 2, 2, "top_left", 2), [[D, S, S, S], [F, D, S, S]], 12, 10, 0, [1, 2], [1, 2]),
    # Nq = 5 > Nk = 2, 2 × 2 tiles, bottom-right offset −3: rows 0-2 blind, rows 3, 4 see 1, 2 keys.
    # Query tiles: rows 0-1 (blind, skipped), rows 2-3 (row 3 sees key 0 only → diagonal), row 4 (full).
    # Three programs take one query tile each: 0, 1, 1 key tiles; paired order 0, 2, 1 → [0, 1, 1].
    ((5, 2, 2, 2, "bottom_right", 3), [[S], [D], [F]], 6, 3, 3, [0, 1, 1], [0, 1, 1]),
]


@pytest.mark.parametrize("args, kinds, computed, visible, blind, contiguous, paired", HAND)
def test_the_picture_matches_counts_by_hand(args, kinds, computed, visible, blind, contiguous, paired):
    n_q, n_k, block_m, block_n, alignment, programs = args
    p = causal_picture(*args)
    assert isinstance(p, CausalPicture)
    assert p.kinds == kinds
    assert p.counts == TileCounts(*(sum(row.count(kind) for row in kinds) for kind in (S, F, D)))
    assert (p.computed_scores, p.visible_scores, p.blind_rows) == (computed, visible, blind)
    assert p.flop_fraction == pytest.approx(computed / (n_q * n_k))
    assert p.visible_fraction == pytest.approx(visible / (n_q * n_k))
    assert (p.contiguous, p.paired) == (contiguous, paired)
    mean = sum(contiguous) / programs
    assert p.contiguous_imbalance == pytest.approx(max(contiguous) / mean)
    assert p.paired_imbalance == pytest.approx(max(paired) / mean)
    assert p.offset == (n_k - n_q if alignment == "bottom_right" else 0)


def test_the_first_example_in_numbers():
    p = causal_picture(4, 4, 1, 1, "bottom_right", 2)
    assert (p.counts.skipped, p.counts.full, p.counts.diagonal, p.counts.computed) == (6, 10, 0, 10)
    assert p.flop_fraction == p.visible_fraction == 10 / 16
    assert (p.contiguous_imbalance, p.paired_imbalance) == (7 / 5, 1.0)


def top_left_mask(n_q: int, n_k: int) -> torch.Tensor:
    i = torch.arange(n_q)[:, None]
    j = torch.arange(n_k)[None, :]
    return j <= i


SHAPES = [(1, 1), (4, 4), (7, 3), (3, 7), (16, 40), (40, 16), (33, 33), (50, 77), (77, 50), (128, 64)]
BLOCKS = [(1, 1), (2, 3), (4, 4), (16, 8), (64, 64)]


@pytest.mark.parametrize("n_q, n_k", SHAPES)
def test_visible_share_is_the_masks_mean_and_the_tiles_agree_with_the_mask(n_q, n_k):
    for alignment, mask in (("bottom_right", causal_mask(n_q, n_k)), ("top_left", top_left_mask(n_q, n_k))):
        assert mask.shape == (n_q, n_k)
        for block_m, block_n in BLOCKS:
            p = causal_picture(n_q, n_k, block_m, block_n, alignment, 3)
            assert p.visible_scores == int(mask.sum())
            assert p.visible_fraction == pytest.approx(mask.double().mean().item(), abs=1e-15)
            assert p.blind_rows == int((~mask.any(dim=1)).sum())
            computed = 0
            for qt, kt in itertools.product(range(p.query_tiles), range(p.key_tiles)):
                tile = mask[qt * block_m:(qt + 1) * block_m, kt * block_n:(kt + 1) * block_n]
                kind = p.kinds[qt][kt]
                assert kind == (S if not tile.any() else F if tile.all() else D), (alignment, qt, kt)
                computed += tile.numel() if kind != S else 0
            assert p.computed_scores == computed
            assert p.visible_fraction <= p.flop_fraction <= 1.0
            assert sum(p.contiguous) == sum(p.paired) == p.counts.computed


def test_the_alignments_agree_only_when_the_matrix_is_square():
    assert causal_picture(64, 64, 16, 16, "bottom_right").kinds == causal_picture(64, 64, 16, 16, "top_left").kinds
    for n_q, n_k in ((64, 96), (96, 64)):
        br, tl = causal_picture(n_q, n_k, 16, 16, "bottom_right"), causal_picture(n_q, n_k, 16, 16, "top_left")
        assert br.visible_scores != tl.visible_scores
    assert causal_picture(96, 64, 16, 16, "bottom_right").blind_rows == 32
    assert causal_picture(96, 64, 16, 16, "top_left").blind_rows == 0


def test_pairing_is_never_more_imbalanced_for_a_square_matrix_and_an_even_share():
    cases = 0
    for n in range(1, 65):
        for block_m, block_n in ((1, 1), (2, 3), (4, 4), (8, 4), (16, 16)):
            query_tiles = -(-n // block_m)
            for programs in range(1, 9):
                if query_tiles % programs or (query_tiles // programs) % 2:
                    continue
                p = causal_picture(n, n, block_m, block_n, "bottom_right", programs)
                assert p.paired_imbalance <= p.contiguous_imbalance + 1e-12, (n, block_m, block_n, programs)
                cases += 1
    assert cases > 100
    wide = causal_picture(512, 512, 16, 16, "bottom_right", 4)  # 32 query tiles, 8 each
    assert wide.contiguous_imbalance > 1.5 and wide.paired_imbalance < 1.01


@pytest.mark.parametrize("kwargs, word", [
    (dict(n_q=0), "n_q"), (dict(n_k=-3), "n_k"), (dict(block_m=0), "block_m"), (dict(block_n=2.5), "block_n"),
    (dict(alignment="diagonal"), "alignment"), (dict(alignment="bottom-right"), "alignment"),
    (dict(programs=0), "programs"), (dict(programs=True), "programs"),
])
def test_bad_input_is_refused_with_a_sentence(kwargs, word):
    args = dict(n_q=64, n_k=64, block_m=16, block_n=16, alignment="bottom_right", programs=4) | kwargs
    with pytest.raises(ValueError, match=word) as caught:
        causal_picture(**args)
    message = str(caught.value)
    assert message[0].isalpha() and message.endswith(".") and " " in message


def test_the_summary_names_the_kinds_shares_blind_rows_and_imbalance_but_not_the_counts():
    """How many tiles of each kind is Exercise 3's answer: the explorer colours the tiles and does not count them."""
    picture = causal_picture(6, 4, 4, 3, "bottom_right", 2)
    lines = picture.summary()
    text = "\n".join(lines)
    assert (picture.counts.skipped, picture.counts.full, picture.counts.diagonal) == (1, 1, 2)
    assert "skipped (grey" in text and "full (blue" in text and "diagonal (orange" in text
    assert not re.search(r"\d+ (skipped|full|diagonal)|of \d+ computed", text), text
    assert f"{20 / 24:.1%}" in text and f"{10 / 24:.1%}" in text
    assert "first 2 query rows see no key" in text and "O = 0" in text and "LSE = −∞" in text
    assert "contiguous [1, 2]" in text and "paired" in text
    assert "no key" not in "\n".join(causal_picture(6, 4, 4, 3, "top_left", 2).summary())
    assert "nothing to pair" in "\n".join(causal_picture(256, 256, 64, 64, "bottom_right", 4).summary())




def test_while_grading_the_builder_draws_nothing(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    placeholder = causal_explorer()
    assert isinstance(placeholder, NotWhileGrading)
    assert repr(placeholder).startswith("(causal_explorer: ") and "JupyterLab" in repr(placeholder)


def test_the_first_slider_redraws_the_plot_and_changes_the_text(monkeypatch, shown):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    slider, _, before = move_first_slider(causal_explorer(), shown)
    assert slider.description == "N_q" and "256 × 256" in before
    assert len(shown) == 4


def test_the_other_controls_redraw_and_the_text_follows_the_picture(monkeypatch, shown):
    import ipywidgets as w
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = causal_explorer()
    (n_q, n_k), (block_m, block_n), (alignment, programs) = (row.children for row in box.children[:3])
    assert [c.description for c in (n_q, n_k, block_m, block_n, alignment, programs)] == \
        ["N_q", "N_k", "BLOCK_M", "BLOCK_N", "alignment", "programs"]
    assert (n_q.value, n_k.value, block_m.value, block_n.value, alignment.value, programs.value) == \
        (256, 256, 64, 64, "bottom_right", 2)
    text = first_widget(box, w.HTML)
    n_q.value, n_k.value, block_m.value, block_n.value, programs.value = 400, 112, 32, 16, 6
    assert "first 288 query rows see no key" in text.value
    expected = causal_picture(400, 112, 32, 16, "bottom_right", 6)
    assert f"{expected.flop_fraction:.1%}" in text.value and str(expected.paired) in text.value
    alignment.value = "top_left"
    assert "no key" not in text.value and "top-left" in text.value
    assert len(shown) == 7
