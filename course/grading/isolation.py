"""Run a check in a child process, so a kernel that crashes costs that check and nothing else.

A learner's kernel can take its process down: Triton's interpreter reads raw memory, so a wrong mask
can segfault, and a compiled kernel can abort. Inside Jupyter that would kill the kernel and lose
every variable; under the grader it would lose the rest of the notebook. ``run_isolated`` forks,
runs the check in the child and hands back its result or its exception. If the child dies, the
parent raises a CheckFailed that names the signal and the case that was running.

Fork is used (not spawn) because the learner's function lives in the notebook's memory and cannot be
re-imported by a fresh process. A process that has initialised CUDA, or that is not on Linux, cannot
fork safely; there the check simply runs in-process.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import warnings
from typing import Any, Callable, TypeVar

from course.errors import CheckFailed

__all__ = ["can_isolate", "run_isolated", "note_progress", "kept"]

T = TypeVar("T")
_progress_fd: int | None = None  # set in the child: where note_progress writes
_kept: dict[str, Any] = {}  # what kept() computed, here or in a child that handed it back
_kept_in_child: dict[str, Any] | None = None  # in a child: what it computed, handed back with its result


def can_isolate() -> bool:
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return False
    torch = sys.modules.get("torch")
    return not (torch is not None and torch.cuda.is_initialized())


def note_progress(text: str) -> None:
    """Tell the parent what is running now, so a crash report can name it (no-op outside a child)."""
    if _progress_fd is not None:
        os.write(_progress_fd, (text.replace("\n", " ") + "\n").encode())


def kept(key: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per ``key`` in this process and the checks it forks: a value a child computes goes back
    to the parent with the child's result, so the next child starts with it. For results that cost seconds and
    depend only on what the key names (lesson 04's compile for sm_90, keyed by the kernel file's text)."""
    if key not in _kept:
        _kept[key] = compute()
        if _kept_in_child is not None:
            _kept_in_child[key] = _kept[key]
    return _kept[key]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _child(func: Callable[[], Any], result_fd: int, progress_fd: int) -> None:
    global _progress_fd, _kept_in_child
    _progress_fd = progress_fd
    _kept_in_child = {}
    # The parent reports a crash in a sentence; a C-level stack dump on stderr would only add noise
    # (and, under nbgrader, stderr in a test cell zeroes it regardless).
    faulthandler.disable()
    # The child runs a check and nothing else: a library warning about the answer it checks (NumPy's
    # "overflow encountered in exp" from Triton's interpreter, say) would reach the learner's output,
    # with a site-packages path, above the diagnosis. The parent's own warning settings are untouched.
    warnings.simplefilter("ignore")
    # OpenMP's thread pool does not survive fork: if the parent already ran a parallel PyTorch op,
    # the child's first parallel op waits forever on the parent's threads. One thread avoids the pool.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    try:
        outcome: tuple[str, Any] = ("ok", func())
    except BaseException as exc:  # handed to the parent, which re-raises it
        outcome = ("error", exc)
    try:
        payload = pickle.dumps((*outcome, _kept_in_child))
    except Exception as exc:  # e.g. an exception holding an unpicklable object
        payload = pickle.dumps(("error", CheckFailed(f"{type(outcome[1]).__name__}: {outcome[1]}"), {}))
    with os.fdopen(result_fd, "wb") as out:
        out.write(payload)
    os._exit(0)


def run_isolated(func: Callable[[], T], what: str) -> T:
    """``func()`` in a forked child; its return value, or its exception re-raised here.

    ``what`` names the check in a crash report (e.g. the exercise id).
    """
    if not can_isolate():
        return func()
    sys.stdout.flush()
    sys.stderr.flush()
    result_r, result_w = os.pipe()
    progress_r, progress_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(result_r)
        os.close(progress_r)
        _child(func, result_w, progress_w)
    os.close(result_w)
    os.close(progress_w)
    try:
        payload = _read_all(result_r)
        progress = _read_all(progress_r).decode(errors="replace").splitlines()
        _, status = os.waitpid(pid, 0)
    except BaseException:  # an interrupt (the grader's time limit) must not leave the child running
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    if os.WIFSIGNALED(status) or not payload:
        number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if number is not None:
            how = f"crashed (signal {number}, {signal.Signals(number).name})"
        else:
            how = f"exited with status {os.WEXITSTATUS(status)}"
        where = f" on {progress[-1]}" if progress else ""
        # Only an invalid memory access says which mistake it was; an abort, a kill or an exit does not.
        memory = number in (signal.SIGSEGV, signal.SIGBUS)
        raise CheckFailed(f"{what}: your kernel {how}{where}."
                          + ("\n  hint: the process touched memory it does not own: memory outside a tensor was read "
                             "or written. Check the masks of your loads and stores." if memory else ""))
    kind, value, computed = pickle.loads(payload)
    _kept.update(computed)
    if kind == "error":
        raise value
    return value
