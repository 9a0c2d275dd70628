"""Wrong kernels for the CUDA C forward kernels (lesson 01 and the ladder, steps 02-06, in kernels/cuda/).

Each entry is a small edit of the course's own kernel file: the mistake a learner makes when writing
that step. The test suite compiles every edited file for the CPU runtime, grades it with
``course.grading.kernel_steps.check_step`` and requires it to fail with ``expect`` in the message: a missing
barrier must be reported as a data race (racecheck), an unguarded tail as an out-of-bounds access
(memcheck), a bad float4 cast as a misaligned access, not merely as a wrong number.

``checked`` says whether the mistake needs the checked launch to be seen (races and bounds); the
others show in the numbers already, and are graded with plain launches only (each build is a compile
of a few seconds; the checked launch would fail them too).
"""
from __future__ import annotations

from autograder.corpora.wrong import WrongKernel

__all__ = ["WrongCudaKernel", "WRONG_CUDA_KERNELS"]


class WrongCudaKernel(WrongKernel):
    """``key`` is the step's exercise id (course.tracks.cuda.STEPS)."""

    @property
    def exercise(self) -> str:
        return self.key

    def kernel_file(self) -> str:
        from course.tracks.cuda import STEPS
        return STEPS[self.key].kernel_file

    def grade(self):
        """Compile the edited file and grade it as its step; returns the report (raises CheckFailed)."""
        from course.grading.kernel_steps import GRADING_TILES, check_step, grading_cases

        module = self.module()
        if self.measured:
            from course.grading import techniques
            techniques.before_values(self.exercise, module)
            techniques.after_values(self.exercise, module)
        checked, plain = grading_cases(self.exercise)
        if not self.checked:  # the plain launch with the grading tiles and with the default tiles
            return check_step(self.exercise, module, checked_cases=(), plain_cases=checked + plain,
                              tiles=GRADING_TILES.get(self.exercise))
        return check_step(self.exercise, module, plain_cases=())


_W = WrongCudaKernel

WRONG_CUDA_KERNELS: list[WrongCudaKernel] = [
    # -- 01: one thread per row, two passes over the keys -----------------------------------------
    _W("01.naive_cuda", "unguarded-row", "lets the spare threads of the last block read past the end of q",
       (("    if (row >= n_q) return;  // the last block may have more threads than rows\n", ""),),
       expect="out-of-bounds read of `q`", checked=True, hint=None),
    _W("01.naive_cuda", "pass2-without-max", "exponentiates the raw scores in pass 2, which overflows on peaky rows",
       (("const float p = expf(score * scale - m);", "const float p = expf(score * scale);"),),
       hint="exp() leaves float32's range on these rows, whose scores reach the hundreds"),
    _W("01.naive_cuda", "max-without-scale", "takes the max of the unscaled scores in pass 1, so every weight "
       "underflows on peaky rows",
       (("m = fmaxf(m, dot * scale);", "m = fmaxf(m, dot);"),),
       hint="exp() leaves float32's range on these rows, whose scores reach the hundreds"),
    _W("01.naive_cuda", "last-key-skipped", "stops pass 2 one key early",
       (("for (int j = 0; j < n_k; ++j) {\n        const float* k_row = k + (size_t)j * d;\n        float score",
         "for (int j = 0; j + 1 < n_k; ++j) {\n        const float* k_row = k + (size_t)j * d;\n        float score"),),
       hint=None),
    # -- 02: one warp per row --------------------------------------------------------------------
    _W("02.online_softmax_cuda", "missing-rescale", "adds each chunk to l and acc without rescaling them to the new max",
       (("const float correction = expf(m - m_new);       // 0 on the first chunk, where m = -inf",
         "const float correction = 1.0f;"),), hint="l and acc are not rescaled when the max grows"),
    _W("02.online_softmax_cuda", "lane-max", "uses each lane's own score as the max instead of the warp's",
       (("const float m_new = fmaxf(m, warp_max(score));", "const float m_new = fmaxf(m, score);"),), hint=None),
    _W("02.online_softmax_cuda", "half-warp-sum", "starts the butterfly at offset 8, so l sums 16 lanes, not 32",
       (("for (int offset = WARP / 2; offset > 0; offset /= 2) x += __shfl_xor_sync",
         "for (int offset = WARP / 4; offset > 0; offset /= 2) x += __shfl_xor_sync"),), hint=None),
    _W("02.online_softmax_cuda", "tail-lanes-unguarded", "lets the lanes past the last key read K rows that do not exist",
       (("        if (j < n_k) {\n            const float* k_row", "        {\n            const float* k_row"),),
       expect="out-of-bounds read of `k`", checked=True, hint=None),
    # -- 03: tiled ---------------------------------------------------------------------------------
    _W("03.tiled_cuda", "no-barrier-before-load", "overwrites the K/V tile while other warps still read the last one",
       (("        __syncthreads();  // every warp is done with the previous tile (and Q is complete)\n", ""),),
       expect="data race", checked=True, hint=None),
    _W("03.tiled_cuda", "no-barrier-after-load", "reads the K/V tile before every thread has finished copying it",
       (("        __syncthreads();  // the tile is complete\n", ""),), expect="data race", checked=True, hint=None),
    _W("03.tiled_cuda", "barrier-in-branch", "waits for the K/V tile in the first warp only, so the other warps "
       "read it unfinished and never reach that barrier",
       (("        __syncthreads();  // the tile is complete\n",
         "        if (threadIdx.x < WARP) __syncthreads();  // the tile is complete\n"),),
       expect=r"divergent barrier in block .*passed it without waiting", hint=None),
    _W("03.tiled_cuda", "tile-tail-unguarded", "copies a whole tile even when it runs past the last key",
       (("const bool in = key < n_k;  // the last tile may run past the last key", "const bool in = true;"),),
       expect="out-of-bounds read of `k`", checked=True, hint=None),
    _W("03.tiled_cuda", "missing-rescale", "never rescales acc when the max grows",
       (("for (int s = 0; s < SLOTS; ++s) acc[s] *= correction;", "for (int s = 0; s < SLOTS; ++s) acc[s] *= 1.0f;"),),
       hint="acc is not rescaled"),
    _W("03.tiled_cuda", "lse-without-max", "writes log(l) as the LSE, forgetting the running max",
       (("lse[head * n_q + row] = l > 0.0f ? m + logf(l) : NEG_INF;",
         "lse[head * n_q + row] = l > 0.0f ? logf(l) : NEG_INF;"),), expect="wrong LSE",
       hint="the running max m_i is missing"),
    # -- 04: float4 and double buffering ---------------------------------------------------------
    _W("04.double_buffer_cuda", "float4-offset-in-floats", "adds the float4 index to a float pointer, then casts",
       (("kv = reinterpret_cast<const float4*>(k + (size_t)key * d)[c4];",
         "kv = *reinterpret_cast<const float4*>(k + (size_t)key * d + c4);"),),
       expect="misaligned float4 load", hint=None),
    _W("04.double_buffer_cuda", "prefetch-into-current", "loads the next tile into the buffer being computed on",
       (("load_tile(k_bufs + (cur ^ 1) * k_size, v_bufs + (cur ^ 1) * v_size,",
         "load_tile(k_bufs + cur * k_size, v_bufs + cur * v_size,"),), expect="data race", checked=True, hint=None),
    _W("04.double_buffer_cuda", "no-barrier", "drops the one barrier per tile, trusting the two buffers alone",
       (("        __syncthreads();  // tile t + 1 is complete, and buffer `cur` is free for tile t + 2\n", ""),),
       expect="data race", checked=True, hint=None),
    _W("04.double_buffer_cuda", "missing-rescale", "never rescales the float4 accumulator when the max grows",
       (("            acc.x *= correction;\n            acc.y *= correction;\n            acc.z *= correction;\n"
         "            acc.w *= correction;\n", ""),), hint="acc is not rescaled"),
    _W("04.double_buffer_cuda", "tile-tail-unguarded", "copies a whole tile even when it runs past the last key",
       (("        if (key < n_k) {\n            kv =", "        {\n            kv ="),),
       expect="out-of-bounds read of `k`", checked=True, hint=None),
    # Right numbers, the lesson's point missing: measured in the barriers and load widths (course.grading.pipelining).
    _W("04.double_buffer_cuda", "single-buffer", "loads each tile into the one buffer it then reads: two barriers a tile",
       (("    load_tile(k_bufs, v_bufs, k, v, 0, n_k, d, block_n);\n    __syncthreads();  // Q and tile 0 are complete\n",
         ""),
        ("        if (t + 1 < n_tiles)\n            load_tile(k_bufs + (cur ^ 1) * k_size, v_bufs + (cur ^ 1) * v_size, k, v, "
         "j0 + block_n, n_k, d, block_n);\n",
         "        load_tile(k_bufs, v_bufs, k, v, j0, n_k, d, block_n);\n        __syncthreads();  // tile t is complete\n"),
        ("const float* k_tile = k_bufs + cur * k_size;", "const float* k_tile = k_bufs;"),
        ("reinterpret_cast<const float4*>(v_bufs + cur * v_size);", "reinterpret_cast<const float4*>(v_bufs);")),
       expect=r"reached 10 barriers \(__syncthreads\(\)\) where ping-pong buffers need at most 6",
       hint="into the other buffer", measured=True),
    _W("04.double_buffer_cuda", "scalar-loads", "reads K and V a float at a time and packs the float4 itself",
       (("kv = reinterpret_cast<const float4*>(k + (size_t)key * d)[c4];",
         "const float* kr = k + (size_t)key * d + 4 * c4;\n            kv = make_float4(kr[0], kr[1], kr[2], kr[3]);"),
        ("vv = reinterpret_cast<const float4*>(v + (size_t)key * d)[c4];",
         "const float* vr = v + (size_t)key * d + 4 * c4;\n            vv = make_float4(vr[0], vr[1], vr[2], vr[3]);")),
       expect=r"reads K from device memory 4 bytes per thread per load", hint=None, measured=True),
    # -- 05: tensor cores ------------------------------------------------------------------------
    _W("05.mma_cuda", "accumulator-not-rescaled", "rescales l but never the O fragments it spilled to shared memory",
       (("        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n", ""),), hint="acc is not rescaled"),
    _W("05.mma_cuda", "no-syncwarp-before-reload", "reloads the accumulator before every lane has scaled its rows",
       (("        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n        __syncwarp();\n",
         "        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n"),), expect="data race", checked=True,
       hint=None),
    _W("05.mma_cuda", "no-syncwarp-after-spill", "scales rows of the spilled accumulator before the warp's "
       "store_matrix_sync is known to be complete",
       (("        __syncwarp();\n        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;",
         "        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;"),), expect="data race", checked=True,
       hint=None),
    _W("05.mma_cuda", "k-row-major", "loads the K tile as a row-major matrix_b, which multiplies by K, not Kᵀ",
       (("typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> FragKt;",
         "typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> FragKt;"),), hint=None),
    _W("05.mma_cuda", "padded-keys-count", "lets the zero-padded keys of the last tile into the softmax",
       (("        const int keys = min(block_n, n_k - j0);\n", "        const int keys = block_n;\n"),),
       hint="padding keys of the last block count"),
    _W("05.mma_cuda", "sum-not-rescaled", "rescales the accumulator but not the row sum l",
       (("l = l * alpha + sum;", "l = l + sum;"),), hint="l is not rescaled"),
    # Right numbers, the lesson's point missing: measured in the matrix operations the launch runs (course.grading.matrix_units).
    _W("05.mma_cuda", "pv-scalar-loop", "adds P V to the spilled accumulator with a loop of multiply-adds while "
       "scaling it, and drops the wmma product of P and V",
       (("        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n",
         "        for (int c = half_id; c < d; c += 2) {  // O = alpha O + P V, one column at a time\n"
         "            float pv = 0.0f;\n"
         "            for (int j = 0; j < keys; ++j) pv += __half2float(p_row[j]) * __half2float(v_tile[j * ldh + c]);\n"
         "            o_row[c] = o_row[c] * alpha + pv;\n"
         "        }\n"),
        ("        // 4. O += P V.\n"
         "        for (int k0 = 0; k0 < block_n; k0 += 16) {\n"
         "            FragA p;\n"
         "            wmma::load_matrix_sync(p, p_strip + k0, ldp);\n"
         "#pragma unroll\n"
         "            for (int f = 0; f < FRAGS; ++f) {\n"
         "                if (f * 16 < d) {\n"
         "                    FragV b;\n"
         "                    wmma::load_matrix_sync(b, v_tile + k0 * ldh + f * 16, ldh);\n"
         "                    wmma::mma_sync(acc[f], p, b, acc[f]);\n"
         "                }\n"
         "            }\n"
         "        }\n",
         "        // 4. O += P V: added above, as the rows are scaled.\n")),
       expect=r"your kernel ran 12 matrix operations \(wmma::mma_sync, all at line \d+ of 05_mma\.cu\) where the two "
              r"products of the 6 key tiles its blocks visit need at least 24 .*one product's worth", hint=None,
       measured=True),
    # -- 06: causal ------------------------------------------------------------------------------
    _W("06.causal_cuda", "mask-off-by-one", "masks j < i + offset instead of j <= i + offset, hiding the diagonal key",
       (("min(keys, row + offset - j0 + 1)", "min(keys, row + offset - j0)"),),
       hint="a causal mask that hides the diagonal gives zeros too"),
    _W("06.causal_cuda", "top-left-alignment", "aligns the mask top-left (offset 0), wrong whenever Nq != Nk",
       (("const int offset = n_k - n_q;  // query i sees keys j <= i + offset", "const int offset = 0;"),),
       hint="aligned top-left"),
    _W("06.causal_cuda", "stops-before-diagonal", "ends the tile loop at the block's first row's last key",
       (("min(n_k, row0 + block_m + offset)", "min(n_k, row0 + 1 + offset)"),), hint=None),
    # Right numbers, the lesson's point missing: measured in the bytes of K the launch loads (course.grading.causal_tiles).
    _W("06.causal_cuda", "visits-every-tile", "leaves kv_end at n_k, visiting every key tile and masking the future",
       (("    if (causal) kv_end = max(0, min(n_k, row0 + block_m + offset));\n", ""),),
       expect=r"query rows 0–31 loaded key tiles 2–3 \(keys 32–63\), which lie wholly in the future", hint=None,
       measured=True),
    _W("06.causal_cuda", "tile-range-top-left", "ends the tile loop at the block's last row, top-left aligned",
       (("min(n_k, row0 + block_m + offset)", "min(n_k, row0 + block_m)"),), expect="wholly in the future|never loaded",
       hint="aligned top-left", measured=True),
    # Right numbers, future tiles skipped, but the element-wise mask on every visited tile: measured by running the
    # softmax with the mask's offset moved away after the given `diagonal` flag (course.grading.causal_masks).
    _W("06.causal_cuda", "masks-every-tile", "applies the element-wise mask on every visited tile, not only where "
       "the given `diagonal` flag holds",
       (("const int visible = diagonal ? min(keys, row + offset - j0 + 1) : keys;",
         "const int visible = causal ? min(keys, row + offset - j0 + 1) : keys;"),),
       expect=r"the block for query rows 32–63 masked 4 key tiles, of which only 2 cross the diagonal: key tiles "
              r"0–1 \(keys 0–31\) are seen whole",
       hint="only when `diagonal` is true", measured=True),
    _W("06.causal_cuda", "only-last-tile-masked", "masks only the last tile, though the diagonal crosses several",
       (("const bool diagonal = causal && j0 + block_n - 1 > row0 + offset;",
         "const bool diagonal = causal && t == n_tiles - 1;"),), hint=None),
    # kv_end one key off at either end: named from the bytes of K on every probe (course.grading.causal_tiles).
    _W("06.causal_cuda", "kv-end-one-short", "ends the tile loop at the last key the block's last row sees, not one "
       "past it",
       (("min(n_k, row0 + block_m + offset)", "min(n_k, row0 + block_m + offset - 1)"),),
       expect=r"on Nq=48, Nk=65(.|\n)*the block for query rows 0–31 never loaded key tile 3 \(keys 48–63\)",
       hint="the tile loop stops one key early", measured=True),
    _W("06.causal_cuda", "kv-end-one-long", "ends the tile loop one key past the end of the block's last row",
       (("min(n_k, row0 + block_m + offset)", "min(n_k, row0 + block_m + offset + 1)"),),
       expect=r"the block for query rows 0–31 loaded key tile 2 \(keys 32–47\), which lies wholly in the future",
       hint="the tile loop runs one key too far", measured=True),
    _W("06.causal_cuda", "missing-rescale", "rescales l but not the spilled accumulator when the max grows",
       (("        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n", ""),), hint="acc is not rescaled"),
    _W("06.causal_cuda", "no-syncwarp-after-spill", "scales the spilled accumulator rows before the warp's store is "
       "known to be complete (other lanes stored those elements)",
       (("        __syncwarp();\n        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n",
         "        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;\n"),), expect=r"data race", checked=True,
       hint=None),
    _W("06.causal_cuda", "empty-rows-unwritten", "skips the O write of a row that sees no key, as if O started as zeros",
       (("        for (int c = half_id; c < d; c += 2) out[c] = o_row[c] * inv_l;",
         "        if (l > 0.0f) for (int c = half_id; c < d; c += 2) out[c] = o_row[c] * inv_l;"),), expect="NaN",
       hint="rows that see no key"),
    _W("06.causal_cuda", "nan-on-empty-rows", "subtracts m even while it is -inf: exp(-inf - (-inf)) is NaN",
       (("const float m_use = m_new == NEG_INF ? 0.0f : m_new;", "const float m_use = m_new;"),), expect="NaN",
       hint="rows that see no key"),
]
