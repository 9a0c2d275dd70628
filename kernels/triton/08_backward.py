# Lesson 08 · the capstone's own backward: lesson 07's algorithm, restructured for speed.
#
# Given code, not an exercise: the learner reads it in the appendix of lesson 08 ("what bought speed").
# The mathematics is lesson 07's (P rebuilt from the saved LSE, Δ = rowsum(dO ∘ O), dV = Pᵀ dO,
# dS = P ∘ (dP - Δ), dK = scale · dSᵀ Q, dQ = scale · dS K); what changes is how the work is laid out,
# one change per measurement of lesson 07's kernels on an H200 (docs/benchmarks.md):
#
#  1. No atomics. Under the profiler the atomic dQ cost lesson 07's dK/dV kernel more than a third of its
#     time (12.8 ms with it, 7.9 ms without), and at the check config the split dQ was already the faster
#     backward (8.03 vs 9.77 ms, 1 × 16 heads × 16k, D 64, causal, bf16). So dQ is computed by programs that
#     own their rows and sum over key blocks in registers, as lesson 07's split dQ kernel does, but in the
#     same launch as dK and dV: the grid's first part is one program per key block (dK, dV), its second part
#     one program per query block (dQ). Nothing is added to global memory twice, so the result is the same
#     bits on every run: deterministic by construction, and the capstone's deterministic=True costs the
#     backward nothing extra.
#  2. Stages, as lesson 06's forward has them. A key block's dK/dV program visits the query blocks the causal
#     diagonal cuts in a masked stage, the query blocks that see the whole key block in an unmasked stage
#     with no mask arithmetic at all, and never the query blocks wholly before the diagonal. The dQ program
#     mirrors it: unmasked key blocks first, then the diagonal ones. The ragged end of a sequence (a length
#     that is not a multiple of the block) goes through the masked code too.
#  3. exp2. The scores are multiplied by scale · log2(e) once per tile, and the forward's natural-log LSE is
#     turned into base 2 once per row by the pre-pass, so P = 2^(S₂ - LSE₂) is one exp2 per entry, the
#     instruction the GPU has (exp is exp2 plus a multiply). The forward's LSE stays natural-log: lesson 06
#     and every check keep that contract.
#
# Grouped-query attention, bottom-right causal alignment (query i sees key j iff j <= i + Nk - Nq), rows that
# see no key (LSE = -inf: their gradients are 0) and any lengths and head dims from 1 to 256 work as in
# lesson 07. Its speed has not been measured on a GPU yet: `python -m course.tools.bench_triton --leaderboard
# --kernels 08b7` times the capstone with it beside the capstone with lesson 07's backward, and
# `python -m course.tools.sweep_backward --kinds capstone` sweeps its launch configs.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 08 --track triton
import math

import torch
import triton
import triton.language as tl

from course.kernels import load_triton_module
from course.tracks.triton import autotuning, table_config  # importing course first also selects the interpreter on CPU

LOG2E = 1.4426950408889634  # log2(e): exp(x) = 2^(x · log2 e)


@triton.jit
def bwd_preprocess_kernel(
    o_ptr, do_ptr, lse_ptr,           # O and dO (Z, Nq, D) in the input dtype; LSE (Z, Nq) float32, natural log
    delta_ptr, lse2_ptr,              # out: Δ and LSE₂ (Z, Nq) float32
    n_q, head_dim,
    stride_oz, stride_on, stride_doz, stride_don,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Δ = rowsum(dO ∘ O) and the LSE in base 2, once per query row."""
    z = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < n_q
    mask = row_ok[:, None] & (offs_d < head_dim)[None, :]
    o = tl.load(o_ptr + z * stride_oz + offs_m[:, None] * stride_on + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(do_ptr + z * stride_doz + offs_m[:, None] * stride_don + offs_d[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    lse = tl.load(lse_ptr + z * n_q + offs_m, mask=row_ok, other=0.0)
    # A row that sees no key has LSE = -inf. Stored as +inf, 2^(S₂ - LSE₂) = 0 for every key of that row,
    # in the unmasked stages too: no key, no probability, and never 0 · inf = NaN.
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(delta_ptr + z * n_q + offs_m, delta, mask=row_ok)
    tl.store(lse2_ptr + z * n_q + offs_m, lse2, mask=row_ok)


@triton.jit
def _dkdv_query_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse2_ptr, delta_ptr, stride_qn, stride_don,
                       offs_n, d_ok, n_q, diag, qk_scale, lo, hi,
                       MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr):
    """Add query blocks [lo, hi) of one query head to the dK, dV of one key block (dK still without its scale)."""
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        if MASKED:
            row_ok = offs_m < n_q
            q = tl.load(q_ptrs + m0 * stride_qn, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            do = tl.load(do_ptrs + m0 * stride_don, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            lse2 = tl.load(lse2_ptr + offs_m, mask=row_ok, other=float("inf"))  # padded rows: P = 0
            delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        else:
            # Whole query blocks that see every key of this block: only the loop-invariant head-dim mask.
            q = tl.load(q_ptrs + m0 * stride_qn, mask=d_ok[None, :], other=0.0)
            do = tl.load(do_ptrs + m0 * stride_don, mask=d_ok[None, :], other=0.0)
            lse2 = tl.load(lse2_ptr + offs_m)
            delta = tl.load(delta_ptr + offs_m)
        s2 = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # scores in base-2 units, one multiply
        if MASKED:
            visible = (offs_m < n_q)[:, None]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag)
            p = tl.math.exp2(tl.where(visible, s2 - lse2[:, None], float("-inf")))
        else:
            p = tl.math.exp2(s2 - lse2[:, None])
        # Keys past Nk (the ragged last key block) get a P here too: they were loaded as zero rows of K and V,
        # and what they add lands in rows of dK and dV that are never stored.
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    return dk, dv


@triton.jit
def _dq_key_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn,
                   offs_m, d_ok, n_k, diag, qk_scale, lo, hi,
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """Add key blocks [lo, hi) to the dQ of one query block (still without its scale)."""
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        if MASKED:
            key_ok = offs_n < n_k
            k = tl.load(k_ptrs + n0 * stride_kn, mask=key_ok[:, None] & d_ok[None, :], other=0.0)
            v = tl.load(v_ptrs + n0 * stride_vn, mask=key_ok[:, None] & d_ok[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs + n0 * stride_kn, mask=d_ok[None, :], other=0.0)
            v = tl.load(v_ptrs + n0 * stride_vn, mask=d_ok[None, :], other=0.0)
        s2 = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        if MASKED:
            visible = key_ok[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag)
            p = tl.math.exp2(tl.where(visible, s2 - lse2[:, None], float("-inf")))
        else:
            p = tl.math.exp2(s2 - lse2[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    return dq


@triton.jit
def bwd_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr,      # Q, dO (Z·group, Nq, D); K, V (Z, Nk, D)
    lse2_ptr, delta_ptr,              # LSE₂ and Δ from bwd_preprocess_kernel (Z·group, Nq) float32
    dq_ptr, dk_ptr, dv_ptr,           # dQ (Z·group, Nq, D), dK, dV (Z, Nk, D), in the input dtype
    n_q, n_k, head_dim, scale, qk_scale,  # qk_scale = scale · log2(e)
    group,                            # query heads per K/V head (grouped-query attention; 1 without)
    stride_qz, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_doz, stride_don,
    stride_dqz, stride_dqn, stride_dkz, stride_dkn, stride_dvz, stride_dvn,
    CAUSAL: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,   # dK/dV part: query rows per step × keys per program
    BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,   # dQ part: query rows per program × keys per step
    BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    z_kv = tl.program_id(1).to(tl.int64)  # the K/V head; its query heads are z_kv·group .. z_kv·group + group - 1
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    diag = n_k - n_q                      # query i sees key j iff j <= i + diag
    n_kv_blocks = tl.cdiv(n_k, BLOCK_N1)
    full_q = n_q // BLOCK_M1 * BLOCK_M1   # the query blocks before this row are whole
    if pid < n_kv_blocks:
        # ---- dK and dV of keys start_n .. start_n + BLOCK_N1 - 1, summed over the group's query heads ----
        start_n = pid * BLOCK_N1
        offs_n = start_n + tl.arange(0, BLOCK_N1)
        kv_mask = (offs_n < n_k)[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + z_kv * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + z_kv * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        dk = tl.zeros([BLOCK_N1, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N1, BLOCK_D], tl.float32)
        if CAUSAL:
            # The first query row that sees key start_n is start_n - diag: the blocks before the one holding it
            # see none of these keys and are never visited. Row i sees every key of the block once
            # i >= start_n + BLOCK_N1 - 1 - diag: from the first block starting there, the unmasked stage.
            lo = tl.maximum(start_n - diag, 0) // BLOCK_M1 * BLOCK_M1
            mid = tl.maximum(tl.cdiv(tl.maximum(start_n + BLOCK_N1 - 1 - diag, 0), BLOCK_M1) * BLOCK_M1, lo)
        else:
            lo = 0
            mid = 0
        # Stages: [lo, min(mid, Nq)) diagonal, masked; [mid, full_q) whole and unmasked; [max(mid, full_q), Nq) the
        # ragged last query block, masked (mid is a multiple of BLOCK_M1, so it never falls inside that block).
        hi = tl.minimum(mid, n_q)
        tail = tl.maximum(mid, full_q)
        for g in range(group):
            z = z_kv * group + g
            q_ptrs = q_ptr + z * stride_qz + tl.arange(0, BLOCK_M1)[:, None] * stride_qn + offs_d[None, :]
            do_ptrs = do_ptr + z * stride_doz + tl.arange(0, BLOCK_M1)[:, None] * stride_don + offs_d[None, :]
            lse2_row = lse2_ptr + z * n_q
            delta_row = delta_ptr + z * n_q
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse2_row, delta_row, stride_qn, stride_don,
                                        offs_n, d_ok, n_q, diag, qk_scale, lo, hi,
                                        MASKED=True, CAUSAL=CAUSAL, BLOCK_M=BLOCK_M1)
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse2_row, delta_row, stride_qn, stride_don,
                                        offs_n, d_ok, n_q, diag, qk_scale, mid, full_q,
                                        MASKED=False, CAUSAL=CAUSAL, BLOCK_M=BLOCK_M1)
            dk, dv = _dkdv_query_blocks(dk, dv, k, v, q_ptrs, do_ptrs, lse2_row, delta_row, stride_qn, stride_don,
                                        offs_n, d_ok, n_q, diag, qk_scale, tail, n_q,
                                        MASKED=True, CAUSAL=CAUSAL, BLOCK_M=BLOCK_M1)
        dk = dk * scale
        tl.store(dk_ptr + z_kv * stride_dkz + offs_n[:, None] * stride_dkn + offs_d[None, :],
                 dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
        tl.store(dv_ptr + z_kv * stride_dvz + offs_n[:, None] * stride_dvn + offs_d[None, :],
                 dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
    else:
        # ---- dQ of query rows start_m .. start_m + BLOCK_M2 - 1 of query head z, over the key blocks ----
        index = pid - n_kv_blocks
        n_q_blocks = tl.cdiv(n_q, BLOCK_M2)
        z = z_kv * group + index // n_q_blocks
        start_m = index % n_q_blocks * BLOCK_M2
        offs_m = start_m + tl.arange(0, BLOCK_M2)
        row_ok = offs_m < n_q
        q_mask = row_ok[:, None] & d_ok[None, :]
        q = tl.load(q_ptr + z * stride_qz + offs_m[:, None] * stride_qn + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(do_ptr + z * stride_doz + offs_m[:, None] * stride_don + offs_d[None, :], mask=q_mask, other=0.0)
        lse2 = tl.load(lse2_ptr + z * n_q + offs_m, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_ptr + z * n_q + offs_m, mask=row_ok, other=0.0)
        dq = tl.zeros([BLOCK_M2, BLOCK_D], tl.float32)
        full_k = n_k // BLOCK_N2 * BLOCK_N2
        if CAUSAL:
            # Keys j <= start_m + diag are seen by every row of the block: the whole key blocks below that are
            # unmasked. The last real row sees keys j < min(start_m + BLOCK_M2, Nq) + diag: the key blocks from
            # there on are never visited (hi <= 0: the block sees no key, dQ stays 0).
            lo = tl.minimum(tl.maximum(start_m + diag + 1, 0) // BLOCK_N2 * BLOCK_N2, full_k)
            hi = tl.maximum(tl.minimum(start_m + BLOCK_M2, n_q) + diag, 0)
        else:
            lo = full_k                   # every whole key block is unmasked; the ragged last one is masked
            hi = n_k
        k_ptrs = k_ptr + z_kv * stride_kz + tl.arange(0, BLOCK_N2)[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_ptr + z_kv * stride_vz + tl.arange(0, BLOCK_N2)[:, None] * stride_vn + offs_d[None, :]
        dq = _dq_key_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, d_ok, n_k, diag,
                            qk_scale, 0, lo, MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N2)
        dq = _dq_key_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, d_ok, n_k, diag,
                            qk_scale, lo, hi, MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N2)
        dq = dq * scale
        tl.store(dq_ptr + z * stride_dqz + offs_m[:, None] * stride_dqn + offs_d[None, :],
                 dq.to(dq_ptr.dtype.element_ty), mask=q_mask)


# ---- given code below this line: you do not edit it ----

_lesson07 = load_triton_module("triton/07_backward")  # its input checks: the same errors as lesson 07's backward


def _cfg(m1: int, n1: int, m2: int, n2: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M1": m1, "BLOCK_N1": n1, "BLOCK_M2": m2, "BLOCK_N2": n2},
                         num_warps=warps, num_stages=stages)


def check_config(head_dim: int, dtype: torch.dtype) -> dict[str, triton.Config]:
    """The fixed launches a check, the interpreter and the compile gate run, and (until a GPU measures better
    ones: LAUNCH_TABLE is empty) what a direct call runs, unmeasured. Lesson 07's check tiles, which in this
    kernel too compile for sm_90 without spilling in 16-bit (below): the dK/dV part 32 query rows × 64 keys up to
    D = 64, 32 × 32 up to 128, 16 × 32 beyond;
    the dQ part 64 query rows × 32 keys (32 × 16 past D = 128); fp32 tiles half as many keys (dK/dV) and
    rows (dQ). One kernel holds both parts, so both share one warp count.

    Registers per thread / spilled bytes of bwd_kernel on sm_90, from the compile gate with Triton 3.9.0
    (``python -m course.tools.triton_gate --lessons 08_backward --targets 90 --gqa``, and ``--head-dims 256``),
    without and with grouped heads (4 query heads over 2 K/V heads), causal:
        fp16 D 64 (32 × 64 | 64 × 32, 4 warps, 3 stages): 213 / 0, GQA 252 / 0 (bf16 the same)
        fp16 D 128 (32 × 32 | 64 × 32, 4 warps, 2 stages): 210 / 0, GQA 249 / 0
        fp16 D 256 (16 × 32 | 32 × 16, 8 warps, 1 stage): 162 / 0, GQA 158 / 0
        fp32 D 64 (32 × 32 | 32 × 32, 4 warps, 3 stages): 32 / 28840, GQA 255 / 1576 (the exact "ieee" fp32 dots
            run on the FMA units; lesson 07's fp32 check config spills too: fp32 is for checks, not for speed)
        fp32 D 256 (16 × 16 | 16 × 16, 8 warps, 1 stage): 120 / 0, GQA 108 / 0
    The grouped heads' loop over the group costs the dK/dV part about 40 registers at D 64. bwd_preprocess_kernel:
    32 registers (fp32: 56 at D 64, 168 at D 256), no spills."""
    half = 2 if dtype == torch.float32 else 1
    if head_dim <= 64:
        main = _cfg(32, 64 // half, 64 // half, 32, 4, 3)
    elif head_dim <= 128:
        main = _cfg(32, 32 // half, 64 // half, 32, 4, 2)
    else:
        main = _cfg(16, 32 // half, 32 // half, 16, 8, 1)
    return {"bwd_preprocess_kernel": triton.Config({"BLOCK_M": 64}, num_warps=4, num_stages=1), "bwd_kernel": main}


def tuning_configs(head_dim: int, dtype: torch.dtype) -> list[triton.Config]:
    """What a benchmark's autotuner times for bwd_kernel (inside course.tracks.triton.autotune()): the check
    config first, then candidates no GPU has timed yet. Triton's fused-attention tutorial publishes, for its
    own backward at D = 64 on Hopper, 32 query rows × 128 keys for the dK/dV part and 128 × 32 for the dQ part
    with 4 warps and 5 stages: that is the second 16-bit candidate at D <= 64. The others are lesson 07's
    H200 sweep winners for its dK/dV kernel (64 × 64 at D 64; 32 × 64 at D 128) with the dQ tiles that sweep
    found best. fp32 and 256-wide heads keep the check config alone (every larger fp32 tile of lesson 07
    spilled). ``python -m course.tools.sweep_backward --kinds capstone`` times more; every config here runs
    on the interpreter in tests/tracks/test_triton_capstone_backward.py.

    Registers / spilled bytes on sm_90 (Triton 3.9.0, ``python -m course.tools.triton_gate --lessons 08_backward
    --dtypes fp16 --head-dims 64 128 --targets 90 --causal true --gqa --tuned --all-configs``), fp16, causal,
    without | with grouped heads; "dK/dV | dQ" tiles:
        D 64: 32 × 128 | 128 × 32, 4 warps, 5 stages (the tutorial's): 255 / 240 | 255 / 1056
              32 × 128 | 128 × 32, 8 warps, 3 stages: 207 / 0 | 226 / 0
              64 × 64 | 64 × 64, 8 warps, 2 stages: 209 / 0 | 255 / 160
        D 128: 32 × 64 | 64 × 32, 8 warps, 2 stages: 216 / 0 | 254 / 0
               32 × 64 | 64 × 64, 8 warps, 2 stages: 210 / 0 | 244 / 0
    The tutorial's tiles with 4 warps spill in this kernel, which holds both parts (the compiler allocates for
    the larger), so the same tiles with 8 warps are a candidate too. With 4 warps, 64 × 64 | 64 × 64 at D 64
    reached 255 registers (312 bytes spilled with grouped heads) and 32 × 64 | 64 × 32 at D 128 spilled 216 bytes:
    those went to 8 warps. Which one is fastest only a GPU can say.
    """
    check = check_config(head_dim, dtype)["bwd_kernel"]
    if dtype == torch.float32 or head_dim > 128:
        more: list[triton.Config] = []
    elif head_dim > 64:
        more = [_cfg(32, 64, 64, 32, 8, 2), _cfg(32, 64, 64, 64, 8, 2)]
    else:
        more = [_cfg(32, 128, 128, 32, 4, 5), _cfg(32, 128, 128, 32, 8, 3), _cfg(64, 64, 64, 64, 8, 2)]
    return [check] + [c for c in more if c != check]


# The launch table: a direct call on a GPU family listed here would launch measured configs instead of the
# check config. No GPU has timed this kernel yet, so it is empty: a direct call runs check_config everywhere.
LAUNCH_TABLE: dict = {}


_TUNING_REGIMES = [(d, dtype) for d in (64, 128, 256) for dtype in (torch.float16, torch.float32)]


def _every_tuning_config() -> list[triton.Config]:
    found: list[triton.Config] = []
    for d, dtype in _TUNING_REGIMES:
        found += [c for c in tuning_configs(d, dtype) if c not in found]
    return found


def _prune(configs, named_args, **kwargs):
    """The tuning list of this launch's head dim and dtype (an autotuner holds one list for all)."""
    return tuning_configs(named_args["head_dim"], named_args["q_ptr"].dtype)


# The benchmarks' autotuned launch. Every output is a plain store, so a timed trial can run again and again.
bwd_tuned = triton.autotune(configs=_every_tuning_config(), key=["n_q", "n_k", "head_dim", "group", "CAUSAL"],
                            prune_configs_by={"early_config_prune": _prune})(bwd_kernel)


def _grid(n_q: int, n_k: int, group: int, z_kv: int, meta: dict) -> tuple[int, int]:
    """Key-block programs first, then one program per query block of each of the group's query heads."""
    return (triton.cdiv(n_k, meta["BLOCK_N1"]) + group * triton.cdiv(n_q, meta["BLOCK_M2"]), z_kv)


def _backward_zbnd(q, k, v, o, lse, do, causal, scale, configs=None):
    """The launches, on (Z, N, D) tensors (Z = every leading dim flattened) and lse (Z, Nq). K and V may have
    fewer entries than Q (grouped-query attention): Z_q = Z_kv · group, query entry z reads K/V entry z // group."""
    z, n_q, d = q.shape
    z_kv, n_k = k.shape[0], k.shape[1]
    group = z // z_kv if z_kv else 1
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, do = o.to(q.dtype).contiguous(), do.to(q.dtype).contiguous()  # tl.dot needs one operand dtype
    lse = lse.to(torch.float32).contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if z == 0 or n_q == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    row = table_config(LAUNCH_TABLE, q.device, d, q.dtype, causal, n_q) if configs is None else None
    chosen = dict(check_config(d, q.dtype), **(row or {}), **(configs or {}))
    cfg = {name: config.all_kwargs() for name, config in chosen.items()}
    block_d = max(16, triton.next_power_of_2(d))

    delta = torch.empty((z, n_q), device=q.device, dtype=torch.float32)
    lse2 = torch.empty_like(delta)
    pre = cfg["bwd_preprocess_kernel"]
    bwd_preprocess_kernel[(triton.cdiv(n_q, pre["BLOCK_M"]), z)](
        o, do, lse, delta, lse2, n_q, d, o.stride(0), o.stride(1), do.stride(0), do.stride(1), BLOCK_D=block_d, **pre)

    args = (q, k, v, do, lse2, delta, dq, dk, dv, n_q, n_k, d, scale, scale * LOG2E, group,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
            dq.stride(0), dq.stride(1), dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1))
    if configs is None and autotuning():  # a benchmark: time the tuning list, keep the fastest
        bwd_tuned[lambda meta: _grid(n_q, n_k, group, z_kv, meta)](*args, CAUSAL=causal, BLOCK_D=block_d)
    else:
        main = cfg["bwd_kernel"]
        bwd_kernel[_grid(n_q, n_k, group, z_kv, main)](*args, CAUSAL=causal, BLOCK_D=block_d, **main)
    return dq, dk, dv


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                       do: torch.Tensor, causal: bool = False, scale: float | None = None, *,
                       configs: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) for Q (..., Nq, D), K, V (..., Nk, D), given the forward's O, its natural-log float32 LSE
    (..., Nq) and dO; the same leading dims everywhere. Deterministic: the same bits on every call.
    ``configs`` ({kernel name: triton.Config}) replaces the check configs (tests and experiments)."""
    _lesson07._validate(q, k, v, o, lse, do, "split", four_d=False)
    n_q, d = q.shape[-2:]
    n_k = k.shape[-2]
    scale = d ** -0.5 if scale is None else float(scale)
    lead = q.shape[:-2]
    z = math.prod(lead)
    dq, dk, dv = _backward_zbnd(q.reshape(z, n_q, d), k.reshape(z, n_k, d), v.reshape(z, n_k, d),
                                o.reshape(z, n_q, d), lse.reshape(z, n_q), do.reshape(z, n_q, d),
                                bool(causal), scale, configs)
    return dq.reshape(*lead, n_q, d), dk.reshape(*lead, n_k, d), dv.reshape(*lead, n_k, d)


def attention_backward_bhnd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                            do: torch.Tensor, causal: bool = False, scale: float | None = None, *,
                            configs: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """attention_backward for (B, H, N, D) tensors and lse (B, H, Nq): what the capstone's autograd.Function calls.

    K and V may have fewer heads than Q, H_kv dividing H (grouped-query attention): query head h reads K/V head
    h // (H / H_kv), and dK, dV come back with H_kv heads, each summed over its group in registers. Nothing is
    expanded or copied per query head."""
    _lesson07._validate(q, k, v, o, lse, do, "split", four_d=True)
    b, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else float(scale)
    dq, dk, dv = _backward_zbnd(q.reshape(b * h, n_q, d), k.reshape(b * h_kv, n_k, d), v.reshape(b * h_kv, n_k, d),
                                o.reshape(b * h, n_q, d), lse.reshape(b * h, n_q), do.reshape(b * h, n_q, d),
                                bool(causal), scale, configs)
    return dq.view(b, h, n_q, d), dk.view(b, h_kv, n_k, d), dv.view(b, h_kv, n_k, d)
