"""Lesson 04's Triton loop: the near misses a learner makes on it fail with a hint that names them (a loop bound one
off at either end, the mask one key past the end or at Nq, the rescale factor inverted, the running max never
stored). The answers are the wrong-answer corpus's entries (autograder/corpora/wrong/lesson04.py), run here through
``course.check`` on the solution cell they edit; the corpus test runs them again in the notebook."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import course
from autograder.corpora.wrong import corpus, hint_problem
from course.errors import CheckFailed

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "solutions" / "04_double_buffering" / "04_double_buffering.ipynb"
CELL = "double_buffer_kernel_triton"
# Each entry's first failing case and what the message says of it besides the hint the entry declares.
EXPECTED = {
    "loop-stops-one-key-short": ("wrong answer on Nq=1, Nk=1", "the output: NaN in 1 of 1 rows"),
    "loop-starts-one-block-late": ("wrong answer on Nq=1, Nk=1", "the output: NaN in 1 of 1 rows"),
    "rescale-factor-inverted": ("wrong answer on Nq=1, Nk=1", "the output: NaN in 1 of 1 rows"),
    "mask-keeps-one-key-past-the-end": ("wrong answer on Nq=1, Nk=1", "worst: row 0"),
    "max-never-updated": ("wrong LSE on Nq=1, Nk=1", "the LSE: Inf in 1 of 1 rows"),
    "keys-masked-at-nq": ("wrong answer on Nq=17, Nk=129", "17 of 17 rows"),
}


def _solution_cell() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == CELL)


def test_every_near_miss_here_is_in_the_corpus():
    assert set(EXPECTED) <= {w.name for w in corpus("04_double_buffering") if w.cell == CELL}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_near_miss_is_named(name, tmp_path):
    entry = next(w for w in corpus("04_double_buffering") if w.cell == CELL and w.name == name)
    path = tmp_path / f"{name.replace('-', '_')}.py"  # a file, as a cell is, so the check can read the kernel's source
    path.write_text(entry.apply(_solution_cell()), encoding="utf-8")
    namespace = {"__name__": "__main__", "__file__": str(path)}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    with pytest.raises(CheckFailed) as failed:
        course.check("04.double_buffer_triton", namespace["pipelined_attention"])
    message = str(failed.value)
    assert all(text in message for text in EXPECTED[name]), message
    assert hint_problem(entry.hint, message) is None, hint_problem(entry.hint, message)
