"""A lesson's wrong answers to a kernel exercise, taken from the kernel-file corpora of its tracks.

The kernel-file corpora (``triton.py``, ``cuda.py``, ``metal.py``) hold every mistake of a step, each
tested against the file; a lesson notebook needs a few of them per track as answers to its track
group's cells. Naming the picks keeps the notebook's corpus small (each entry costs a run of the
exercise's tests) and loud: a pick that no longer exists is an error, not a silent gap.
"""
from __future__ import annotations

from autograder.corpora.wrong import WrongSolution

__all__ = ["kernel_answers"]


def _corpus(track: str):
    if track == "triton":
        from autograder.corpora.wrong.triton import WRONG_KERNELS
        return WRONG_KERNELS
    if track == "cuda":
        from autograder.corpora.wrong.cuda import WRONG_CUDA_KERNELS
        from autograder.corpora.wrong.cuda_backward import WRONG_KERNELS as BACKWARD
        return WRONG_CUDA_KERNELS + BACKWARD
    from autograder.corpora.wrong.metal import WRONG_METAL_KERNELS
    return WRONG_METAL_KERNELS


def kernel_answers(assignment: str, group: str, picks: dict[str, tuple[str, tuple[str, ...]]]) -> list[WrongSolution]:
    """For each track in ``picks`` (track → (exercise id, entry names)), those entries as wrong answers in the
    cell ``<group>_<track>`` of ``assignment`` (``group`` may name the cell of a kernel file that serves
    several steps, as lesson 07's Triton file does)."""
    answers = []
    for track, (exercise, names) in picks.items():
        found = {w.name: w for w in _corpus(track) if w.exercise == exercise}
        missing = [name for name in names if name not in found]
        if missing:
            raise ValueError(f"{assignment}: no entries {missing} for {exercise} in the {track} kernel corpus")
        answers += [WrongSolution(assignment, f"{group}_{track}", found[name].name, found[name].mistake,
                                  edits=found[name].edits, hint=found[name].hint) for name in names]
    return answers
