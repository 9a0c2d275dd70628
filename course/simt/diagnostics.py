"""Errors that are sentences for a person, not tracebacks.

In IPython/Jupyter an exception that has ``_render_traceback_`` displays as what that returns, so a
failed compile or launch shows its message only; the cell still fails, so a grader still scores it 0.
``CourseError`` is the base of every error the course raises on purpose. It is defined here, in the
CPU runtime, because the runtime imports nothing outside its package; ``course.errors`` re-exports it,
so the runtime's errors are course errors like any other. ``quote_lines`` and ``quote_diagnostics`` put
the learner's own source line under every message that names one.
"""
from __future__ import annotations

import re

__all__ = ["CourseError", "KernelCompileError", "KernelLaunchError", "GpuUnavailable", "quote_lines", "quote_diagnostics"]


class CourseError(Exception):
    """An error raised on purpose by course machinery; the message is meant for a person."""

    title = "course error"

    def _render_traceback_(self) -> list[str]:
        red, reset = "\x1b[31m", "\x1b[0m"
        return [f"{red}✗ {self.title}{reset}", *str(self).splitlines()]


class KernelCompileError(CourseError):
    """The kernel file did not compile; the message holds g++'s diagnostics for the learner's lines."""


class KernelLaunchError(CourseError):
    """A launch was refused or the kernel failed while running; the message says where and why."""

    title = "kernel failed"


class GpuUnavailable(CourseError):
    """This machine cannot run the GPU tier; the message says what it lacks."""

    title = "no GPU"


def _source_line(code: str, line: int, first_line: int) -> str | None:
    """Line ``line`` of the file as the learner numbers it (``code`` starts at line ``first_line``)."""
    lines = code.splitlines()
    index = line - first_line
    if 0 <= index < len(lines):
        return lines[index].rstrip().expandtabs(4)
    return None


def quote_lines(message: str, code: str, shown: str, first_line: int = 1) -> str:
    """``message`` with each source line it names as "line N of <shown>" quoted below it, numbered.

    A notebook hides line numbers, so "line 39 of naive_cuda.cu" alone sends a learner counting; the
    quote shows the line itself, as a Python traceback does::

        ... at line 39 of naive_cuda.cu by thread (3,0,0) of block (0,0,0): ...
            39 |     float x = q[row * d + c];
    """
    name = re.escape(shown.replace("\\", "/").rsplit("/", 1)[-1])
    numbers: list[int] = []
    for m in re.finditer(rf"\bline (\d+) of {name}\b", message):
        if int(m.group(1)) not in numbers:
            numbers.append(int(m.group(1)))
    quoted = [(n, text) for n in numbers if (text := _source_line(code, n, first_line)) is not None]
    if not quoted:
        return message
    width = max(len(str(n)) for n, _ in quoted)
    return message.rstrip("\n") + "".join(f"\n    {n:>{width}} | {text}" for n, text in quoted)


def quote_diagnostics(diagnostics: str, code: str, shown: str, first_line: int = 1) -> str:
    """Compiler diagnostics ("<shown>:N:C: error: ...") with the line each names quoted below it, and a
    caret under column C when the compiler gave one."""
    pattern = re.compile(rf"^{re.escape(shown)}:(\d+)(?::(\d+))?:")
    out = []
    for line in diagnostics.splitlines():
        out.append(line)
        m = pattern.match(line)
        if not m:
            continue
        number = int(m.group(1))
        text = _source_line(code, number, first_line)
        if text is None:
            continue
        gutter = f"    {number} | "
        out.append(gutter + text)
        if m.group(2):
            raw = code.splitlines()[number - first_line]
            column = len(raw[: int(m.group(2)) - 1].expandtabs(4))
            out.append(" " * (len(gutter) - 2) + "| " + " " * column + "^")
    return "\n".join(out)
