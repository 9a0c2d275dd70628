"""The grading results as a CSV file and as a short table for the terminal."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .grade import StudentResult

__all__ = ["CSV_FIELDS", "write_csv", "summary_table"]

CSV_FIELDS = ["student_id", "assignment", "score", "max_score", "status"]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def write_csv(path: Path, results: Sequence["StudentResult"], assignment: str, test_ids: Sequence[str]) -> None:
    """One row per student; one column per graded test cell, blank where the student was not graded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CSV_FIELDS, *test_ids])
        for r in results:
            writer.writerow([r.student_id, assignment, _number(r.score), _number(r.max_score), r.status,
                             *(_number(r.cells.get(test_id)) for test_id in test_ids)])


def summary_table(results: Sequence["StudentResult"]) -> str:
    """A fixed-width table: student, score out of max, status."""
    if not results:
        return "no submissions"
    width = max(7, *(len(r.student_id) for r in results))
    lines = [f"{'student':<{width}}  {'score':>11}  status"]
    for r in results:
        score = f"{r.score:g} / {r.max_score:g}"
        lines.append(f"{r.student_id:<{width}}  {score:>11}  {r.status}")
    graded = sum(r.status.startswith("graded") for r in results)
    lines.append(f"{graded} of {len(results)} submission{'s' * (len(results) != 1)} graded")
    return "\n".join(lines)
