"""Wrong kernels for the Triton track (lessons 01-08).

Each entry is a small edit of the course's own kernel file: the mistake a learner makes when
writing that step. The test suite loads every edited file and requires the step's check to fail
(with ``expect`` in the message where the reason matters, e.g. a race that only racecheck sees).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from autograder.corpora.wrong import UNDECLARED, Undeclared, apply_edits

__all__ = ["WrongKernel", "WRONG_KERNELS"]


@dataclass(frozen=True)
class WrongKernel:
    exercise: str
    name: str
    mistake: str
    edits: tuple[tuple[str, str], ...]
    expect: str = "wrong|NaN|Inf|-inf|race"
    """A regular expression the failure message must match."""
    hint: "str | None | Undeclared" = UNDECLARED
    """Text the failure's ``hint:`` line must contain, or None: the failure must have no hint line."""

    @property
    def id(self) -> str:
        return f"{self.exercise}:{self.name}"

    def build(self, directory: Path) -> Callable[..., Any]:
        """Write the edited kernel file into ``directory`` and return the step's function from it."""
        from course.kernels import kernel_path
        from course.tracks.triton import solution, step

        s = step(self.exercise)
        original = kernel_path(s.kernel_file)
        path = directory / original.name
        path.write_text(apply_edits(original.read_text(), self.edits, self.id))
        return solution(s, str(path))


_W = WrongKernel

WRONG_KERNELS: list[WrongKernel] = [
    # -- 01: naive attention, two passes over the keys --------------------------------------------
    _W("01.naive_triton", "pass2-without-max", "exponentiates the raw scores in pass 2, which overflows on peaky rows",
       (("p = tl.exp(scores - m)", "p = tl.exp(scores)"),),
       hint="exp() leaves float32's range on these rows, whose scores reach the hundreds"),
    _W("01.naive_triton", "max-without-scale", "takes the max of the unscaled scores in pass 1, so every weight "
       "underflows on peaky rows",
       (("s = tl.sum(q[None, :] * k, axis=1) * scale", "s = tl.sum(q[None, :] * k, axis=1)"),), hint=None),
    _W("01.naive_triton", "tail-keys-score-zero", "lets the padded keys of the last block score 0 in pass 2",
       (('        scores = tl.where(key_ok, scores, float("-inf"))\n', ""),),
       hint="padding keys of the last block count"),
    _W("01.naive_triton", "no-final-divide", "writes the numerator acc without dividing by l",
       (("out = acc / l", "out = acc"),), hint="O is acc / l: the division by the row sum l is missing."),
    _W("01.naive_triton", "kv-loads-unmasked", "loads K and V without a mask, so the last block reads past their end",
       (("mask=key_ok[:, None] & in_row[None, :], other=0.0)", ")"), ("mask=tile, other=0.0)", ")")),
       expect="out-of-bounds load(.|\n)*element \\d+ of `k_ptr`, past its end", hint=None),
    # -- 02: online softmax and merged states ----------------------------------------------------
    _W("02.online_softmax_triton", "missing-rescale", "adds new terms to l without rescaling the old sum to the new max",
       (("l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)", "l = l + tl.sum(tl.exp(x - m_safe), axis=0)"),),
       hint="l is not rescaled when the running max grows"),
    _W("02.online_softmax_triton", "stale-max", "computes the new max but never keeps it",
       (("        m = m_new\n", ""),), hint=None),
    _W("02.online_softmax_triton", "tail-padded-with-zero", "pads the last block with 0 instead of -inf, so padding counts",
       (('x = tl.load(row_ptr + cols, mask=cols < stop, other=float("-inf"))', "x = tl.load(row_ptr + cols, mask=cols < stop, other=0.0)"),),
       hint="the padding of the last block counts in l"),
    _W("02.online_softmax_merge_triton", "second-sum-not-rescaled", "rescales only the first state's sum",
       (("l = l_a * tl.exp(m_a - m_safe) + l_b * tl.exp(m_b - m_safe)", "l = l_a * tl.exp(m_a - m_safe) + l_b"),), hint="l_b is not rescaled"),
    _W("02.online_softmax_merge_triton", "nan-on-empty", "does not guard two empty states: exp(-inf - (-inf)) is NaN",
       (('m_safe = tl.where(m == float("-inf"), 0.0, m)', "m_safe = m"),), expect="empty",
       hint="exp(−inf − (−inf)) = NaN"),
    _W("02.online_softmax_merge_triton", "sums-added-raw", "adds the two sums as if they shared a max",
       (("l = l_a * tl.exp(m_a - m_safe) + l_b * tl.exp(m_b - m_safe)", "l = l_a + l_b"),), hint="the sums are added as they are"),
    # -- 02: the one-sweep attention kernel --------------------------------------------------------
    _W("02.online_softmax_attention_triton", "acc-not-rescaled", "rescales l but not acc when the max grows",
       (("acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)", "acc = acc + tl.sum(p[:, None] * v, axis=0)"),),
       hint="acc is not rescaled when the max grows"),
    _W("02.online_softmax_attention_triton", "sum-not-rescaled", "rescales acc but not the row sum l",
       (("l = l * alpha + tl.sum(p, axis=0)", "l = l + tl.sum(p, axis=0)"),),
       hint="l is not rescaled when the max grows"),
    _W("02.online_softmax_attention_triton", "stale-max", "computes the new max but never keeps it, so every block "
       "wipes out the ones before",
       (("        m = m_new  # from here on, l and acc are measured against m_new\n", ""),),
       hint="only the last step's keys count"),
    _W("02.online_softmax_attention_triton", "tail-keys-unmasked", "lets the padded keys of the last block score 0",
       (('        s = tl.where(key_ok, s, float("-inf"))  # keys past the end weigh exp(-inf) = 0\n', ""),),
       hint="padding keys of the last block count"),
    # -- 03: tiled forward ------------------------------------------------------------------------
    _W("03.tiled_triton", "missing-rescale", "never rescales acc when the max grows",
       (('acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")', 'acc = acc + tl.dot(p, v, input_precision="ieee")'),),
       hint="acc is not rescaled"),
    _W("03.tiled_triton", "stale-max", "computes the new max but never keeps it",
       (("        m = m_new\n", ""),), hint="Is m updated to m_new at the end of every step?"),
    _W("03.tiled_triton", "tail-keys-unmasked", "lets the padded keys of the last tile score 0 instead of -inf",
       (('        s = tl.where(key_ok[None, :], s, float("-inf"))', ""),), hint="padding keys of the last block count"),
    _W("03.tiled_triton", "lse-without-max", "writes log(l) as the LSE, forgetting the running max",
       (("lse = m + tl.log(l)", "lse = tl.log(l)"),), expect="wrong LSE", hint="the running max m_i is missing"),
    _W("03.tiled_triton", "kv-loads-without-key-mask", "masks only the columns of the K and V tiles, so the last "
       "tile reads rows past the end of K and V",
       (("mask=kv_mask, other=0.0)", "mask=col_ok[None, :], other=0.0)"),),
       expect="out-of-bounds load(.|\n)*of `k_ptr`, past its end", hint=None),
    # -- 04: pipelined --------------------------------------------------------------------------
    _W("04.double_buffer_triton", "missing-rescale", "never rescales acc when the max grows",
       (('acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")', 'acc = acc + tl.dot(p, v, input_precision="ieee")'),),
       hint="acc is not rescaled"),
    _W("04.double_buffer_triton", "descriptor-padding-unmasked", "trusts the descriptor's zero padding as if it were -inf",
       (('        s = tl.where((start_n + offs_n < N_CTX_K)[None, :], s, float("-inf"))', ""),),
       hint="padding keys of the last block count"),
    _W("04.double_buffer_triton", "lse-in-base-2", "stores the LSE in base-2 units",
       (("lse = (m + tl.log2(l)) * 0.6931471805599453", "lse = m + tl.log2(l)"),), expect="wrong LSE",
       hint="base-2 units"),
    # Right numbers, the lesson's technique missing: the compiled loop (sm_90, the check's configuration) is read
    # for Triton's software pipeline and the TMA copies of descriptor loads (course.grading.pipelining.pipelining_triton).
    _W("04.double_buffer_triton", "single-stage", "turns the pipeline off with tl.range(..., num_stages=1), so each "
       "K/V tile is loaded and waited for inside its own iteration",
       (("for start_n in tl.range(0, N_CTX_K, BLOCK_N):", "for start_n in tl.range(0, N_CTX_K, BLOCK_N, num_stages=1):"),),
       expect=r"the loads were not software-pipelined(.|\n)*tl.range\(\.\.\., num_stages=1\) turns the pipeline off",
       hint="leave num_stages out of tl.range"),
    _W("04.double_buffer_triton", "pointer-tile-loads", "loads the K and V tiles with tl.load through tensors of "
       "pointers instead of the descriptors",
       (("k = k_desc.load([start_n, 0]).to(tl.float32)",
         "k = tl.load(k_ptr + z * stride_kz + (start_n + offs_n)[:, None] * stride_kn + tl.arange(0, BLOCK_D)[None, :], "
         "mask=((start_n + offs_n)[:, None] < N_CTX_K) & (tl.arange(0, BLOCK_D)[None, :] < HEAD_DIM), other=0.0)"
         ".to(tl.float32)"),
        ("v = v_desc.load([start_n, 0]).to(tl.float32)",
         "v = tl.load(v_ptr + z * stride_vz + (start_n + offs_n)[:, None] * stride_vn + tl.arange(0, BLOCK_D)[None, :], "
         "mask=((start_n + offs_n)[:, None] < N_CTX_K) & (tl.arange(0, BLOCK_D)[None, :] < HEAD_DIM), other=0.0)"
         ".to(tl.float32)")),
       expect=r"loads tiles through a tensor of pointers \(tl.load\)(.|\n)*TMA unit", hint=None),
    # -- 05: tensor cores -------------------------------------------------------------------------
    _W("05.mma_triton", "missing-rescale", "forgets to rescale the accumulator before the next MMA",
       (("        acc = acc * alpha[:, None]\n", ""),), hint="acc is not rescaled"),
    _W("05.mma_triton", "sum-not-rescaled", "rescales acc but not the row sum l",
       (("l = l * alpha + tl.sum(p, axis=1)", "l = l + tl.sum(p, axis=1)"),), hint="l is not rescaled"),
    _W("05.mma_triton", "log2e-twice", "folds log2(e) into the scale and then uses exp, not exp2",
       (("alpha = tl.math.exp2(m - m_new)", "alpha = tl.exp(m - m_new)"), ("p = tl.math.exp2(s - m_new[:, None])", "p = tl.exp(s - m_new[:, None])")),
       hint=None),
    # Right numbers, wrong technique: measured (course.grading.techniques), not seen in the values.
    _W("05.mma_triton", "scores-in-float32", "upcasts the Q and K tiles to float32 before Q Kᵀ",
       (("s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale",
         "s = tl.dot(q.to(tl.float32), kT.to(tl.float32), input_precision=DOT_PRECISION) * qk_scale"),),
       expect="multiplied fp32 by fp32 tiles although the inputs are float16", hint=None),
    _W("05.mma_triton", "pv-in-float32", "leaves P in float32 and upcasts V to match it, so P V is a float32 product",
       (("acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)",
         "acc = tl.dot(p, v.to(tl.float32), acc, input_precision=DOT_PRECISION)"),),
       expect="multiplied fp32 by fp32 tiles although the inputs are float16", hint=None),
    # -- 06: causal -----------------------------------------------------------------------------
    _W("06.causal_triton", "mask-off-by-one", "masks j < i instead of j <= i, hiding each query's own key",
       (("key_idx[None, :] <= rows[:, None] + diagonal", "key_idx[None, :] < rows[:, None] + diagonal"),),
       hint="the output is all zeros"),
    _W("06.causal_triton", "top-left-alignment", "aligns the mask top-left, wrong whenever Nq != Nk",
       (("diagonal = n_k - n_q   #", "diagonal = 0   #"),), expect="past its end|wholly in the future|wrong",
       hint="aligned top-left"),
    # The lazy kernel: every key tile visited, the mask doing all the work. Right numbers; the lesson's point
    # (future tiles are never loaded) is missing, and the measurement of the tiles each program loads says so.
    _W("06.causal_triton", "visits-every-tile", "visits every key tile and lets the mask hide the future ones",
       (("hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)", "hi = n_k"),
        ("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = 0")),
       expect=r"query rows 0–63 loaded key tiles 2–4 \(keys 64–149\), which lie wholly in the future(.|\n)*"
              r"upper bound should stop at the diagonal", hint=None),
    _W("06.causal_triton", "top-left-hi", "ends the key loop at the block's last row as if the mask were top-left",
       (("hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)", "hi = tl.minimum(start_m + BLOCK_M, n_k)"),),
       expect="wholly in the future|never loaded", hint="aligned top-left"),
    _W("06.causal_triton", "lo-rounded-up", "rounds lo up to a tile boundary, so the unmasked stage runs a tile past it",
       (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N",
         "lo = tl.cdiv(tl.maximum(start_m + diagonal + 1, 0), BLOCK_N) * BLOCK_N"),),
       expect="past its end(.|\n)*Masking that load is not the fix", hint=None),
    _W("06.causal_triton", "diagonal-blocks-unmasked", "runs the blocks that straddle the diagonal without the mask",
       (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = hi // BLOCK_N * BLOCK_N"),),
       expect=r"ran key tiles 0–1 \(keys 0–63\), which the diagonal crosses, without the element-wise mask, and 63 "
              r"of its rows come out wrong",
       hint="every tile the diagonal crosses goes through the masked stage"),
    # Each bound one key off at either end. The check's probes include shapes where that moves a whole tile (the
    # last key a block sees opens a tile; the first row's last key ends one, or is one short of it), and the tiles
    # each program loads and masks name the bound and the direction.
    _W("06.causal_triton", "hi-one-short", "ends the key loop at the last key the block's last row sees, not one past "
       "it (hi one short)",
       (("hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)",
         "hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal - 1, 0)"),),
       expect=r"the program for query rows 0–33 never loaded key tile 3 \(keys 96–96\), which its rows see",
       hint="the loop stops one key early: its bound must be one past the last key the block's last row sees, "
            "96 + 1 = 97. At 96 it ends before key tile 3, whose first key, 96, is that last key, so the last key "
            "column is never reached."),
    _W("06.causal_triton", "hi-one-long", "ends the key loop two keys past the last key the block's last row sees "
       "(hi one long)",
       (("hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)",
         "hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal + 1, 0)"),),
       expect=r"loaded key tile 2 \(keys 64–95\), which lies wholly in the future",
       hint="the loop runs one key too far: its bound must be one past the last key the block's last row sees, "
            "63 + 1 = 64"),
    _W("06.causal_triton", "lo-one-short", "rounds down the first row's last key instead of one past it (lo one short), "
       "so a full tile goes to the masked stage",
       (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N",
         "lo = tl.maximum(start_m + diagonal, 0) // BLOCK_N * BLOCK_N"),),
       expect=r"key tile 1 \(keys 32–63\) is seen whole by every one of its rows",
       hint="the unmasked stage stops one tile early: the first row, 0, sees keys up to 63, the last key of key "
            "tile 1, so its bound (lo) is one past that key, 64"),
    _W("06.causal_triton", "lo-one-long", "rounds down two keys past the first row's last key (lo one long), so a tile "
       "the diagonal crosses runs unmasked",
       (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N",
         "lo = tl.maximum(start_m + diagonal + 2, 0) // BLOCK_N * BLOCK_N"),),
       expect=r"ran key tile 1 \(keys 32–63\), which the diagonal crosses, without the element-wise mask, and 1 of its "
              r"rows comes out wrong",
       hint="the unmasked stage ends one key too late: its bound (lo) is one past the last key the first row sees, "
            "62 + 1 = 63"),
    # Right numbers, future tiles skipped, but every visited tile goes through the masked stage: the measurement
    # of which key tiles each program ran a whole-tile select on says so.
    _W("06.causal_triton", "masks-every-tile", "skips the future tiles but runs every visited tile through the "
       "masked stage (lo = 0)",
       (("lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N", "lo = 0"),),
       expect=r"query tile 1 \(rows 64–127\) masked 4 key tiles, of which only 2 cross the diagonal: key tiles 0–1 "
              r"\(keys 0–63\) are seen whole",
       hint="split the key axis in two stages"),
    _W("06.causal_triton", "nan-on-empty-rows", "does not guard rows that see no key: 2^(-inf - (-inf)) is NaN",
       (('m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)', "m_sub = m_new"),), hint="rows that see no key"),
    # -- 07: backward ---------------------------------------------------------------------------
    _W("07.backward_atomic_triton", "non-atomic-dq", "adds into dQ with a plain load and store instead of an atomic",
       (('tl.atomic_add(dq_ptrs, dq_part, mask=q_mask, sem="relaxed")',
         "tl.store(dq_ptrs, tl.load(dq_ptrs, mask=q_mask, other=0.0) + dq_part, mask=q_mask)"),), expect="data race",
       hint=None),
    _W("07.backward_atomic_triton", "dq-overwritten", "stores its share of dQ over the other programs' shares",
       (('tl.atomic_add(dq_ptrs, dq_part, mask=q_mask, sem="relaxed")', "tl.store(dq_ptrs, dq_part, mask=q_mask)"),),
       hint=None),
    _W("07.backward_atomic_triton", "missing-delta", "computes dS = P ∘ dP, forgetting the row term Δ = rowsum(dO ∘ O)",
       (("ds = p * (dp - delta[:, None])", "ds = p * dp"),), hint="the Δ term is missing"),
    _W("07.backward_atomic_triton", "mask-off-by-one", "masks j < i in the backward, unlike the forward",
       (("offs_n[None, :] <= offs_m[:, None] + diag", "offs_n[None, :] < offs_m[:, None] + diag"),),
       hint="hides the diagonal key"),
    _W("07.backward_atomic_triton", "dkdv-loop-from-zero", "starts every dK/dV program's loop at query block 0, "
       "leaving the mask to hide the blocks above its keys",
       (("start_m = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M", "start_m = 0"),),
       expect="none of whose rows sees any of its keys", hint=None),
    _W("07.backward_split_triton", "dq-unscaled", "forgets the softmax scale on dQ",
       (("    dq = dq * scale\n", ""),), expect="wrong dq", hint="dQ is missing the factor scale"),
    _W("07.backward_split_triton", "causal-end-too-early", "stops the dQ key loop at the block's first row",
       (("end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)", "end_n = tl.minimum(start_m + diag, n_k)"),),
       expect="never loaded key tile", hint=None),
    _W("07.backward_split_triton", "dq-loop-to-the-end", "loops every dQ program over all key blocks, masking the "
       "future ones",
       (("end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)", "end_n = n_k"),),
       expect="wholly in the future", hint=None),
    _W("07.backward_split_triton", "dq-end-top-left", "ends the dQ key loop at the block's last row, top-left aligned",
       (("end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)", "end_n = tl.minimum(start_m + BLOCK_M, n_k)"),),
       expect="wholly in the future|never loaded", hint="aligned top-left"),
    _W("07.backward_split_triton", "dq-stored-atomically", "writes the dQ rows with tl.atomic_add, as the atomic "
       "design does",
       (("""    tl.store(dq_ptr + z * stride_dqz + offs_m[:, None] * stride_dqn + offs_d[None, :],
             dq.to(dq_ptr.dtype.element_ty), mask=q_mask)""",
         """    tl.atomic_add(dq_ptr + z * stride_dqz + offs_m[:, None] * stride_dqn + offs_d[None, :],
                  dq.to(dq_ptr.dtype.element_ty), mask=q_mask)"""),),
       expect="dq_kernel made \\d+ atomic update", hint=None),
    _W("07.backward_split_triton", "p-without-lse", "rebuilds P as exp(S) without subtracting the saved LSE",
       (('p = tl.exp(tl.where(visible, s - lse[:, None], float("-inf")))', 'p = tl.exp(tl.where(visible, s, float("-inf")))'),),
       hint="without the saved LSE"),
    # -- 08: the autograd function ----------------------------------------------------------------
    _W("08.flash_attention_triton", "forward-ignores-causal", "always runs the non-causal forward",
       (("_forward.causal_attention_forward(q, k, v, causal, scale)", "_forward.causal_attention_forward(q, k, v, False, scale)"),),
       hint="the causal mask is missing"),
    _W("08.flash_attention_triton", "backward-ignores-causal", "runs the backward without the causal mask",
       (("do.contiguous(), causal=ctx.causal,", "do.contiguous(), causal=False,"),), expect="wrong d",
       hint="without the causal mask the forward used"),
    _W("08.flash_attention_triton", "dk-dv-swapped", "returns the gradients of K and V in each other's places",
       (("return dq, dk, dv, None, None, None", "return dq, dv, dk, None, None, None"),), expect="wrong d",
       hint="dK and dV are swapped"),
    _W("08.flash_attention_triton", "backward-default-scale", "recomputes P in the backward with scale 1",
       (("scale=ctx.scale)", "scale=1.0)"),), expect="wrong d", hint="uses scale 1 instead of the forward's scale"),
    # -- 08: the fp8 forward ------------------------------------------------------------------------
    _W("08.fp8_forward_triton", "missing-qk-descale", "multiplies the scores by the softmax scale only, not by the "
       "descales of Q and K",
       (("qk_scale = sm_scale_log2e * q_descale * k_descale", "qk_scale = sm_scale_log2e"),),
       expect="wrong (O|LSE)", hint="the scores are not descaled"),
    _W("08.fp8_forward_triton", "missing-v-descale", "leaves V's descale out of O",
       (("o_scale = v_descale / P_SCALE", "o_scale = 1.0 / P_SCALE"),), expect="wrong O",
       hint="O is missing V's descale"),
    _W("08.fp8_forward_triton", "qk-descale-twice", "applies the descales of Q and K to the scores twice",
       (("qk_scale = sm_scale_log2e * q_descale * k_descale", "qk_scale = sm_scale_log2e * q_descale * k_descale * q_descale * k_descale"),),
       expect="wrong (O|LSE)", hint="applied twice"),
    _W("08.fp8_forward_triton", "v-descale-twice", "multiplies O by V's descale twice",
       (("o_scale = v_descale / P_SCALE", "o_scale = v_descale * v_descale / P_SCALE"),), expect="wrong O",
       hint="V's descale is applied twice"),
    _W("08.fp8_forward_triton", "p-scale-left-in", "forgets to divide P's power-of-two scale out of O",
       (("o_scale = v_descale / P_SCALE", "o_scale = v_descale"),), expect="wrong O", hint="P_SCALE times too large"),
]
