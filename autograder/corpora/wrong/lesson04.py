"""Wrong answers for lesson 04 (float4 loads and double buffering)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "04_double_buffering"
_LOOP = "for start_n in tl.range(0, N_CTX_K, BLOCK_N):"

# Three mistakes per track from the kernel-file corpora, each also tested there against the file; CUDA C and Metal
# add a lazy kernel (right numbers, the lesson's technique missing), which only the measurement catches; Triton's is
# a loop the compiler does not pipeline (read off the compiled kernel). Metal's last three are a learner's near misses
# in the ping-pong loop: one tile short, the diagonal masked, the barrier after the prefetch instead of before.
_KERNEL_ENTRIES = {
    "triton": ("04.double_buffer_triton", ("missing-rescale", "descriptor-padding-unmasked", "lse-in-base-2",
                                           "single-stage")),
    "cuda": ("04.double_buffer_cuda", ("prefetch-into-current", "no-barrier", "missing-rescale", "single-buffer")),
    "metal": ("04.double_buffer_metal", ("no-barrier", "prefetch-into-current", "float4-at-float-offset",
                                         "scalar-loads", "loop-one-tile-short", "mask-off-by-one",
                                         "barrier-after-prefetch")),
}

WRONG = [
    # -- exercise 1: sectors of a warp's access ---------------------------------------------------------
    WrongSolution(_A, "warp_sectors", "bytes-over-32", "divides the bytes asked for by 32",
                  source="def warp_sectors(offset_bytes, stride_bytes, access_bytes):\n"
                         "    return math.ceil(32 * access_bytes / 32)\n",
                  hint="not the bytes they ask for divided by 32"),
    WrongSolution(_A, "warp_sectors", "span", "counts every sector from the first byte to the last",
                  source="def warp_sectors(offset_bytes, stride_bytes, access_bytes):\n"
                         "    last = offset_bytes + 31 * stride_bytes + access_bytes - 1\n"
                         "    return last // 32 - offset_bytes // 32 + 1\n",
                  hint="sectors that no lane touches are not moved"),
    WrongSolution(_A, "warp_sectors", "offset-forgotten", "leaves the offset out, as if every access started a sector",
                  edits=(("first = offset_bytes + lane * stride_bytes", "first = lane * stride_bytes"),),
                  hint="the offset matters"),
    WrongSolution(_A, "warp_sectors", "start-sector-only", "counts only the sector where each lane's access starts",
                  edits=(("sectors.update(range(first // 32, last // 32 + 1))", "sectors.add(first // 32)"),),
                  hint="straddle a sector boundary"),
    WrongSolution(_A, "warp_sectors", "visible-table", "answers from a table of the visible check's arguments",
                  source="def warp_sectors(offset_bytes, stride_bytes, access_bytes):\n"
                         "    seen = {(0, 4, 4): 4, (4, 4, 4): 5, (0, 16, 16): 16, (8, 16, 16): 17, (0, 256, 4): 32,\n"
                         "            (0, 8, 4): 8, (64, 0, 4): 1, (16, 16, 16): 17}\n"
                         "    return seen.get((offset_bytes, stride_bytes, access_bytes), 0)\n",
                  hint=None),
    # -- exercise 2: bank conflicts of a column walk ------------------------------------------------------
    WrongSolution(_A, "bank_ways", "padding-ignored", "leaves the padding out of the row stride",
                  edits=(("stride = row_floats + pad_floats", "stride = row_floats"),),
                  hint="the padding is part of the row"),
    WrongSolution(_A, "bank_ways", "all-or-nothing", "thinks a stride either conflicts fully or not at all",
                  source="def bank_ways(row_floats, pad_floats):\n"
                         "    return 32 if (row_floats + pad_floats) % 32 == 0 else 1\n",
                  hint="conflicts are not all or nothing"),
    WrongSolution(_A, "bank_ways", "banks-used", "returns how many banks the warp uses",
                  edits=(("return max(len(words) for words in words_per_bank.values())", "return len(words_per_bank)"),),
                  hint="32 divided by that"),
    # -- exercise 3: the kernel, graded on the best track; each entry attempts one track
    # Near misses of the Triton loop, each named by its hint (the first case has Nq = Nk = 1: one key, one block).
    WrongSolution(_A, "double_buffer_kernel_triton", "loop-stops-one-key-short",
                  "ends the loop over key blocks one key early, so with one key it never runs",
                  edits=((_LOOP, "for start_n in tl.range(0, N_CTX_K - 1, BLOCK_N):"),),
                  hint="the loop over the key blocks never ran"),
    WrongSolution(_A, "double_buffer_kernel_triton", "loop-starts-one-block-late",
                  "starts the loop over key blocks at BLOCK_N, skipping the first block",
                  edits=((_LOOP, "for start_n in tl.range(BLOCK_N, N_CTX_K, BLOCK_N):"),),
                  hint="the loop over the key blocks never ran"),
    WrongSolution(_A, "double_buffer_kernel_triton", "mask-keeps-one-key-past-the-end",
                  "masks the keys with <= N_CTX_K, so the first padding key (score 0) counts",
                  edits=(("(start_n + offs_n < N_CTX_K)", "(start_n + offs_n <= N_CTX_K)"),),
                  hint="one key past the last counts in the softmax"),
    WrongSolution(_A, "double_buffer_kernel_triton", "keys-masked-at-nq",
                  "masks the keys against N_CTX_Q, the number of queries",
                  edits=(("(start_n + offs_n < N_CTX_K)", "(start_n + offs_n < N_CTX_Q)"),),
                  hint="only the first Nq keys count"),
    WrongSolution(_A, "double_buffer_kernel_triton", "rescale-factor-inverted",
                  "rescales with exp2(m_new − m_old), the inverse of the factor, which is inf on the first step",
                  edits=(("alpha = tl.exp2(m - m_safe)", "alpha = tl.exp2(m_safe - m)"),),
                  hint="the first rescale multiplied l = 0 by inf"),
    WrongSolution(_A, "double_buffer_kernel_triton", "max-never-updated",
                  "never stores m_new back into m, so the LSE is written with m = −inf",
                  edits=(("        m = m_new\n", ""),),
                  hint="Is m updated to m_new at the end of every step?"),
] + kernel_answers(_A, "double_buffer_kernel", _KERNEL_ENTRIES)
