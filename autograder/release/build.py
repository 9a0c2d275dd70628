"""Build the student notebooks in ``notebooks/`` from the instructor notebooks in ``solutions/``.

For each assignment folder ``solutions/<assignment>/`` the release

1. checks that every notebook cell holding a kernel file still matches ``kernels/`` (``course.tools.sync``);
2. runs nbgrader's ``generate_assignment`` in a throwaway course directory under ``build/`` with the
   course settings (per-language stubs, build artefacts ignored);
3. refuses the result if it holds anything but notebooks, or any solution or hidden-test marker;
4. copies the released notebooks to ``notebooks/<assignment>/``, or with ``check=True`` compares
   them with what is there and reports every stale notebook.
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from autograder import BUILD_DIR, NOTEBOOKS_DIR, REPO_ROOT, SOLUTIONS_DIR
from autograder.coursedir import CourseDir
from autograder.nbgrader_api import run_in_process
from course.solution_regions import LEAK_MARKERS

__all__ = ["Release", "ReleaseError", "release", "find_assignments", "check_kernel_cells",
           "build_release", "verify_release", "stale_notebooks", "write_release"]


class ReleaseError(Exception):
    """The release could not be built or would leak; the message says what to fix."""


@dataclass
class Release:
    """The released notebooks, by assignment: ``{assignment: {file name: file bytes}}``."""

    notebooks: dict[str, dict[str, bytes]] = field(default_factory=dict)


def _shown(path: Path) -> str:
    """A path as a person would type it: relative to the repository when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def find_assignments(solutions: Path) -> list[str]:
    """Assignment folders in ``solutions`` (those holding a notebook), sorted."""
    if not solutions.is_dir():
        return []
    return sorted(p.name for p in solutions.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")) and any(p.glob("*.ipynb")))


def check_kernel_cells() -> None:
    """Fail when a notebook cell that mirrors a file in ``kernels/`` has drifted from it."""
    try:
        from course.tools.sync import sync_all
    except ModuleNotFoundError as exc:
        if exc.name not in ("course.tools.sync", "course"):
            raise
        raise ReleaseError("course/tools/sync.py is missing, so the kernel cells of the notebooks cannot be checked "
                           "against kernels/; the release needs that check.") from None
    stale = [_shown(Path(p)) for p in sync_all(write=False)]
    if stale:
        raise ReleaseError("kernel cells are out of date with kernels/ in " + ", ".join(stale)
                           + "; run `python -m course sync`, then release again.")


def check_test_cells(solutions: Path, assignments: Iterable[str]) -> None:
    """Fail when a test cell of the course's own lessons does not grade through the course: the grader's
    re-check (autograder/preprocessors/recheck_tests.py) could not judge it, so a submission could forge its grade."""
    from autograder.preprocessors.recheck_tests import grades_through_course
    loose = []
    for assignment in assignments:
        for path in sorted((solutions / assignment).glob("*.ipynb")):
            for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8")).get("cells", [])):
                meta = cell.get("metadata", {}).get("nbgrader", {})
                source = cell.get("source", "")
                source = "".join(source) if isinstance(source, list) else source
                if meta.get("grade") and not meta.get("solution") and not grades_through_course(source):
                    loose.append(f"{assignment}/{path.name} {_cell_name(cell, index)}")
    if loose:
        raise ReleaseError("these test cells do not call course.check (or another course function), so the "
                           "grader cannot re-check them where the learner's code never ran: " + ", ".join(loose)
                           + ". Grade through course.check.")


def _cell_name(cell: dict[str, Any], index: int) -> str:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"cell {index} ('{grade_id}')" if grade_id else f"cell {index}"


def _leaks(text: str) -> list[str]:
    """Where a released notebook still holds solution or hidden-test markers."""
    found = [marker for marker in LEAK_MARKERS if marker in text]
    if not found:
        return []
    places = []
    for index, cell in enumerate(json.loads(text).get("cells", [])):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        hits = [marker for marker in LEAK_MARKERS if marker in source]
        if hits:
            places.append(f"{_cell_name(cell, index)} still contains '{hits[0]}'")
    return places or [f"its metadata or outputs contain '{found[0]}'"]


def verify_release(folder: Path, assignment: str) -> dict[str, bytes]:
    """The released notebooks of one assignment, after refusing anything that must not ship."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    others = [p.relative_to(folder).as_posix() for p in files if p.suffix != ".ipynb" or p.parent != folder]
    if others:
        raise ReleaseError(f"solutions/{assignment} would ship files that are not notebooks: {', '.join(others)}. "
                           f"Only notebooks may be released; move these out of the assignment folder "
                           f"(build artefacts such as *.ptx, *.so and __pycache__ are skipped already).")
    released = {}
    for path in files:
        data = path.read_bytes()
        leaks = _leaks(data.decode("utf-8"))
        if leaks:
            raise ReleaseError(f"the release of solutions/{assignment}/{path.name} is not clean: "
                               + "; ".join(leaks) + ". Solution and hidden-test regions need BEGIN and END "
                               "lines inside solution cells and test cells.")
        released[path.name] = data
    if not released:
        raise ReleaseError(f"nbgrader released no notebook for {assignment}.")
    return released


def build_release(assignments: Iterable[str], solutions: Path, workspace: Path) -> Release:
    """Run ``nbgrader generate_assignment`` on the assignments, in a course directory under ``workspace``.

    All of them go through one nbgrader run, in this process (no student code runs in it; a process of its
    own would cost seconds of start-up). A failing run leaves its log as ``release.log`` beside ``workspace``.
    """
    assignments = list(assignments)
    course = CourseDir.create(workspace / "course")
    for assignment in assignments:
        course.add_source(assignment, solutions / assignment)
    log = course.root / "generate_assignment.log"
    problem = run_in_process(course.root, "generate_assignment", "*", log_file=log)  # '*': every assignment in source/
    if problem:
        text = log.read_text(encoding="utf-8", errors="replace")
        failed = re.findall(r"error processing assignment '([^']+)'", text) or assignments
        # The workspace is deleted on the way out; the log stays beside it for the instructor.
        log_file = workspace.parent / "release.log"
        log_file.write_text(text)
        raise ReleaseError(f"nbgrader could not release solutions/{failed[0]}: {problem} "
                           f"(full log: {_shown(log_file)})")
    return Release({a: verify_release(course.release(a), a) for a in assignments})


def _first_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    old_cells, new_cells = old.get("cells", []), new.get("cells", [])
    for index, (a, b) in enumerate(zip(old_cells, new_cells)):
        if a != b:
            return f"first difference in {_cell_name(b, index)}"
    if len(old_cells) != len(new_cells):
        return f"it has {len(old_cells)} cells, the release has {len(new_cells)}"
    return "the notebook metadata differs"


def stale_notebooks(built: Release, notebooks: Path) -> list[str]:
    """One sentence per notebook in ``notebooks`` that differs from, lacks or outlives the release."""
    problems = []
    for assignment, files in built.notebooks.items():
        folder = notebooks / assignment
        for name, data in files.items():
            target = folder / name
            if not target.exists():
                problems.append(f"{_shown(target)} is missing")
                continue
            try:
                committed = json.loads(target.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                problems.append(f"{_shown(target)} is not valid notebook JSON")
                continue
            fresh = json.loads(data.decode("utf-8"))
            if committed != fresh:
                problems.append(f"{_shown(target)} is out of date with solutions/{assignment}/{name} "
                                f"({_first_difference(committed, fresh)})")
        for leftover in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
            if leftover.name not in files:
                problems.append(f"{_shown(leftover)} has no source in solutions/{assignment}")
    return problems


def write_release(built: Release, notebooks: Path) -> list[Path]:
    """Put the released notebooks in ``notebooks/<assignment>/``; return the files that changed."""
    changed = []
    for assignment, files in built.notebooks.items():
        folder = notebooks / assignment
        folder.mkdir(parents=True, exist_ok=True)
        for leftover in folder.glob("*.ipynb"):
            if leftover.name not in files:
                leftover.unlink()
                changed.append(leftover)
        for name, data in files.items():
            target = folder / name
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
                changed.append(target)
    return changed


def release(assignments: Iterable[str] | None = None, *, solutions: Path = SOLUTIONS_DIR,
            notebooks: Path = NOTEBOOKS_DIR, check: bool = False, build_dir: Path = BUILD_DIR,
            kernel_sync: bool | None = None, echo: Callable[[str], None] = print) -> list[str]:
    """Release ``assignments`` (all in ``solutions`` by default) into ``notebooks``.

    With ``check=True`` nothing is written; the return value lists every stale notebook (empty when
    ``notebooks`` is up to date). ``kernel_sync`` defaults to checking kernel cells only for the
    repository's own ``solutions/``. Raises :class:`ReleaseError` when the release cannot be built.
    """
    solutions, notebooks = Path(solutions).resolve(), Path(notebooks).resolve()
    available = find_assignments(solutions)
    chosen = list(assignments) if assignments else available
    if not chosen:
        raise ReleaseError(f"no assignment folder with a notebook in {_shown(solutions)}.")
    unknown = [a for a in chosen if a not in available]
    if unknown:
        raise ReleaseError(f"no notebook in {_shown(solutions)}/{unknown[0]}; "
                           f"assignments found: {', '.join(available) or 'none'}.")
    if kernel_sync is None:
        kernel_sync = solutions == SOLUTIONS_DIR.resolve()  # course.tools.sync knows the repository's notebooks only
    if kernel_sync:
        check_kernel_cells()
        check_test_cells(solutions, chosen)
    build_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=build_dir, prefix="release-") as workspace:
        built = build_release(chosen, solutions, Path(workspace))
    if check:
        return stale_notebooks(built, notebooks)
    for path in write_release(built, notebooks):
        echo(f"{'wrote' if path.exists() else 'removed'} {_shown(path)}")
    return []
