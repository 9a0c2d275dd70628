"""What an entry of the cheating corpus is (:class:`Cheat`), the lesson notebooks it edits, and how entries become
the submissions the hostile corpus's tools build and grade: one at a time, or packed (:func:`packs`), and with the
stale outputs of a passing run (:func:`stale_outputs`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autograder.corpora.hostile import Change, HostileSubmission


ASSIGNMENT = "01_naive_attention"
KERNEL_TESTS = ("test_naive_kernel", "test_naive_kernel_hidden")
TORCH_TESTS = ("test_attention_torch", "test_attention_torch_hidden")
KERNEL_CELLS = ("naive_triton", "naive_cuda", "naive_metal")
# Every test the grader judges is judged outside the learner's process (autograder.preprocessors.recheck_tests): a trick
# that worked on the notebook's own process fools nothing there.
CAUGHT = r"failed when the grader checked it"
# The course launches a Triton cell's kernels with its own wrapper, in the notebook too: a wrapper that
# computes the answer otherwise leaves the kernel a stub, and the check says so, in the learner's lab and the grader.
NOT_STARTED = r"not implemented yet in any track"


@dataclass(frozen=True)
class Cheat:
    name: str
    """Also the student id it is graded under."""
    trick: str
    """What it does, in one sentence."""
    changes: tuple[Change, ...]
    loses: tuple[str, ...]
    feedback: str
    """A regular expression its feedback page must match: the reason the grade is what it is."""
    stub_tracks: tuple[str, ...] = ()
    """Kernel cells handed in as the student notebook has them (stubs)."""
    stale_outputs: bool = False
    """The test cells carry the outputs of an earlier passing run, recordings of right answers included."""
    assignment: str = ASSIGNMENT

    @property
    def in_kernel_cell(self) -> bool:
        return any(change.cell in KERNEL_CELLS for change in self.changes)


def cell_sources(repo: Path, folder: str, assignment: str = ASSIGNMENT) -> dict[str, str]:
    """Each cell's source by grade id, in ``folder``'s copy of the lesson (``notebooks`` or ``solutions``)."""
    notebook = repo / folder / assignment / f"{assignment}.ipynb"
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in cells}


def stale_outputs(notebook, repo: Path) -> None:
    """Give ``notebook``'s test cells the outputs a passing run of the instructor's solution leaves:
    the check's line and the recording of the right answers (course.grading.recording)."""
    import contextlib
    import io

    import nbformat
    from course.exercises import EXERCISES
    from course.grading.recording import MIME, Recorder
    from course.reference import attention

    def right(q, k, v, scale=None):
        return attention(q, k, v, scale=scale).o.to(q.dtype)
    recorder = Recorder("01.attention_torch", right, "attention_torch")
    with contextlib.redirect_stdout(io.StringIO()):
        EXERCISES["01.attention_torch"].run(recorder)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_attention_torch"):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ 01.attention_torch: passed\n"),
                            nbformat.v4.new_output("display_data", data={MIME: json.dumps(recorder.bundle())})]
            cell.execution_count = 1


def as_submission(cheats: "Cheat | tuple[Cheat, ...]", repo: Path) -> HostileSubmission:
    """One entry, or a pack of entries that change different cells, as a submission the hostile corpus's
    tools build and grade (named after its entries)."""
    pack = cheats if isinstance(cheats, tuple) else (cheats,)
    assignment = pack[0].assignment
    if any(cheat.assignment != assignment for cheat in pack):
        raise ValueError(f"entries {[c.name for c in pack]} belong to different lessons; they cannot share a submission")
    stubs = cell_sources(repo, "notebooks", assignment)
    changes = tuple(change for cheat in pack for change in cheat.changes)
    changes += tuple(Change(cell, source=stubs[cell]) for cheat in pack for cell in cheat.stub_tracks)
    cells = [change.cell for change in changes]
    if len(set(cells)) != len(cells):
        raise ValueError(f"entries {[c.name for c in pack]} change the same cell; they cannot share a submission")
    return HostileSubmission(assignment, "--".join(c.name for c in pack), "; ".join(c.trick for c in pack), changes,
                             loses=tuple(dict.fromkeys(cell for c in pack for cell in c.loses)))


def _touched(entry: Cheat) -> set[str]:
    return {change.cell for change in entry.changes} | set(entry.stub_tracks)


def packs(entries: list[Cheat]) -> list[tuple[Cheat, ...]]:
    """The entries two by two, a Python-cell cheat with a kernel-cell cheat (they lose different tests); the
    Python-cell cheats left over each join the first pack that changes none of its cells and loses none of its
    tests (so the batch grades no more submissions than there are kernel-cell cheats, while they last)."""
    python = [e for e in entries if not e.in_kernel_cell]
    kernel = [e for e in entries if e.in_kernel_cell]
    dealt = [list(pair) for pair in zip(python, kernel)]
    for entry in python[len(dealt):] + kernel[len(dealt):]:
        def fits(pack: list[Cheat]) -> bool:
            taken = {c.cell for e in pack for c in e.changes} | {t for e in pack for t in e.stub_tracks}
            lost = {t for e in pack for t in e.loses}
            return not (_touched(entry) & taken or set(entry.loses) & lost
                        or (entry.stale_outputs and any(e.stale_outputs for e in pack)))
        home = next((pack for pack in dealt if fits(pack)), None)
        if home is None:
            dealt.append([entry])
        else:
            home.append(entry)
    return [tuple(pack) for pack in dealt]
