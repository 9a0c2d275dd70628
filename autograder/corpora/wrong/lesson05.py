"""Wrong answers for lesson 05 (matrix units)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "05_matrix_units"

# Mistakes per track from the kernel-file corpora, each also tested there against the file. pv-scalar-loop has
# the right numbers: only the count of matrix operations (course.grading.matrix_units.matrix_units_simt) catches it;
# Metal's kv-end-one-short has them too but where a block's bound opens a tile, named from the tiles it loads.
_KERNEL_ENTRIES = {
    "triton": ("05.mma_triton", ("missing-rescale", "pv-in-float32", "log2e-twice")),
    "cuda": ("05.mma_cuda", ("accumulator-not-rescaled", "no-syncwarp-before-reload", "sum-not-rescaled",
                             "pv-scalar-loop")),
    "metal": ("05.mma_metal", ("accumulator-not-rescaled", "no-barrier-after-spill", "kv-end-one-short",
                               "pv-scalar-loop")),
}

WRONG = [
    # -- exercise 1: reading the fragment maps ------------------------------------------------------
    WrongSolution(_A, "fragment_lane", "cuda-transposed", "reads the CUDA map column by column",
                  edits=(("return 2 * row + col // 8", "return 2 * col + row // 8"),), hint=None),
    WrongSolution(_A, "fragment_lane", "cuda-one-lane-a-row", "thinks each lane holds a whole row of 16",
                  edits=(("return 2 * row + col // 8", "return row"),), hint=None),
    WrongSolution(_A, "fragment_lane", "metal-like-cuda", "assumes the Metal matrix is laid out like the CUDA one",
                  edits=(("    if track == \"cuda\":\n", "    if True:\n"),), hint=None),
    # -- exercise 2: the kernel, graded on the best track; each entry attempts one track
] + kernel_answers(_A, "mma_kernel", _KERNEL_ENTRIES)
