"""The batch's own records, kept by the client alone: gradebook, files, and which students are done.

A run's course directory (``<workdir>/nbgrader``) holds nbgrader's gradebook and folders as a TA
knows them (``submitted/``, ``autograded/``, ``feedback/``, ``logs/``), plus:

* ``recorded/<student>.json``: the student's result row and the digest of what was handed in. It is
  written last, atomically, when everything else of that student is in place, so it is the mark
  that the student is done. :meth:`OutcomeWriter.record` first removes it, then writes the files and the
  gradebook entry, then writes it again: an interruption at any point leaves a student either done
  (with a consistent gradebook entry) or not done (and a re-run grades it again, replacing what is
  there). Recording the same outcome twice leaves the same state as recording it once.
* ``autograder-run.json``: what the run grades with (assignment, source files, settings). A re-run
  with the same ones resumes: students done with the same submission are kept, the others graded.
* ``gradebook-as-released.db``: the gradebook right after ``generate_assignment``, which every
  submission's scratch course directory starts from.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from autograder.coursedir import CourseDir
from autograder.grade.gradebook import remove_submission, write_submission
from autograder.grade.bundle import GradingSettings, SubmissionOutcome, SubmissionTask
from autograder.grade.results import StudentResult

__all__ = ["MANIFEST", "PRISTINE_GRADEBOOK", "OutcomeWriter"]

MANIFEST = "autograder-run.json"
PRISTINE_GRADEBOOK = "gradebook-as-released.db"
LEDGER = "recorded"


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


class OutcomeWriter:
    """Writes outcomes into a run's course directory, one student at a time, idempotently."""

    def __init__(self, course: CourseDir, settings: GradingSettings) -> None:
        self.course = course
        self.settings = settings
        self.ledger = course.root / LEDGER

    def _mark(self, student: str) -> Path:
        return self.ledger / f"{student}.json"

    def entries(self) -> dict[str, dict]:
        """The students done so far: student id -> {"digest", "result", "where"}."""
        done = {}
        for path in sorted(self.ledger.glob("*.json")) if self.ledger.is_dir() else []:
            try:
                entry = json.loads(path.read_text(encoding="utf-8"))
                done[str(entry["student_id"])] = entry
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)  # unreadable: that student is not done
        return done

    def result(self, entry: dict) -> StudentResult:
        student = str(entry["student_id"])
        page = self.course.feedback(student, self.settings.assignment) / f"{Path(self.settings.notebook_name).stem}.html"
        graded = str(entry["result"].get("status", "")).startswith("graded")
        return StudentResult.from_data(entry["result"], page if graded and page.exists() else None)

    def _folders(self, student: str) -> list[Path]:
        a = self.settings.assignment
        return [self.course.autograded(student, a), self.course.feedback(student, a)]

    def hand_in(self, task: SubmissionTask) -> None:
        """Put what the student handed in where nbgrader keeps submissions (``submitted/<student>/<assignment>/``)."""
        submitted = self.course.submitted(task.student_id, self.settings.assignment)
        submitted.mkdir(parents=True, exist_ok=True)
        (submitted / self.settings.notebook_name).write_bytes(task.notebook)
        (submitted / "timestamp.txt").write_text(task.submitted_at)

    def _write_files(self, task: SubmissionTask, outcome: SubmissionOutcome) -> None:
        student, root = task.student_id, self.course.root
        for folder in self._folders(student):
            if folder.exists():
                shutil.rmtree(folder)
        self.hand_in(task)
        allowed = self._folders(student)
        for name, data in outcome.files.items():
            target = (root / name).resolve()
            inside_logs = target.parent == (root / "logs").resolve()
            if not inside_logs and not any(folder.resolve() in target.parents for folder in allowed):
                continue  # only the student's own folders and logs are written
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def record(self, task: SubmissionTask, outcome: SubmissionOutcome) -> StudentResult:
        """Make the course directory hold ``outcome`` for its student, replacing anything earlier."""
        student = task.student_id
        if outcome.student_id != student:
            raise ValueError(f"an outcome for {outcome.student_id} was handed in as {student}'s")
        mark = self._mark(student)
        mark.unlink(missing_ok=True)
        self._write_files(task, outcome)
        graded = str(outcome.result.get("status", "")).startswith("graded")
        if graded and outcome.gradebook is not None:
            write_submission(self.course.db_url, self.settings.assignment, student, outcome.gradebook)
        else:
            remove_submission(self.course.db_url, self.settings.assignment, student)
        entry = {"student_id": student, "digest": task.digest, "result": outcome.result, "where": outcome.where}
        _write_atomically(mark, json.dumps(entry, indent=1).encode("utf-8"))
        return self.result(entry)

    def forget(self, student: str) -> None:
        """Remove a student done in an earlier run (their submission changed or is gone)."""
        self._mark(student).unlink(missing_ok=True)
        remove_submission(self.course.db_url, self.settings.assignment, student)
        for folder in [self.course.submitted(student, self.settings.assignment), *self._folders(student)]:
            if folder.exists():
                shutil.rmtree(folder)
