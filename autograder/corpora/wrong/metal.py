"""Wrong kernels for the Metal track (kernels/metal/01-07).

Each entry is a small edit of the course's own kernel file: a mistake a learner makes when writing that
step. The test suite compiles every edited file for the CPU runtime, grades it with
``course.grading.kernel_steps.check_step`` (lessons 01 and 02, one thread per row, as CUDA's lesson 01)
and requires it to fail with ``expect`` in the message: a missing
threadgroup_barrier or a plain `+=` where threadgroups add into the same dQ must be reported as a data
race (racecheck), an unguarded tail as an out-of-bounds access (memcheck), a float4 read at a float
offset as a misaligned access, not merely as a wrong number that luck could hide.

``checked`` says whether the mistake needs the checked launch (memcheck + racecheck, random schedule)
to be seen; the others show in the numbers, and are graded with a plain launch of the same small
cases and small tiles (each edited file is a compile of a few seconds; one build per entry).
"""
from __future__ import annotations

from autograder.corpora.wrong import WrongKernel

__all__ = ["WrongMetalKernel", "WRONG_METAL_KERNELS"]


class WrongMetalKernel(WrongKernel):
    """``key`` is the step's exercise id (course.tracks.table; lessons 01 and 02, one thread per row, launch
    through course.tracks.cuda, the others through course.tracks.metal)."""

    language = "metal"

    @property
    def exercise(self) -> str:
        return self.key

    def kernel_file(self) -> str:
        from course.tracks import table
        return table.exercise(self.key).kernel_file

    def grade(self, module=None):
        """Grade the edited file as its step on the small grading cases; returns the report (raises CheckFailed)."""
        from course.grading.kernel_steps import GRADING_TILES, check_step, grading_cases
        from course.lessons.lesson07 import SPLIT_DQ, explain_split_dq

        module = module or self.module()
        if self.measured:
            from course.grading import techniques
            techniques.before_values(self.exercise, module)
            techniques.after_values(self.exercise, module)
        small, _ = grading_cases(self.exercise)  # one thread per row (01, 02): CUDA's lesson-01 launch and cases
        if self.checked:
            run = lambda: check_step(self.exercise, module, plain_cases=())  # noqa: E731  (the default checked cases)
        else:
            run = lambda: check_step(self.exercise, module, checked_cases=(), plain_cases=small,  # noqa: E731
                                     tiles=GRADING_TILES.get(self.exercise))
        if self.exercise in SPLIT_DQ:  # a failure of the split dQ kernel is explained as course.check explains it
            return explain_split_dq(self.exercise, module, run)
        return run()


_W = WrongMetalKernel
RACE = r"data race"
ONE_SIMDGROUP = r"data race .* in simdgroups \d+ and \d+: a simdgroup_barrier makes only the lanes of one simdgroup meet"

WRONG_METAL_KERNELS: list[WrongMetalKernel] = [
    # -- 01: one thread per row, two passes over the keys -----------------------------------------
    _W("01.naive_metal", "unguarded-row", "lets the spare threads of the rounded-up dispatch read past q",
       (("    if (row >= n_q) return;  // the dispatch is rounded up to whole threadgroups\n", ""),),
       expect=r"out-of-bounds read of `q`", checked=True, hint=None),
    _W("01.naive_metal", "pass2-without-max", "exponentiates the raw scores in pass 2, which overflows on peaky rows",
       (("const float p = exp(score * scale - m);", "const float p = exp(score * scale);"),),
       hint="exp() leaves float32's range on these rows, whose scores reach the hundreds"),
    _W("01.naive_metal", "max-without-scale", "takes the max of the unscaled scores in pass 1, so every weight "
       "underflows on peaky rows",
       (("m = max(m, dot * scale);", "m = max(m, dot);"),),
       hint="exp() leaves float32's range on these rows, whose scores reach the hundreds"),
    # -- 02: one thread per row, one sweep (the online softmax) -----------------------------------
    _W("02.online_softmax_metal", "acc-not-rescaled", "rescales l but not acc when the max grows",
       (("acc[c] = acc[c] * correction + p * v_row[c];", "acc[c] = acc[c] + p * v_row[c];"),),
       hint="acc is not rescaled when the max grows"),
    _W("02.online_softmax_metal", "sum-not-rescaled", "rescales acc but not the row sum l",
       (("l = l * correction + p;", "l = l + p;"),), hint="l is not rescaled when the max grows"),
    _W("02.online_softmax_metal", "stale-max", "computes the new max but never keeps it, so every key wipes out "
       "the ones before",
       (("        m = m_new;\n", ""),), hint="only the last step's keys count"),
    _W("02.online_softmax_metal", "unguarded-row", "lets the spare threads of the rounded-up dispatch read past q",
       (("    if (row >= n_q) return;  // the dispatch is rounded up to whole threadgroups\n", ""),),
       expect=r"out-of-bounds read of `q`", checked=True, hint=None),
    # -- 03: tiled --------------------------------------------------------------------------------
    _W("03.tiled_metal", "no-barrier-after-load", "reads the K/V tile before every thread has finished copying it",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n", ""),),
       expect=RACE, checked=True, hint=None),
    _W("03.tiled_metal", "no-barrier-before-load", "overwrites the K/V tile while other threads still read the last one",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // done with the previous tile (and Q is complete)\n",
         ""),), expect=RACE, checked=True, hint=None),
    _W("03.tiled_metal", "barrier-in-branch", "waits for the tile only in the first half of the threadgroup, "
       "so the other threads read it unfinished and never reach that barrier",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n",
         "        if (tid < block_m / 2) threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n"),),
       expect=r"divergent barrier in block .*passed it without waiting", hint=None),
    # A simdgroup_barrier meets only the 32 lanes of one simdgroup: the check's case of two simdgroups per
    # threadgroup (the row's two_group_tiles) shows the race the grading tiles, one simdgroup each, cannot.
    _W("03.tiled_metal", "simdgroup-barrier", "waits for the tile with a simdgroup_barrier, which the other "
       "simdgroups of the threadgroup do not reach",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n",
         "        simdgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n"),),
       expect=ONE_SIMDGROUP, checked=True, hint=None),
    _W("03.tiled_metal", "empty-rows-unwritten", "skips the O write of a row that sees no key, as if O started as zeros",
       (("        for (uint c = 0; c < d; ++c) o_row[c] = acc[c] * inv_l;",
         "        if (l > 0.0f) for (uint c = 0; c < d; ++c) o_row[c] = acc[c] * inv_l;"),), expect="NaN",
       hint="rows that see no key"),
    _W("03.tiled_metal", "tile-tail-unguarded", "copies a whole tile even when it runs past the last key",
       (("const bool in = key < n_k;  // the last tile may run past the last key", "const bool in = true;"),),
       expect=r"out-of-bounds read of `k`", checked=True, hint=None),
    _W("03.tiled_metal", "missing-rescale", "rescales l but not acc when the max grows",
       (("        for (uint c = 0; c < d; ++c) acc[c] *= correction;\n", ""),), hint="acc is not rescaled"),
    _W("03.tiled_metal", "mask-off-by-one", "masks j < i + offset, hiding the key on the diagonal",
       (("int(j0 + jj) <= int(row) + offset", "int(j0 + jj) < int(row) + offset"),),
       hint="the causal mask hides the diagonal"),
    _W("03.tiled_metal", "lse-without-max", "writes log(l) as the LSE, forgetting the running max",
       (("l > 0.0f ? m + log(l) : -INFINITY", "l > 0.0f ? log(l) : -INFINITY"),), expect=r"wrong LSE",
       hint="the running max m_i is missing"),
    # -- 04: float4 and ping-pong -----------------------------------------------------------------
    _W("04.double_buffer_metal", "no-barrier", "drops the one barrier per tile, trusting the two buffers alone",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete; tile t - 1 is no longer read\n",
         ""),), expect=RACE, checked=True, hint=None),
    _W("04.double_buffer_metal", "simdgroup-barrier", "meets at a simdgroup_barrier where the whole threadgroup "
       "must wait for the tile",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete; tile t - 1 is no longer read\n",
         "        simdgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete; tile t - 1 is no longer read\n"),),
       expect=ONE_SIMDGROUP, checked=True, hint=None),
    _W("04.double_buffer_metal", "prefetch-into-current", "copies the next tile into the buffer being computed on",
       (("load_tile(k_tiles + (cur ^ 1) * buffer_size, v_tiles + (cur ^ 1) * buffer_size,",
         "load_tile(k_tiles + cur * buffer_size, v_tiles + cur * buffer_size,"),), expect=RACE, checked=True,
       hint=None),
    _W("04.double_buffer_metal", "float4-at-float-offset", "adds the float4 index to a float pointer, then casts to float4",
       (("k_dst[i] = in ? k[ulong(key) * d4 + i % d4] : float4(0.0f);",
         "k_dst[i] = in ? *(device const float4*)((device const float*)k + ulong(key) * d4 + i % d4) : float4(0.0f);"),),
       expect=r"misaligned float4 read", hint=None),
    _W("04.double_buffer_metal", "missing-rescale", "rescales l but not the float4 accumulator when the max grows",
       (("        for (uint c4 = 0; c4 < d4; ++c4) acc[c4] *= correction;\n", ""),), hint="acc is not rescaled"),
    # Right numbers, the lesson's point missing: measured in the barriers and load widths (course.grading.pipelining).
    _W("04.double_buffer_metal", "single-buffer", "loads each tile into the one buffer it then reads: two barriers a tile",
       (("    if (n_tiles > 0) load_tile(k_tiles, v_tiles, kh, vh, 0, block_n, n_k, d4, tid, block_m);\n", ""),
        ("        if (t + 1 < n_tiles) {\n            load_tile(k_tiles + (cur ^ 1) * buffer_size, v_tiles + (cur ^ 1) * "
         "buffer_size, kh, vh,\n                      j0 + block_n, block_n, n_k, d4, tid, block_m);\n        }\n"
         "        threadgroup const float4* k_tile = k_tiles + cur * buffer_size;\n"
         "        threadgroup const float4* v_tile = v_tiles + cur * buffer_size;\n",
         "        load_tile(k_tiles, v_tiles, kh, vh, j0, block_n, n_k, d4, tid, block_m);\n"
         "        threadgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete\n"
         "        threadgroup const float4* k_tile = k_tiles;\n"
         "        threadgroup const float4* v_tile = v_tiles;\n")),
       expect=r"reached 40 barriers \(threadgroup_barrier\) where ping-pong buffers need at most 21",
       hint="into the other buffer", measured=True),
    _W("04.double_buffer_metal", "scalar-loads", "reads K and V a float at a time and packs the float4 itself",
       (("k_dst[i] = in ? k[ulong(key) * d4 + i % d4] : float4(0.0f);",
         "device const float* kf = (device const float*)(k + ulong(key) * d4 + i % d4);\n"
         "        k_dst[i] = in ? float4(kf[0], kf[1], kf[2], kf[3]) : float4(0.0f);"),
        ("v_dst[i] = in ? v[ulong(key) * d4 + i % d4] : float4(0.0f);",
         "device const float* vf = (device const float*)(v + ulong(key) * d4 + i % d4);\n"
         "        v_dst[i] = in ? float4(vf[0], vf[1], vf[2], vf[3]) : float4(0.0f);")),
       expect=r"reads K from device memory 4 bytes per thread per load", hint=None, measured=True),
    # A bound one off at either end, and the barrier moved after the prefetch.
    _W("04.double_buffer_metal", "loop-one-tile-short", "ends the tile loop one tile early: the last tile is "
       "loaded into its buffer but never computed on",
       (("for (uint t = 0; t < n_tiles; ++t) {", "for (uint t = 0; t + 1 < n_tiles; ++t) {"),),
       hint="a loop over the keys (or key tiles) that stops one early never reaches it"),
    _W("04.double_buffer_metal", "keys-one-short", "counts one key less in every tile (keys = kv_end - j0 - 1)",
       (("const uint keys = min(block_n, kv_end - j0);", "const uint keys = min(block_n, kv_end - j0 - 1);"),),
       hint="a loop over the keys (or key tiles) that stops one early never reaches it"),
    _W("04.double_buffer_metal", "keys-one-past", "counts one key past the end of the last tile, a zero padding key",
       (("const uint keys = min(block_n, kv_end - j0);", "const uint keys = min(block_n, kv_end - j0 + 1);"),),
       hint="one key past the last counts in the softmax"),
    _W("04.double_buffer_metal", "mask-off-by-one", "masks j < i + offset in both passes over the tile, hiding the "
       "diagonal key",
       (("            const bool visible = !causal || int(j0 + jj) <= int(row) + offset;\n"
         "            if (visible) tile_max",
         "            const bool visible = !causal || int(j0 + jj) < int(row) + offset;\n"
         "            if (visible) tile_max"),
        ("            const bool visible = !causal || int(j0 + jj) <= int(row) + offset;\n"
         "            if (!visible) continue;",
         "            const bool visible = !causal || int(j0 + jj) < int(row) + offset;\n"
         "            if (!visible) continue;")),
       hint="the causal mask hides the diagonal"),
    _W("04.double_buffer_metal", "barrier-after-prefetch", "waits at the barrier after copying the next tile "
       "instead of before: the copy overwrites the buffer other threads still read",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete; tile t - 1 is no longer "
         "read\n", ""),
        ("        threadgroup const float4* k_tile = k_tiles + cur * buffer_size;\n",
         "        threadgroup_barrier(mem_flags::mem_threadgroup);\n"
         "        threadgroup const float4* k_tile = k_tiles + cur * buffer_size;\n")),
       expect=RACE, checked=True, hint=None),
    # -- 05: simdgroup matrices -------------------------------------------------------------------
    _W("05.mma_metal", "accumulator-not-rescaled", "spills and reloads the O accumulator but never scales it",
       (("        for (uint c = phase; c < d; c += 4) o_row[c] *= correction;\n", ""),), hint="acc is not rescaled"),
    _W("05.mma_metal", "no-barrier-after-spill", "scales the spilled accumulator before the simdgroup's "
       "store is known to be complete (other lanes stored those elements)",
       (("        simdgroup_barrier(mem_flags::mem_threadgroup);\n        for (uint c = phase; c < d; c += 4) o_row[c]",
         "        for (uint c = phase; c < d; c += 4) o_row[c]"),), expect=RACE, checked=True, hint=None),
    _W("05.mma_metal", "no-barrier-before-load", "loads the next K/V tile while other simdgroups still read the last",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // every simdgroup is done with the previous tile\n",
         ""),), expect=RACE, checked=True, hint=None),
    _W("05.mma_metal", "mask-off-by-one", "masks j < i + offset on diagonal tiles, hiding the diagonal key",
       (("clamp(int(row) + offset - int(j0) + 1, 0, int(keys))", "clamp(int(row) + offset - int(j0), 0, int(keys))"),),
       hint="the causal mask hides the diagonal"),
    _W("05.mma_metal", "top-left-alignment", "aligns the causal mask top-left, wrong whenever Nq != Nk",
       (("    const int offset = int(n_k) - int(n_q);  // query i sees keys j <= i + offset\n",
         "    const int offset = 0;\n"),), hint="aligned top-left"),
    _W("05.mma_metal", "skip-tiles-from-the-first-row", "ends the tile loop at the last key the first row "
       "sees, dropping keys the later rows of the threadgroup see",
       (("if (causal) kv_end = uint(clamp(int(row0 + block_m) + offset, 0, int(n_k)));",
         "if (causal) kv_end = uint(clamp(int(row0 + 1) + offset, 0, int(n_k)));"),), hint=None),
    # Right numbers, the lesson's point missing: measured in the bytes of K the launch loads (course.grading.causal_tiles).
    _W("05.mma_metal", "visits-every-tile", "leaves kv_end at n_k, visiting every key tile and masking the future",
       (("    if (causal) kv_end = uint(clamp(int(row0 + block_m) + offset, 0, int(n_k)));\n", ""),),
       expect=r"query rows 0–15 loaded key tile 1 \(keys 16–31\), which lies wholly in the future", hint=None,
       measured=True),
    _W("05.mma_metal", "tile-range-top-left", "ends the tile loop at the threadgroup's last row, top-left aligned",
       (("clamp(int(row0 + block_m) + offset, 0, int(n_k))", "clamp(int(row0 + block_m), 0, int(n_k))"),),
       expect="wholly in the future|never loaded", hint="aligned top-left", measured=True),
    # Right numbers, the lesson's point missing: measured in the matrix operations the launch runs (course.grading.matrix_units).
    _W("05.mma_metal", "pv-scalar-loop", "adds P V to the spilled accumulator with a loop of multiply-adds while "
       "scaling it, and drops the simdgroup product of P and V",
       (("        for (uint c = phase; c < d; c += 4) o_row[c] *= correction;\n",
         "        for (uint c = phase; c < d; c += 4) {  // O = correction O + P V, one column at a time\n"
         "            float pv = 0.0f;\n"
         "            for (uint j = 0; j < block_n; ++j) pv += float(p_row[j]) * float(v_tile[j * d + c]);\n"
         "            o_row[c] = o_row[c] * correction + pv;\n"
         "        }\n"),
        ("        for (uint n0 = 0; n0 < block_n; n0 += 8) {\n"
         "            simdgroup_half8x8 p_frag;\n"
         "            simdgroup_load(p_frag, p_strip + n0, block_n);\n"
         "            for (uint b = 0; b < blocks; ++b) {\n"
         "                simdgroup_half8x8 v_frag;  // keys n0 .. n0 + 7, columns 8b .. 8b + 7\n"
         "                simdgroup_load(v_frag, v_tile + n0 * d + b * 8, d);\n"
         "                simdgroup_multiply_accumulate(o_acc[b], p_frag, v_frag, o_acc[b]);\n"
         "            }\n"
         "        }\n",
         "        // O += P V: added above, as the rows are scaled.\n")),
       expect=r"your kernel ran 48 matrix operations \(simdgroup_multiply_accumulate, all at line \d+ of "
              r"05_mma\.metal\) where the two products of the 6 key tiles its blocks visit need at least 96 .*one "
              r"product's worth", hint=None, measured=True),
    # kv_end one key off at either end: named from the bytes of K on every probe (course.grading.causal_tiles).
    _W("05.mma_metal", "kv-end-one-short", "ends the tile loop at the last key the threadgroup's last row sees, "
       "not one past it",
       (("clamp(int(row0 + block_m) + offset, 0, int(n_k))", "clamp(int(row0 + block_m) + offset - 1, 0, int(n_k))"),),
       expect=r"on Nq=32, Nk=49(.|\n)*the block for query rows 0–15 never loaded key tile 2 \(keys 32–47\)",
       hint="the tile loop stops one key early", measured=True),
    _W("05.mma_metal", "kv-end-one-long", "ends the tile loop one key past the end of the threadgroup's last row",
       (("clamp(int(row0 + block_m) + offset, 0, int(n_k))", "clamp(int(row0 + block_m) + offset + 1, 0, int(n_k))"),),
       expect=r"the block for query rows 0–15 loaded key tile 1 \(keys 16–31\), which lies wholly in the future(.|\n)*"
              r"should stop at the diagonal, after key 15", hint=None, measured=True),
    _W("05.mma_metal", "no-barrier-before-reload", "reloads the scaled accumulator into the simdgroup matrices "
       "without a simdgroup_barrier after the lanes scaled its rows",
       (("o_row[c] *= correction;\n        simdgroup_barrier(mem_flags::mem_threadgroup);\n",
         "o_row[c] *= correction;\n"),), expect=RACE, checked=True, hint=None),
    _W("05.mma_metal", "sum-not-rescaled", "rescales the accumulator but not the row sum l",
       (("l = l * correction + sum;", "l = l + sum;"),), hint="l is not rescaled"),
    # -- 07: backward, atomic dQ ------------------------------------------------------------------
    _W("07.backward_atomic_metal", "non-atomic-dq", "adds its share into dQ with a plain += although other "
       "threadgroups add to the same rows",
       (("atomic_add_float(dq + ulong(i0 + i) * d + c, share * scale);", "dq[ulong(i0 + i) * d + c] += share * scale;"),),
       expect=RACE, checked=True, hint=None),
    _W("07.backward_atomic_metal", "missing-barrier", "reads the P and dS tiles without waiting for the threads "
       "that write them",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // every P and dS entry of the tile is written\n", ""),),
       expect=RACE, checked=True, hint=None),
    _W("07.backward_atomic_metal", "missing-delta", "computes dS = P ∘ dP, forgetting Δ = rowsum(dO ∘ O)",
       (("ds = p * (dp - delta_s[i]);     // the softmax backward", "ds = p * dp;"),), expect=r"wrong d[qk]",
       hint="the Δ term is missing"),
    _W("07.backward_atomic_metal", "mask-off-by-one", "masks j < i + offset, hiding the diagonal the forward let through",
       (("if (causal) visible = visible && int(key) <= int(row) + offset;",
         "if (causal) visible = visible && int(key) < int(row) + offset;"),), expect=r"wrong d[qkv]",
       hint="hides the diagonal key"),
    _W("07.backward_atomic_metal", "cas-stores-instead-of-adds", "swaps in its share instead of old + share, "
       "so the last threadgroup's share wins",
       (("as_type<uint>(as_type<float>(expected) + value)", "as_type<uint>(value)"),), expect=r"wrong dq", hint=None),
    _W("07.backward_atomic_metal", "p-without-lse", "rebuilds P as exp(S) without subtracting the saved LSE",
       (("p = exp(s * scale - lse_s[i]);  // P rebuilt from the saved LSE", "p = exp(s * scale);"),),
       expect=r"wrong d[qkv]", hint="without the saved LSE"),
    # A plain store where several threadgroups add into the same dQ rows: each overwrites the others' shares.
    _W("07.backward_atomic_metal", "dq-plain-store", "stores its share of dQ with a plain = although other "
       "threadgroups add to the same rows",
       (("atomic_add_float(dq + ulong(i0 + i) * d + c, share * scale);", "dq[ulong(i0 + i) * d + c] = share * scale;"),),
       expect=RACE, checked=True, hint=None),
    _W("07.backward_atomic_metal", "dq-row-guard-one-past", "guards the dQ rows with i0 + i > n_q, one row past the end",
       (("if (i0 + i >= n_q) continue;", "if (i0 + i > n_q) continue;"),),
       expect=r"out-of-bounds atomic of `dq`", checked=True, hint=None),
    _W("07.backward_atomic_metal", "share-one-key-short", "sums its share of dQ over all but the last key of its block",
       (("for (uint j = 0; j < BLOCK_N; ++j) share +=", "for (uint j = 0; j + 1 < BLOCK_N; ++j) share +="),),
       expect=r"wrong dq(.|\n)*dk and dv are right", hint="dQ leaves out one key of every block of keys"),
    # -- 07: backward, split ----------------------------------------------------------------------
    _W("07.backward_split_metal", "dq-missing-barrier", "backward_dq reads the dS tile before every thread wrote its part",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the dS tile is complete\n", ""),),
       expect=RACE, checked=True, hint=None),
    _W("07.backward_split_metal", "dkdv-key-tile-overwritten", "backward_dkdv loads the next query tile while "
       "others still read the last",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dkdv: the previous query tile is no "
         "longer read\n", ""),), expect=RACE, checked=True, hint=None),
    _W("07.backward_split_metal", "dq-causal-end-too-early", "stops backward_dq's key loop at the first row's last "
       "key instead of the last row's",
       (("clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))", "clamp(int(i0 + 1) + offset, 0, int(n_k))"),),
       expect=r"wrong dq", hint=None),
    _W("07.backward_split_metal", "dq-loop-to-the-end", "runs backward_dq's key loop to n_k, masking the tiles past "
       "the diagonal",
       (("const uint kv_end = causal ? uint(clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))) : n_k;",
         "const uint kv_end = n_k;"),),
       expect=r"wholly in the future", hint=None, measured=True),
    _W("07.backward_split_metal", "p-without-lse", "rebuilds P as exp(S) without subtracting the saved LSE",
       (("const float p = exp(s * scale - lse_s[i]);", "const float p = exp(s * scale);"),),
       expect=r"wrong d[qkv]|NaN|Inf", hint="without the saved LSE"),
    _W("07.backward_split_metal", "dq-no-barrier-before-load", "backward_dq loads the next key tile while other "
       "threads still read the last one",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the previous key tile is no longer "
         "read\n", ""),), expect=RACE, checked=True, hint=None),
    _W("07.backward_split_metal", "dq-tile-one-key-short", "adds dS K over all but the last key of each tile",
       (("for (uint j = 0; j < BLOCK_N; ++j) {\n            const float ds = ds_tile",
         "for (uint j = 0; j + 1 < BLOCK_N; ++j) {\n            const float ds = ds_tile"),),
       expect=r"wrong dq(.|\n)*dk and dv are right", hint="dQ leaves out one key of every block of keys"),
    # backward_dq's key loop bound one key off at either end, named from the bytes of K it loads on every probe.
    _W("07.backward_split_metal", "dq-end-one-short", "ends backward_dq's key loop at the last key the threadgroup's "
       "last row sees, not one past it",
       (("clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))", "clamp(int(i0 + BLOCK_M) + offset - 1, 0, int(n_k))"),),
       expect=r"on Nq=48, Nk=65(.|\n)*the block for query rows 8–15 never loaded key tile 2 \(keys 32–47\)",
       hint="the tile loop stops one key early", measured=True),
    _W("07.backward_split_metal", "dq-end-one-long", "ends backward_dq's key loop two keys past the last key the "
       "threadgroup's last row sees",
       (("clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))", "clamp(int(i0 + BLOCK_M) + offset + 1, 0, int(n_k))"),),
       expect=r"the block for query rows 8–15 loaded key tile 1 \(keys 16–23\), which lies wholly in the future",
       hint="the tile loop runs one key too far", measured=True),
    # An atomic where the design owns its rows: dq is handed over unwritten (NaN), so adding into it gives NaN rows;
    # the check measures that the kernel reads dq before writing it (course.lessons.lesson07.dq_added_into).
    _W("07.backward_split_metal", "dq-added-atomically", "adds backward_dq's terms into dq with atomic_float adds, "
       "as the atomic design does, and drops the store after the loop",
       (("for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_ROW) dq_acc[s] += ds * k_tile[j * d + c];",
         "if (i0 + i < n_q) for (uint c = part; c < d; c += COLS_PER_ROW) atomic_fetch_add_explicit("
         "(device atomic_float*)&dq[ulong(i0 + i) * d + c], ds * k_tile[j * d + c] * scale, memory_order_relaxed);"),
        ("        for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_ROW) dq[ulong(i0 + i) * d + c] = dq_acc[s] * scale;\n",
         "")),
       expect=r"dq: NaN in(.|\n)*dq is not zeroed before the kernel(.|\n)*each block owns its BLOCK_M query rows(.|\n)*"
              r"float atomics into a dq zeroed first is the other design",
       hint="your backward_dq adds into dq instead of storing its rows"),
    _W("07.backward_split_metal", "dq-stored-with-plus-equals", "sums dQ in registers but adds the rows into dq with "
       "+= instead of storing them",
       (("dq[ulong(i0 + i) * d + c] = dq_acc[s] * scale;", "dq[ulong(i0 + i) * d + c] += dq_acc[s] * scale;"),),
       expect=r"dq: NaN(.|\n)*dq is not zeroed before the kernel(.|\n)*stores each row once",
       hint="your backward_dq adds into dq instead of storing its rows"),
]
