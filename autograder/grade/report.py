"""The grading results as a CSV file and as a short table for the terminal."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from autograder.grade.results import StudentResult

__all__ = ["CSV_FIELDS", "INTERRUPTED", "NOT_GRADED", "write_csv", "summary_table"]

INTERRUPTED = "not graded yet: the run was interrupted; run the same command again to grade the rest"
"""The status of a student an interrupted run did not reach: no score yet, so the CSV leaves it blank."""

CSV_FIELDS = ["student_id", "assignment", "score", "max_score", "status", "tier", "crashes", "crash_details",
              "recheck", "seconds", "recheck_seconds"]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _recheck(r: "StudentResult") -> str:
    """The re-check's column: each grade it changed and why, and the test cells it could not judge."""
    notes = list(r.recheck)
    if r.not_rechecked:
        notes.append("not re-checked, the notebook's grade stands (no course.check in the test): "
                     + ", ".join(r.not_rechecked))
    return " | ".join(notes)


NOT_GRADED = "not graded: "
"""The start of the status of a student whose grading failed (the grader's trouble, not the submission's): a re-run
tries again, so the CSV leaves the score blank, as for an interrupted run."""


def _not_graded_yet(r: "StudentResult") -> bool:
    return r.status == INTERRUPTED or r.status.startswith(NOT_GRADED)


def write_csv(path: Path, results: Sequence["StudentResult"], assignment: str, test_ids: Sequence[str]) -> None:
    """One row per student; one column per graded test cell, blank where the student was not graded.

    A student an interrupted run did not reach has a blank score and blank test cells (a zero would read
    as a grade to anyone who imports the file before the re-run); its status says it was interrupted.

    ``tier`` is the execution tier the notebook was graded on, ``crashes`` how many times its
    kernel crashed or had to be killed (``crash_details`` says where), ``seconds`` the wall time
    its grading took (``recheck_seconds`` the re-check's share); ``recheck`` the tests the re-check failed, and why.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_FIELDS, *test_ids])
        for r in results:
            graded = r.wall_seconds is not None
            pending = _not_graded_yet(r)
            writer.writerow([r.student_id, assignment, "" if pending else _number(r.score), _number(r.max_score),
                             r.status, r.tier, len(r.crashes) if graded else "", "; ".join(r.crashes), _recheck(r),
                             _seconds(r.wall_seconds), _seconds(r.recheck_seconds),
                             *("" if pending else _number(r.cells.get(test_id)) for test_id in test_ids)])


def summary_table(results: Sequence["StudentResult"]) -> str:
    """A fixed-width table: student, score out of max, time, crashes, tier, status."""
    if not results:
        return "no submissions"
    rows = [(r.student_id, f"{'-' if _not_graded_yet(r) else format(r.score, 'g')} / {r.max_score:g}",
             "" if r.wall_seconds is None else f"{r.wall_seconds:.1f} s",
             "" if r.wall_seconds is None else str(len(r.crashes)), r.tier or "-", r.status) for r in results]
    header = ("student", "score", "time", "crashes", "tier", "status")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(5)]
    align = ["<", ">", ">", ">", "<"]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)) + f"  {row[5]}"

    lines = [line(header), *(line(row) for row in rows)]
    graded = sum(r.status.startswith("graded") for r in results)
    crashed = sum(bool(r.crashes) for r in results)
    lines.append(f"{graded} of {len(results)} submission{'s' * (len(results) != 1)} graded"
                 + (f"; {crashed} with a crashed or killed kernel (see the status)" if crashed else ""))
    return "\n".join(lines)
