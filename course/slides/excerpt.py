"""From a region's raw text to what a code slide shows, and steps resolved to the lines they name.

A slide shows code without its full-line comments (they go to the speaker notes, next to the step they
explain) and without the course's marker lines. A *step* highlights lines chosen by pattern against that
shown code, never by number: ``Step("the barrier", match(r"threadgroup_barrier"))``. A pattern that
matches nothing is an error, so a step cannot silently drift onto other lines after a kernel edit.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from course.slides.slide_errors import SourceMissing
from course.slides.sources import comment_text
from course.solution_regions import MARKER_LINE

__all__ = ["Excerpt", "excerpt", "Step", "match", "block", "span", "resolve", "line_spec"]


@dataclass(frozen=True)
class Excerpt:
    lines: tuple[str, ...]                    # what the slide shows
    comments: tuple[tuple[str, ...], ...]     # full-line comments that stood right above each shown line
    trailing: tuple[str, ...] = ()            # comments left after the last line

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def excerpt(raw: str, python: bool, keep_comments: bool = False) -> Excerpt:
    """The shown form of ``raw`` (a region or function): dedented, markers dropped, full-line comments moved
    out (unless ``keep_comments``), runs of blank lines collapsed."""
    lines, comments, pending = [], [], []
    for line in textwrap.dedent(raw).splitlines():
        if MARKER_LINE.match(line):
            continue
        text = comment_text(line, python)
        if text is not None and not keep_comments:
            pending.append(text.strip())
            continue
        if not line.strip() and (not lines or not lines[-1].strip()):
            continue
        lines.append(line.rstrip())
        comments.append(tuple(pending))
        pending = []
    while lines and not lines[-1].strip():
        lines.pop()
        comments.pop()
    # Marker lines are dropped after dedenting, so what remains may share more indentation.
    shown = textwrap.dedent("\n".join(lines)).split("\n") if lines else []
    return Excerpt(tuple(shown), tuple(comments), tuple(pending))


# ---- steps -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selector:
    kind: str            # "match", "block" or "span"
    pattern: str
    end: str | None = None
    nth: int = 1         # block and span: start at the nth line the pattern finds

    def describe(self) -> str:
        which = f" (occurrence {self.nth})" if self.nth > 1 else ""
        if self.kind == "span":
            return f"the lines from /{self.pattern}/{which} to /{self.end}/"
        if self.kind == "block":
            return f"the block opened by /{self.pattern}/{which}"
        return f"/{self.pattern}/"


def match(pattern: str) -> Selector:
    """Every shown line that ``pattern`` (a regular expression) finds something in."""
    return Selector("match", pattern)


def block(pattern: str, nth: int = 1) -> Selector:
    """The ``nth`` line ``pattern`` finds, with the body it opens (braces in C, indentation in Python)."""
    return Selector("block", pattern, nth=nth)


def span(start: str, end: str, nth: int = 1) -> Selector:
    """From the ``nth`` line ``start`` finds to the next line ``end`` finds, both included."""
    return Selector("span", start, end, nth)


@dataclass(frozen=True, init=False)
class Step:
    """One highlight: a label for the slide and the speaker, and the selectors that choose its lines."""

    label: str
    selectors: tuple[Selector, ...]

    def __init__(self, label: str, *selectors: Selector):
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "selectors", tuple(selectors))


def _braces(line: str) -> int:
    code = re.sub(r"//.*$|\"(?:\\.|[^\"])*\"|'(?:\\.|[^'])*'", "", line)
    return code.count("{") - code.count("}")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _first(lines: tuple[str, ...], pattern: str, start: int = 0, nth: int = 1) -> int | None:
    rx = re.compile(pattern)
    found = [i for i in range(start, len(lines)) if rx.search(lines[i])]
    return found[nth - 1] if len(found) >= nth else None


def _block_end(lines: tuple[str, ...], i: int, python: bool) -> int:
    """Index of the last line of the block that line ``i`` opens."""
    if python:
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > _indent(lines[i])):
            j += 1
        while j - 1 > i and not lines[j - 1].strip():
            j -= 1
        return j - 1
    depth, j = _braces(lines[i]), i
    if depth <= 0:
        # A brace-less body (`for (...) x += y;` on the next line) is one statement.
        return i + 1 if not lines[i].rstrip().endswith((";", "}")) and i + 1 < len(lines) else i
    while depth > 0 and j + 1 < len(lines):
        j += 1
        depth += _braces(lines[j])
    return j


def resolve(step: Step, shown: Excerpt, python: bool) -> list[int]:
    """The 1-based rows of ``shown`` that ``step`` highlights; SourceMissing when a selector finds nothing."""
    rows: set[int] = set()
    for sel in step.selectors:
        start = _first(shown.lines, sel.pattern, nth=sel.nth)
        if start is None:
            raise SourceMissing(f"step '{step.label}' finds no line for {sel.describe()}")
        if sel.kind == "match":
            rx = re.compile(sel.pattern)
            rows.update(i + 1 for i, line in enumerate(shown.lines) if rx.search(line))
        elif sel.kind == "block":
            rows.update(range(start + 1, _block_end(shown.lines, start, python) + 2))
        else:
            end = _first(shown.lines, sel.end, start)
            if end is None:
                raise SourceMissing(f"step '{step.label}' finds no end line /{sel.end}/ after /{sel.pattern}/")
            rows.update(range(start + 1, end + 2))
    return sorted(rows)


def line_spec(rows: list[int]) -> str:
    """[3, 4, 5, 9] → "3-5,9": reveal.js's notation for one highlight step."""
    parts, run = [], []
    for row in rows:
        if run and row == run[-1] + 1:
            run.append(row)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [row]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)
