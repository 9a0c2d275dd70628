"""Wrong answers for lesson 10 (one program per query row)."""
from dataclasses import replace

from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.lesson01 import WRONG as LESSON01

_A = "10_one_row"

WRONG = [
    WrongSolution(_A, "programs", "forgets-heads", "counts the rows of one head only",
                  edits=(("return batch * heads * n_q", "return batch * n_q"),), hint="multiply by the heads too"),
    WrongSolution(_A, "programs", "forgets-batch", "counts the rows of one sequence only",
                  edits=(("return batch * heads * n_q", "return heads * n_q"),), hint="multiply by the batch too"),
    WrongSolution(_A, "programs", "one-per-head", "launches one program per head, not per row",
                  edits=(("return batch * heads * n_q", "return batch * heads"),), hint=None),
    # The kernel is lesson 01's: so are its mistakes, in lesson 10's cells.
    *(replace(w, assignment=_A, cell=w.cell.replace("naive_", "one_row_")) for w in LESSON01
      if w.cell in ("naive_triton", "naive_cuda", "naive_metal")),
]
