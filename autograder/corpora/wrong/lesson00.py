"""Wrong answers for lesson 00 (orientation)."""
from autograder.corpora.wrong import WrongSolution

_A = "00_orientation"

WRONG = [
    WrongSolution(_A, "attention_flops", "one-matmul", "counts only Q·Kᵀ",
                  edits=(("return 2 * (2 * n_q * n_k * d)", "return 2 * n_q * n_k * d"),),
                  hint="either a matmul is missing or a multiply-add was counted as 1 FLOP"),
    WrongSolution(_A, "attention_flops", "macs-not-flops", "counts multiply-adds, not FLOPs",
                  edits=(("return 2 * (2 * n_q * n_k * d)", "return 2 * n_q * n_k * d // 2"),),
                  hint="multiply-adds of one matmul"),
    WrongSolution(_A, "attention_flops", "square-queries", "uses Nq for both sequence lengths",
                  edits=(("return 2 * (2 * n_q * n_k * d)", "return 4 * n_q * n_q * d"),),
                  hint="Nq is used for both lengths"),
    WrongSolution(_A, "attention_flops", "d-squared", "multiplies by D twice",
                  edits=(("return 2 * (2 * n_q * n_k * d)", "return 4 * n_q * n_k * d * d"),),
                  hint="the count grows as D²"),
    WrongSolution(_A, "flash_intensity", "elements-not-bytes", "forgets the bytes per element",
                  edits=(("bytes_moved = (2 * n * d + 2 * n * d) * bytes_per_element", "bytes_moved = 4 * n * d"),),
                  hint="remember the bytes per element"),
    WrongSolution(_A, "flash_intensity", "reads-only", "counts the reads of Q, K, V but not the write of O",
                  edits=(("(2 * n * d + 2 * n * d)", "(3 * n * d)"),), hint="O is written once too"),
    WrongSolution(_A, "flash_intensity", "materialized-s", "counts the S matrix as if it went to global memory",
                  edits=(("(2 * n * d + 2 * n * d)", "(4 * n * d + n * n)"),), hint="S never reaches global memory"),
]
