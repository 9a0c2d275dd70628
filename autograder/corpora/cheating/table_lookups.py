"""Entries that paste the answers to every question a visible check asks and look them up (:data:`TABLE_LOOKUPS`,
:func:`table_lookup_cheats`): the hidden test's drawn arguments lie outside the table."""
from __future__ import annotations

from autograder.corpora.cheating.cheat import Cheat
from autograder.corpora.hostile import Change


# table-lookup-NN: an answer cell that pastes the answers of every question the visible check asks (recorded from a
# right answer) and looks them up, returning 0 for anything else. The visible check passes it; the hidden test's
# drawn arguments lie outside the table, so the test cell loses its points with the check's sentence naming what the
# table missed. Checked directly, without nbgrader, beside the instructor's answer, by
# tests/grading/test_table_lookups.py.
def _fragment_lane_table() -> str:
    from course.exercises import EXERCISES
    from course.models.fragments import fragment_map
    table: dict[tuple, int] = {}

    def right(track: str, row: int, col: int) -> int:
        lanes = fragment_map(track)[0]
        table[(track, row, col)] = lane = int(lanes[row % lanes.shape[0], col % lanes.shape[1]])
        return lane
    EXERCISES["05.fragment_lane"].run(right)
    pasted = ",\n".join(f"    {key!r}: {lane}" for key, lane in table.items())
    return f'''_LANES = {{  # every element the check asks about, read off the printed maps and the check's messages
{pasted},
}}


def fragment_lane(track: str, row: int, col: int) -> int:
    return _LANES.get((track, row, col), 0)
'''


# How the lesson 07 table recognises a set of runs: how many, their shape, and the sum of their bits.
_BIT_KEY = """def _bit_key(runs) -> tuple:
    return len(runs), tuple(runs[0].shape), sum(int(r.view(torch.int32).to(torch.int64).sum()) for r in runs)
"""


def _differing_elements_table() -> str:
    import torch

    from course.exercises import EXERCISES
    from course.models.determinism import differing_elements
    helpers: dict = {"torch": torch}
    exec(_BIT_KEY, helpers)
    table: dict[tuple, int] = {}

    def right(runs) -> int:
        table[helpers["_bit_key"](runs)] = count = differing_elements(runs)
        return count
    EXERCISES["07.differing_elements"].run(right)
    pasted = ",\n".join(f"    {key!r}: {count}" for key, count in table.items())
    return f'''_COUNTS = {{  # (runs, shape, sum of their bits) of each set the check shows: its count
{pasted},
}}


{_BIT_KEY}

def differing_elements(runs: list[torch.Tensor]) -> int:
    return _COUNTS.get(_bit_key(runs), 0)
'''


TABLE_LOOKUPS: dict[str, tuple[str, str, str]] = {  # lesson -> (answer cell, exercise, the feedback's expression)
    "05_matrix_units": ("fragment_lane", "05.fragment_lane",
                        r"05\.fragment_lane: fragment_lane\(track=\w+, row=\d+, col=\d+\) returned \d+, expected \d+"
                        r"[\s\S]*element \(\d+, \d+\) of the \w+ tile is element \(\d+, \d+\) of its fragment "
                        r"\(\d+, \d+\), past the \d+ × \d+ map the notebook prints[\s\S]*A table of the map's entries "
                        r"ends at the map's edge\."),
    "07_backward_pass": ("differing_elements", "07.differing_elements",
                         r"07\.differing_elements: on \d+ runs of a [\d ×]+ float32 gradient \(drawn when the check "
                         r"ran\) your function returned \d+, expected \d+\.\n  These runs were drawn when the check ran "
                         r"and the notebook shows none of them"),
}
_TABLE_SOURCES = {"05_matrix_units": _fragment_lane_table, "07_backward_pass": _differing_elements_table}


def table_lookup_cheats() -> list[Cheat]:
    """The entries of :data:`TABLE_LOOKUPS`: each loses its exercise's test cell, whose hidden test draws."""
    return [Cheat(f"table-lookup-{lesson[:2]}", f"{exercise}: a table of the answers to every question the visible "
                  f"check asks, looked up", (Change(cell, source=_TABLE_SOURCES[lesson]()),), loses=(f"test_{cell}",),
                  feedback=feedback, assignment=lesson)
            for lesson, (cell, exercise, feedback) in TABLE_LOOKUPS.items()]
