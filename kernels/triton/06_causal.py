# Lesson 06 · causal masking: skip the future, mask only the diagonal.
#
# In causal attention query i may only look at keys j <= i + (Nk - Nq). (The offset Nk - Nq aligns
# the mask bottom-right: the last query always sees every key, as when the queries are the newest
# tokens appended to a longer KV cache. With Nq = Nk it is the familiar j <= i.) Seen as a grid of
# BLOCK_M × BLOCK_N tiles of the score matrix S, the mask splits the tiles of one query block into
# three kinds:
#   (a) tiles left of the diagonal: every row of the block sees every key in them. No mask at all.
#   (b) tiles the diagonal passes through (and the ragged last key tile when Nk is not a multiple
#       of BLOCK_N): some entries are visible, some are not. These need the element-wise mask.
#   (c) tiles right of the diagonal: no row of the block sees any of their keys. They are never
#       loaded and never multiplied: the loop simply stops before them.
# Counting tiles shows why causal attention costs half: with Nq = Nk = N and T = N / BLOCK tiles per
# side, full attention visits T² tiles, causal visits 1 + 2 + ... + T = T(T + 1)/2, which tends to
# half as T grows (N = 4096, BLOCK = 64: 2080 of 4096 tiles, 51%).
#
# What you write: the mask of stage (b) with its guard (in attend_key_blocks), and the two bounds
# lo and hi that split the key axis into the stages (in causal_attention_kernel). The launch
# configurations and the wrappers are below the kernels.
#
# Your part: the `diagonal_mask` region of attend_key_blocks and the marked stage split of
# causal_attention_kernel, the first two functions below. The launch configurations and the wrappers
# are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 06 --track triton
import math

import torch
import triton
import triton.language as tl

from course.tracks.common import check_qkv
from course.tracks.triton import autotuning, table_config  # importing course first also selects the interpreter on CPU

# ----------------------------------------------------------------------------------------------
# The inner loop, written once and instantiated twice: MASKED=False for stage (a), True for (b).
#
# Why two stages, when masking every tile would give the same numbers? On a GPU the mask is not
# free: per tile it is BLOCK_M·BLOCK_N integer compares and selects in the innermost loop, right
# between the two tensor-core matmuls, plus the guard against rows that are still entirely masked.
# Stage (a) is the fast path, the lesson-05 loop with nothing added, and it covers almost all tiles;
# stage (b) pays for the mask only on the BLOCK_M / BLOCK_N tiles (one more when the diagonal does
# not fall on a tile edge) that the diagonal crosses in each query block. The same two stages give
# non-causal attention with a ragged tail: stage (a) over the full key tiles, stage (b) on the one
# partial tile at the end.
# ----------------------------------------------------------------------------------------------

@triton.jit
def attend_key_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                      n_k, diagonal, qk_scale, lo, hi,
                      MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
                      DOT_PRECISION: tl.constexpr):
    """Fold key blocks [lo, hi) into the running (acc, l, m) of one query block."""
    for start_n in range(lo, hi, BLOCK_N):
        key_idx = start_n + keys
        key_ok = key_idx < n_k
        if MASKED:  # a compile-time branch: stage (a)'s code has no trace of the mask
            kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[:, None] & key_ok[None, :], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=key_ok[:, None] & col_ok[None, :], other=0.0)
        else:
            # Full tiles: only the loop-invariant head-dim mask (all true when D is a power of two).
            kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[:, None], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=col_ok[None, :], other=0.0)
        s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale  # tensor cores, fp32 out, base-2 units
        if MASKED:
            # Stage (b): set the scores of the keys row i must not see to -inf (keys past Nk always; with
            # CAUSAL also the keys right of the diagonal), then the new running max m_new, and m_sub, the
            # max the exponents subtract, which must keep a row that has seen no key yet away from NaN.
            # region: diagonal_mask
            # BEGIN SOLUTION
            visible = key_ok[None, :]
            if CAUSAL:
                visible = visible & (key_idx[None, :] <= rows[:, None] + diagonal)  # j <= i + (Nk - Nq)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            # A row may have seen no key yet (Nq > Nk, or the diagonal cuts this block before its
            # first visible key). Its max is still -inf, and 2^(-inf - (-inf)) would be NaN:
            # subtract 0 instead, so alpha = p = 2^(-inf) = 0 and the row stays empty.
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            # END SOLUTION
            # endregion: diagonal_mask
        else:
            # Every score here is finite, so after this block every row's max is too.
            m_new = tl.maximum(m, tl.max(s, axis=1))
            m_sub = m_new
        alpha = tl.math.exp2(m - m_sub)
        p = tl.math.exp2(s - m_sub[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]                                            # in-register rescale
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)    # MMA accumulates in place
        m = m_new
    return acc, l, m


@triton.jit
def causal_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,  # Q, O (B, H, Nq, D); K, V (B, H_kv, Nk, D); LSE (B, H, Nq) fp32
    n_q, n_k, n_heads, group, qk_scale,   # group = H / H_kv query heads per KV head; qk_scale = scale·log2 e
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, stride_lb, stride_lh,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,          # D
    BLOCK_D: tl.constexpr,           # D padded to a power of two >= 16 (tl.dot needs every dim >= 16)
    DOT_PRECISION: tl.constexpr,     # "ieee" for fp32 inputs (no TF32 rounding), default otherwise
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // n_heads).to(tl.int64)           # int64: offsets of large batches exceed 2^31 elements
    h = (bh % n_heads).to(tl.int64)
    kv_h = h // group                          # grouped-query attention: several Q heads share a KV head
    rows = start_m + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_q
    col_ok = cols < HEAD_DIM

    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    kT_ptrs = k_ptr + b * stride_kb + kv_h * stride_kh + keys[None, :] * stride_kn + cols[:, None]
    v_ptrs = v_ptr + b * stride_vb + kv_h * stride_vh + keys[:, None] * stride_vn + cols[None, :]
    diagonal = n_k - n_q   # bottom-right alignment: query i sees key j iff j <= i + diagonal

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # region: causal_stage_split
    # Key blocks [0, lo) are stage (a), [lo, hi) stage (b), [hi, Nk) stage (c). lo is a multiple of
    # BLOCK_N (stage (a) loads whole tiles without a mask); hi is where this block's keys end.
    if CAUSAL:
        # BEGIN SOLUTION
        # The last real row of this block (rows past Nq are padding and must not pull in keys)
        # sees keys j < min(start_m + BLOCK_M, Nq) + diagonal; everything from there on is stage (c).
        # That bound never exceeds Nk, and is <= 0 when the whole block sees nothing (Nq > Nk).
        hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)
        # The first row sees j <= start_m + diagonal, and so does every later row: the key blocks
        # that end at or before start_m + diagonal + 1 are stage (a). Round down to a block start.
        lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N
        # END SOLUTION
    else:
        hi = n_k
        lo = n_k // BLOCK_N * BLOCK_N      # every full key block is stage (a); the ragged tail is (b)
    # Stage (a): full, unmasked blocks [0, lo).
    acc, l, m = attend_key_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                                  n_k, diagonal, qk_scale, 0, lo,
                                  MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, DOT_PRECISION=DOT_PRECISION)
    # Stage (b): blocks [lo, hi) straddle the diagonal or the end of K; element-wise mask.
    acc, l, m = attend_key_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                                  n_k, diagonal, qk_scale, lo, hi,
                                  MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, DOT_PRECISION=DOT_PRECISION)
    # Stage (c), blocks [hi, Nk): nothing to do, which is the whole point.
    # endregion: causal_stage_split
    # A row that saw no key has l = 0 and m = -inf: it gets O = 0 and LSE = -inf, not 0/0.
    empty = l == 0.0
    l_div = tl.where(empty, 1.0, l)
    o = acc / l_div[:, None]
    lse = tl.where(empty, float("-inf"), (m + tl.math.log2(l_div)) * 0.6931471805599453)  # back to natural log
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + cols[None, :],
             o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + b * stride_lb + h * stride_lh + rows, lse, mask=row_ok)


# ---- given code below this line: you do not edit it ----

LOG2E = 1.4426950408889634  # log2(e): exp(x) = 2^(x·log2 e)

# ----------------------------------------------------------------------------------------------
# Below the kernels: launch configurations and the wrappers (given).
#
# The kernel is the lesson-05 one (Q·Kᵀ and P·V on tensor cores, fp32 accumulator, exp2 with
# log2(e) folded into the scale), generalised to (B, H, N, D) tensors with grouped-query attention:
# K and V may have fewer heads H_kv than Q has (H_kv dividing H); query head h reads KV head
# h // (H / H_kv). Only the pointer offsets know about it.
#
# Launch configurations. Checks, tests and notebooks run check_config on both tiers, and the compile
# gate compiles it: nothing is timed. BLOCK_M != BLOCK_N on purpose, so every check exercises loop
# bounds where a query block spans two key blocks. The benchmarks autotune over _configs(), a list
# aimed at H100-class parts (228 KB shared memory per SM, 4 warps per warpgroup): BLOCK_M = 128 keeps
# a 128 × D fp32 accumulator per program; BLOCK_N trades registers for fewer loop trips; num_stages is
# how many K/V tiles the compiler keeps in flight (lesson 04).
# ----------------------------------------------------------------------------------------------


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """16-bit tiles up to D = 128: 128 query rows, 64 keys, 4 warps, two stages. fp32 tiles (twice the
    bytes, exact "ieee" dots on the FMA units) and 256-wide heads: 64 × 32, one stage for 256-wide fp32."""
    wide = max(16, triton.next_power_of_2(head_dim)) > 128
    if dtype == torch.float32 or wide:
        return triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4,
                             num_stages=1 if wide and dtype == torch.float32 else 2)
    return triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=2)


def _configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn in [(128, 64), (128, 128), (64, 64)]
            for w in (4, 8)
            for s in (2, 3, 4)] + [triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=1)]


def _prune(configs, named_args, **kwargs):
    """Drop configs that cannot fit or cannot help before any of them is timed."""
    block_d = kwargs.get("BLOCK_D", named_args.get("BLOCK_D", 64))
    wide = block_d > 128 or named_args["q_ptr"].element_size() > 2  # 256-wide heads or fp32 tiles
    keep = [c for c in configs
            if not (wide and (c.kwargs["BLOCK_N"] > 64 or c.num_stages > 2))
            and not (named_args["n_q"] <= 64 and c.kwargs["BLOCK_M"] > 64)]  # short queries (decoding)
    if block_d > 128 and named_args["q_ptr"].element_size() > 2:
        # 256-wide fp32 tiles: only the 64×32 single-stage config fits in an A100's shared memory.
        keep = [c for c in keep if c.kwargs["BLOCK_N"] <= 32]
    return keep or configs[-1:]


# The launch table: what a direct call (outside a check, outside autotune()) launches on a GPU family whose
# benchmark run is recorded, instead of the check config; nothing is timed at call time (course.tracks.triton's
# table_config reads it). Rows: (largest head dim, causal, shortest Nq, config), first match wins, 16-bit tiles.
# sm_90: what the autotuner kept on an H200 (Triton 3.6) for fp16 at N 1k and 4k and bf16 at 16k, D 64 and 128
# (docs/benchmarks.md): 128 × 64 with 8 warps and 3 stages everywhere but short causal sequences.
LAUNCH_TABLE = {
    (9, 0): [(128, True, 2048, triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)),
             (128, True, 0, triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3)),
             (128, False, 0, triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3))],
}


causal_attention_tuned = triton.autotune(
    configs=_configs(), key=["n_q", "n_k", "HEAD_DIM", "CAUSAL"], prune_configs_by={"early_config_prune": _prune},
)(causal_attention_kernel)


def causal_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                             scale: float | None = None, *, block_m: int | None = None, block_n: int | None = None,
                             num_warps: int = 4, num_stages: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The launcher a capstone reuses: Q (B, H, Nq, D), K and V (B, H_kv, Nk, D) with H_kv dividing H.

    Returns O (B, H, Nq, D) in q's dtype and LSE (B, H, Nq) float32 (natural log; -inf on rows that
    see no key). The launch runs check_config, LAUNCH_TABLE's row in a direct call on a GPU it names, or the
    autotuner inside course.tracks.triton.autotune() (the benchmarks); ``block_m``/``block_n`` choose the tiles
    by hand (for tests and experiments).
    """
    name = "causal_attention_forward"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{name} takes 4-D (B, H, N, D) tensors; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    check_qkv(name, q, k, v, same_batch=False)  # the batch and the head mapping are checked below
    batch, n_heads, n_q, d = q.shape
    n_kv_heads, n_k = k.shape[1], k.shape[2]
    if k.shape[0] != batch or n_kv_heads == 0 or n_heads % n_kv_heads:
        raise ValueError(f"{name} needs K, V with the batch of Q and a head count dividing Q's "
                         f"(grouped-query attention); got Q {tuple(q.shape)}, K {tuple(k.shape)}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    lse = torch.empty((batch, n_heads, n_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    # fp32 inputs: tl.dot defaults to TF32 on NVIDIA, which keeps only 10 mantissa bits of each
    # operand (~1e-3 relative error); "ieee" keeps exact fp32. 16-bit inputs: leave the default.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    args = (q, k, v, o, lse, n_q, n_k, n_heads, n_heads // n_kv_heads, scale * LOG2E,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *lse.stride()[:2])
    meta = dict(CAUSAL=bool(causal), HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), DOT_PRECISION=precision)
    if block_m is None and block_n is None and autotuning():  # a benchmark: time the list, keep the fastest
        grid = lambda cfg: (triton.cdiv(n_q, cfg["BLOCK_M"]), batch * n_heads)  # noqa: E731
        causal_attention_tuned[grid](*args, **meta)
    elif block_m is None and block_n is None:  # one fixed config, nothing timed: the table's row or the check's
        config = table_config(LAUNCH_TABLE, q.device, d, q.dtype, causal, n_q) or check_config(d, q.dtype)
        causal_attention_kernel[(triton.cdiv(n_q, config.kwargs["BLOCK_M"]), batch * n_heads)](
            *args, **meta, **config.all_kwargs())
    else:
        block_m, block_n = block_m or 64, block_n or 64
        if block_m < 16 or block_n < 16 or block_m & (block_m - 1) or block_n & (block_n - 1):
            raise ValueError(f"{name}: block sizes must be powers of two >= 16; got {block_m}, {block_n}")
        causal_attention_kernel[(triton.cdiv(n_q, block_m), batch * n_heads)](
            *args, **meta, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return o, lse


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale · Q Kᵀ [+ causal mask]) V on tensor cores; returns (O, LSE).

    Q (..., Nq, D), K and V (..., Nk, D), any number of leading batch dims (all equal). ``causal``
    is bottom-right aligned: query i sees key j iff j <= i + (Nk - Nq). O has q's dtype; LSE
    (..., Nq) is float32, natural log, -inf on a row that sees no key (whose O is 0).
    """
    check_qkv("causal_attention", q, k, v)
    *batch, n_q, d = q.shape
    n_k = k.shape[-2]
    z = math.prod(batch)  # flatten every leading dim into the head axis: (1, Z, N, D), H = H_kv = Z
    o, lse = causal_attention_forward(q.reshape(1, z, n_q, d), k.reshape(1, z, n_k, d), v.reshape(1, z, n_k, d),
                                      causal, scale)
    return o.reshape(*batch, n_q, d), lse.reshape(*batch, n_q)
