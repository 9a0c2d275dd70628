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

__all__ = ["ForkedCommand", "NbgraderForks", "ForkServerUnavailable"]

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
