"""nbgrader commands forked from one process that imported nbgrader once, instead of a new Python each time.

Starting ``python -m nbgrader`` costs about a second of CPU before it does anything (Python, then nbgrader,
nbconvert, SQLAlchemy and Jupyter's libraries), and a batch starts one per student. :class:`NbgraderForks`
starts a fork server (``python -m autograder.nbgrader_command --serve``) that imports them once; each command
is then a fork of it, which starts in a few milliseconds. A forked command is what the grader's own child
would be: a session of its own (so :func:`autograder.children.stop_group` kills it, and finds its kernels),
killed when the server dies, its output in a log file; :class:`ForkedCommand` is waited on and stopped like
a ``subprocess.Popen``.

The server lives as long as the :class:`NbgraderForks` that started it (one per prepared assignment, closed
with it), and no longer than the process that owns it: when the socket between them closes, it kills every
command still running and exits. Where it cannot start, commands start as their own processes instead.

A process that grades many batches (the test suite's workers) may keep one server for all of them
(:func:`lend_one_server`): each prepared assignment then borrows it (:func:`borrow`) instead of paying the
server's imports again (about 4 s of CPU on the course's 2-core machine), and closing the assignment stops the
commands it started, as closing a server of its own would, while the server goes on. It is lent only while the
process's environment is the one lending began with.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from autograder import REPO_ROOT

__all__ = ["ForkedCommand", "NbgraderForks", "ForkServerUnavailable", "BorrowedForks", "lend_one_server", "borrow",
           "lent_server_pid"]

START_SECONDS = 120.0  # the server's imports, on a loaded machine


class ForkServerUnavailable(Exception):
    """The fork server could not start, or has ended; commands start as processes of their own."""


class ForkedCommand:
    """A running nbgrader command forked by the server: ``pid``, ``returncode``, ``poll``, ``wait``, ``kill``
    as on a ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"nbgrader (pid {self.pid})", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _end(self, returncode: int) -> None:
        self.returncode = returncode
        self._ended.set()


class NbgraderForks:
    """A fork server for nbgrader commands (see the module's docstring); thread-safe."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        try:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "autograder.nbgrader_command", "--serve", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise ForkServerUnavailable(f"the fork server did not start ({exc})") from None
        finally:
            theirs.close()
        self._channel = ours
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._starting: dict[int, tuple[threading.Event, list]] = {}
        self._running: dict[int, ForkedCommand] = {}
        self._closed = False
        ours.settimeout(START_SECONDS)
        try:
            said = json.loads(ours.recv(1 << 16) or b"{}")
        except (OSError, ValueError):
            said = {}
        if not said.get("ready"):
            self.close()
            raise ForkServerUnavailable(said.get("why", "the fork server did not answer"))
        ours.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="nbgrader-forks", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self._closed and self._server.poll() is None

    @property
    def pid(self) -> int:
        return self._server.pid

    def start(self, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> ForkedCommand:
        """``nbgrader ARGS`` in ``cwd`` with exactly the environment ``env``, its output into the file ``log``."""
        started = threading.Event()
        slot: list = []
        with self._lock:
            if self._closed:
                raise ForkServerUnavailable("the fork server has ended")
            request = next(self._ids)
            self._starting[request] = (started, slot)
            try:
                self._channel.send(json.dumps({"id": request, "args": list(args), "cwd": str(cwd), "env": env,
                                               "log": str(log)}).encode())
            except OSError as exc:
                self._starting.pop(request, None)
                raise ForkServerUnavailable(f"the fork server has ended ({exc})") from None
        if not started.wait(START_SECONDS) or not slot:
            with self._lock:
                self._starting.pop(request, None)
            raise ForkServerUnavailable("the fork server did not start the command")
        return slot[0]

    def _read(self) -> None:
        try:
            while True:
                message = self._channel.recv(1 << 16)
                if not message:
                    break
                said = json.loads(message)
                with self._lock:
                    if "started" in said:
                        command = ForkedCommand(int(said["pid"]))
                        self._running[command.pid] = command
                        started, slot = self._starting.pop(int(said["started"]), (None, []))
                        if started is not None:
                            slot.append(command)
                            started.set()
                    elif "ended" in said:
                        ended = self._running.pop(int(said["ended"]), None)
                        if ended is not None:
                            ended._end(int(said["returncode"]))
        except (OSError, ValueError):
            pass
        # The server is gone (it kills its commands as it goes): nothing waits for it any more.
        with self._lock:
            self._closed = True
            for command in self._running.values():
                command._end(-signal.SIGKILL)
            self._running.clear()
            for started, _ in self._starting.values():
                started.set()
            self._starting.clear()

    def close(self) -> None:
        """End the server; it kills any command still running."""
        with self._lock:
            self._closed = True
        try:
            self._channel.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._channel.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()


class BorrowedForks:
    """A prepared assignment's use of a shared server (:func:`borrow`): started, waited on and stopped as
    :class:`NbgraderForks`; :meth:`close` stops the commands it started and leaves the server to the process."""

    def __init__(self, server: NbgraderForks) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._mine: list[ForkedCommand] = []
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed and self.server.alive

    def start(self, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> ForkedCommand:
        with self._lock:
            if self._closed:
                raise ForkServerUnavailable("the assignment that borrowed the fork server has been closed")
            command = self.server.start(args, cwd, env, log)
            self._mine = [c for c in self._mine if c.poll() is None] + [command]
            return command

    def close(self) -> None:
        """Stop every command this assignment started that still runs (its group and what it started)."""
        from autograder.children import stop_group
        with self._lock:
            self._closed = True
            running, self._mine = [c for c in self._mine if c.poll() is None], []
        for command in running:
            stop_group(command)


# Not compared: variables that change while a process runs and that no import of the server reads: PATH (the grader's
# in-process commands put its programs' folder on it), inductor's cache folder (torch writes it as it compiles) and
# the name of the test running (pytest sets it for each).
_NOT_READ_BY_IMPORTS = ("PATH", "TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST")
_lent_lock = threading.Lock()
_lending: dict[str, str] | None = None  # the environment a lent server starts with, while lending is on
_lent: NbgraderForks | None = None


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _NOT_READ_BY_IMPORTS}


def lend_one_server(on: bool) -> None:
    """With ``on``, every assignment this process prepares from now on borrows one server, started on first use and
    kept, while the process's environment is the one it has now; with ``on`` False, lending stops and that server
    ends (each assignment's commands were stopped as the assignment closed)."""
    global _lending, _lent
    with _lent_lock:
        _lending = _comparable(dict(os.environ)) if on else None
        server, _lent = (_lent, None) if not on else (None, _lent)
    if server is not None:
        server.close()


def lent_server_pid() -> int | None:
    """The process id of the lent server, if one runs (it outlives each batch by design)."""
    server = _lent
    return server.pid if server is not None and server.alive else None


def borrow() -> BorrowedForks | None:
    """A share of the lent server, started now if it is not running; None when lending is off, the server cannot
    start, or this process's environment is no longer the one lending began with (a server's imports could have read
    something else): the caller then starts a server of its own."""
    global _lent
    with _lent_lock:
        if _lending is None or _comparable(dict(os.environ)) != _lending:
            return None
        if _lent is None or not _lent.alive:
            try:
                _lent = NbgraderForks()
            except ForkServerUnavailable:
                return None
        return BorrowedForks(_lent)
