"""Autograde a batch of submissions with nbgrader and write one CSV row per student.

The pipeline, around a course directory ``<workdir>/nbgrader`` that this process alone writes:

1. copy ``solutions/<assignment>`` in as the source and run ``generate_assignment`` (fills the gradebook),
   unless an earlier run with the same assignment and settings left one to resume (see step 5);
2. find one notebook per student (:mod:`autograder.grade.submissions`) and refuse the ones that cannot
   be graded with a sentence saying why;
3. grade each remaining student with :func:`autograder.grade.one.grade_one`, in a scratch course
   directory of its own, ``jobs`` at a time in threads of this process, or on the workers of a Dask
   cluster (:mod:`autograder.grade.cluster`); either way the same function does the same thing:
   ``nbgrader autograde`` with the notebook's kernel in the sandbox (:mod:`autograder.sandbox.bubblewrap`;
   a kernel that crashes or hangs costs only the cells it breaks) and, in the same pass, the re-check of
   every test cell in a sandbox where no answer cell runs (:mod:`autograder.preprocessors.recheck_tests`),
   before nbgrader scores the notebook; ``generate_feedback`` without the hidden tests, and the scores;
   everything comes back as data;
4. record each student as its grading completes (:mod:`autograder.grade.record`): the gradebook entry,
   the autograded notebook, the feedback page and the logs, then the mark that the student is done;
5. write ``<workdir>/grades.csv`` with the tier each student was graded on, the crashes, the re-check's
   notes, and the time each took. A re-run (after Ctrl-C, say) grades only the students not done yet,
   or whose submission changed; ``fresh=True`` (``--fresh``) grades everyone again.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from autograder import SOLUTIONS_DIR
from autograder import children
from autograder.coursedir import IGNORED_FILES, CourseDir
from autograder.grade.bundle import TIERS, GradingSettings, ReleaseBundle, SubmissionTask, discard_release, \
    prepared_release
from autograder.grade.one import grade_one
from autograder.grade.record import MANIFEST, PRISTINE_GRADEBOOK, OutcomeWriter
from autograder.grade.stages import nbgrader_in_process
from autograder.preprocessors.recheck_tests import notebook_wall_limit
from autograder.grade.report import INTERRUPTED, NOT_GRADED, write_csv
from autograder.grade.results import GradingError, StudentResult, TestCell, graded_test_cells
from autograder.grade.submissions import Submission, SubmissionsError, collect, exercise_ids
from autograder.sandbox.bubblewrap import SandboxSettings, SandboxUnavailable, kernels_folder, require_sandbox, \
    write_kernels_without_solutions

__all__ = ["StudentResult", "GradingError", "TestCell", "grade_submissions", "NO_SANDBOX_WARNING", "INTERRUPTED"]

NO_SANDBOX_WARNING = ("WARNING: --no-sandbox: submissions run unconfined, as your user, with no resource limits. "
                      "A submission can read the solutions and the instructor notebooks, write the gradebook, "
                      "use the network, and exhaust this machine. Grade only code you trust this way.")

GPU_NEEDS_NO_SANDBOX = ("grading on the GPU tier needs --no-sandbox: the sandbox binds no GPU device "
                        "(see 'GPUs' in docs/grading.md).")

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


def _check_sandbox(sandbox: SandboxSettings, say: Callable[[str], None]) -> None:
    if not sandbox.isolate:
        say(NO_SANDBOX_WARNING)
        return
    try:
        require_sandbox(sandbox)
    except SandboxUnavailable as exc:
        raise GradingError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# The course directory of the run: made fresh, or resumed
# ---------------------------------------------------------------------------------------------

def _manifest(source_folder: Path, settings: GradingSettings) -> dict:
    """What a run grades with; a re-run with the same resumes the earlier one."""
    import fnmatch
    h = hashlib.sha256()
    for path in sorted(source_folder.rglob("*")):
        relative = path.relative_to(source_folder)
        if path.is_file() and not any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in IGNORED_FILES):
            h.update(relative.as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return {"settings": settings.as_data(), "source": h.hexdigest()}


def _prepare_course(workdir: Path, assignment: str, source_notebook: Path, settings: GradingSettings,
                    say: Callable[[str], None]) -> CourseDir:
    """A fresh course directory whose gradebook knows the assignment."""
    try:
        course = CourseDir.create(workdir / "nbgrader", settings.timeout, settings.sandbox)
    except FileExistsError as exc:
        raise GradingError(str(exc)) from None
    if kernels_folder().is_dir():  # for a TA who runs nbgrader by hand in this directory
        from course.tracks import table
        whole = tuple(p.removeprefix("kernels/") for p in table.graded_whole(assignment[:2]))
        write_kernels_without_solutions(kernels_folder(), course.kernels_view, whole)
    course.add_source(assignment, source_notebook.parent)
    say(f"generating {assignment} in {course.root}")
    problem = nbgrader_in_process(course.root, settings, "generate_assignment", assignment,
                                  log_file=course.root / "logs" / "generate_assignment.log")
    if problem:
        raise GradingError(f"nbgrader could not generate {assignment}: {problem}")
    return course


def _open_course(workdir: Path, source_notebook: Path, settings: GradingSettings, fresh: bool,
                 say: Callable[[str], None]) -> tuple[CourseDir, bool]:
    """(course directory, whether an earlier run is resumed)."""
    root = workdir / "nbgrader"
    wanted = _manifest(source_notebook.parent, settings)
    try:
        earlier = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = None
    if earlier is not None and not fresh:
        if earlier == wanted and (root / PRISTINE_GRADEBOOK).is_file() and (root / "gradebook.db").is_file():
            say(f"resuming the grading in {root} (--fresh grades everyone again)")
            return CourseDir(root), True
        say(f"the assignment or the grading settings changed since the run in {root}: grading everyone again")
    course = _prepare_course(workdir, settings.assignment, source_notebook, settings, say)
    shutil.copyfile(course.root / "gradebook.db", course.root / PRISTINE_GRADEBOOK)
    (course.root / MANIFEST).write_text(json.dumps(wanted, indent=1), encoding="utf-8")
    return course, False


# ---------------------------------------------------------------------------------------------
# Where the grading runs: threads of this process, or a Dask cluster (autograder.grade.cluster)
# ---------------------------------------------------------------------------------------------

class LocalRunner:
    """``jobs`` students at a time, each in a thread of this process running :func:`grade_one`."""

    label = "this machine"

    def __init__(self, jobs: int, say: Callable[[str], None], watch: Callable[[dict], None] | None = None) -> None:
        self.jobs = max(1, jobs)
        self.say = say
        self.watch = watch
        self.base: Path | None = None
        self.release: Any = None
        self.bundle: Any = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None

    def connect(self, settings: GradingSettings) -> None:
        children.reopen()
        _check_sandbox(settings.sandbox, self.say)

    def start(self, bundle: ReleaseBundle) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="autograder-"))
        self.bundle = bundle
        self.release = prepared_release(bundle, self.base)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)

    def _grade(self, task: SubmissionTask) -> Any:
        if self.watch is not None:
            self.watch({"event": "started", "student": task.student_id, "worker": self.label, "pid": os.getpid()})
        assert self.base is not None
        return grade_one(task, self.release, self.base / "scratch")

    def submit(self, task: SubmissionTask) -> concurrent.futures.Future:
        assert self.pool is not None
        return self.pool.submit(self._grade, task)

    def as_completed(self, futures: Iterable[concurrent.futures.Future]) -> Iterator[concurrent.futures.Future]:
        return concurrent.futures.as_completed(list(futures))

    def failure(self, exc: BaseException) -> str:
        return f"grading raised {type(exc).__name__}: {exc}"

    def forget(self, future: concurrent.futures.Future) -> None:
        pass

    def abort(self) -> None:
        """Stop every nbgrader run and re-check in flight; start no more."""
        children.stop_all()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        children.reopen()
        if self.base is not None:
            discard_release(self.bundle, self.base)
            shutil.rmtree(self.base, ignore_errors=True)


def _runner(cluster: str | None, jobs: int, say: Callable[[str], None], watch: Callable[[dict], None] | None) -> Any:
    if cluster is None:
        return LocalRunner(jobs, say, watch)
    from autograder.grade.clusterspec import NO_DASK, parse_cluster
    parse_cluster(cluster)  # a bad address is named even where Dask is missing
    try:
        from autograder.grade.cluster import ClusterRunner
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("dask", "distributed"):
            raise GradingError(NO_DASK) from None
        raise
    return ClusterRunner(cluster, say, watch)


# ---------------------------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------------------------

def _task(submission: Submission) -> SubmissionTask:
    assert submission.notebook is not None
    when = submission.submitted_at or datetime.fromtimestamp(submission.notebook.stat().st_mtime, timezone.utc)
    return SubmissionTask(submission.student_id, submission.notebook.read_bytes(),
                          when.strftime("%Y-%m-%d %H:%M:%S UTC"), submission.note or "")


def _grade_pending(runner: Any, writer: OutcomeWriter, pending: list[SubmissionTask], results: dict[str, StudentResult],
                   max_score: float, say: Callable[[str], None]) -> None:
    """Send ``pending`` to the runner and record each student as its grading completes."""
    futures = {runner.submit(task): task for task in pending}
    for future in runner.as_completed(list(futures)):
        task = futures.pop(future)
        try:
            outcome = future.result()
        except Exception as exc:  # noqa: BLE001 (one student's grading failing must not stop the batch)
            runner.forget(future)
            results[task.student_id] = StudentResult(task.student_id, 0.0, max_score,
                                                     f"{NOT_GRADED}{runner.failure(exc)}; a re-run tries again")
            say(f"{task.student_id}: {results[task.student_id].status}")
            continue
        runner.forget(future)  # a cluster would otherwise keep the result, and compute it again if its worker died
        for line in outcome.messages:
            say(line)
        result = writer.record(task, outcome)
        results[task.student_id] = result
        where = f" on {outcome.where}" if outcome.where else ""
        say(f"{task.student_id}: {result.status} ({result.wall_seconds or 0:.1f} s{where})")


def grade_submissions(submissions: Path, assignment: str, workdir: Path, jobs: int = 1, timeout: int = 120, *,
                      solutions: Path = SOLUTIONS_DIR, csv_path: Path | None = None,
                      progress: Callable[[str], None] | None = None,
                      sandbox: SandboxSettings | None = None, cluster: str | None = None, tier: str = "cpu",
                      fresh: bool = False, watch: Callable[[dict], None] | None = None) -> list[StudentResult]:
    """Grade every submission in ``submissions`` (a folder of student folders, or a zip) for ``assignment``.

    ``timeout`` is the limit per notebook cell in seconds; ``jobs`` students are graded at once, or,
    with ``cluster`` (a Dask scheduler address, or ``local:N``), as many as the cluster's workers take.
    ``tier`` is ``cpu`` (in the sandbox, any worker) or ``gpu`` (a worker with the ``GPU`` resource;
    needs ``sandbox.isolate`` False). ``sandbox`` confines each notebook's kernel (default:
    :class:`SandboxSettings`); grading refuses to run when the sandbox cannot, unless ``sandbox.isolate``
    is False. Students done in an earlier run into the same ``workdir`` with the same assignment and
    settings are kept unless their submission changed or ``fresh`` is set. ``watch`` receives
    ``{"event": "started", "student": ..., "worker": ..., "pid": ...}`` as each grading starts.

    The CSV goes to ``csv_path`` (default ``<workdir>/grades.csv``). Returns one result per row of
    the CSV, sorted by student id. Raises :class:`GradingError` only when the pipeline cannot run, and
    KeyboardInterrupt after recording what finished (and writing the CSV) when interrupted.
    """
    say = progress or (lambda line: None)
    sandbox = sandbox or SandboxSettings()
    workdir = Path(workdir).resolve()
    csv_path = Path(csv_path).resolve() if csv_path else workdir / "grades.csv"
    if not Path(submissions).exists():
        raise GradingError(f"{submissions} does not exist.")
    source_notebook = _assignment_notebook(Path(solutions).resolve(), assignment)
    if tier not in TIERS:
        raise GradingError(f"no tier '{tier}' (tiers: {', '.join(TIERS)}).")
    if tier == "gpu" and sandbox.isolate:
        raise GradingError(GPU_NEEDS_NO_SANDBOX)
    source = json.loads(source_notebook.read_text(encoding="utf-8"))
    tests = graded_test_cells(source)
    test_ids = [t.grade_id for t in tests]
    max_score = sum(t.points for t in tests)
    code_cells = sum(cell.get("cell_type") == "code" for cell in source.get("cells", []))
    # Per-cell limits are nbgrader's; this bounds a run that nbgrader itself cannot stop. A cell
    # can also cost a kill and a fresh kernel after its limit.
    wall_limit = notebook_wall_limit(timeout, code_cells)
    settings = GradingSettings(assignment, source_notebook.name, timeout, wall_limit, sandbox, tier)

    runner = _runner(cluster, jobs, say, watch)
    if cluster is not None and not sandbox.isolate:
        say(NO_SANDBOX_WARNING)
    try:
        runner.connect(settings)
        course, resumed = _open_course(workdir, source_notebook, settings, fresh, say)
        writer = OutcomeWriter(course, settings)
        staging = course.root / "unpacked"
        if staging.exists():
            shutil.rmtree(staging)
        try:
            found = collect(Path(submissions), staging, assignment, source_notebook.name, exercise_ids(source))
        except SubmissionsError as exc:
            raise GradingError(str(exc)) from None

        results: dict[str, StudentResult] = {}
        tasks = {s.student_id: _task(s) for s in found if s.notebook is not None}
        done = writer.entries()
        for student, entry in done.items():
            if student not in tasks or entry.get("digest") != tasks[student].digest:
                writer.forget(student)  # handed in something else since, or nothing gradable
        for submission in found:
            student = submission.student_id
            if submission.notebook is None:
                results[student] = StudentResult(student, 0.0, max_score, submission.problem or "nothing to grade")
                say(f"{student}: {results[student].status}")
            elif student in done and done[student].get("digest") == tasks[student].digest:
                results[student] = writer.result(done[student])
                say(f"{student}: {results[student].status} (recorded by an earlier run)")
        pending = [task for student, task in tasks.items() if student not in results]
        for task in pending:
            writer.hand_in(task)
        if resumed:
            kept = len(tasks) - len(pending)
            say(f"{kept} student{'s' * (kept != 1)} already graded, {len(pending)} to grade")
        try:
            if pending:
                runner.start(ReleaseBundle.pack(course, course.root / PRISTINE_GRADEBOOK, settings))
                _grade_pending(runner, writer, pending, results, max_score, say)
        except KeyboardInterrupt:
            runner.abort()
            for task in pending:
                results.setdefault(task.student_id, StudentResult(task.student_id, 0.0, max_score, INTERRUPTED))
            write_csv(csv_path, [results[s.student_id] for s in found], assignment, test_ids)
            left = sum(r.status == INTERRUPTED for r in results.values())
            say(f"interrupted: {len(tasks) - left} of {len(tasks)} students are graded and recorded in {course.root}; "
                f"run the same command again to grade the other {left}")
            raise
    finally:
        runner.close()

    ordered = [results[s.student_id] for s in found]
    write_csv(csv_path, ordered, assignment, test_ids)
    return ordered
