"""Wrong kernels for lesson 07 in CUDA C (kernels/cuda/07_backward_atomic.cu and 07_backward_split.cu).

Each entry is a small edit of the course's own kernel file: a mistake a learner makes when writing
the backward pass. The tests compile every edited file for the CPU runtime and require the gradient
check, run with memcheck + racecheck and a random schedule, to fail with ``expect`` in its message
(a missing barrier or a non-atomic dQ is caught by racecheck, not by a wrong number that luck could hide).
Every ``old`` text occurs exactly once in its file, so an edit changes the one line it names.
"""
from __future__ import annotations

import functools

from autograder.corpora.wrong import WrongKernel

__all__ = ["WrongCudaKernel", "WRONG_KERNELS"]


class WrongCudaKernel(WrongKernel):
    """``key`` is "atomic" or "split" (course.tracks.cuda.BACKWARD_FILES); every entry is graded with the
    checked build, as a learner's backward kernel is."""

    @property
    def kind(self) -> str:
        return self.key

    @property
    def exercise(self) -> str:
        return f"07.backward_{self.key}_cuda"

    def kernel_file(self) -> str:
        from course.tracks.cuda import BACKWARD_FILES as FILES
        return FILES[self.key]

    def module(self):
        from course.simt import RawModule
        return RawModule(code=self.source(), language="cuda", name=self.kernel_file().rsplit("/", 1)[1],
                         compile_now="checked")


# A wrong backward must fail the gradient check by name (dq, dk or dv) unless it says otherwise.
_W = functools.partial(WrongCudaKernel, expect=r"wrong d[qkv]")
RACE = r"data race"

WRONG_KERNELS: list[WrongCudaKernel] = [
    # -- 07_backward_atomic.cu ----------------------------------------------------------------------
    _W("atomic", "non-atomic-dq", "adds its share into dQ with a plain += although other blocks add to the same rows",
       (("atomicAdd(&dq[(size_t)(m0 + i) * d + c], share * scale);", "dq[(size_t)(m0 + i) * d + c] += share * scale;"),),
       expect=RACE, hint=None),
    _W("atomic", "missing-syncthreads", "reads the P and dS tiles without waiting for the threads that write them",
       (("        __syncthreads();  // every P and dS entry of the tile is written before anyone reads one\n", ""),),
       expect=RACE, hint=None),
    _W("atomic", "missing-delta", "computes dS = P ∘ dP, forgetting the row term Δ = rowsum(dO ∘ O)",
       (("ds = p * (dp - delta_s[i]);       // the softmax backward", "ds = p * dp;"),), hint="the Δ term is missing"),
    _W("atomic", "p-without-lse", "rebuilds P as exp(S) without subtracting the saved LSE",
       (("p = expf(s * scale - lse_s[i]);   // P rebuilt", "p = expf(s * scale);   // P rebuilt"),),
       hint="without the saved LSE"),
    _W("atomic", "mask-off-by-one", "masks j < i + diag, hiding the diagonal the forward pass let through",
       (("if (causal) visible = visible && key <= row + diag;", "if (causal) visible = visible && key < row + diag;"),),
       hint="hides the diagonal key"),
    _W("atomic", "dq-exchanged", "writes its share of dQ with atomicExch, over the other blocks' shares",
       (("atomicAdd(&dq[", "atomicExch(&dq["),), expect=r"wrong dq", hint=None),
    # A plain store where several blocks add into the same dQ rows: each overwrites the others' shares.
    _W("atomic", "dq-plain-store", "stores its share of dQ with a plain = although other blocks add to the same rows",
       (("atomicAdd(&dq[(size_t)(m0 + i) * d + c], share * scale);", "dq[(size_t)(m0 + i) * d + c] = share * scale;"),),
       expect=RACE, hint=None),
    _W("atomic", "dq-row-guard-one-past", "guards the dQ rows with m0 + i <= n_q, one row past the end",
       (("if (m0 + i < n_q) {\n                float share", "if (m0 + i <= n_q) {\n                float share"),),
       expect=r"out-of-bounds atomic of `dq`", hint=None),
    _W("atomic", "share-one-key-short", "sums its share of dQ over all but the last key of its block",
       (("for (int j = 0; j < BLOCK_N; ++j) share +=", "for (int j = 0; j < BLOCK_N - 1; ++j) share +="),),
       expect=r"wrong dq(.|\n)*dk and dv are right", hint="dQ leaves out one key of every block of keys"),
    # -- 07_backward_split.cu -----------------------------------------------------------------------
    _W("split", "missing-syncthreads", "backward_dq reads the dS tile before every thread has written its part",
       (("        __syncthreads();  // backward_dq: the dS tile is complete\n", ""),), expect=RACE, hint=None),
    _W("split", "key-tile-overwritten", "backward_dq loads the next K, V tile while others still read the last one",
       (("        __syncthreads();  // the previous key tile is no longer read (the first time: Q, dO, LSE, Δ are in)\n",
         ""),), expect=RACE, hint=None),
    _W("split", "missing-delta-in-dq", "forgets Δ in backward_dq only, so dK and dV stay right",
       (("ds = p * (dp - delta_s[i]);                   // dS of backward_dq", "ds = p * dp;"),), expect=r"wrong dq",
       hint="the Δ term is missing"),
    _W("split", "p-without-lse-in-dkdv", "rebuilds P in backward_dkdv as exp(S), without the saved LSE",
       (("p = expf(s * scale - lse_s[i]);       // P of backward_dkdv", "p = expf(s * scale);"),), expect=r"wrong d[kv]",
       hint="without the saved LSE"),
    _W("split", "causal-end-too-early", "stops backward_dq's key loop at the block's first row instead of its last",
       (("min(m0 + BLOCK_M + diag, n_k)", "min(m0 + diag, n_k)"),), expect=r"wrong dq", hint=None),
    # Right gradients, the future key tiles loaded anyway: measured in the bytes of K backward_dq loads.
    _W("split", "dq-loop-to-the-end", "runs backward_dq's key loop to n_k, masking the tiles past the diagonal",
       (("const int n_end = causal ? min(m0 + BLOCK_M + diag, n_k) : n_k;", "const int n_end = n_k;"),),
       expect=r"backward_dq loaded 4,096 bytes of K(.|\n)*query rows 0–15 loaded key tile 1 \(keys 16–31\), which lies "
              r"wholly in the future", hint=None, measured=True),
    _W("split", "dq-mask-off-by-one", "masks j < i + diag in backward_dq, unlike the forward pass and backward_dkdv",
       (("if (causal) visible = visible && key <= row + diag;   // mask of backward_dq",
         "if (causal) visible = visible && key < row + diag;   // mask of backward_dq"),), expect=r"wrong dq",
       hint="hides the diagonal key"),
    # backward_dq's key loop bound one key off at either end: one long, the gradients stay right (the mask hides the
    # extra tile); one short, they go wrong only where a block's last key opens a tile. Both are named first, from
    # the bytes of K backward_dq loads on every probe.
    _W("split", "dq-end-one-short", "ends backward_dq's key loop at the last key the block's last row sees, not one "
       "past it",
       (("min(m0 + BLOCK_M + diag, n_k)", "min(m0 + BLOCK_M + diag - 1, n_k)"),),
       expect=r"on Nq=48, Nk=65(.|\n)*the block for query rows 0–15 never loaded key tile 2 \(keys 32–47\)",
       hint="the tile loop stops one key early", measured=True),
    _W("split", "dq-end-one-long", "ends backward_dq's key loop two keys past the last key the block's last row sees",
       (("min(m0 + BLOCK_M + diag, n_k)", "min(m0 + BLOCK_M + diag + 1, n_k)"),),
       expect=r"the block for query rows 0–15 loaded key tile 1 \(keys 16–31\), which lies wholly in the future",
       hint="the tile loop runs one key too far", measured=True),
    # An atomic where the design owns its rows: dq is handed over unwritten (NaN), so adding into it gives NaN rows;
    # the check measures that the kernel reads dq before writing it (course.lessons.lesson07.dq_added_into).
    _W("split", "dq-added-atomically", "adds backward_dq's terms into dq with atomicAdd, as the atomic design does, "
       "and drops the store after the loop",
       (("for (int j = 0; j < BLOCK_N; ++j) dq_acc[r] += ds_s[i * BLOCK_N + j] * k_s[j * d + c];",
         "if (m0 + i < n_q) for (int j = 0; j < BLOCK_N; ++j) "
         "atomicAdd(&dq[(size_t)(m0 + i) * d + c], ds_s[i * BLOCK_N + j] * k_s[j * d + c] * scale);"),
        ("        if (e < BLOCK_M * d && m0 + e / d < n_q) dq[(size_t)m0 * d + e] = dq_acc[r] * scale;\n", "")),
       expect=r"dq: NaN in 17 of 17 rows(.|\n)*dq is not zeroed before the kernel(.|\n)*each block owns its BLOCK_M "
              r"query rows(.|\n)*atomicAdd into a dq zeroed first is the other design",
       hint="your backward_dq adds into dq instead of storing its rows"),
    _W("split", "dq-stored-with-atomicadd", "sums dQ in registers but writes the rows with atomicAdd instead of a store",
       (("dq[(size_t)m0 * d + e] = dq_acc[r] * scale;", "atomicAdd(&dq[(size_t)m0 * d + e], dq_acc[r] * scale);"),),
       expect=r"dq: NaN(.|\n)*dq is not zeroed before the kernel(.|\n)*stores each row once",
       hint="your backward_dq adds into dq instead of storing its rows"),
]
