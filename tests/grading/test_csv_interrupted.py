"""The CSV of an interrupted grading run: a student it did not reach has no score yet, not a zero.

A TA may import grades.csv while a run is paused; a 0 there would read as a grade. The pipeline's
interrupted path (test_cluster.py interrupts a real run) writes these rows with write_csv.
"""
from __future__ import annotations

import csv
from pathlib import Path

from autograder.grade.pipeline import INTERRUPTED, StudentResult
from autograder.grade.report import CSV_FIELDS, NOT_GRADED, summary_table, write_csv

TESTS = ["test_add", "test_mul"]


def _rows(path: Path) -> dict[str, dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def test_a_student_not_reached_has_blank_score_and_cells_and_says_interrupted(tmp_path: Path) -> None:
    results = [
        StudentResult("alice", 2.0, 3.0, "graded", cells={"test_add": 2.0, "test_mul": 0.0}, tier="CPU tier",
                      wall_seconds=4.2, recheck_seconds=0.5),
        StudentResult("bob", 0.0, 3.0, INTERRUPTED),
        StudentResult("dave", 0.0, 3.0, "not a valid notebook (it does not parse as JSON)"),
        StudentResult("erin", 0.0, 3.0, f"{NOT_GRADED}the worker grading it died; a re-run tries again"),
    ]
    path = tmp_path / "grades.csv"
    write_csv(path, results, "lesson", TESTS)
    with open(path, newline="", encoding="utf-8") as handle:
        assert next(csv.reader(handle)) == [*CSV_FIELDS, *TESTS]
    rows = _rows(path)
    bob = rows["bob"]
    assert (bob["score"], bob["test_add"], bob["test_mul"]) == ("", "", ""), bob
    assert (bob["status"], bob["max_score"]) == (INTERRUPTED, "3"), bob
    # A graded student keeps every number, zeros included; a submission with nothing to grade earns 0.
    assert (rows["alice"]["score"], rows["alice"]["test_add"], rows["alice"]["test_mul"]) == ("2", "2", "0")
    assert rows["dave"]["score"] == "0" and rows["dave"]["test_add"] == ""
    # A grading that failed (the grader's trouble, retried by a re-run) is not a grade either.
    assert rows["erin"]["score"] == "" and rows["erin"]["status"].startswith(NOT_GRADED), rows["erin"]
    table = summary_table(results)
    assert "- / 3" in next(line for line in table.splitlines() if line.startswith("bob")), table
    assert "0 / 3" in next(line for line in table.splitlines() if line.startswith("dave")), table
