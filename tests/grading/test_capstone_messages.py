"""Lesson 08's check names the mistake of keeping P: a forward that saves the N×N probabilities for its backward (built
with a matrix product or by broadcasting) is told so, with save_for_backward and the recomputation in the hint, and a
tensor too large for the wrapper is counted in elements against elements. The answers are the wrong-answer corpus's
entries (autograder/corpora/wrong/lesson08.py), each run here through ``course.check`` on the solution cell it edits."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import course
from autograder.corpora.wrong import corpus, hint_problem
from course.errors import CheckFailed

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "solutions" / "08_capstone" / "08_capstone.ipynb"
FIRST_CASE = "on q (2, 3, 17, 32), k (2, 3, 17, 32) "  # the check's first case: 2 × 3 heads of 17 rows, D = 32

SAVES_P = ("the forward saves an Nq × Nk matrix per head for the backward (shape (2, 3, 17, 17)",
           "the probabilities P (or the scores they come from), as standard attention keeps them",
           "FlashAttention never holds P: its forward keeps q, k, v, O and the LSE (one float per query row, (2, 3, 17))")
# What each entry's message must say, besides its hint (the corpus entry declares that), and what it must not.
EXPECTED = {
    "saves-a-score-sized-tensor": (SAVES_P, ("matrix product",)),
    "saves-p-from-a-matmul": (SAVES_P + ("(shape (2, 3, 17, 17), built with 1 matrix product(s) in PyTorch)",),
                              ("makes 1 matrix product",)),
    "saves-p-from-a-broadcast": (SAVES_P, ("elements", "bytes")),
    "recomputes-p-in-pytorch": (("a PyTorch operator inside flash_attention built a tensor of 55,488 elements, where "
                                 "the kernels' wrapper never needs more than 13,056 (the largest input's 3,264 "
                                 "elements, copied as 4 bytes each by Triton's interpreter)",
                                 "is an Nq × Nk matrix (the scores, or the probabilities P) built outside the kernels?"),
                                ("13,056 bytes", "saves an Nq × Nk")),
}


def _solution_cell() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells
                if c["metadata"].get("nbgrader", {}).get("grade_id") == "flash_attention_triton")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_keeping_p_is_named(name, tmp_path):
    entry = next(w for w in corpus("08_capstone") if w.name == name)
    path = tmp_path / f"{name}.py"  # a file, as a notebook cell is, so the check can read the answer's source
    path.write_text(entry.apply(_solution_cell()), encoding="utf-8")
    namespace = {"__name__": "__main__", "__file__": str(path)}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    with pytest.raises(CheckFailed) as failed:
        course.check("08.flash_attention_triton", namespace["flash_attention"])
    message = str(failed.value)
    says, never = EXPECTED[name]
    assert message.startswith(f"08.flash_attention_triton: {FIRST_CASE}"), message
    assert all(text in message for text in says), message
    assert not [text for text in never if text in message], message
    assert hint_problem(entry.hint, message) is None, hint_problem(entry.hint, message)
