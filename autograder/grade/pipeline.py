"""Autograde a batch of submissions with nbgrader and write one CSV row per student.

The pipeline, in a fresh nbgrader course directory ``<workdir>/nbgrader``:

1. copy ``solutions/<assignment>`` in as the source and run ``generate_assignment`` (fills the gradebook);
2. find one notebook per student (:mod:`autograder.grade.submissions`), refuse the ones that cannot be
   graded with a sentence saying why, and import the rest as ``submitted/<student>/<assignment>/``;
3. run ``nbgrader autograde`` once per student, in its own process, ``jobs`` at a time. Each
   notebook's kernel runs in the sandbox (:mod:`autograder.sandbox.bubblewrap`); a kernel that crashes or
   hangs costs only the cells it breaks (:mod:`autograder.preprocessors.sandboxed_execute`);
4. re-check every test cell in a sandbox of its own where no answer cell of the student runs
   (:mod:`autograder.grade.recheck`): its result is the grade, and the gradebook is corrected where
   the notebook's run said otherwise;
5. run ``generate_feedback`` without the hidden tests (each page says what the re-check changed and
   why), read the scores from the gradebook, and write ``<workdir>/grades.csv`` with the tier each
   student was graded on, the crashes, the re-check's notes, and the time each took.
"""
from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from autograder import SOLUTIONS_DIR
from autograder.coursedir import COURSE_ID, CommandResult, CourseDir, error_summary
from autograder.grade.recheck import Recheck, build_job, run_recheck, strip_recordings
from autograder.grade.report import write_csv
from autograder.sandbox.bubblewrap import SandboxSettings, SandboxUnavailable, kernels_folder, require_sandbox, \
    write_kernels_without_solutions
from autograder.grade.submissions import Submission, SubmissionsError, collect, exercise_ids

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
    tier: str = ""  # the execution tier the notebook was graded on
    crashes: list[str] = field(default_factory=list)  # "kernel crashed (signal 11: ...) in cell mul", ...
    wall_seconds: float | None = None  # time nbgrader and the re-check took for this student
    recheck: list[str] = field(default_factory=list)  # test cells whose grade the re-check changed, and why
    recheck_seconds: float | None = None
    not_rechecked: list[str] = field(default_factory=list)  # test cells the re-check cannot judge: grade as run


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


@dataclass
class _Run:
    """How one student's autograde went, before the scores are read."""

    status: str
    wall_seconds: float
    tier: str = ""
    crashes: list[str] = field(default_factory=list)
    recheck: Recheck | None = None


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


def _run_record(course: CourseDir, assignment: str, student: str, notebook_name: str) -> dict:
    """What the sandboxed Execute stored in the autograded notebook (events and tier)."""
    from autograder.preprocessors.sandboxed_execute import METADATA_KEY
    try:
        notebook = json.loads((course.autograded(student, assignment) / notebook_name).read_text(encoding="utf-8"))
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


def _recheck(course: CourseDir, assignment: str, student: str, notebook_name: str, source: dict,
             sandbox: SandboxSettings, limit: float) -> Recheck:
    """Re-check one autograded student (see :mod:`autograder.grade.recheck`); the recordings leave the notebook."""
    graded_path = course.autograded(student, assignment) / notebook_name
    try:
        graded = json.loads(graded_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Recheck(problem=f"the autograded notebook could not be read ({exc})")
    job = build_job(source, graded)
    graded_path.write_text(json.dumps(strip_recordings(graded), indent=1), encoding="utf-8")
    return run_recheck(job, course.root / "recheck" / student, sandbox,
                       course.kernels_view if course.kernels_view.is_dir() else None, limit)


def _autograde(course: CourseDir, assignment: str, student: str, notebook_name: str, timeout: int,
               limit: float) -> _Run:
    """Autograde one student."""
    log_file = course.root / "logs" / f"autograde-{student}.log"
    started = time.monotonic()
    run = course.run("autograde", assignment, f"--student={student}", "--force", timeout=limit, log_file=log_file)
    if not run.ok and "database is locked" in run.log:
        # Parallel students share one SQLite gradebook; a rare write collision is worth one more try.
        run = course.run("autograde", assignment, f"--student={student}", "--force", timeout=limit, log_file=log_file)
    wall = time.monotonic() - started
    if not run.ok:
        return _Run(f"failed: {_failure_reason(run, timeout, limit)}", wall)
    record = _run_record(course, assignment, student, notebook_name)
    events = [e for e in record.get("events", []) if isinstance(e, dict)]
    status, crashes = _graded_status(events, timeout)
    return _Run(status, wall, str(record.get("tier", "")), crashes)


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


def _apply_recheck(course: CourseDir, assignment: str, student: str, notebook_stem: str, tests: list[TestCell],
                   recheck: Recheck) -> list[str]:
    """Make the gradebook hold what the re-check found; a line per test cell whose grade changed."""
    from nbgrader.api import Gradebook, MissingEntry

    changes = []
    with Gradebook(course.db_url, COURSE_ID) as gb:
        for test in tests:
            try:
                grade = gb.find_grade(test.grade_id, notebook_stem, assignment, student)
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


def _prepare_course(workdir: Path, assignment: str, source_notebook: Path, timeout: int,
                    sandbox: SandboxSettings, say: Callable[[str], None]) -> CourseDir:
    """A fresh course directory whose gradebook knows the assignment."""
    try:
        course = CourseDir.create(workdir / "nbgrader", timeout, sandbox)
    except FileExistsError as exc:
        raise GradingError(str(exc)) from None
    if kernels_folder().is_dir():
        from course.tracks.table import graded_whole
        whole = tuple(p.removeprefix("kernels/") for p in graded_whole(assignment[:2]))
        write_kernels_without_solutions(kernels_folder(), course.kernels_view, whole)
    course.add_source(assignment, source_notebook.parent)
    say(f"generating {assignment} in {course.root}")
    run = course.run("generate_assignment", assignment, "--force", log_file=course.root / "logs" / "generate_assignment.log")
    if not run.ok:
        raise GradingError(f"nbgrader could not generate {assignment}: {error_summary(run.log)}")
    return course


def _autograde_all(course: CourseDir, assignment: str, students: list[str], notebook_name: str, jobs: int,
                   timeout: int, limit: float, say: Callable[[str], None], source: dict,
                   sandbox: SandboxSettings) -> dict[str, _Run]:
    """Autograde and re-check each student in processes of their own, ``jobs`` at a time; outcome by student."""
    def grade_one(student: str) -> tuple[str, _Run]:
        outcome = _autograde(course, assignment, student, notebook_name, timeout, limit)
        if outcome.status.startswith("graded"):
            outcome.recheck = _recheck(course, assignment, student, notebook_name, source, sandbox, limit)
            outcome.wall_seconds += outcome.recheck.seconds
        say(f"{student}: {outcome.status} ({outcome.wall_seconds:.1f} s)")
        return student, outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(pool.map(grade_one, students))


NO_SANDBOX_WARNING = ("WARNING: --no-sandbox: submissions run unconfined, as your user, with no resource limits. "
                      "A submission can read the solutions and the instructor notebooks, write the gradebook, "
                      "use the network, and exhaust this machine. Grade only code you trust this way.")


def _check_sandbox(sandbox: SandboxSettings, say: Callable[[str], None]) -> None:
    if not sandbox.isolate:
        say(NO_SANDBOX_WARNING)
        return
    try:
        require_sandbox(sandbox)
    except SandboxUnavailable as exc:
        raise GradingError(str(exc)) from None


def grade_submissions(submissions: Path, assignment: str, workdir: Path, jobs: int = 1, timeout: int = 120, *,
                      solutions: Path = SOLUTIONS_DIR, csv_path: Path | None = None,
                      progress: Callable[[str], None] | None = None,
                      sandbox: SandboxSettings | None = None) -> list[StudentResult]:
    """Grade every submission in ``submissions`` (a folder of student folders, or a zip) for ``assignment``.

    ``timeout`` is the limit per notebook cell in seconds; ``jobs`` students are graded at once.
    ``sandbox`` confines each notebook's kernel (default: :class:`SandboxSettings`); grading refuses
    to run when the sandbox cannot, unless ``sandbox.isolate`` is False.
    The CSV goes to ``csv_path`` (default ``<workdir>/grades.csv``). Returns one result per row of
    the CSV, sorted by student id. Raises :class:`GradingError` only when the pipeline cannot run.
    """
    say = progress or (lambda line: None)
    sandbox = sandbox or SandboxSettings()
    workdir = Path(workdir).resolve()
    if not Path(submissions).exists():
        raise GradingError(f"{submissions} does not exist.")
    source_notebook = _assignment_notebook(Path(solutions).resolve(), assignment)
    _check_sandbox(sandbox, say)
    source = json.loads(source_notebook.read_text(encoding="utf-8"))
    tests = _test_cells(source)
    test_ids = [t.grade_id for t in tests]
    code_cells = sum(cell.get("cell_type") == "code" for cell in source.get("cells", []))
    # Per-cell limits are nbgrader's; this bounds a run that nbgrader itself cannot stop. A cell
    # can also cost a kill and a fresh kernel after its limit.
    wall_limit = (timeout + 30) * (code_cells + 1) + 120.0

    course = _prepare_course(workdir, assignment, source_notebook, timeout, sandbox, say)
    # Every CUDA/Metal exercise links the same SIMT runtime object: build it once, here, where the
    # course package is writable, instead of once per submission inside read-only sandboxes.
    from course.simt.compiler import prebuild_runtime
    prebuild_runtime()
    try:
        found = collect(Path(submissions), course.root / "unpacked", assignment, source_notebook.name,
                        exercise_ids(source))
    except SubmissionsError as exc:
        raise GradingError(str(exc)) from None

    runs: dict[str, _Run] = {}
    for submission in found:
        if submission.notebook is None:
            runs[submission.student_id] = _Run(submission.problem or "nothing to grade", 0.0)
            say(f"{submission.student_id}: {runs[submission.student_id].status}")
        else:
            _import(course, submission, assignment, source_notebook.name)
    gradable = [s.student_id for s in found if s.notebook is not None]
    runs.update(_autograde_all(course, assignment, gradable, source_notebook.name, jobs, timeout, wall_limit, say,
                               source, sandbox))

    graded = {s for s in gradable if runs[s].status.startswith("graded")}
    changes = {s: _apply_recheck(course, assignment, s, source_notebook.stem, tests, runs[s].recheck)
               for s in graded if runs[s].recheck is not None}
    if graded:
        feedback_log = course.root / "logs" / "generate_feedback.log"
        run = course.run("generate_feedback", assignment, "--force", log_file=feedback_log)
        if not run.ok:
            say(f"feedback: {error_summary(run.log)} (see {feedback_log})")

    notes = {s.student_id: s.note for s in found if s.note}
    results = []
    for student in (s.student_id for s in found):
        run = runs[student]
        if student in notes and student in graded:
            run.status += f"; {notes[student]}"
        result = StudentResult(student, 0.0, sum(t.points for t in tests), run.status, tier=run.tier,
                               crashes=run.crashes, wall_seconds=run.wall_seconds if student in gradable else None)
        if student in graded:
            result.recheck = changes.get(student, [])
            if runs[student].recheck is not None:
                result.recheck_seconds = runs[student].recheck.seconds
                result.not_rechecked = list(runs[student].recheck.kept)
            if result.recheck:
                result.status += f"; the re-check changed {len(result.recheck)} test grade{'s' * (len(result.recheck) != 1)}"
            scores = _scores(course, assignment, student, set(test_ids))
            if scores is None:
                result.status = "failed: nbgrader recorded no grades for this submission"
            else:
                result.score, result.cells = scores
            html = course.feedback(student, assignment) / f"{source_notebook.stem}.html"
            result.feedback_html = html if html.exists() else None
            if result.feedback_html and result.recheck:
                _feedback_note(html, result.recheck)
        results.append(result)
    write_csv(csv_path or workdir / "grades.csv", results, assignment, test_ids)
    return results
