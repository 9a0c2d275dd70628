"""The grader's second pass: every test cell checked again, in a process no answer cell ever ran in.

    python -m course recheck - RESULT.json [SECONDS_PER_TEST] < JOB.json

The grader (``autograder.grade.recheck``) runs this in a sandbox of its own after nbgrader has run the
learner's notebook, and the grade of each test cell is what this pass finds. The job comes on stdin (a pipe
from the grader), never as a file: the learner's answer process runs in the same sandbox, and a file there, or
a descriptor this process kept, would show it the hidden tests. Once read, stdin is /dev/null. The job holds:

- ``setup``: the instructor's setup cells (imports), run first;
- ``answers``: each answer cell of the lesson, as the learner handed it in, with what it answers:
  - ``python`` cells never run in this process. They run, in order, in an answer process of their own
    (:mod:`course.grading.answer_process`), and their names become :class:`course.grading.answer_process.LiveAnswer`
    stand-ins that call them there, so each check judges what the learner's function computes now, on the
    arguments (drawn ones included) the check makes now. Checks that need more than return values (lesson
    08's gradients and training run) read the cell first (:func:`course.lessons.capstone.refused_reach`), then have
    the course's probe run around the function in that process, and judge the data it returns. What the
    notebook's checks recorded (``recordings``) decides nothing here;
  - ``triton`` cells give only their ``@triton.jit`` functions, which Triton's real compiler must accept
    before the course's own wrapper launches them (:mod:`course.tracks.triton_answer`);
  - ``cuda`` / ``metal`` cells give only their kernel text, compiled for the CPU runtime (which refuses
    host calls) and launched by the course's own launcher;
  - cells of a kind a lesson adds are built from their text by the function that lesson declares for the kind
    (its ``CELL_BUILDERS``, a :data:`course.grading.exercise.CellBuilder` each, which the entry point in
    course.__main__ reads with ``course.lessons.load`` and hands to :func:`main` and :func:`run_job`): ``tt`` cells
    (TT-Lang, lesson 09) must pass :func:`course.lessons.tt_answer.gate` and are run with a few safe built-ins and
    nothing else (:func:`course.lessons.tt_answer.build`);
- ``tests``: the instructor's test cells, hidden tests included, run as written.

``RESULT.json`` maps each test cell to ``{"passed": bool, "message": str}``, and a failed one also to the name of
what it raised (``"error"``).

The test cells reach the course through the setup's own ``import course``, as in the notebook.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

from course.errors import CheckFailed, CourseError
from course.grading import exercise as grading_run
from course.grading import answer_zygote
from course.grading.answer_process import (AnswerProcess, LiveAnswer, protect_this_process, serve,
                                           stop_every_answer_process)
from course.grading.answers import FailedCell, NotFinished
from course.grading.exercise import CellBuilder, ProbeSource
from course.simt import RawModule
from course.simt.magic import CompileFailed
from course.tracks import table
from course.tracks.triton_answer import LearnerKernels, compile_server, gate, graded_function

__all__ = ["run_job", "main"]

_LANGUAGE_SUFFIX = {"cuda": ".cu", "metal": ".metal"}


class _TestTimeout(Exception):
    pass


def _kernel_module(answer: dict) -> Any:
    """The learner's %%cuda / %%metal cell compiled for the CPU runtime, or the placeholder a failed compile leaves."""
    name, language = answer["names"][0], answer["kind"]
    source = answer.get("source")
    if source is None:
        return _missing(answer)
    first, _, body = source.partition("\n")
    if not first.lstrip().startswith("%%"):
        body, line = source, 1
    else:
        line = 2
    try:
        return RawModule(code=body, language=language, name=f"{name}{_LANGUAGE_SUFFIX[language]}", first_line=line,
                         compile_now="checked")
    except CourseError as exc:
        return CompileFailed(name, language, error=str(exc))


def _missing(answer: dict) -> Any:
    return FailedCell(answer["names"][0], f"the answer cell {answer['cell']!r} is not in the notebook handed in")


def _triton_functions(answer: dict) -> dict[str, Any]:
    """The course's wrappers around the learner's kernels, by the names the instructor's cell defines."""
    bound: dict[str, Any] = {}
    rows = {row.entry[0]: row for row in table.exercises(track="triton") if row.kernel_file == answer.get("kernel_file")}
    for name in answer["names"]:
        if answer.get("source") is None:
            bound[name] = _missing(answer | {"names": [name]})
        elif name not in rows:
            bound[name] = FailedCell(name, "no exercise grades this function")
        else:
            try:
                learner = LearnerKernels(answer["source"], f"your cell {answer['cell']!r}")
                bound[name] = graded_function(rows[name], learner)
                # Before any test runs a kernel: on the interpreter its body is Python that could reach this process.
                gate(rows[name], bound[name], learner)
            except CheckFailed as exc:
                bound[name] = FailedCell(name, str(exc))
            except Exception as exc:  # noqa: BLE001 - e.g. the course's kernel file missing: this answer fails alone
                bound[name] = FailedCell(name, f"the course could not build its wrapper ({type(exc).__name__}: {exc})")
    return bound


def _built_functions(answer: dict, build: CellBuilder, setup: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """The names a cell of a lesson's own kind (a TT-Lang cell) defines, built again from its text by the lesson's
    builder ``build`` (behind its gate), or the reason it failed."""
    if answer.get("source") is None:
        return {name: _missing(answer | {"names": [name]}) for name in answer["names"]}
    try:
        built = build(answer["source"], f"your cell {answer['cell']!r}", "this exercise", setup, earlier)
    except CheckFailed as exc:
        return {name: FailedCell(name, str(exc).replace("this exercise: ", "", 1)) for name in answer["names"]}
    return {name: built[name] if name in built else FailedCell(name, f"your cell {answer['cell']!r} does not define {name}")
            for name in answer["names"]}


def _namespace(job: dict, cell_builders: Mapping[str, CellBuilder]) -> dict[str, Any]:
    if any(answer["kind"] == "triton" for answer in job.get("answers", [])):
        compile_server().warm()  # its start-up (a Python and a Triton import) overlaps the setup cells
    namespace: dict[str, Any] = {"__name__": "__recheck__"}
    for cell in job.get("setup", []):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell, "<setup>", "exec"), namespace)
    python = [answer for answer in job.get("answers", []) if answer["kind"] == "python"]
    answers = AnswerProcess(job.get("setup", []), [{"cell": a["cell"], "source": a.get("source"), "names": a["names"],
                                                    "ended": bool(a.get("ended"))} for a in python])
    namespace["__answer_process__"] = answers
    built_names: dict[str, dict[str, Any]] = {}  # kind → what earlier cells of it defined: a later cell calls it
    for answer in job.get("answers", []):
        kind = answer["kind"]
        if kind == "python":
            for name in answer["names"]:
                # with its text: the model-function policy and lesson 08's reading of the cell use it (course.exercises)
                namespace[name] = LiveAnswer(name, answers, answer.get("source"))
        elif kind == "triton":
            namespace.update(_triton_functions(answer))
        elif kind in cell_builders:  # a lesson's own kind of cell (lesson 09's TT-Lang)
            earlier = built_names.setdefault(kind, {})
            built = _built_functions(answer, cell_builders[kind], namespace, earlier)
            earlier.update(built)
            namespace.update(built)
        elif kind in _LANGUAGE_SUFFIX:
            namespace[answer["names"][0]] = _kernel_module(answer)
        else:  # a kind no lesson handed a builder for: its names fail, the other answers are checked
            namespace.update({name: FailedCell(name, f"the course has no way to build a {kind!r} answer cell")
                              for name in answer["names"]})
    return namespace


def _message(exc: BaseException) -> str:
    if isinstance(exc, (CheckFailed, NotFinished, AssertionError)) and str(exc):
        return str(exc)
    frames = traceback.format_exception_only(type(exc), exc)
    return "".join(frames).strip()


def run_job(job: dict, cell_builders: Mapping[str, CellBuilder],
            per_test_seconds: float = 600.0) -> dict[str, dict[str, Any]]:
    """Run every test of ``job``; a test cell's result is whether it raised. ``cell_builders``: how to build the
    answer cells of each kind a lesson adds (every lesson's ``CELL_BUILDERS``, ``course.lessons.load().cell_builders``)."""
    def on_alarm(signum, frame):
        raise _TestTimeout()

    # Both are put back when the job ends, so a run inside another process (a test) leaves it as it was.
    stop_before = grading_run.STOP_AT_FIRST_PASS
    grading_run.STOP_AT_FIRST_PASS = True
    # The grader's environment says "autograde", which tells the notebook's checks to record and skip the
    # compiler; here is where the compiler runs.
    execution_before = os.environ.pop("NBGRADER_EXECUTION", None)
    results: dict[str, dict[str, Any]] = {}
    namespace = _namespace(job, cell_builders)
    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        for test in job.get("tests", []):
            started = time.monotonic()
            shown = io.StringIO()
            signal.setitimer(signal.ITIMER_REAL, per_test_seconds)
            try:
                with contextlib.redirect_stdout(shown):
                    exec(compile(test["source"], f"<test {test['cell']}>", "exec"), dict(namespace))
                outcome = {"passed": True, "message": shown.getvalue().strip()}
            except _TestTimeout:
                outcome = {"passed": False, "message": f"the re-check of this test ran past {per_test_seconds:g} s",
                           "error": "TimeoutError"}
            except BaseException as exc:  # noqa: BLE001 - any failure of a test cell fails that test only
                if isinstance(exc, KeyboardInterrupt):
                    raise
                outcome = {"passed": False, "message": _message(exc), "error": type(exc).__name__}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            outcome["seconds"] = round(time.monotonic() - started, 2)
            results[test["cell"]] = outcome
    finally:
        signal.signal(signal.SIGALRM, previous)
        namespace["__answer_process__"].close()
        grading_run.STOP_AT_FIRST_PASS = stop_before
        if execution_before is not None:
            os.environ["NBGRADER_EXECUTION"] = execution_before
    return results


def _forget_stdin() -> None:
    """Put /dev/null where the job came in, so no descriptor of this process leads back to it."""
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.close(quiet)
    sys.stdin = open(os.devnull, encoding="utf-8")


_USAGE = ("usage: python -m course recheck - RESULT.json [SECONDS_PER_TEST] < JOB.json (the job comes on stdin: a file "
          "would be readable by the learner's answer cells)")


def main(args: list[str], cell_builders: Mapping[str, CellBuilder], probe_source: ProbeSource | None = None) -> int:
    """The re-check's process (``python -m course recheck``, whose entry point hands it ``cell_builders``, as
    :func:`run_job` takes them, and the lessons' probes for the answer processes, which are then forked from a copy
    of this process made before it reads the job, :mod:`course.grading.answer_zygote`): ``args`` are what follows
    ``recheck`` on its command line."""
    if len(args) not in (2, 3) or args[0] != "-":
        print(_USAGE, file=sys.stderr)
        return 2
    # The learner's Python answers run in children of this process: none may reach it, or outlive the result.
    protect_this_process()
    if probe_source is not None:
        # Before the job is read: the answer processes are forked from this copy, which never holds any of it.
        answer_zygote.start(lambda: serve(probe_source))
    job = json.loads(sys.stdin.buffer.read())
    _forget_stdin()  # before any answer process starts: nothing of the job stays open to be read again
    started = time.monotonic()
    results = run_job(job, cell_builders, float(args[2]) if len(args) == 3 else 600.0)
    stop_every_answer_process()
    payload = {"tests": results, "seconds": round(time.monotonic() - started, 2)}
    target = Path(args[1])
    staged = target.with_name(f".{target.name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    # A fresh file, never a link left at that name: what the result says goes only where the grader reads it.
    with os.fdopen(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644),
                   "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload))
    os.replace(staged, target)  # whatever stood at the result's path is replaced, never written through
    return 0


if __name__ == "__main__":  # not the entry point: that one reads the lessons, which sit above this module
    print("The re-check runs as `python -m course recheck`, which hands it every lesson's kinds of answer cell.\n"
          + _USAGE, file=sys.stderr)
    raise SystemExit(2)
