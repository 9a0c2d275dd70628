"""The stages of grading one submission in a scratch course directory (:func:`autograder.grade.one.grade_one`).

* :func:`import_submission` puts the notebook where ``nbgrader autograde`` looks for it;
* :func:`autograde` runs ``nbgrader autograde`` with the course's settings: the notebook's kernel in the sandbox,
  then the re-check of every test cell (:mod:`autograder.preprocessors.recheck_tests`), then nbgrader's own
  scoring, which writes each grade once; it reads back what the run and the re-check recorded in the notebook;
* :func:`make_feedback` runs ``generate_feedback``;
* :func:`read_scores` reads the grades nbgrader wrote;
* :func:`products` collects the files the client keeps.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.coursedir import COURSE_ID, CommandResult, CourseDir, error_summary
from autograder.grade.bundle import GradingSettings, SubmissionTask, files_under, tier_environment
from autograder.nbgrader_api import run_in_process

__all__ = ["Autograded", "import_submission", "autograde", "make_feedback", "read_scores", "products",
           "nbgrader_in_process", "MAX_LOG_BYTES"]

# A log longer than this travels back as its last part only.
MAX_LOG_BYTES = 4 * 2**20


def import_submission(course: CourseDir, task: SubmissionTask, settings: GradingSettings) -> None:
    """Place the submission where ``nbgrader autograde`` looks for it."""
    folder = course.submitted(task.student_id, settings.assignment)
    folder.mkdir(parents=True)
    (folder / settings.notebook_name).write_bytes(task.notebook)
    (folder / "timestamp.txt").write_text(task.submitted_at)


@dataclass
class Autograded:
    """What ``nbgrader autograde`` found: the status, the tier, the crashes, and the tests the re-check failed."""

    status: str
    tier: str = ""
    crashes: list[str] = field(default_factory=list)
    recheck_changes: list[str] = field(default_factory=list)
    recheck_seconds: float | None = None
    not_rechecked: list[str] = field(default_factory=list)

    @property
    def graded(self) -> bool:
        return self.status.startswith("graded")


def _failure_reason(run: CommandResult, timeout: int, limit: float) -> str:
    """A sentence for a TA from an autograde run that did not finish."""
    if run.timed_out:
        return f"grading took longer than {limit:g} s and was stopped"
    if "died before replying to kernel_info" in run.log or "didn't respond in" in run.log:
        return "the notebook's Python process did not start (see the kernel log in logs/)"
    if "DeadKernelError" in run.log or "Kernel died" in run.log:
        return "the notebook's Python process crashed (a segfault, or killed for using too much memory)"
    if "Timeout waiting for IOPub" in run.log or "CellTimeoutError" in run.log:
        return f"a cell ran past the {timeout} s limit and could not be interrupted"
    return error_summary(run.log)


def _run_record(course: CourseDir, settings: GradingSettings, student: str) -> dict:
    """What the autograde pass stored in the autograded notebook (the run's events and tier, the re-check's findings)."""
    # Imported here, not at the top: the preprocessor modules import nbgrader, nbclient and jupyter_client, which a
    # process that only sends submissions to a cluster never loads; this needs one string of them.
    from autograder.preprocessors.sandboxed_execute import METADATA_KEY
    path = course.autograded(student, settings.assignment) / settings.notebook_name
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    record = notebook.get("metadata", {}).get(METADATA_KEY)
    return record if isinstance(record, dict) else {}


def _graded_status(events: list[dict], timeout: int) -> tuple[str, list[str]]:
    """("graded (...)", crash descriptions) from the events of a run."""
    crashes = [str(e.get("what", "")) for e in events if e.get("kind") in ("crashed", "killed")]
    notes = list(crashes)
    if any(e.get("kind") == "interrupted" for e in events):
        notes.insert(0, f"a cell was stopped at the {timeout} s limit")
    return ("graded (" + "; ".join(notes) + ")" if notes else "graded"), crashes


def autograde(course: CourseDir, settings: GradingSettings, student: str, forks: Any = None) -> Autograded:
    """``nbgrader autograde`` for the one student of this course directory: the notebook's run and the re-check,
    each within ``settings.wall_limit``."""
    # The name of the re-check's record, as the autograde command writes it (autograder.preprocessors.recheck_tests);
    # imported here for the reason _run_record gives.
    from autograder.preprocessors.recheck_tests import RECHECK_RECORD
    limit = 2 * settings.wall_limit
    run = course.run("autograde", settings.assignment, f"--student={student}", "--force", timeout=limit,
                     log_file=course.root / "logs" / f"autograde-{student}.log",
                     environment=tier_environment(settings.tier), forks=forks)
    if not run.ok:
        return Autograded(f"failed: {_failure_reason(run, settings.timeout, limit)}")
    record = _run_record(course, settings, student)
    events = [e for e in record.get("events", []) if isinstance(e, dict)]
    status, crashes = _graded_status(events, settings.timeout)
    recheck = record.get(RECHECK_RECORD)
    if not isinstance(recheck, dict):
        # nbgrader finished without the re-check's record: the grades it wrote were never re-checked.
        return Autograded("failed: the re-check left no record in the autograded notebook (see "
                          f"logs/autograde-{student}.log)", str(record.get("tier", "")), crashes)
    seconds = recheck.get("seconds")
    return Autograded(status, str(record.get("tier", "")), crashes,
                      [str(line) for line in recheck.get("changes", [])],
                      float(seconds) if isinstance(seconds, (int, float)) else None,
                      [str(cell) for cell in recheck.get("kept", [])])


def nbgrader_in_process(root: Path, settings: GradingSettings, method: str, *args: str,
                        log_file: Path | None = None) -> str | None:
    """An nbgrader command that runs no student code, with the grading settings (:mod:`autograder.nbgrader_api`)."""
    return run_in_process(root, method, *args, timeout=settings.timeout, sandbox=settings.sandbox, log_file=log_file)


def make_feedback(course: CourseDir, settings: GradingSettings, student: str) -> str | None:
    """``generate_feedback`` for the student: None when it worked, else a line for the TA."""
    log = course.root / "logs" / f"generate_feedback-{student}.log"
    problem = nbgrader_in_process(course.root, settings, "generate_feedback", settings.assignment, student,
                                  log_file=log)
    return f"{student}: feedback: {problem} (see logs/{log.name})" if problem else None


def read_scores(course: CourseDir, settings: GradingSettings, student: str, test_ids: set[str]
                ) -> tuple[float, dict[str, float]] | None:
    """(total, points per test cell) from the gradebook; None when nbgrader recorded no submission."""
    # Imported here, not at the top: see nbgrader_in_process.
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            submission = gb.find_submission(settings.assignment, student)
        except MissingEntry:
            return None
        cells = {grade.name: float(grade.score or 0.0)
                 for notebook in submission.notebooks for grade in notebook.grades if grade.name in test_ids}
        return float(submission.score or 0.0), cells


def _log_text(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) > MAX_LOG_BYTES:
        data = b"[... start of the log cut ...]\n" + data[-MAX_LOG_BYTES:]
    return data


def products(course: CourseDir, settings: GradingSettings, student: str) -> dict[str, bytes]:
    """The files the client keeps: the autograded folder, the feedback folder and the logs (the re-check's too)."""
    files = files_under(course.root, course.autograded(student, settings.assignment))
    files |= files_under(course.root, course.feedback(student, settings.assignment))
    logs = course.root / "logs"
    for path in sorted(logs.iterdir()) if logs.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            files[f"logs/{path.name}"] = _log_text(path)
    return files
