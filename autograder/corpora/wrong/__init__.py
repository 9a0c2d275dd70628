"""The wrong-solution corpus: plausible mistakes that the checks must catch.

Each entry replaces one solution cell of a lesson's instructor notebook, either with a whole new
cell or with small text edits of the reference solution (so an entry goes stale loudly, never
silently: an edit whose text is no longer in the solution is an error). The test suite runs every
entry's exercise tests beside the honest notebook and requires them to fail, then grades the entries
with the real nbgrader pipeline packed into a few submissions (:func:`packs`: one wrong answer per
exercise in each) and requires each to lose its exercise's points.
"""
from __future__ import annotations

import copy
import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable

import nbformat

__all__ = ["WrongSolution", "WrongKernel", "apply_edits", "lesson_corpora", "corpus", "packs", "make_submission", "exercise_of",
           "track_groups", "group_siblings", "groups_touched", "exercise_key", "student_notebook",
           "UNDECLARED", "Undeclared", "hint_problem"]


class Undeclared:
    """The default of every entry's ``hint``: a corpus test fails until the entry says which hint it gets."""

    def __repr__(self) -> str:
        return "UNDECLARED"


UNDECLARED = Undeclared()


def hint_problem(hint: "str | None | Undeclared", message: str) -> str | None:
    """What is wrong with the ``hint:`` line of a failure ``message`` for an entry that declares ``hint``
    (text its hint line must contain, or None for no hint line at all); None when it is right."""
    if isinstance(hint, Undeclared):
        return ("declare the hint this entry gets: hint=\"<text its hint line contains>\", or hint=None when its "
                f"message must have no hint line. Its message is:\n{message}")
    found = [line.strip()[len("hint:"):].strip() for line in message.splitlines() if line.strip().startswith("hint:")]
    if hint is None:
        return f"expected no hint line, got {found[0]!r} in:\n{message}" if found else None
    if not any(hint in line for line in found):
        return f"expected a hint line containing {hint!r}, got {found or 'no hint line'} in:\n{message}"
    return None


@dataclass(frozen=True)
class WrongSolution:
    assignment: str
    cell: str
    """grade_id of the solution cell this entry replaces."""
    name: str
    mistake: str
    """The mistake, as a learner would make it, in one sentence."""
    source: str | None = None
    edits: tuple[tuple[str, str], ...] = ()
    hint: "str | None | Undeclared" = UNDECLARED
    """Text the failure's ``hint:`` line must contain, or None: the failure must have no hint line."""

    @property
    def student_id(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", f"{self.cell}-{self.name}".lower())

    def apply(self, solution: str) -> str:
        if self.source is not None:
            return self.source.strip("\n")
        return apply_edits(solution, self.edits, f"{self.student_id} (solution of {self.cell})")


def apply_edits(text: str, edits: tuple[tuple[str, str], ...], label: str) -> str:
    """``text`` with each (old, new) replacement made; an edit that no longer matches is an error."""
    result = text
    for old, new in edits:
        if old not in result:
            raise ValueError(f"{label}: {old!r} is not in the text any more; update the corpus")
        result = result.replace(old, new)
    if result == text:
        raise ValueError(f"{label}: the edits change nothing")
    return result


@dataclass(frozen=True)
class WrongKernel:
    """An edit of one of the course's CUDA C or Metal kernel files, which its check must reject.

    ``key`` names the kernel file in the track's table (an exercise id, or "atomic"/"split" for CUDA's
    backward); subclasses say how ``key`` finds the file. ``expect`` is a regular expression the failure
    message must match; ``checked`` says whether the mistake only shows under memcheck/racecheck (its
    edited file then needs the instrumented build). ``hint`` is the text the failure's ``hint:`` line must
    contain, or None when it must have no hint line (:func:`hint_problem`).
    """
    key: str
    name: str
    mistake: str
    edits: tuple[tuple[str, str], ...]
    expect: str = r"wrong|NaN|Inf"
    checked: bool = False
    hint: "str | None | Undeclared" = UNDECLARED
    measured: bool = False
    """The mistake leaves the numbers right and shows only in what the kernel loads or which instructions it
    runs (course.grading.techniques): ``grade()`` measures first, as ``course.check`` does for that exercise."""

    language = "cuda"

    @property
    def id(self) -> str:
        return f"{self.key}:{self.name}"

    def kernel_file(self) -> str:
        raise NotImplementedError

    def source(self) -> str:
        """The kernel file's text with this entry's edits made."""
        from course.kernels import read_source
        return apply_edits(read_source(self.kernel_file()), self.edits, self.id)

    def module(self):
        """The edited file compiled for the CPU runtime, the build its grading launches first (messages
        name the original file)."""
        from course.simt import RawModule
        return RawModule(code=self.source(), language=self.language, name=self.kernel_file().rsplit("/", 1)[1],
                         compile_now="checked" if self.checked else "fast")


def exercise_of(test_cell: str) -> str:
    """Test cells are named test_<solution cell>[_hidden | _in_training] (lesson 08 also grades its operator
    inside a training run)."""
    return re.sub(r"_(hidden|in_training)$", "", test_cell.removeprefix("test_"))


def lesson_corpora() -> list[ModuleType]:
    """The corpus modules, one a lesson (``lessonNN.py`` beside this file, each with its ``WRONG`` list), found on
    disk: a new lesson's module joins the corpus by being there."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"lesson\d\d", m.name))
    # Imported here: each of these modules imports this package for WrongSolution.
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def corpus(assignment: str | None = None) -> list[WrongSolution]:
    entries = [entry for module in lesson_corpora() for entry in module.WRONG]
    return [e for e in entries if assignment in (None, e.assignment)]


def track_groups(solution_notebook: Path) -> dict[str, str]:
    """Solution cell → its track group, for cells that answer one exercise in several languages.

    A lesson step offered in Triton, CUDA C and Metal has one cell per language, tagged with
    ``{"course": {"track_group": "naive_kernel"}}``, and one graded test (``test_naive_kernel``) that
    counts the learner's best track. Cells outside a group are their own exercise.
    """
    return {cell: groups[0] for cell, groups in _cell_groups(solution_notebook).items()}


def _cell_groups(solution_notebook: Path) -> dict[str, tuple[str, ...]]:
    """Solution cell → every track group it answers. A cell holding a kernel file that serves several
    steps (lesson 07's Triton file: the atomic and the split backward) lists them all; the first is the
    one its wrong answers are graded on."""
    nb = nbformat.read(solution_notebook, as_version=4)
    out = {}
    for c in nb.cells:
        group, cell = c.metadata.get("course", {}).get("track_group"), c.metadata.get("nbgrader", {}).get("grade_id")
        if group and cell:
            out[cell] = (group,) if isinstance(group, str) else tuple(group)
    return out


def group_siblings(solution_notebook: Path, cell: str) -> list[str]:
    """The other cells of ``cell``'s track group (its first one), including cells that answer that group
    among others: a learner who studies one track leaves every other track's cell as handed out."""
    groups = _cell_groups(solution_notebook)
    if cell not in groups:
        return []
    group = groups[cell][0]
    return [c for c, gs in groups.items() if group in gs and c != cell]


def groups_touched(solution_notebook: Path, cells: Iterable[str]) -> set[str]:
    """Every track group that one of ``cells`` answers (a multi-step cell touches each of its steps)."""
    groups = _cell_groups(solution_notebook)
    return {g for c in cells for g in groups.get(c, (c,))}


def exercise_key(wrong: WrongSolution, groups: dict[str, str]) -> str:
    """The exercise a wrong answer loses points on: its cell's track group, or the cell itself."""
    return groups.get(wrong.cell, wrong.cell)


def student_notebook(solution_notebook: Path) -> Path:
    """``<repo>/solutions/A/A.ipynb`` → the handed-out ``<repo>/notebooks/A/A.ipynb``."""
    return solution_notebook.parents[2] / "notebooks" / solution_notebook.parent.name / solution_notebook.name


def packs(assignment: str) -> list[list[WrongSolution]]:
    """The assignment's entries dealt into submissions that hold at most one wrong answer per solution
    cell: the i-th pack has the i-th entry of every cell that has one. Grading the packs puts every entry
    through nbgrader in a few submissions instead of one each. A track group's test passes when any of
    its tracks does, so a pack that loses the group's points proves every wrong track in it wrong."""
    by_cell: dict[str, list[WrongSolution]] = {}
    for entry in corpus(assignment):
        by_cell.setdefault(entry.cell, []).append(entry)
    depth = max((len(v) for v in by_cell.values()), default=0)
    return [[v[i] for v in by_cell.values() if i < len(v)] for i in range(depth)]


def make_submission(solution_notebook: Path, *wrongs: WrongSolution) -> nbformat.NotebookNode:
    """The instructor notebook with the solution cell of each entry replaced by its wrong answer.

    The other cells of an entry's track group that hold no wrong answer get what the student notebook
    hands out (their stubs): the best-track test then grades only the wrong tracks.
    """
    nb = copy.deepcopy(nbformat.read(solution_notebook, as_version=4))
    if len({w.cell for w in wrongs}) != len(wrongs):
        raise ValueError("a submission can hold one wrong answer per solution cell")
    wrong_cells = {w.cell for w in wrongs}
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    stubs = None
    for wrong in wrongs:
        cell = by_id.get(wrong.cell)
        if cell is None or not cell.metadata["nbgrader"].get("solution"):
            raise ValueError(f"{wrong.student_id}: no solution cell {wrong.cell!r} in {solution_notebook}")
        cell.source = wrong.apply(cell.source)
        siblings = [c for c in group_siblings(solution_notebook, wrong.cell) if c not in wrong_cells]
        if siblings:
            if stubs is None:
                handed_out = nbformat.read(student_notebook(solution_notebook), as_version=4)
                stubs = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in handed_out.cells}
            for sibling in siblings:
                by_id[sibling].source = stubs[sibling]
    return nb
