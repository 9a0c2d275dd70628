"""The hostile-submission corpus: notebooks that attack the grader instead of solving the exercises.

Each entry is the instructor notebook of a lesson with a few changes: a solution cell's source
replaced by hostile code, a test cell edited or deleted, or a cell's nbgrader metadata changed.
Everything an attack does not need stays the instructor's correct solution, so every entry earns a
known grade: full marks minus the test cells named in ``loses``. The test suite grades the whole
corpus in one batch with an honest student and a bystander, and checks that each entry gets exactly
that grade while the gradebook, the other students and the machine come through untouched.

Changes name cells by grade_id and fail loudly when the instructor notebook no longer has them, so
the corpus cannot go stale silently.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.corpora.hostile.attacks import LISTEN_PORT, TAMPER_MARK

__all__ = ["Change", "HostileSubmission", "corpus", "make_submission", "LISTEN_PORT", "TAMPER_MARK"]


@dataclass(frozen=True)
class Change:
    """One change to one cell, named by its grade_id."""

    cell: str
    source: str | None = None
    """The cell's new source; ``LISTEN_PORT`` in it becomes the port the grader's test listens on."""
    delete: bool = False
    metadata: tuple[tuple[str, object], ...] = ()
    """nbgrader metadata to overwrite, as (key, value) pairs."""


@dataclass(frozen=True)
class HostileSubmission:
    assignment: str
    name: str
    """Also the student id it is graded under."""
    attack: str
    """What the submission tries to do, in one sentence."""
    changes: tuple[Change, ...]
    loses: tuple[str, ...] = ()
    """Test cells that must score 0; every other test cell keeps its full points."""
    reason: str | None = None
    """A regular expression the grading status must match (case-insensitive), so a TA sees what happened."""
    or_output: str | None = None
    """A regular expression that may stand in for ``reason`` when the attacking cell's output matches it:
    a limit stopped the attack inside the kernel, which then went on normally."""

    def expected_cells(self, test_points: dict[str, float]) -> dict[str, float]:
        """Points per test cell this submission must get, given each test cell's full points."""
        unknown = set(self.loses) - set(test_points)
        if unknown:
            raise ValueError(f"{self.name}: loses unknown test cells {sorted(unknown)}")
        return {test: 0.0 if test in self.loses else points for test, points in test_points.items()}


def corpus(assignment: str | None = None) -> list[HostileSubmission]:
    from autograder.corpora.hostile import lesson00
    return [e for e in lesson00.HOSTILE if assignment in (None, e.assignment)]


def _cell_index(nb: nbformat.NotebookNode, grade_id: str, entry: HostileSubmission) -> int:
    found = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    if len(found) != 1:
        raise ValueError(f"{entry.name}: the instructor notebook has {len(found)} cells named {grade_id!r}; "
                         f"update the corpus")
    return found[0]


def _apply(nb: nbformat.NotebookNode, change: Change, entry: HostileSubmission, listen_port: int) -> None:
    index = _cell_index(nb, change.cell, entry)
    cell = nb.cells[index]
    if change.delete:
        del nb.cells[index]
        return
    if change.source is not None:
        source = change.source.strip("\n").replace(LISTEN_PORT, str(listen_port))
        if source == cell.source:
            raise ValueError(f"{entry.name}: the new source of {change.cell} is the current one")
        cell.source = source
    if change.metadata:
        meta = cell.metadata["nbgrader"]
        if all(meta.get(key) == value for key, value in change.metadata):
            raise ValueError(f"{entry.name}: the metadata of {change.cell} already is {dict(change.metadata)}")
        meta.update(dict(change.metadata))


def make_submission(instructor_notebook: Path, entry: HostileSubmission, listen_port: int = 9
                    ) -> nbformat.NotebookNode:
    """The instructor notebook with the entry's changes applied (``listen_port``: see :class:`Change`)."""
    nb = copy.deepcopy(nbformat.read(instructor_notebook, as_version=4))
    if not entry.changes:
        raise ValueError(f"{entry.name}: changes nothing")
    for change in entry.changes:
        _apply(nb, change, entry, listen_port)
    return nb
