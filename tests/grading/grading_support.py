"""Helpers the grading tests share: writing submissions, reading feedback, a lesson's two notebooks, and
watching that a grading run leaves no process behind."""
from __future__ import annotations

import ctypes
import html
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import nbformat
from nbgrader.preprocessors import ClearHiddenTests

from autograder import NOTEBOOKS_DIR, SOLUTIONS_DIR
from autograder.grade.pipeline import StudentResult
from autograder.preprocessors.clear_solutions import LanguageAwareClearSolutions


def put(path: Path, nb: nbformat.NotebookNode | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb))
    return path


def feedback_text(result: StudentResult) -> str:
    """The feedback page as a reader sees it: tags and syntax-highlighting spans removed."""
    assert result.feedback_html is not None and result.feedback_html.exists()
    return html.unescape(re.sub(r"<[^>]+>", "", result.feedback_html.read_text()))


def by_student(results: list[StudentResult]) -> dict[str, StudentResult]:
    return {r.student_id: r for r in results}


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What ``generate_assignment`` hands out: stubs instead of solutions, no hidden tests."""
    out, resources = LanguageAwareClearSolutions().preprocess(nbformat.reads(nbformat.writes(nb), as_version=4), {})
    out, _ = ClearHiddenTests().preprocess(out, resources)
    return out


def lesson_notebooks(assignment: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    """(instructor notebook, student notebook) for a lesson; the committed student copy when there is one."""
    source = nbformat.read(SOLUTIONS_DIR / assignment / f"{assignment}.ipynb", as_version=4)
    committed = NOTEBOOKS_DIR / assignment / f"{assignment}.ipynb"
    student = nbformat.read(committed, as_version=4) if committed.exists() else student_version(source)
    return source, student


def hidden_lines(nb: nbformat.NotebookNode) -> list[str]:
    lines, inside = [], False
    for c in nb.cells:
        for line in c.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                lines.append(line.strip())
    return lines


# ---------------------------------------------------------------------------------------------
# Nothing a grading run starts outlives it
# ---------------------------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37  # linux/prctl.h


def adopt_orphans(on: bool) -> bool:
    """Make this process the adopter of its descendants' orphans (Linux's child subreaper), or stop; whether it was one
    before, to put back afterwards: the suite's answer processes need it on for good
    (course.grading.answer_zygote.start_apart)."""
    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    return bool(was.value)


def _describe(process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except Exception:  # noqa: BLE001 (it ended meanwhile)
        return str(process.pid)


@contextmanager
def processes_left_behind(grace: float = 15.0) -> Iterator[list[str]]:
    """Yields a list that, after the block, names every process started inside it that is still alive
    ``grace`` seconds after the block ended (each is killed before the list is filled).

    While the block runs, this process adopts the orphans of everything below it (Linux's child subreaper):
    a process whose parent died (a kernel whose nbgrader was killed, a detached child of a submission)
    becomes this process's child instead of init's, so it is found here however it got loose. Processes
    that were below this one before the block (another test's server, say) are left alone, and so is the nbgrader
    fork server the session lends every batch (tests/conftest.py), though not the commands it forked."""
    import psutil

    from autograder.nbgrader_forks import lent_server_pid
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    left: list[str] = []
    adopting_before = adopt_orphans(True)
    try:
        yield left
    finally:
        try:
            deadline = time.monotonic() + grace
            while True:
                alive = []
                for process in me.children(recursive=True):
                    if process.pid in before or process.pid == lent_server_pid():  # lent to every batch, by design
                        continue
                    try:
                        if process.status() == psutil.STATUS_ZOMBIE:
                            if process.ppid() == me.pid:
                                os.waitpid(process.pid, os.WNOHANG)  # an adopted orphan that has ended
                            continue
                    except (psutil.Error, ChildProcessError):
                        continue
                    alive.append(process)
                if not alive or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            for process in alive:
                left.append(_describe(process))
                try:
                    process.kill()
                    if process.ppid() == me.pid:
                        os.waitpid(process.pid, 0)
                except (psutil.Error, ChildProcessError):
                    pass
        finally:
            adopt_orphans(adopting_before)
