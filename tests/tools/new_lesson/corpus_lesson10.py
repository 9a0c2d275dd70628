"""Wrong answers for lesson 10 (one program per query row)."""
from autograder.corpora.wrong import WrongSolution

_A = "10_one_row"

WRONG = [
    WrongSolution(_A, "programs", "forgets-heads", "counts the rows of one head only",
                  edits=(("return batch * heads * n_q", "return batch * n_q"),), hint="multiply by the heads too"),
]
