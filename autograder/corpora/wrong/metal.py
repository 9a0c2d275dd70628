"""Wrong kernels for the Metal track (kernels/metal/03-07).

Each entry is a small edit of the course's own kernel file: a mistake a learner makes when writing that
step. The test suite compiles every edited file for the CPU runtime, grades it with
``course.tracks.metal.check_step`` and requires it to fail with ``expect`` in the message: a missing
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
    """``key`` is the step's exercise id (course.tracks.metal.STEPS)."""

    language = "metal"

    @property
    def exercise(self) -> str:
        return self.key

    def kernel_file(self) -> str:
        from course.tracks.metal import STEPS
        return STEPS[self.key].kernel_file

    def grade(self, module=None):
        """Grade the edited file as its step on the small grading cases; returns the report (raises CheckFailed)."""
        from course.tracks.metal import GRADING_TILES, check_step, grading_cases

        module = module or self.module()
        small, _ = grading_cases(self.exercise)
        if self.checked:
            return check_step(self.exercise, module, checked_cases=small, plain_cases=())
        return check_step(self.exercise, module, checked_cases=(), plain_cases=small,
                          tiles=GRADING_TILES.get(self.exercise))


_W = WrongMetalKernel
RACE = r"data race"

WRONG_METAL_KERNELS: list[WrongMetalKernel] = [
    # -- 03: tiled --------------------------------------------------------------------------------
    _W("03.tiled_metal", "no-barrier-after-load", "reads the K/V tile before every thread has finished copying it",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete\n", ""),),
       expect=RACE, checked=True),
    _W("03.tiled_metal", "no-barrier-before-load", "overwrites the K/V tile while other threads still read the last one",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // done with the previous tile (and Q is complete)\n",
         ""),), expect=RACE, checked=True),
    _W("03.tiled_metal", "tile-tail-unguarded", "copies a whole tile even when it runs past the last key",
       (("const bool in = key < n_k;  // the last tile may run past the last key", "const bool in = true;"),),
       expect=r"out-of-bounds read of `k`", checked=True),
    _W("03.tiled_metal", "missing-rescale", "rescales l but not acc when the max grows",
       (("        for (uint c = 0; c < d; ++c) acc[c] *= correction;\n", ""),)),
    _W("03.tiled_metal", "mask-off-by-one", "masks j < i + offset, hiding the key on the diagonal",
       (("int(j0 + jj) <= int(row) + offset", "int(j0 + jj) < int(row) + offset"),)),
    _W("03.tiled_metal", "lse-without-max", "writes log(l) as the LSE, forgetting the running max",
       (("l > 0.0f ? m + log(l) : -INFINITY", "l > 0.0f ? log(l) : -INFINITY"),), expect=r"wrong LSE"),
    # -- 04: float4 and ping-pong -----------------------------------------------------------------
    _W("04.double_buffer_metal", "no-barrier", "drops the one barrier per tile, trusting the two buffers alone",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // tile t is complete; tile t - 1 is no longer read\n",
         ""),), expect=RACE, checked=True),
    _W("04.double_buffer_metal", "prefetch-into-current", "copies the next tile into the buffer being computed on",
       (("load_tile(k_tiles + (cur ^ 1) * buffer_size, v_tiles + (cur ^ 1) * buffer_size,",
         "load_tile(k_tiles + cur * buffer_size, v_tiles + cur * buffer_size,"),), expect=RACE, checked=True),
    _W("04.double_buffer_metal", "float4-at-float-offset", "adds the float4 index to a float pointer, then casts to float4",
       (("k_dst[i] = in ? k[ulong(key) * d4 + i % d4] : float4(0.0f);",
         "k_dst[i] = in ? *(device const float4*)((device const float*)k + ulong(key) * d4 + i % d4) : float4(0.0f);"),),
       expect=r"misaligned float4 read"),
    _W("04.double_buffer_metal", "missing-rescale", "rescales l but not the float4 accumulator when the max grows",
       (("        for (uint c4 = 0; c4 < d4; ++c4) acc[c4] *= correction;\n", ""),)),
    # -- 05: simdgroup matrices -------------------------------------------------------------------
    _W("05.mma_metal", "accumulator-not-rescaled", "spills and reloads the O accumulator but never scales it",
       (("        for (uint c = phase; c < d; c += 4) o_row[c] *= correction;\n", ""),)),
    _W("05.mma_metal", "no-barrier-after-spill", "scales the spilled accumulator before the simdgroup's "
       "store is known to be complete (other lanes stored those elements)",
       (("        simdgroup_barrier(mem_flags::mem_threadgroup);\n        for (uint c = phase; c < d; c += 4) o_row[c]",
         "        for (uint c = phase; c < d; c += 4) o_row[c]"),), expect=RACE, checked=True),
    _W("05.mma_metal", "no-barrier-before-load", "loads the next K/V tile while other simdgroups still read the last",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // every simdgroup is done with the previous tile\n",
         ""),), expect=RACE, checked=True),
    _W("05.mma_metal", "mask-off-by-one", "masks j < i + offset on diagonal tiles, hiding the diagonal key",
       (("clamp(int(row) + offset - int(j0) + 1, 0, int(keys))", "clamp(int(row) + offset - int(j0), 0, int(keys))"),)),
    _W("05.mma_metal", "top-left-alignment", "aligns the causal mask top-left, wrong whenever Nq != Nk",
       (("    const int offset = int(n_k) - int(n_q);  // query i sees keys j <= i + offset\n",
         "    const int offset = 0;\n"),)),
    _W("05.mma_metal", "skip-tiles-from-the-first-row", "ends the tile loop at the last key the first row "
       "sees, dropping keys the later rows of the threadgroup see",
       (("if (causal) kv_end = uint(clamp(int(row0 + block_m) + offset, 0, int(n_k)));",
         "if (causal) kv_end = uint(clamp(int(row0 + 1) + offset, 0, int(n_k)));"),)),
    # -- 07: backward, atomic dQ ------------------------------------------------------------------
    _W("07.backward_atomic_metal", "non-atomic-dq", "adds its share into dQ with a plain += although other "
       "threadgroups add to the same rows",
       (("atomic_add_float(dq + ulong(i0 + i) * d + c, share * scale);", "dq[ulong(i0 + i) * d + c] += share * scale;"),),
       expect=RACE, checked=True),
    _W("07.backward_atomic_metal", "missing-barrier", "reads the P and dS tiles without waiting for the threads "
       "that write them",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // every P and dS entry of the tile is written\n", ""),),
       expect=RACE, checked=True),
    _W("07.backward_atomic_metal", "missing-delta", "computes dS = P ∘ dP, forgetting Δ = rowsum(dO ∘ O)",
       (("ds = p * (dp - delta_s[i]);     // the softmax backward", "ds = p * dp;"),), expect=r"wrong d[qk]"),
    _W("07.backward_atomic_metal", "mask-off-by-one", "masks j < i + offset, hiding the diagonal the forward let through",
       (("if (causal) visible = visible && int(key) <= int(row) + offset;",
         "if (causal) visible = visible && int(key) < int(row) + offset;"),), expect=r"wrong d[qkv]"),
    _W("07.backward_atomic_metal", "cas-stores-instead-of-adds", "swaps in its share instead of old + share, "
       "so the last threadgroup's share wins",
       (("as_type<uint>(as_type<float>(expected) + value)", "as_type<uint>(value)"),), expect=r"wrong dq"),
    # -- 07: backward, split ----------------------------------------------------------------------
    _W("07.backward_split_metal", "dq-missing-barrier", "backward_dq reads the dS tile before every thread wrote its part",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the dS tile is complete\n", ""),),
       expect=RACE, checked=True),
    _W("07.backward_split_metal", "dkdv-key-tile-overwritten", "backward_dkdv loads the next query tile while "
       "others still read the last",
       (("        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dkdv: the previous query tile is no "
         "longer read\n", ""),), expect=RACE, checked=True),
    _W("07.backward_split_metal", "dq-causal-end-too-early", "stops backward_dq's key loop at the first row's last "
       "key instead of the last row's",
       (("clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))", "clamp(int(i0 + 1) + offset, 0, int(n_k))"),),
       expect=r"wrong dq"),
    _W("07.backward_split_metal", "p-without-lse", "rebuilds P as exp(S) without subtracting the saved LSE",
       (("const float p = exp(s * scale - lse_s[i]);", "const float p = exp(s * scale);"),),
       expect=r"wrong d[qkv]|NaN|Inf"),
]
