"""course.models.causal: the three kinds of causal tiles, counted and dealt to programs."""
from __future__ import annotations

import numpy as np
import pytest

from course.models.causal import program_work, tile_counts, tile_kind


@pytest.mark.parametrize("tiles_a_side", [1, 2, 5, 64])
def test_square_causal_matrix_computes_the_triangle_of_tiles(tiles_a_side):
    n = 16 * tiles_a_side
    counts = tile_counts(n, n, 16, 16)
    assert counts.computed == tiles_a_side * (tiles_a_side + 1) // 2
    assert counts.diagonal == tiles_a_side  # square tiles on the diagonal are the only masked ones


def test_a_one_row_last_tile_that_sees_every_key_makes_the_ragged_key_tile_full():
    assert tile_kind(129, 100, 64, 64, query_tile=2, key_tile=1) == "full"
    assert tile_kind(129, 100, 64, 64, query_tile=2, key_tile=1, alignment="top_left") == "full"
    assert tile_kind(129, 100, 64, 64, query_tile=0, key_tile=1) == "skipped"


def test_numpy_integers_are_sizes_and_bad_ones_are_refused_with_a_sentence():
    assert tile_counts(np.int64(64), 64, 16, np.int32(16)) == tile_counts(64, 64, 16, 16)
    for bad in (dict(query_tile=-1, key_tile=0), dict(query_tile=0, key_tile=-1), dict(query_tile=9, key_tile=0)):
        with pytest.raises(ValueError, match=r"\.$"):
            tile_kind(64, 64, 16, 16, **bad)
    with pytest.raises(ValueError, match="programs must be a whole number"):
        program_work(64, 64, 16, 16, True, paired=True)


def test_pairing_balances_the_triangle_when_each_program_holds_whole_pairs():
    assert program_work(128, 128, 16, 16, 4, paired=False) == [3, 7, 11, 15]
    assert program_work(128, 128, 16, 16, 4, paired=True) == [9, 9, 9, 9]
