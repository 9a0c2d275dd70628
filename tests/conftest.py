"""Shared fixtures. Importing course first puts Triton in interpreter mode on CPU machines."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("COURSE_TIER", "cpu")
import course  # noqa: E402,F401  (must precede any @triton.jit definition)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def naive_module():
    from course.kernels import load_triton_module
    return load_triton_module("triton/01_naive")


def pytest_collection_modifyitems(config, items):
    """Whole notebooks, grading pipelines and browser runs first, the many quick tests after them.

    The suite runs on two workers that steal work from each other (`make test`: --dist worksteal); a worker
    can only steal tests not yet started, so a minute-long test that starts last keeps the other worker
    idle for that minute. Starting the long ones first leaves quick tests to even out the end."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") or item.get_closest_marker("browser") else 1)


# ------------------------------------------------------------------------------------------------
# Per-lesson time budget, reported at the end of every run
#
# The whole suite must stay within 15 minutes on two cores with all ten lessons. What no lesson owns
# (the runtime, the tracks, the grader) takes about 4 minutes, which leaves each lesson about 60 s of
# wall time on two workers: about 120 s of test time summed over its tests. A test belongs to the lesson its id names: a parameter such as
# `01_naive_attention` or `03.tiled_cuda`, or `lesson_01` / `lesson01` in its name. The report is
# information for whoever adds a lesson; it never fails a run (timings are no test of correctness).
# ------------------------------------------------------------------------------------------------

LESSON_BUDGET_S = 120.0
_LESSON_IN_ID = (re.compile(r"[\[\-/](\d\d)[._]"), re.compile(r"lesson_?(\d\d)"))


def lesson_of(nodeid: str) -> str | None:
    for pattern in _LESSON_IN_ID:
        m = pattern.search(nodeid)
        if m:
            return m.group(1)
    return None


def pytest_terminal_summary(terminalreporter):
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", None), getattr(report, "duration", None)
            if not nodeid or duration is None:
                continue
            lesson = lesson_of(nodeid) or "shared"
            seconds[lesson] = seconds.get(lesson, 0.0) + duration
            if getattr(report, "when", None) == "call":
                counts[lesson] = counts.get(lesson, 0) + 1
    if not seconds:
        return
    terminalreporter.section("time per lesson (test seconds summed over workers)")
    for lesson in sorted(seconds, key=lambda k: (k == "shared", k)):
        over = lesson != "shared" and seconds[lesson] > LESSON_BUDGET_S
        budget = "" if lesson == "shared" else f"  budget {LESSON_BUDGET_S:.0f} s" + ("  OVER BUDGET" if over else "")
        terminalreporter.write_line(f"lesson {lesson:>6}: {seconds[lesson]:7.1f} s in {counts.get(lesson, 0):4d} tests{budget}")
