"""Autograde a batch of submissions with nbgrader and write one CSV row per student.

The pipeline, in a fresh nbgrader course directory ``<workdir>/nbgrader``:

1. copy ``solutions/<assignment>`` in as the source and run ``generate_assignment`` (fills the gradebook);
2. find one notebook per student (:mod:`autograder.submissions`), refuse the ones that cannot be
   graded with a sentence saying why, and import the rest as ``submitted/<student>/<assignment>/``;
3. run ``nbgrader autograde`` once per student, in its own process, ``jobs`` at a time, so a crash
   or a hang in one submission costs only that submission;
4. run ``generate_feedback`` without the hidden tests, read the scores from the gradebook, and
   write ``<workdir>/grades.csv``.
"""
from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import SOLUTIONS_DIR
from .coursedir import COURSE_ID, CommandResult, CourseDir, error_summary
from .report import write_csv
from .submissions import Submission, SubmissionsError, collect, exercise_ids

__all__ = ["StudentResult", "GradingError", "TestCell", "grade_submissions"]


@dataclass
class StudentResult:
    """One student's outcome. ``status`` is ``graded`` (maybe with a note) or a sentence saying what failed."""

    student_id: str
    score: float
    max_score: float
    status: str
    cells: dict[str, float] = field(default_factory=dict)  # graded test cell id -> points earned
    feedback_html: Path | None = None


@dataclass(frozen=True)
class TestCell:
    grade_id: str
    points: float


class GradingError(Exception):
    """The pipeline itself could not run (as opposed to one student's submission failing)."""


def _assignment_notebook(solutions: Path, assignment: str) -> Path:
    folder = solutions / assignment
    notebooks = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
    if not notebooks:
        known = sorted(p.name for p in solutions.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) \
            if solutions.is_dir() else []
        raise GradingError(f"no assignment '{assignment}': {folder} holds no notebook "
                           f"(assignments: {', '.join(known) or 'none'}).")
    if len(notebooks) > 1:
        raise GradingError(f"{folder} holds {len(notebooks)} notebooks; grading expects one per assignment.")
    return notebooks[0]


def _test_cells(notebook: dict) -> list[TestCell]:
    """The autograded test cells of a notebook, in notebook order."""
    cells = []
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution"):
            cells.append(TestCell(meta["grade_id"], float(meta.get("points", 0))))
    return cells


def _import(course: CourseDir, submission: Submission, assignment: str, notebook_name: str) -> None:
    """Place a submission where ``nbgrader autograde`` looks for it."""
    folder = course.submitted(submission.student_id, assignment)
    folder.mkdir(parents=True)
    shutil.copyfile(submission.notebook, folder / notebook_name)
    when = submission.submitted_at or datetime.now(timezone.utc)
    (folder / "timestamp.txt").write_text(when.strftime("%Y-%m-%d %H:%M:%S UTC"))


def _failure_reason(run: CommandResult, timeout: int, limit: float) -> str:
    """A sentence for a TA from an autograde run that did not finish."""
    if run.timed_out:
        return f"grading took longer than {limit:g} s and was stopped"
    if "DeadKernelError" in run.log or "Kernel died" in run.log:
        return "the notebook's Python process crashed (a segfault, or killed for using too much memory)"
    if "Timeout waiting for IOPub" in run.log or "CellTimeoutError" in run.log:
        return f"a cell ran past the {timeout} s limit and could not be interrupted"
    return error_summary(run.log)


def _autograde(course: CourseDir, assignment: str, student: str, timeout: int, limit: float) -> str:
    """Autograde one student; the status for the report."""
    log_file = course.root / "logs" / f"autograde-{student}.log"
    run = course.run("autograde", assignment, f"--student={student}", "--force", timeout=limit, log_file=log_file)
    if not run.ok and "database is locked" in run.log:
        # Parallel students share one SQLite gradebook; a rare write collision is worth one more try.
        run = course.run("autograde", assignment, f"--student={student}", "--force", timeout=limit, log_file=log_file)
    if not run.ok:
        return f"failed: {_failure_reason(run, timeout, limit)}"
    if "Timeout waiting for execute reply" in run.log:
        return f"graded (a cell was stopped at the {timeout} s limit)"
    return "graded"


def _scores(course: CourseDir, assignment: str, student: str, test_ids: set[str]
            ) -> tuple[float, dict[str, float]] | None:
    """(total, points per test cell) from the gradebook; None when nbgrader recorded no submission."""
    from nbgrader.api import Gradebook, MissingEntry  # seconds to import: only once there is something to read

    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        cells = {grade.name: float(grade.score or 0.0)
                 for notebook in submission.notebooks for grade in notebook.grades if grade.name in test_ids}
        return float(submission.score or 0.0), cells


def _prepare_course(workdir: Path, assignment: str, source_notebook: Path, timeout: int,
                    say: Callable[[str], None]) -> CourseDir:
    """A fresh course directory whose gradebook knows the assignment."""
    try:
        course = CourseDir.create(workdir / "nbgrader", timeout)
    except FileExistsError as exc:
        raise GradingError(str(exc)) from None
    course.add_source(assignment, source_notebook.parent)
    say(f"generating {assignment} in {course.root}")
    run = course.run("generate_assignment", assignment, "--force", log_file=course.root / "logs" / "generate_assignment.log")
    if not run.ok:
        raise GradingError(f"nbgrader could not generate {assignment}: {error_summary(run.log)}")
    return course


def _autograde_all(course: CourseDir, assignment: str, students: list[str], jobs: int, timeout: int,
                   limit: float, say: Callable[[str], None]) -> dict[str, str]:
    """Autograde each student in a process of its own, ``jobs`` at a time; status by student."""
    def grade_one(student: str) -> tuple[str, str]:
        outcome = _autograde(course, assignment, student, timeout, limit)
        say(f"{student}: {outcome}")
        return student, outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(pool.map(grade_one, students))


def grade_submissions(submissions: Path, assignment: str, workdir: Path, jobs: int = 1, timeout: int = 120, *,
                      solutions: Path = SOLUTIONS_DIR, csv_path: Path | None = None,
                      progress: Callable[[str], None] | None = None) -> list[StudentResult]:
    """Grade every submission in ``submissions`` (a folder of student folders, or a zip) for ``assignment``.

    ``timeout`` is the limit per notebook cell in seconds; ``jobs`` students are graded at once.
    The CSV goes to ``csv_path`` (default ``<workdir>/grades.csv``). Returns one result per row of
    the CSV, sorted by student id. Raises :class:`GradingError` only when the pipeline cannot run.
    """
    say = progress or (lambda line: None)
    workdir = Path(workdir).resolve()
    if not Path(submissions).exists():
        raise GradingError(f"{submissions} does not exist.")
    source_notebook = _assignment_notebook(Path(solutions).resolve(), assignment)
    source = json.loads(source_notebook.read_text(encoding="utf-8"))
    tests = _test_cells(source)
    test_ids = [t.grade_id for t in tests]
    code_cells = sum(cell.get("cell_type") == "code" for cell in source.get("cells", []))
    # Per-cell limits are nbgrader's; this bounds a run that nbgrader itself cannot stop.
    wall_limit = timeout * (code_cells + 1) + 120.0

    course = _prepare_course(workdir, assignment, source_notebook, timeout, say)
    try:
        found = collect(Path(submissions), course.root / "unpacked", assignment, source_notebook.name,
                        exercise_ids(source))
    except SubmissionsError as exc:
        raise GradingError(str(exc)) from None

    status: dict[str, str] = {}
    for submission in found:
        if submission.notebook is None:
            status[submission.student_id] = submission.problem or "nothing to grade"
            say(f"{submission.student_id}: {status[submission.student_id]}")
        else:
            _import(course, submission, assignment, source_notebook.name)
    gradable = [s.student_id for s in found if s.notebook is not None]
    status.update(_autograde_all(course, assignment, gradable, jobs, timeout, wall_limit, say))

    graded = {s for s in gradable if status[s].startswith("graded")}
    if graded:
        feedback_log = course.root / "logs" / "generate_feedback.log"
        run = course.run("generate_feedback", assignment, "--force", log_file=feedback_log)
        if not run.ok:
            say(f"feedback: {error_summary(run.log)} (see {feedback_log})")

    results = []
    for student in (s.student_id for s in found):
        result = StudentResult(student, 0.0, sum(t.points for t in tests), status[student])
        if student in graded:
            scores = _scores(course, assignment, student, set(test_ids))
            if scores is None:
                result.status = "failed: nbgrader recorded no grades for this submission"
            else:
                result.score, result.cells = scores
            html = course.feedback(student, assignment) / f"{source_notebook.stem}.html"
            result.feedback_html = html if html.exists() else None
        results.append(result)
    write_csv(csv_path or workdir / "grades.csv", results, assignment, test_ids)
    return results
