"""The grader's child processes (nbgrader runs, re-checks): started so that none outlives its purpose.

* Each runs in a session of its own (a timeout kills its whole process group, kernels included).
* Where util-linux's ``setpriv`` offers it, each gets the parent-death signal: when the process
  that started it dies (a Dask worker killed mid-submission, say), it is killed too, and so is its
  sandboxed kernel (bubblewrap runs with ``--die-with-parent``). The signal follows the *thread*
  that started the child; every caller here blocks in that thread until the child has ended.
* :func:`stop_all` kills every child still running, for an interrupted batch (Ctrl-C): the
  threads waiting on them return at once instead of after a whole grading.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["death_signal_prefix", "tracked", "stop_all", "stop_group", "reopen"]


def stop_group(process: subprocess.Popen) -> None:
    """Kill ``process`` and its process group (it was started with ``start_new_session=True``), then reap it.

    The same as ``course.processes.stop_group``, kept here so that nbgrader's processes, which import
    this package through their configuration, need not import the course (and PyTorch) for it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()

_lock = threading.Lock()
_running: set[subprocess.Popen] = set()
_stopping = False


def _setpriv_has_pdeathsig() -> bool:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return False
    try:
        said = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--pdeathsig" in said.stdout


_PREFIX: list[str] | None = None


def death_signal_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` where available, else nothing (the child then outlives a killed parent)."""
    global _PREFIX
    if _PREFIX is None:
        _PREFIX = [shutil.which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--"] if _setpriv_has_pdeathsig() else []
    return list(_PREFIX)


@contextmanager
def tracked(process: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Register ``process`` for :func:`stop_all` while the block runs; one started after it is stopped at once."""
    with _lock:
        _running.add(process)
        late = _stopping
    if late:
        stop_group(process)
    try:
        yield process
    finally:
        with _lock:
            _running.discard(process)


def stop_all() -> None:
    """Kill every tracked child and its process group; children started from now on are killed as they start."""
    global _stopping
    with _lock:
        _stopping = True
        victims = list(_running)
    for process in victims:
        if process.poll() is None:
            stop_group(process)


def reopen() -> None:
    """Allow children again (a new batch in the same process, after an interrupted one)."""
    global _stopping
    with _lock:
        _stopping = False
