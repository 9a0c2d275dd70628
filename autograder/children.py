"""The grader's child processes (nbgrader runs, re-checks, sandboxed kernels): none outlives its purpose.

* Each runs in a session of its own; stopping one (:func:`stop_group`) kills its process group and every
  process descended from it, a kernel in a session of its own included.
* Each gets the parent-death signal where util-linux's ``setpriv`` offers it (:func:`die_with_parent`):
  when the process that started it dies (a Dask worker killed mid-submission, an nbgrader run stopped at
  its time limit), it is killed too. The signal is armed a moment after the child starts, so the prefix
  also checks, once it is armed, that the parent is still the one that started it, and exits otherwise:
  a parent killed in between would leave the child running for good (bubblewrap's own
  ``--die-with-parent`` has the same gap). The signal follows the *thread* that started the child; every
  caller here blocks in that thread until the child has ended.
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

__all__ = ["die_with_parent", "descendants", "tracked", "stop_all", "stop_group", "reopen"]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), read from /proc; empty where there is none."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()  # the name before ")" may hold anything
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def stop_group(process: subprocess.Popen) -> None:
    """Kill ``process``, its process group (it was started with ``start_new_session=True``) and every process
    below it, then reap it.

    The group is stopped first, so that nothing in it starts another process while the family is listed;
    a process below it in another session (a kernel) is found by descent. The same as
    ``course.tracks.processes.stop_group``, kept here so that nbgrader's processes, which import this package
    through their configuration, need not import the course (and PyTorch) for it."""
    try:
        os.killpg(process.pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    family = descendants(process.pid)  # before the kill: once it dies, its children belong to someone else
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
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


_SETPRIV: str | None = None

# Run as ``sh -c GUARD name PARENT COMMAND...`` once the death signal is armed: $PPID is the parent now.
_PARENT_GUARD = 'if [ "$PPID" != "$1" ]; then exit 125; fi; shift; exec "$@"'


def die_with_parent(argv: list[str], parent: int | None = None, shell_prelude: str = "",
                    name: str = "die-with-parent") -> list[str]:
    """``argv`` wrapped so that it is killed when ``parent`` (default: this process, which must be the one
    that starts it) dies, and never starts once ``parent`` is gone.

    ``setpriv --pdeathsig KILL`` arms the signal, then a shell compares its parent with ``parent`` and
    execs ``argv`` (same process, same signal); ``shell_prelude`` runs in that shell first (e.g. a
    ``trap``). Without a ``setpriv`` that knows ``--pdeathsig`` only the check remains, and a child
    outlives a parent that dies after it started."""
    global _SETPRIV
    if _SETPRIV is None:
        _SETPRIV = (shutil.which("setpriv") or "") if _setpriv_has_pdeathsig() else ""
    arm = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
    parent = os.getpid() if parent is None else parent
    return [*arm, "/bin/sh", "-c", f"{shell_prelude}{_PARENT_GUARD}", name, str(parent), *argv]


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
