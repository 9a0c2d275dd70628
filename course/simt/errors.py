"""Errors that are sentences for a person, not tracebacks.

In IPython/Jupyter an exception that has ``_render_traceback_`` displays as what that returns, so a
failed compile or launch shows its message only; the cell still fails, so a grader still scores it 0.
``CourseError`` is the base of every error the course raises on purpose. It is defined here, in the
CPU runtime, because the runtime imports nothing outside its package; ``course.errors`` re-exports it,
so the runtime's errors are course errors like any other.
"""
from __future__ import annotations

__all__ = ["CourseError"]


class CourseError(Exception):
    """An error raised on purpose by course machinery; the message is meant for a person."""

    title = "course error"

    def _render_traceback_(self) -> list[str]:
        red, reset = "\x1b[31m", "\x1b[0m"
        return [f"{red}✗ {self.title}{reset}", *str(self).splitlines()]
