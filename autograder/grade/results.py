"""What grading reports about one student, and the graded test cells of an assignment."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["GradingError", "StudentResult", "TestCell", "graded_test_cells"]


class GradingError(Exception):
    """The pipeline itself could not run (as opposed to one student's submission failing)."""


@dataclass
class StudentResult:
    """One student's outcome. ``status`` is ``graded`` (maybe with a note) or a sentence saying what failed."""

    student_id: str
    score: float
    max_score: float
    status: str
    cells: dict[str, float] = field(default_factory=dict)  # graded test cell id -> points earned
    feedback_html: Path | None = None
    tier: str = ""  # the execution tier the notebook was graded on
    crashes: list[str] = field(default_factory=list)  # "kernel crashed (signal 11: ...) in cell mul", ...
    wall_seconds: float | None = None  # time the grading of this student took (nbgrader, re-check, feedback)
    recheck: list[str] = field(default_factory=list)  # test cells the re-check failed, and why
    recheck_seconds: float | None = None
    not_rechecked: list[str] = field(default_factory=list)  # test cells the re-check cannot judge: grade as run

    def as_data(self) -> dict:
        """Plain JSON-able data (without the feedback page's path, which belongs to one machine)."""
        data = asdict(self)
        data.pop("feedback_html")
        return data

    @classmethod
    def from_data(cls, data: dict, feedback_html: Path | None = None) -> "StudentResult":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "feedback_html"},
                   feedback_html=feedback_html)


@dataclass(frozen=True)
class TestCell:
    grade_id: str
    points: float


def graded_test_cells(notebook: dict) -> list[TestCell]:
    """The autograded test cells of a notebook, in notebook order."""
    cells = []
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution"):
            cells.append(TestCell(meta["grade_id"], float(meta.get("points", 0))))
    return cells
