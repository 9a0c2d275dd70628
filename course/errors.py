"""Errors the course shows to a learner: a few plain sentences, never a wall of traceback.

``CourseError`` is the base of everything the course raises on purpose. In IPython/Jupyter such an
error displays as its message only (IPython asks an exception for ``_render_traceback_``); the cell
still fails, with an ordinary error output, so nbgrader still gives 0 for a failing test cell.
``learner_traceback`` formats an exception raised by the learner's own code, keeping only the
learner's frames.
"""
from __future__ import annotations

import linecache
import os
import sys
import traceback

from course.simt.diagnostics import CourseError  # the base of every error the course raises on purpose

__all__ = ["CourseError", "CheckFailed", "learner_traceback", "root_cause"]

_COURSE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_DIRS = tuple({os.path.dirname(os.__file__), *(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))})


class CheckFailed(CourseError, AssertionError):
    """A check found the learner's answer wrong. Subclasses AssertionError so test tooling treats it as a failure."""

    title = "check failed"


def _is_learner_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_COURSE_DIR + os.sep):
        return False
    if any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS if d):
        return False
    return not filename.startswith("<frozen")


def _where(filename: str) -> str:
    # IPython names cells like /tmp/ipykernel_123/4567.py; a learner knows them as "your cell".
    if "ipykernel_" in filename or filename.startswith("<ipython-input"):
        return "your cell"
    return os.path.relpath(filename) if os.path.isabs(filename) else filename


def root_cause(exc: BaseException) -> BaseException:
    """The innermost explicit cause: Triton's interpreter, for one, wraps a kernel's own exception."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def learner_traceback(exc: BaseException, limit: int = 4) -> str:
    """'ExcType: message' of the root cause, after the last few frames that belong to the learner's code."""
    chain = [exc]
    while chain[-1] is not root_cause(chain[-1]):
        chain.append(chain[-1].__cause__)  # type: ignore[arg-type]
    frames = [f for e in chain for f in traceback.extract_tb(e.__traceback__) if _is_learner_frame(f.filename)]
    lines = []
    for f in frames[-limit:]:
        code = (f.line or linecache.getline(f.filename, f.lineno or 0)).strip()
        lines.append(f"  {_where(f.filename)}, line {f.lineno}, in {f.name}: {code}")
    root = chain[-1]
    message = str(root).strip().splitlines()
    head = f"{type(root).__name__}: {message[0] if message else ''}".rstrip(": ")
    if getattr(root, "raised_as", None) and message:
        # Raised in another process (the answer process), whose message already begins with the type the learner's
        # code raised there: the name of the exception that carried it here would only stand in front of it.
        head = message[0]
    # Some libraries (Triton's compiler among them) put the useful sentence on a later line.
    extra = [m for m in message[1:] if m.strip()][-3:]
    return "\n".join(lines + [f"  {head}"] + [f"    {m.strip()}" for m in extra])
