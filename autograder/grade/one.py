"""Grading one submission in a scratch course directory: data in, data out.

This is the whole grading of a student, wherever it runs: in a thread of ``python -m autograder grade``
or on a Dask worker on another machine (:mod:`autograder.grade.cluster`). It needs no file of the
batch: what it needs arrives as data and what it finds leaves as data.

* :class:`ReleaseBundle` is the assignment as the client prepared it: the source notebook with its
  tests (and any other file of that assignment's folder), nbgrader's release, and the gradebook right
  after ``generate_assignment``, plus the grading settings. Never the other assignments' solutions.
* :func:`prepared_release` turns a bundle into a template course directory on this machine, once per
  process (the kernel files without their solutions are written from this machine's ``kernels/``,
  and the course's SIMT runtime object is built here, before any sandbox needs it read-only).
* :func:`grade_one` copies the template into a scratch directory, imports the submission, runs
  ``nbgrader autograde`` (the notebook's kernel in the sandbox), the re-check, ``generate_feedback``,
  reads the scores, and returns a :class:`SubmissionOutcome`: the result row, the student's gradebook
  entries, the autograded notebook, the feedback page and the logs. The scratch directory is deleted.

The client alone writes the batch's gradebook, files and CSV (:mod:`autograder.grade.record`).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.coursedir import IGNORED_FILES, KERNELS_VIEW, CommandResult, CourseDir, error_summary
from autograder.grade.gradebook import read_submission
from autograder.grade.recheck import Recheck, build_job, run_recheck, strip_recordings
from autograder.grade.results import StudentResult, TestCell, graded_test_cells
from autograder.sandbox.bubblewrap import SandboxSettings, kernels_folder, write_kernels_without_solutions

__all__ = ["TIERS", "GradingSettings", "ReleaseBundle", "PreparedRelease", "SubmissionTask", "SubmissionOutcome",
           "prepared_release", "discard_release", "grade_one", "tier_environment", "nbgrader_in_process"]

# Where a batch is graded. "cpu": in the sandbox, which binds no GPU device (any worker will do);
# "gpu": on a worker that advertises the GPU resource, unconfined (see docs/grading.md).
TIERS = ("cpu", "gpu")
GPU_RESOURCE = "GPU"

# A log longer than this travels back as its last part only.
MAX_LOG_BYTES = 4 * 2**20



def tier_environment(tier: str) -> dict[str, str]:
    """Variables for nbgrader's processes: an unsandboxed kernel inherits them (the sandbox sets its own)."""
    return {"COURSE_TIER": "cpu" if tier == "cpu" else "auto"}


@dataclass(frozen=True)
class GradingSettings:
    """How every submission of a batch is graded."""

    assignment: str
    notebook_name: str
    timeout: int               # per notebook cell, seconds
    wall_limit: float          # per nbgrader command, seconds
    sandbox: SandboxSettings
    tier: str = "cpu"

    def as_data(self) -> dict:
        return {"assignment": self.assignment, "notebook_name": self.notebook_name, "timeout": self.timeout,
                "wall_limit": self.wall_limit, "sandbox": self.sandbox.as_dict(), "tier": self.tier}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _ignored(relative: Path) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in IGNORED_FILES)


def _files_under(root: Path, folder: Path) -> dict[str, bytes]:
    """Regular files below ``folder`` (no links, nothing nbgrader ignores), by path relative to ``root``."""
    files = {}
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        relative = path.relative_to(folder)
        if path.is_file() and not path.is_symlink() and not _ignored(relative):
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


@dataclass(frozen=True)
class ReleaseBundle:
    """The assignment as the workers need it, as data: file path in the course directory -> bytes."""

    settings: GradingSettings
    files: dict[str, bytes]
    digest: str

    @classmethod
    def pack(cls, course: CourseDir, pristine_gradebook: Path, settings: GradingSettings) -> "ReleaseBundle":
        """From a course directory where ``generate_assignment`` ran; the gradebook as it was just after."""
        files = {"gradebook.db": Path(pristine_gradebook).read_bytes()}
        files |= _files_under(course.root, course.source(settings.assignment))
        files |= _files_under(course.root, course.release(settings.assignment))
        digest = _digest(json.dumps(settings.as_data(), sort_keys=True).encode(),
                         *(name.encode() + b"\0" + files[name] for name in sorted(files)))
        return cls(settings, files, digest)

    @property
    def source_notebook(self) -> dict:
        return json.loads(self.files[f"source/{self.settings.assignment}/{self.settings.notebook_name}"])


@dataclass
class PreparedRelease:
    """A bundle written out on this machine: a template course directory each submission starts from, and the
    fork server its nbgrader commands start from (:mod:`autograder.nbgrader_forks`)."""

    root: Path
    settings: GradingSettings
    source: dict
    tests: list[TestCell]
    _forks: Any = field(default=None, repr=False)
    _forks_tried: bool = field(default=False, repr=False)
    _forks_lock: Any = field(default_factory=threading.Lock, repr=False)

    def forks(self) -> Any:
        """The fork server, started on first use; None where it cannot start (commands then start on their own)."""
        with self._forks_lock:
            if not self._forks_tried:
                self._forks_tried = True
                from autograder.nbgrader_forks import ForkServerUnavailable, NbgraderForks
                try:
                    self._forks = NbgraderForks()
                except ForkServerUnavailable:
                    self._forks = None
            return self._forks

    def close(self) -> None:
        """End the fork server, if it started."""
        with self._forks_lock:
            self._forks_tried = True
            if self._forks is not None:
                self._forks.close()
                self._forks = None

    def instantiate(self, root: Path) -> CourseDir:
        """A fresh course directory at ``root`` that knows the assignment and shares the template's kernel view."""
        s = self.settings
        course = CourseDir.create(root, s.timeout, s.sandbox)
        shutil.copyfile(self.root / "gradebook.db", course.root / "gradebook.db")
        for folder in ("source", "release"):
            if (self.root / folder).is_dir():
                shutil.copytree(self.root / folder, course.root / folder)
        if (self.root / KERNELS_VIEW).is_dir():
            os.symlink(self.root / KERNELS_VIEW, course.kernels_view)
        return course


_prepared: dict[tuple[str, str], PreparedRelease] = {}
_prepare_lock = threading.Lock()
_runtime_built = False


def _build_runtime_once() -> None:
    """The SIMT runtime object every CUDA/Metal exercise links, built once per process where the course
    package is writable, instead of once per submission inside read-only sandboxes."""
    global _runtime_built
    if not _runtime_built:
        from course.simt.compiler import prebuild_runtime
        prebuild_runtime()
        _runtime_built = True


def prepared_release(bundle: ReleaseBundle, base: Path) -> PreparedRelease:
    """The template course directory for ``bundle`` under ``base``, written once per process (thread-safe)."""
    base = Path(base).resolve()
    key = (bundle.digest, str(base))
    with _prepare_lock:
        if key in _prepared and _prepared[key].root.is_dir():
            return _prepared[key]
        root = base / f"release-{bundle.digest[:16]}"
        if root.exists():
            shutil.rmtree(root)
        building = base / f".release-{bundle.digest[:16]}-{os.getpid()}"
        if building.exists():
            shutil.rmtree(building)
        for name, data in bundle.files.items():
            target = (building / name).resolve()
            if building.resolve() not in target.parents:
                raise ValueError(f"the release bundle names a file outside its folder: {name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if kernels_folder().is_dir():
            from course.tracks import table
            whole = tuple(p.removeprefix("kernels/") for p in table.graded_whole(bundle.settings.assignment[:2]))
            write_kernels_without_solutions(kernels_folder(), building / KERNELS_VIEW, whole)
        os.replace(building, root)
        _build_runtime_once()
        source = bundle.source_notebook
        _prepared[key] = PreparedRelease(root, bundle.settings, source, graded_test_cells(source))
        return _prepared[key]


def discard_release(bundle: ReleaseBundle, base: Path) -> None:
    """Forget and delete the template course directory of ``bundle`` under ``base``."""
    base = Path(base).resolve()
    with _prepare_lock:
        release = _prepared.pop((bundle.digest, str(base)), None)
        if release is not None:
            release.close()
        shutil.rmtree(base / f"release-{bundle.digest[:16]}", ignore_errors=True)


@dataclass(frozen=True)
class SubmissionTask:
    """One student's submission, as data."""

    student_id: str
    notebook: bytes
    submitted_at: str           # "YYYY-mm-dd HH:MM:SS UTC", what nbgrader reads from timestamp.txt
    note: str = ""              # what the TA should know (e.g. notebooks set aside); appended to the status

    @property
    def digest(self) -> str:
        """Identifies what was handed in: a re-run grades a student again when this changes."""
        return _digest(self.notebook, self.submitted_at.encode(), self.note.encode())


@dataclass
class SubmissionOutcome:
    """Everything the grading of one submission produced, as data."""

    student_id: str
    submission_digest: str
    result: dict                                   # StudentResult.as_data()
    gradebook: dict | None                         # gradebook.read_submission(); None when not graded
    files: dict[str, bytes] = field(default_factory=dict)  # course-relative: autograded/, feedback/, logs/
    messages: list[str] = field(default_factory=list)      # lines for the TA (e.g. feedback could not be made)
    where: str = ""                                # which machine / worker graded it


# ---------------------------------------------------------------------------------------------
# The steps, in a scratch course directory
# ---------------------------------------------------------------------------------------------

def _import(course: CourseDir, task: SubmissionTask, settings: GradingSettings) -> None:
    """Place the submission where ``nbgrader autograde`` looks for it."""
    folder = course.submitted(task.student_id, settings.assignment)
    folder.mkdir(parents=True)
    (folder / settings.notebook_name).write_bytes(task.notebook)
    (folder / "timestamp.txt").write_text(task.submitted_at)


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
    """What the sandboxed Execute stored in the autograded notebook (events and tier)."""
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


def _autograde(course: CourseDir, settings: GradingSettings, student: str, forks: Any = None
               ) -> tuple[str, str, list[str]]:
    """(status, tier, crashes) of ``nbgrader autograde`` for the one student of this course directory."""
    run = course.run("autograde", settings.assignment, f"--student={student}", "--force", timeout=settings.wall_limit,
                     log_file=course.root / "logs" / f"autograde-{student}.log",
                     environment=tier_environment(settings.tier), forks=forks)
    if not run.ok:
        return f"failed: {_failure_reason(run, settings.timeout, settings.wall_limit)}", "", []
    record = _run_record(course, settings, student)
    events = [e for e in record.get("events", []) if isinstance(e, dict)]
    status, crashes = _graded_status(events, settings.timeout)
    return status, str(record.get("tier", "")), crashes


def _recheck(course: CourseDir, release: PreparedRelease, student: str) -> Recheck:
    """Re-check the autograded notebook (see :mod:`autograder.grade.recheck`); the recordings leave the notebook."""
    s = release.settings
    graded_path = course.autograded(student, s.assignment) / s.notebook_name
    try:
        graded = json.loads(graded_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Recheck(problem=f"the autograded notebook could not be read ({exc})")
    job = build_job(release.source, graded)
    graded_path.write_text(json.dumps(strip_recordings(graded), indent=1), encoding="utf-8")
    return run_recheck(job, course.root / "recheck" / student, s.sandbox,
                       course.kernels_view if course.kernels_view.is_dir() else None, s.wall_limit)


def _apply_recheck(course: CourseDir, settings: GradingSettings, student: str, tests: list[TestCell],
                   recheck: Recheck) -> list[str]:
    """Make the gradebook hold what the re-check found; a line per test cell whose grade changed."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.coursedir import COURSE_ID
    notebook_stem = Path(settings.notebook_name).stem
    changes = []
    with Gradebook(course.db_url, COURSE_ID) as gb:
        for test in tests:
            try:
                grade = gb.find_grade(test.grade_id, notebook_stem, settings.assignment, student)
            except MissingEntry:
                continue
            if test.grade_id in recheck.kept or test.grade_id in recheck.failed_before:
                continue
            earned = test.points if recheck.passed(test.grade_id) else 0.0
            before = float(grade.score or 0.0)
            if earned >= before - 1e-9:
                continue  # the re-check only takes points away
            grade.manual_score = earned
            changes.append(f"{test.grade_id}: passed in the notebook's run but failed when re-checked, {earned:g} of "
                           f"{test.points:g} points: {recheck.message(test.grade_id)}")
        gb.db.commit()
    return changes


def _feedback_note(page: Path, changes: list[str]) -> None:
    """Put the re-check's changes at the top of a feedback page."""
    import html
    try:
        text = page.read_text(encoding="utf-8")
    except OSError:
        return
    items = "".join(f"<li><pre style='white-space: pre-wrap'>{html.escape(line)}</pre></li>" for line in changes)
    note = ("<div id='course-recheck' style='border: 2px solid #b00; padding: 0.5em 1em; margin: 1em'>"
            "<h2>Re-checked by the grader</h2><p>Each exercise was graded again in a fresh process that ran only "
            "your kernels and the answers your checks recorded, with the course's own checks. These grades "
            "changed:</p><ul>" + items + "</ul></div>")
    at = text.find("<body")
    at = text.find(">", at) + 1 if at >= 0 else 0
    page.write_text(text[:at] + note + text[at:], encoding="utf-8")


_nbgrader_lock = threading.Lock()


def nbgrader_in_process(root: Path, settings: GradingSettings, method: str, *args: str,
                        log_file: Path | None = None) -> str | None:
    """An nbgrader command that runs no student code (``generate_assignment``, ``generate_feedback``), run
    through nbgrader's API in this process: None when it worked, else a sentence saying why not.

    In a process of its own such a command costs seconds of start-up; here, a fraction of a second once
    nbgrader is imported. The settings are the course directory's (``course_config``), as its
    ``nbgrader_config.py`` gives them to the command line. nbgrader changes the working directory while
    it converts, so one command runs at a time; it runs the ``alembic`` program that sits beside this
    Python when it creates a gradebook, so that folder goes on PATH.
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.nbgrader_config import course_config
    here = str(Path(sys.executable).parent)
    config = course_config(root, settings.timeout, settings.sandbox)
    with _nbgrader_lock:
        if here not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PATH")])])
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        outcome = getattr(api, method)(*args, force=True)
    log = "\n".join(filter(None, [outcome.get("log", ""), outcome.get("error", "")]))
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(log, encoding="utf-8")
    return None if outcome.get("success") else error_summary(log)


def _scores(course: CourseDir, settings: GradingSettings, student: str, test_ids: set[str]
            ) -> tuple[float, dict[str, float]] | None:
    """(total, points per test cell) from the gradebook; None when nbgrader recorded no submission."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.coursedir import COURSE_ID
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


def _products(course: CourseDir, settings: GradingSettings, student: str) -> dict[str, bytes]:
    """The files the client keeps: the autograded folder, the feedback folder and the logs."""
    files = _files_under(course.root, course.autograded(student, settings.assignment))
    files |= _files_under(course.root, course.feedback(student, settings.assignment))
    logs = course.root / "logs"
    for path in sorted(logs.iterdir()) if logs.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            files[f"logs/{path.name}"] = _log_text(path)
    recheck_log = course.root / "recheck" / student / "recheck.log"
    if recheck_log.is_file():
        files[f"logs/recheck-{student}.log"] = _log_text(recheck_log)
    return files


def grade_one(task: SubmissionTask, release: PreparedRelease, scratch_parent: Path, where: str = "") -> SubmissionOutcome:
    """Grade one submission in a scratch course directory under ``scratch_parent`` (deleted afterwards)."""
    started = time.monotonic()
    s, student = release.settings, task.student_id
    Path(scratch_parent).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{student[:40]}-", dir=scratch_parent))
    try:
        course = release.instantiate(scratch / "course")
        _import(course, task, s)
        status, tier, crashes = _autograde(course, s, student, release.forks())
        result = StudentResult(student, 0.0, sum(t.points for t in release.tests), status, tier=tier, crashes=crashes)
        gradebook, messages = None, []
        if status.startswith("graded"):
            recheck = _recheck(course, release, student)
            changes = _apply_recheck(course, s, student, release.tests, recheck)
            problem = nbgrader_in_process(course.root, s, "generate_feedback", s.assignment, student,
                                          log_file=course.root / "logs" / f"generate_feedback-{student}.log")
            if problem:
                messages.append(f"{student}: feedback: {problem} (see logs/generate_feedback-{student}.log)")
            if task.note:
                result.status += f"; {task.note}"
            result.recheck, result.recheck_seconds, result.not_rechecked = changes, recheck.seconds, list(recheck.kept)
            if changes:
                result.status += f"; the re-check changed {len(changes)} test grade{'s' * (len(changes) != 1)}"
            scores = _scores(course, s, student, {t.grade_id for t in release.tests})
            if scores is None:
                result.status = "failed: nbgrader recorded no grades for this submission"
            else:
                result.score, result.cells = scores
                gradebook = read_submission(course.db_url, s.assignment, student)
            page = course.feedback(student, s.assignment) / f"{Path(s.notebook_name).stem}.html"
            if changes and page.exists():
                _feedback_note(page, changes)
        result.wall_seconds = time.monotonic() - started
        return SubmissionOutcome(student, task.digest, result.as_data(), gradebook, _products(course, s, student),
                                 messages, where)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
