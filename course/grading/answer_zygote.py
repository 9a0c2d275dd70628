"""Answer processes forked from a copy of the re-check made before it read its job, instead of a fresh Python each.

An answer process (:mod:`course.grading.answer_process`) used to be ``python -m course answer-process``: a Python that
imports torch and the course before it runs one setup cell, about two seconds of CPU, paid once per answer process and
several times per graded notebook. The re-check has imported all of that already when it starts, and holds nothing of
the submission yet: its job (the hidden tests, the answers) comes on stdin, and it has not read it. So
:func:`start` forks it there, once, into a *zygote*, and every answer process of that re-check is forked from the
zygote:

- the zygote and every answer process hold only what the re-check held before it read the job: the course's code
  (which every learner has in their lab) and nothing of the job. The zygote puts ``/dev/null`` where the job's pipe
  was, and an answer process keeps no descriptor but the two pipes it answers on;
- each answer process is forked twice (the middle process exits at once), so the re-check, Linux's child subreaper
  (:func:`course.grading.answer_process.protect_this_process`), adopts it: it is the re-check's child, as a process the
  re-check started itself would be, so the re-check waits for it, limits its address space and kills it as before;
- it starts a session of its own and dies with the re-check, as before.

The re-check's tests run it in the pytest process, which holds far more than a learner's lab would, so it is no
process to fork answer processes from. :func:`start_apart` makes the zygote a fresh Python of its own instead
(``python -m course answer-zygote``): it imports the course as the re-check does and holds nothing else, and the
process that started it adopts its answer processes. Without either, :func:`current` is None and each answer process
starts as a fresh Python.

The Triton compile server (:class:`course.tracks.compile_server.CompileServer`) is forked from the zygote as well
(:meth:`Zygote.compile_server`), with Triton's interpreter off: a fresh one imports Python, torch and the course
again before its first compile, once per re-check that gates a Triton answer (about a second of that re-check's
CPU on the 2-core test VM, docs/grading.md). The zygote has not imported Triton, so the server imports it as a
fresh Python would, for the GPU's compiler. It is adopted like an answer process and, like one, holds nothing of the
job.
"""
from __future__ import annotations

import ctypes
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

from course.paths import PACKAGE_ROOT
from course.tracks import compile_server

__all__ = ["Forked", "Zygote", "current", "start", "start_apart", "serve_apart"]

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36  # linux/prctl.h
_ADOPTION_SECONDS = 10.0  # how long a new answer process waits to become the re-check's child
_ZYGOTE: "Zygote | None" = None


class Forked:
    """An answer process forked from the zygote and adopted by this process, with the parts of
    :class:`subprocess.Popen` that :class:`course.grading.answer_process.AnswerProcess` uses."""

    def __init__(self, pid: int, stdin: io.BufferedWriter, stdout: io.BufferedReader):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # already reaped (stop_every_answer_process reaps every child it kills)
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                import subprocess
                raise subprocess.TimeoutExpired(f"answer process {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """The forked copy of the re-check that answer processes are forked from (:func:`start`)."""

    def __init__(self, pid: int, control: socket.socket, process: subprocess.Popen | None = None):
        self.pid, self.control, self.process = pid, control, process

    def close(self) -> None:
        """End the zygote (it ends when its control socket closes); answer processes it forked are not touched."""
        self.control.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def spawn(self, env: dict[str, str], role: str = "answer") -> Forked:
        """A new answer process (``role`` "answer"), or a compile server ("compile"), with ``env`` added to its
        environment, adopted by this process."""
        if self.process is not None:  # started apart: this process adopts its answers only while a subreaper
            _adopt_orphans()
        to_child, from_parent = os.pipe()
        from_child, to_parent = os.pipe()
        try:
            socket.send_fds(self.control, [json.dumps({"env": env, "role": role}).encode()], [to_child, to_parent])
            ready, _, _ = select.select([self.control], [], [], 30.0)
            reply = self.control.recv(64) if ready else b""
        finally:
            os.close(to_child)
            os.close(to_parent)
        pid = int(reply) if reply.strip().isdigit() else 0
        if pid <= 0:
            os.close(from_parent)
            os.close(from_child)
            raise OSError(f"the zygote did not start an {role} process")
        return Forked(pid, os.fdopen(from_parent, "wb"), os.fdopen(from_child, "rb"))

    def compile_server(self, env: dict[str, str]) -> Forked:
        """A compile server (:func:`course.tracks.compile_server.serve`) with ``env`` added to its environment."""
        return self.spawn(env, role="compile")


def current() -> Zygote | None:
    """The zygote of this process, when :func:`start` made one."""
    return _ZYGOTE if _ZYGOTE is not None and _ZYGOTE.pid and _alive(_ZYGOTE.pid) else None


def _alive(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def start(serve: Callable[[], int]) -> Zygote | None:
    """Fork the zygote now; each answer process forked from it runs ``serve`` (its requests on stdin, replies on
    stdout) and exits with what it returns. Call it before reading anything a learner may not see. Linux only."""
    global _ZYGOTE
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the zygote
        try:
            ours.close()
            _zygote(theirs, parent, serve)
        finally:
            os._exit(0)
    theirs.close()
    _ZYGOTE = Zygote(pid, ours)
    compile_server.start_servers_with(_fork_compile_server)
    return _ZYGOTE


def start_apart() -> Zygote | None:
    """Start the zygote as a fresh Python of its own (``python -m course answer-zygote FD``), for a process that is no
    copy to fork answer processes from (the test suite's, which runs re-checks in-process). This process becomes a
    child subreaper, so that it adopts each answer process as the re-check does. Linux only."""
    global _ZYGOTE
    if not sys.platform.startswith("linux"):
        return None
    _adopt_orphans()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = subprocess.Popen([sys.executable, "-m", "course", "answer-zygote", str(theirs.fileno())],
                                   pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    finally:
        theirs.close()
    _ZYGOTE = Zygote(process.pid, ours, process)
    compile_server.start_servers_with(_fork_compile_server)
    return _ZYGOTE


def _fork_compile_server(env: dict[str, str]) -> Forked | None:
    """A compile server forked from this process's zygote; None without a zygote, or when it did not fork one."""
    zygote = current()
    if zygote is None:
        return None
    try:
        return zygote.compile_server(env)
    except OSError:
        return None


def _adopt_orphans() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def serve_apart(fd: int, serve: Callable[[], int]) -> int:
    """The zygote :func:`start_apart` started (its control socket is ``fd``): forks answer processes until that
    socket closes."""
    _zygote(socket.socket(fileno=fd), os.getppid(), serve)
    return 0


def _die_with(parent: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _zygote(control: socket.socket, parent: int, serve: Callable[[], int]) -> None:
    _die_with(parent)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)  # the job's pipe: nothing forked from here may read it
    os.close(quiet)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return  # the re-check closed its end
        pid = b"0"
        request = json.loads(message)
        if len(fds) == 2 and request.get("role") in ("answer", "compile"):
            chosen = serve if request["role"] == "answer" else _serve_compiles
            pid = _fork_adopted(fds, request["env"], parent, chosen)
        for fd in fds:
            os.close(fd)
        control.send(pid)


def _fork_adopted(fds: list[int], env: dict[str, str], parent: int, serve: Callable[[], int]) -> bytes:
    """Fork an answer process through a middle process that exits at once, so that ``parent`` adopts it; its pid."""
    read_pid, write_pid = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            child = os.fork()
            if child == 0:
                _answer(fds, env, parent, serve)
            os.write(write_pid, str(child).encode())
        finally:
            os._exit(0)
    os.close(write_pid)
    os.waitpid(middle, 0)  # once it is reaped, its child has been handed to the re-check
    pid = os.read(read_pid, 32)
    os.close(read_pid)
    return pid or b"0"


def _serve_compiles() -> int:
    """The compile server's loop, where a compile server started as a program runs it."""
    os.chdir(PACKAGE_ROOT)
    return compile_server.serve()


def _answer(fds: list[int], env: dict[str, str], parent: int, serve: Callable[[], int]) -> None:
    """The answer process (or compile server): requests on ``fds[0]``, replies on ``fds[1]``; never returns."""
    code = 1
    try:
        os.setsid()
        # Dumpable again, as a freshly started program is: the re-check's own protection is for the re-check.
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)
        os.closerange(3, 1 << 16)  # the control socket, the pipes' copies: only stdin and stdout lead anywhere
        os.environ.update(env)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)))
        deadline = time.monotonic() + _ADOPTION_SECONDS
        while os.getppid() != parent and time.monotonic() < deadline:
            time.sleep(0.001)
        code = serve()
    except BaseException:  # noqa: BLE001 - nothing of the zygote's loop may run on in this process
        code = 1
    finally:
        os._exit(code)
