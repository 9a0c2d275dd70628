"""Wrong answers for lesson 03 (tiling)."""
from autograder.corpora.wrong import WrongSolution
from autograder.corpora.wrong.track_entries import kernel_answers

_A = "03_tiling"

# Three mistakes per track from the kernel-file corpora (each is tested there against the file too): a
# race or a forgotten rescale, and the LSE without the running max, which only the LSE check sees.
_KERNEL_ENTRIES = {
    "triton": ("03.tiled_triton", ("missing-rescale", "tail-keys-unmasked", "lse-without-max")),
    "cuda": ("03.tiled_cuda", ("no-barrier-before-load", "missing-rescale", "lse-without-max")),
    "metal": ("03.tiled_metal", ("no-barrier-after-load", "missing-rescale", "lse-without-max")),
}

WRONG = [
    # -- exercise 1: the tiled forward in PyTorch -----------------------------------------------------
    WrongSolution(_A, "tiled_torch", "acc-not-rescaled", "rescales l but not the accumulator when the max grows",
                  edits=(("acc = acc * alpha[:, None] + p @ v_j", "acc = acc + p @ v_j"),),
                  hint="acc is not rescaled when the max grows"),
    WrongSolution(_A, "tiled_torch", "lse-without-max", "writes log(l) as the LSE, forgetting the running max",
                  edits=(("lse[i0:i0 + rows] = m + torch.log(l)", "lse[i0:i0 + rows] = torch.log(l)"),),
                  hint="the running max m_i is missing"),
    WrongSolution(_A, "tiled_torch", "strip-of-all-keys", "softmaxes a strip of block_m rows by every key at once",
                  edits=(("        for j0 in range(0, n_k, block_n):", "        for j0 in range(0, n_k, n_k):"),
                         ("k_j, v_j = k[j0:j0 + block_n].float(), v[j0:j0 + block_n].float()",
                          "k_j, v_j = k.float(), v.float()")),
                  hint="loop over K/V tiles of block_n keys"),
    WrongSolution(_A, "tiled_torch", "rows-one-by-one", "walks the queries one row at a time instead of block_m",
                  edits=(("for i0 in range(0, n_q, block_m):", "for i0 in range(0, n_q):"),
                         ("q_i = q[i0:i0 + block_m].float()", "q_i = q[i0:i0 + 1].float()")),
                  hint=None),
    # -- exercise 2: traffic of the tiled kernel -------------------------------------------------------
    WrongSolution(_A, "tiled_bytes", "floor-programs", "counts Nq // BLOCK_M programs, dropping the partial tile",
                  edits=(("programs = math.ceil(n_q / block_m)", "programs = n_q // block_m"),),
                  hint="ceil(Nq / BLOCK_M) programs"),
    WrongSolution(_A, "tiled_bytes", "kv-read-once", "reads K and V once in total, as if one program held every row",
                  edits=(("programs * 2 * n_k * d", "2 * n_k * d"),), hint="once per *query tile*"),
    WrongSolution(_A, "tiled_bytes", "lse-in-input-dtype", "stores the LSE in the input dtype",
                  edits=(("+ 4 * n_q", "+ bytes_per_element * n_q"),), hint="LSE is stored as float32"),
    # -- exercise 3: shared memory of a block ----------------------------------------------------------
    WrongSolution(_A, "shared_bytes", "no-padding", "forgets the float of padding on each K row",
                  edits=(("k_tile = block_n * (d + 1)", "k_tile = block_n * d"),), hint="padded by one float"),
    WrongSolution(_A, "shared_bytes", "no-q-tile", "leaves the Q tile out of shared memory",
                  edits=(("return 4 * (q_tile + k_tile + v_tile)", "return 4 * (k_tile + v_tile)"),),
                  hint="the Q tile lives in shared memory too"),
    WrongSolution(_A, "shared_bytes", "floats-not-bytes", "counts floats instead of bytes",
                  edits=(("return 4 * (q_tile + k_tile + v_tile)", "return q_tile + k_tile + v_tile"),),
                  hint="bytes, not floats"),
    # -- exercise 4: the kernel, graded on the best track; each entry attempts one track
] + kernel_answers(_A, "tiled_kernel", _KERNEL_ENTRIES)
