"""The re-check: each test cell graded in a sandbox, by a process no answer cell of the learner runs in.

nbgrader runs the learner's notebook in one Python process, so an answer cell can rebind
``course.check``, patch torch or the course, or replace a kernel by a wrapper around PyTorch, and
every later test in that process would pass. So the notebook's sandboxed run
(:mod:`autograder.preprocessors.sandboxed_execute`) does not run the test cells that grade through the course at all,
and :class:`RecheckTests`, in nbgrader's autograde pass after that run and before nbgrader's ``SaveAutoGrades``,
judges them: it hands the submission to :mod:`course.grading.recheck` in a fresh sandbox (the same confinement as the
notebook's kernel, a process of its own) with only what each exercise asks for: the kernels of the kernel cells, the
Python answer cells as handed in (run there in answer processes of their own, :mod:`course.grading.answer_process`,
lesson 08's probes included), and the instructor's test cells. Each judged test cell then shows what the re-check
found: the check's own lines when it passed, its error and reason when it failed; nbgrader scores the notebook once,
as it scores any test. A grade depends only on what this process observes from outside the learner's.

Every nbgrader autograde run with the course's settings does this: ``python -m autograder grade`` and the
formgrader's Autograde button alike (:mod:`autograder.nbgrader_config`).
"""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader import utils
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Dict, Float, Integer, Unicode

from autograder.children import die_with_parent, stop_group, tracked
from autograder.preprocessors.sandboxed_execute import METADATA_KEY, grades_through_course
from autograder.sandbox.bubblewrap import SandboxSettings, hand_over, kernel_command, sandbox_uid

__all__ = ["Recheck", "RecheckTests", "RECHECK_RECORD", "RECHECK_ERROR", "JUDGED",
           "answer_cells", "build_job", "grades_through_course", "notebook_wall_limit", "run_recheck",
           "strip_recordings", "RECHECK_SECONDS_PER_TEST"]

RECHECK_SECONDS_PER_TEST = 600.0


@dataclass
class Recheck:
    """The re-check of one submission: per test cell, passed and the message; or why it did not run."""

    tests: dict[str, dict] = field(default_factory=dict)
    problem: str = ""
    seconds: float = 0.0
    kept: tuple[str, ...] = ()
    """Test cells the re-check cannot judge (see :func:`grades_through_course`): the notebook's grade stands."""

    def passed(self, test_cell: str) -> bool:
        return bool(self.tests.get(test_cell, {}).get("passed"))

    def message(self, test_cell: str) -> str:
        if test_cell in self.tests:
            return str(self.tests[test_cell].get("message", ""))
        return self.problem or "the re-check did not reach this test"

    def error(self, test_cell: str) -> str:
        """The name of what the test raised in the re-check (``CheckFailed``, ``AssertionError``, ...)."""
        name = str(self.tests.get(test_cell, {}).get("error") or RECHECK_ERROR)
        return name if name.isidentifier() else RECHECK_ERROR


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def _defined_names(source: str) -> list[str]:
    """Top-level names an instructor's Python answer cell defines (functions, classes, assignments)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def _wrapper_names(source: str) -> list[str]:
    """Top-level functions of a Triton cell that are not kernels: the wrappers a test hands to a check."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    def is_jit(node: ast.FunctionDef) -> bool:
        return any("jit" in ast.unparse(d) for d in node.decorator_list)
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not is_jit(n)]


def _learner_wrapper(source: str) -> bool:
    """A Triton file whose Python wrapper is the exercise (lesson 08): graded like Python, in the answer process."""
    from course.tracks import table
    path = str(source).partition("#")[0]
    return any(row.learner_wrapper and row.kernel_file == path for row in table.KERNEL_EXERCISES)


def answer_cells(source_nb: dict) -> list[dict]:
    """Every answer cell of the instructor's notebook: its grade id, kind and the names it defines."""
    answers = []
    for cell in source_nb.get("cells", []):
        meta = _nbgrader(cell)
        if cell.get("cell_type") != "code" or not meta.get("solution") or meta.get("grade"):
            continue
        course = cell.get("metadata", {}).get("course", {}) or {}
        text = _source(cell)
        magic = str(course.get("magic", ""))
        if magic.startswith(("%%cuda ", "%%metal ")):
            kind, names, kernel_file = magic[2:].split()[0], [magic.split()[1]], None
        elif str(course.get("source", "")).startswith("kernels/tt/"):
            # TT-Lang (lesson 09): the cell is built again, gated, where the grade is decided (course.lessons.tt_answer).
            kind, names, kernel_file = "tt", _defined_names(text), None
        elif str(course.get("source", "")).startswith("kernels/triton/") and not _learner_wrapper(course["source"]):
            # ``course.source`` may name the function too (``kernels/triton/02_online_softmax.py#merge``).
            kind, names, kernel_file = "triton", _wrapper_names(text), str(course["source"]).partition("#")[0]
        else:
            kind, names, kernel_file = "python", _defined_names(text), None
        answers.append({"cell": meta["grade_id"], "kind": kind, "names": names, "kernel_file": kernel_file})
    return answers


def _recordings(graded_nb: dict, test_ids: set[str]) -> dict[str, dict]:
    """What the test cells' checks recorded (course.grading.recording), merged by exercise."""
    from course.grading.recording import MIME
    merged: dict[str, dict] = {}
    for cell in graded_nb.get("cells", []):
        if _nbgrader(cell).get("grade_id") not in test_ids:
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if isinstance(output, dict) else {}
            if MIME not in data:
                continue
            try:
                bundle = json.loads(data[MIME]) if isinstance(data[MIME], str) else data[MIME]
                merged.setdefault(str(bundle["exercise"]), {}).update(dict(bundle["calls"]))
            except (ValueError, KeyError, TypeError):
                continue  # a malformed recording answers nothing
    return merged


# What a cell shows when the notebook's run never finished it: the time limit, or its kernel killed or crashed
# (autograder.preprocessors.sandboxed_execute). The re-check does not run such a cell again.
_NEVER_FINISHED = ("CellTimeoutError", "KernelCrash", "DeadKernelError", "KeyboardInterrupt")


def _ended(cell: dict | None) -> bool:
    outputs = cell.get("outputs", []) if isinstance(cell, dict) else []
    return any(isinstance(o, dict) and o.get("output_type") == "error" and o.get("ename") in _NEVER_FINISHED
               for o in outputs)


def build_job(source_nb: dict, graded_nb: dict) -> dict:
    """The re-check's input: instructor setup and tests, the learner's answer cells, the recordings.

    Every test that grades through the course is judged; ``kept`` lists those that do not (the notebook's grade
    stands)."""
    by_id = {_nbgrader(c).get("grade_id"): c for c in graded_nb.get("cells", []) if _nbgrader(c).get("grade_id")}
    setup, tests, kept = [], [], []
    for cell in source_nb.get("cells", []):
        meta = _nbgrader(cell)
        if cell.get("cell_type") != "code":
            continue
        if meta.get("grade") and not meta.get("solution"):
            if not grades_through_course(_source(cell)):
                kept.append(meta["grade_id"])
            else:
                tests.append({"cell": meta["grade_id"], "source": _source(cell)})
        elif meta.get("locked") and not meta.get("solution") and not meta.get("grade"):
            setup.append(_source(cell))
    answers = []
    for answer in answer_cells(source_nb):
        handed_in = by_id.get(answer["cell"])
        answers.append(answer | {"source": _source(handed_in) if handed_in is not None else None,
                                 "ended": _ended(handed_in)})
    return {"setup": setup, "answers": answers, "tests": tests, "kept": kept,
            "recordings": _recordings(graded_nb, {t["cell"] for t in tests})}


def strip_recordings(notebook: dict) -> dict:
    """The notebook without the recordings' outputs (data for the re-check, nothing a learner reads)."""
    from course.grading.recording import MIME
    for cell in notebook.get("cells", []):
        outputs = cell.get("outputs")
        if isinstance(outputs, list):
            cell["outputs"] = [o for o in outputs if not (isinstance(o, dict) and MIME in o.get("data", {}))]
    return notebook


def run_recheck(job: dict, scratch: Path, settings: SandboxSettings, kernels_view: Path | None,
                time_limit: float, per_test: float = RECHECK_SECONDS_PER_TEST) -> Recheck:
    """Run the re-check (``python -m course recheck``, :mod:`course.grading.recheck`) on ``job`` in the sandbox (or
    unconfined when ``settings.isolate`` is off)."""
    if not job.get("tests"):  # nothing to judge: no sandbox to start
        return Recheck(kept=tuple(job.get("kept", ())))
    result = _run(job, Path(scratch), settings, kernels_view, time_limit, per_test)
    result.kept = tuple(job.get("kept", ()))
    return result


def _run(job: dict, scratch: Path, settings: SandboxSettings, kernels_view: Path | None, time_limit: float,
         per_test: float) -> Recheck:
    started = time.monotonic()
    if scratch.exists():
        shutil.rmtree(scratch)
    workdir, outdir = scratch / "work", scratch / "out"
    workdir.mkdir(parents=True)
    outdir.mkdir()
    # The job (the hidden tests among it) goes in through a pipe, never as a file: the learner's answer process
    # runs in the same sandbox, and the working folder stays empty. The re-check reads it to the end before any
    # answer runs, and what a pipe held is gone once read.
    result = outdir / "result.json"
    argv = [sys.executable, "-m", "course", "recheck", "-", str(result), f"{per_test:g}"]
    if settings.isolate:
        hand_over(outdir, sandbox_uid(workdir))
        argv = kernel_command(argv, settings, workdir, outdir, kernels_view)
    log = scratch / "recheck.log"
    try:
        with open(log, "w") as sink:
            # A session of its own: on a timeout the whole sandbox (and any compiler it started) goes.
            # It dies with this process (kernel_command arms the death signal; unconfined, die_with_parent).
            proc = subprocess.Popen(argv if settings.isolate else die_with_parent(argv, name="recheck"), cwd=workdir,
                                    stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                                    start_new_session=True)
            _hand_in(proc, json.dumps(job).encode())
            with tracked(proc):
                try:
                    proc.wait(timeout=time_limit)
                except subprocess.TimeoutExpired:
                    stop_group(proc)
                    return Recheck(problem=f"the re-check ran past {time_limit:g} s and was stopped",
                                   seconds=time.monotonic() - started)
                finally:
                    if proc.poll() is None:  # leaving on an exception (an interrupt): nothing stays behind
                        stop_group(proc)
    except OSError as exc:
        return Recheck(problem=f"the re-check could not start ({exc})", seconds=time.monotonic() - started)
    if not result.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        return Recheck(problem="the re-check stopped before it finished"
                               + (f" ({' / '.join(tail)})" if tail else f" (exit status {proc.returncode})"),
                       seconds=time.monotonic() - started)
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
    except ValueError:
        return Recheck(problem="the re-check wrote an unreadable result", seconds=time.monotonic() - started)
    return Recheck(tests=dict(data.get("tests", {})), seconds=time.monotonic() - started)


def _hand_in(proc: subprocess.Popen, data: bytes) -> None:
    """Write ``data`` to ``proc``'s stdin from a thread of its own (a job larger than a pipe holds blocks until it
    is read), then close it. A re-check that ends before reading it all says so in its result."""
    def feed() -> None:
        try:
            proc.stdin.write(data)
        except OSError:
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
    threading.Thread(target=feed, name="recheck-job", daemon=True).start()


# ---------------------------------------------------------------------------------------------
# The preprocessor: the re-check in nbgrader's autograde pass
# ---------------------------------------------------------------------------------------------

RECHECK_RECORD = "recheck"
"""Where the re-check's findings go: ``notebook.metadata[METADATA_KEY][RECHECK_RECORD]`` (beside the sandboxed run's
record, :data:`autograder.preprocessors.sandboxed_execute.METADATA_KEY`): ``changes`` (a line per test cell it
failed), ``seconds``, ``kept`` (test cells it cannot judge) and ``problem`` (why it could not run, if it could not)."""

RECHECK_ERROR = "RecheckFailed"
"""The error name of a judged test cell's output when the re-check gives no other (it could not run, or the test
raised something nameless)."""

JUDGED = "failed when the grader checked it"
"""What every judged test cell that failed says, before the check's own reason."""


def notebook_wall_limit(cell_timeout: float, code_cells: int) -> float:
    """Seconds a notebook of ``code_cells`` code cells may take in all: each cell its limit, plus a start.

    The notebook's run and the re-check each get this much; an autograde command, which does both, twice it."""
    return (cell_timeout + 30) * (code_cells + 1) + 120.0


class RecheckTests(NbGraderPreprocessor):
    """Judge every test cell that grades through the course, in a sandbox where no answer cell runs.

    The notebook's run left each such cell an error saying it awaits the re-check; here it gets what the re-check
    found: the check's own lines when it passed, or an error with the reason when it failed, so nbgrader's
    ``SaveAutoGrades`` scores it as any test. A re-check that cannot run fails closed: every test cell it should have
    judged gets the error, with the reason. It reads the instructor's notebook (hidden tests included)
    from the course directory's ``source/<assignment>/``, never from the submission.
    """

    sandbox = Dict(help="SandboxSettings as a dict; isolate=False runs the re-check unconfined").tag(config=True)
    kernels_view = Unicode("", help="kernel sources without solutions, shown where course reads kernels/; "
                                     "{assignment} stands for the assignment graded").tag(config=True)
    cell_timeout = Integer(120, help="the notebook's limit per cell, seconds: sizes the re-check's limit").tag(config=True)
    time_limit = Float(0.0, help="seconds the whole re-check may take; 0: notebook_wall_limit(cell_timeout, "
                                 "code cells)").tag(config=True)
    per_test = Float(RECHECK_SECONDS_PER_TEST, help="seconds one test cell may take in the re-check").tag(config=True)
    log_dir = Unicode("", help="folder that receives recheck-<student>.log").tag(config=True)

    def _source_notebook(self, info: dict) -> Path:
        # The autograde converter's course directory when there is one (its parent is the exporter, whose parent is
        # the converter); else the one the configuration describes.
        coursedir = getattr(getattr(self.parent, "parent", None), "coursedir", None)
        if not isinstance(coursedir, CourseDirectory):
            coursedir = CourseDirectory(config=self.config)
        folder = coursedir.format_path(coursedir.source_directory, ".", info["assignment"])
        return Path(folder) / f"{info['notebook']}.ipynb"

    def _limit(self, nb: NotebookNode) -> float:
        if self.time_limit > 0:
            return self.time_limit
        return notebook_wall_limit(self.cell_timeout, sum(c.get("cell_type") == "code" for c in nb.cells))

    def _recheck(self, nb: NotebookNode, info: dict) -> tuple[dict, Recheck]:
        """(the job, what the re-check found): the recordings leave the notebook once the job holds them."""
        path = self._source_notebook(info)
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            # Fail closed: the notebook's own test cells (nbgrader restored the instructor's) earn nothing.
            job = build_job(nb, nb)
            strip_recordings(nb)
            # The reason reaches the student's feedback: the course directory's layout, not this machine's paths.
            shown = f"source/{info['assignment']}/{path.name}"
            return job, Recheck(problem=f"the grader could not read the instructor's notebook {shown} "
                                        f"({type(exc).__name__})", kept=tuple(job["kept"]))
        job = build_job(source, nb)
        strip_recordings(nb)
        view = self.kernels_view.replace("{assignment}", str(info["assignment"]))  # as SandboxedKernelManager's
        kernels = Path(view) if view and Path(view).is_dir() else None
        scratch = Path(tempfile.mkdtemp(prefix="recheck-"))
        try:
            return job, run_recheck(job, scratch, SandboxSettings(**self.sandbox), kernels, self._limit(nb),
                                    self.per_test)
        finally:
            log = scratch / "recheck.log"
            if self.log_dir and log.is_file():
                Path(self.log_dir).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log, Path(self.log_dir) / f"recheck-{info['student']}.log")
            shutil.rmtree(scratch, ignore_errors=True)

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        job, recheck = self._recheck(nb, info)
        judged = {test["cell"] for test in job["tests"]}
        changes = []
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id not in judged or not utils.is_grade(cell):
                continue
            cell.execution_count = None
            if recheck.passed(grade_id):
                shown = recheck.message(grade_id)
                cell.outputs = [new_output("stream", name="stdout", text=shown + "\n")] if shown else []
                continue
            reason, ename = recheck.message(grade_id), recheck.error(grade_id)
            cell.outputs = [new_output("error", ename=ename, evalue=(
                f"this test {JUDGED}, in a fresh process where no answer cell ran: {reason}"),
                traceback=[f"{ename}: this test {JUDGED}: {reason}"])]
            points = float(cell.metadata["nbgrader"].get("points", 0) or 0)
            changes.append(f"{grade_id}: {JUDGED}, 0 of {points:g} points: {reason}")
        record = nb.metadata.setdefault(METADATA_KEY, {})
        record[RECHECK_RECORD] = {"changes": changes, "seconds": recheck.seconds, "kept": list(recheck.kept),
                                  "problem": recheck.problem}
        return nb, resources
