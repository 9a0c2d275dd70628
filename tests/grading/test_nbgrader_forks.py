"""nbgrader commands forked from one server (autograder.nbgrader_forks): they run as a process of their own would,
and neither a command nor the server outlives what it was started for.

A course directory whose ``nbgrader_config.py`` sleeps stands in for a command that hangs (a notebook that
hangs its kernel hangs its nbgrader command the same way); nothing here runs a notebook.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.children import stop_group
from autograder.coursedir import CourseDir
from autograder.nbgrader_forks import NbgraderForks
from grading_support import processes_left_behind


@pytest.fixture
def forks():
    with processes_left_behind() as left:
        server = NbgraderForks()
        try:
            yield server
        finally:
            server.close()
    assert not left, f"processes outlived the fork server: {left}"


def _hanging_course(root: Path) -> CourseDir:
    course = CourseDir.create(root)
    (course.root / "nbgrader_config.py").write_text("import time\ntime.sleep(600)\n")
    return course


def test_a_forked_command_runs_as_its_own_process_would_and_stops_at_its_limit(forks: NbgraderForks,
                                                                             tmp_path: Path) -> None:
    course = CourseDir.create(tmp_path / "course")
    forked = course.run("--version", forks=forks, log_file=tmp_path / "forked.log")
    alone = course.run("--version", log_file=tmp_path / "alone.log")
    assert (forked.returncode, forked.timed_out) == (alone.returncode, False) == (0, False), (forked, alone)
    assert "nbgrader version" in forked.log and forked.log == alone.log
    assert (tmp_path / "forked.log").read_text() == forked.log
    # It reads the configuration of the folder it runs in, and fails as nbgrader fails.
    missing = course.run("autograde", "no_such_assignment", forks=forks)
    assert missing.returncode != 0 and "no_such_assignment" in missing.log, missing.log
    hanging = _hanging_course(tmp_path / "hanging").run("autograde", "lesson", timeout=1, forks=forks)
    assert hanging.timed_out and not hanging.ok, hanging


def test_a_stopped_command_and_a_closed_server_leave_nothing_running(forks: NbgraderForks, tmp_path: Path) -> None:
    course = _hanging_course(tmp_path / "course")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = forks.start(["autograde", "lesson"], course.root, env, tmp_path / "first.log")
    second = forks.start(["autograde", "lesson"], course.root, env, tmp_path / "second.log")
    with pytest.raises(subprocess.TimeoutExpired):
        first.wait(timeout=0.5)
    stop_group(first)
    assert first.returncode == -9
    forks.close()  # the second command is still running: the server kills it as it ends
    assert second.wait(timeout=30) == -9
    assert not forks.alive


def test_the_server_ends_when_its_owner_dies(tmp_path: Path) -> None:
    """A grader killed outright (no close) takes its fork server and the commands it forked with it."""
    course = _hanging_course(tmp_path / "course")
    owner = ("import os, sys, time\nfrom autograder.nbgrader_forks import NbgraderForks\n"
             "forks = NbgraderForks()\n"
             f"forks.start(['autograde', 'lesson'], {str(course.root)!r}, dict(os.environ), {str(tmp_path / 'log')!r})\n"
             "print('started', flush=True)\ntime.sleep(600)\n")
    with processes_left_behind() as left:
        grader = subprocess.Popen([sys.executable, "-c", owner], cwd=Path(__file__).resolve().parents[2],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert grader.stdout.readline().strip() == "started"
        finally:
            grader.kill()
            grader.wait()
    assert not left, f"processes outlived the grader that started them: {left}"


def test_a_lent_server_serves_every_assignment_and_each_stops_only_its_own_commands(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """The suite lends its batches one server (tests/conftest.py): a prepared assignment borrows it, and closing
    the assignment stops the commands it started, not another's, and not the server; in a changed environment
    (which the server's imports could have read) an assignment starts a server of its own."""
    from autograder.grade.bundle import PreparedRelease
    from autograder.nbgrader_forks import BorrowedForks, borrow, lent_server_pid

    first, second = (PreparedRelease(tmp_path / name, None, {}, []) for name in ("first", "second"))
    course = _hanging_course(tmp_path / "course")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with processes_left_behind() as left:
        try:
            mine, theirs = first.forks(), second.forks()
            assert isinstance(mine, BorrowedForks) and isinstance(theirs, BorrowedForks)
            assert mine.server is theirs.server and mine.server.pid == lent_server_pid()
            hung = mine.start(["autograde", "lesson"], course.root, env, tmp_path / "mine.log")
            other = theirs.start(["autograde", "lesson"], course.root, env, tmp_path / "theirs.log")
            first.close()
            assert hung.wait(timeout=30) == -9 and other.poll() is None and theirs.alive and not mine.alive
        finally:
            second.close()
        assert other.wait(timeout=30) == -9 and mine.server.alive
        monkeypatch.setenv("COURSE_TEST_SOMETHING_ELSE", "1")
        assert borrow() is None
    assert not left, f"processes outlived the assignments that started them: {left}"
