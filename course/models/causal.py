"""The tiles of causal attention: which a kernel skips, computes whole, or masks (lesson 06).

Query ``i`` sees key ``j`` when ``j <= i + offset``. The course's convention is bottom-right alignment,
``offset = Nk - Nq``: the last query sees every key, as when a model decodes new tokens after a cache of
earlier ones (``course.reference.causal_mask``). Top-left alignment (``offset = 0``) is what some
libraries do; the two agree only when Nq = Nk.

A (query tile, key tile) pair of a tiled kernel is one of three kinds:

- **skipped**: no row of the query tile sees any key of the key tile; a kernel never loads it;
- **full**: every row sees every key; computed without a mask;
- **diagonal**: the mask's edge crosses it; computed with the mask, element by element.

Only real keys count: the last key tile may be partial, and its padding is never "seen".
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

__all__ = ["ALIGNMENTS", "offset", "tile_kind", "TileCounts", "tile_counts", "visible_key_tiles",
           "program_work"]

ALIGNMENTS = ("bottom_right", "top_left")


def offset(n_q: int, n_k: int, alignment: str = "bottom_right") -> int:
    """The ``offset`` of ``j <= i + offset`` for an alignment."""
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment is 'bottom_right' or 'top_left', not {alignment!r}.")
    return n_k - n_q if alignment == "bottom_right" else 0


def _whole(name: str, value, low: int = 1) -> int:
    """``value`` as an int (numpy integers too); a bool, a float or a number below ``low`` is refused."""
    try:
        whole = operator.index(value)
    except TypeError:
        whole = None
    if whole is None or isinstance(value, bool) or whole < low:
        raise ValueError(f"{name} must be a whole number of at least {low}; it is {value!r}.")
    return whole


def _check(n_q: int, n_k: int, block_m: int, block_n: int) -> None:
    for name, value in (("n_q", n_q), ("n_k", n_k), ("block_m", block_m), ("block_n", block_n)):
        _whole(name, value)


def tile_kind(n_q: int, n_k: int, block_m: int, block_n: int, query_tile: int, key_tile: int,
              alignment: str = "bottom_right") -> str:
    """``"skipped"``, ``"full"`` or ``"diagonal"`` for one (query tile, key tile) pair."""
    _check(n_q, n_k, block_m, block_n)
    query_tile, key_tile = _whole("query_tile", query_tile, 0), _whole("key_tile", key_tile, 0)
    shift = offset(n_q, n_k, alignment)
    first_row, last_row = query_tile * block_m, min(n_q, (query_tile + 1) * block_m) - 1
    first_key, last_key = key_tile * block_n, min(n_k, (key_tile + 1) * block_n) - 1
    if first_row > last_row or first_key > last_key:
        raise ValueError(f"tile ({query_tile}, {key_tile}) is outside a {n_q} × {n_k} score matrix with "
                         f"{block_m} × {block_n} tiles.")
    if first_key > last_row + shift:  # not even the tile's last (most-seeing) row reaches its first key
        return "skipped"
    if last_key <= first_row + shift:  # even the tile's first (least-seeing) row sees its last key
        return "full"
    return "diagonal"


@dataclass(frozen=True)
class TileCounts:
    skipped: int
    full: int
    diagonal: int

    @property
    def computed(self) -> int:
        return self.full + self.diagonal


def tile_counts(n_q: int, n_k: int, block_m: int, block_n: int, alignment: str = "bottom_right") -> TileCounts:
    """How many (query tile, key tile) pairs of each kind the score matrix holds."""
    _check(n_q, n_k, block_m, block_n)
    kinds = [tile_kind(n_q, n_k, block_m, block_n, qt, kt, alignment)
             for qt in range(-(-n_q // block_m)) for kt in range(-(-n_k // block_n))]
    return TileCounts(kinds.count("skipped"), kinds.count("full"), kinds.count("diagonal"))


def visible_key_tiles(n_q: int, n_k: int, block_m: int, block_n: int, query_tile: int,
                      alignment: str = "bottom_right") -> int:
    """The key tiles one query tile computes (full or diagonal): the work of its program."""
    return sum(tile_kind(n_q, n_k, block_m, block_n, query_tile, kt, alignment) != "skipped"
               for kt in range(-(-n_k // block_n)))


def program_work(n_q: int, n_k: int, block_m: int, block_n: int, programs: int, paired: bool,
                 alignment: str = "bottom_right") -> list[int]:
    """Key tiles computed by each of ``programs`` programs when the query tiles are dealt out.

    Contiguous: program p takes a run of consecutive query tiles. Paired: the query tiles are taken in
    the order first, last, second, second-to-last, ... and that order is dealt out in the same runs, so a
    program with an even number of tiles holds whole pairs (tile t with tile T - 1 - t): early (cheap) and
    late (expensive) rows of the causal triangle together. With one tile per program pairing changes
    nothing, and with an odd number per program one pair is split.
    """
    _check(n_q, n_k, block_m, block_n)
    programs = _whole("programs", programs)
    tiles = -(-n_q // block_m)
    work = [visible_key_tiles(n_q, n_k, block_m, block_n, t, alignment) for t in range(tiles)]
    order = list(range(tiles))
    if paired:
        order = [t for a in range(tiles // 2) for t in (a, tiles - 1 - a)] + ([tiles // 2] if tiles % 2 else [])
    share = -(-tiles // programs)
    return [sum(work[t] for t in order[p * share:(p + 1) * share]) for p in range(programs)]
