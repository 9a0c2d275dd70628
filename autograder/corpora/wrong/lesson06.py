"""Wrong answers for lesson 06 (causal masking)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "06_causal_masking"

# Three mistakes per track from the kernel-file corpora, each also tested there against the file. The first
# of each track is the lazy kernel: right numbers, every key tile visited; the check measures the tiles loaded.
# The fourth of each track is lazy too: future tiles skipped, but every visited tile masked (measured). Triton's
# fifth is the key loop's bound one key short, which the check names from the tiles each program loads (CUDA C's
# fifth too, from the bytes of K its blocks load).
_KERNEL_ENTRIES = {
    "triton": ("06.causal_triton", ("visits-every-tile", "top-left-alignment", "nan-on-empty-rows",
                                    "masks-every-tile", "hi-one-short")),
    "cuda": ("06.causal_cuda", ("visits-every-tile", "stops-before-diagonal", "empty-rows-unwritten",
                                "masks-every-tile", "kv-end-one-short")),
}

WRONG = [
    # -- exercise 1: the mask -------------------------------------------------------------------------
    WrongSolution(_A, "causal_mask", "alignments-swapped", "uses offset 0 for bottom-right and Nk - Nq for top-left",
                  edits=(("offset = 0 if top_left else n_k - n_q", "offset = n_k - n_q if top_left else 0"),),
                  hint="the alignments are swapped"),
    WrongSolution(_A, "causal_mask", "diagonal-hidden", "hides the key on the diagonal (j < i + offset)",
                  edits=(("return j <= i + offset", "return j < i + offset"),), hint="j < i hides it"),
    WrongSolution(_A, "causal_mask", "always-top-left", "ignores the alignment and starts the diagonal at key 0",
                  edits=(("offset = 0 if top_left else n_k - n_q", "offset = 0"),),
                  hint="this is the top-left mask for both"),
    # -- exercise 2: causal attention in PyTorch --------------------------------------------------------
    WrongSolution(_A, "causal_torch", "nan-on-empty-rows", "subtracts the LSE even where it is -inf",
                  edits=(("p = torch.exp(s - safe[:, None])", "p = torch.exp(s - lse[:, None])"),),
                  hint="the NaN rows are rows that see no key"),
    WrongSolution(_A, "causal_torch", "top-left", "masks with PyTorch's top-left convention",
                  edits=(("~causal_mask(q.shape[0], k.shape[0])", "~causal_mask(q.shape[0], k.shape[0], top_left=True)"),),
                  hint="the causal mask is aligned top-left"),
    WrongSolution(_A, "causal_torch", "mask-after-softmax", "zeroes the masked probabilities after a full softmax",
                  edits=(("    s = s.masked_fill(~causal_mask(q.shape[0], k.shape[0]), -math.inf)\n", ""),
                         ("p = torch.exp(s - safe[:, None])",
                          "p = torch.exp(s - safe[:, None]) * causal_mask(q.shape[0], k.shape[0])")),
                  hint=None),
    # -- exercise 3: tile counts ----------------------------------------------------------------------
    WrongSolution(_A, "tile_counts", "top-left-counts", "counts the tiles of the top-left mask",
                  edits=(("offset = n_k - n_q", "offset = 0"),), hint="these are the top-left counts"),
    WrongSolution(_A, "tile_counts", "first-row-for-skip", "skips a tile when its first row sees none of it",
                  edits=(("if c0 > r1 + offset:", "if c0 > r0 + offset:"),),
                  hint="whether a tile is skipped is up to its last row r1"),
    WrongSolution(_A, "tile_counts", "padded-tiles", "uses the padded tile edges instead of the last real row and key",
                  edits=(("r1 = min(n_q, r0 + block_m) - 1", "r1 = r0 + block_m - 1"),
                         ("c1 = min(n_k, c0 + block_n) - 1", "c1 = c0 + block_n - 1")),
                  hint="a partial tile ends at the matrix's edge"),
    WrongSolution(_A, "tile_counts", "diagonal-as-skipped", "counts the tiles the diagonal crosses as skipped (skips "
                  "every tile that is not full)",
                  edits=(("if c0 > r1 + offset:", "if c1 > r0 + offset:"),),
                  hint="the tiles the diagonal crosses are counted as skipped"),
    WrongSolution(_A, "tile_counts", "skip-test-one-off", "skips a tile whose first key is the last row's last key "
                  "(c0 >= r1 + offset)",
                  edits=(("if c0 > r1 + offset:", "if c0 >= r1 + offset:"),), hint="the skip test is one key off"),
    WrongSolution(_A, "tile_counts", "full-test-one-off", "calls a tile full only when its last key is before the "
                  "first row's last (c1 < r0 + offset)",
                  edits=(("elif c1 <= r0 + offset:", "elif c1 < r0 + offset:"),), hint="the full test is one key off"),
    # -- exercise 4: the kernel, graded on the best track; each entry attempts one track
] + kernel_answers(_A, "causal_kernel", _KERNEL_ENTRIES)
