# Lesson 03 · tiling: the FlashAttention-2 forward pass.
#
# Lesson 01 gave every query row its own program, and every one of those programs read all of K
# and V from global memory: Nq · Nk · D loads of each. Here one program owns a *tile* of BLOCK_M
# query rows. It loads its Q tile once and keeps it on chip (registers / shared memory) for the
# whole run, then walks over K and V in tiles of BLOCK_N keys. Each K/V tile that comes in from
# global memory is now used by BLOCK_M query rows instead of one, so the traffic for K and V
# shrinks by a factor of BLOCK_M. The per-row work becomes two small matrix products per tile,
# S = Q Kᵀ (BLOCK_M × BLOCK_N) and P V (BLOCK_M × D), which is what GPUs are built for.
#
# The softmax is the online one of lesson 02, done for BLOCK_M rows at once: each row keeps its
# running max m and sum l; when a tile raises a row's max, the row's l *and* its output
# accumulator acc are rescaled by exp(m_old - m_new). Two FlashAttention-2 choices show here:
#   * the loop over keys is the inner loop, inside a program that owns query rows, so programs
#     never share an output row and nothing is written until the end (FlashAttention-1 put the
#     key loop outside and re-read / re-wrote O for every K/V tile);
#   * acc is left unnormalised until after the loop: one divide by l per row at the end instead
#     of one per tile.
# The last step also writes LSE = m + log(l) per row: the backward pass (lesson 07) rebuilds P
# from it without redoing the softmax statistics.
#
# The products use tl.dot on float32 tiles with input_precision="ieee": exact float32 arithmetic,
# so this lesson is only about the data movement. Lesson 05 hands the dots to the tensor cores.
#
# Your part: the marked tile loop of tiled_attention_kernel, the first function below. The launch
# configuration and the wrapper are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 03 --track triton
import math

import torch
import triton
import triton.language as tl

from course.tracks.common import check_qkv


@triton.jit
def tiled_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,   # Q, O (Z, Nq, D); K, V (Z, Nk, D); LSE (Z, Nq) float32
    n_q, n_k, head_dim, scale,             # Nq, Nk, D and the softmax scale
    stride_qz, stride_qm, stride_kz, stride_kn, stride_vz, stride_vn, stride_oz, stride_om, stride_lz,
    BLOCK_M: tl.constexpr,                 # query rows per program
    BLOCK_N: tl.constexpr,                 # keys per step of the loop
    BLOCK_D: tl.constexpr,                 # D rounded up to a power of two, at least 16 (tl.dot's minimum)
):
    z = tl.program_id(1).to(tl.int64)      # batch index; int64 so z * stride cannot overflow
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_q                    # the last tile of queries may stick out past Nq
    col_ok = cols < head_dim               # lanes past D read as 0, which adds nothing to any dot
    q_tile = q_ptr + z * stride_qz + rows[:, None] * stride_qm + cols[None, :]
    # Loaded once, kept on chip for the whole loop: this is the reuse that tiling buys.
    q = tl.load(q_tile, mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)   # running max of each row's scores
    l = tl.zeros([BLOCK_M], tl.float32)                 # running Σ exp(s - m) of each row
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)      # running Σ exp(s - m) · v, not yet divided by l
    k_base = k_ptr + z * stride_kz
    v_base = v_ptr + z * stride_vz
    # BEGIN SOLUTION
    for start_n in range(0, n_k, BLOCK_N):
        # region: load_kv_tile
        keys = start_n + tl.arange(0, BLOCK_N)
        key_ok = keys < n_k                # the last K/V tile may stick out past Nk
        kv_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(k_base + keys[:, None] * stride_kn + cols[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_base + keys[:, None] * stride_vn + cols[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        # endregion: load_kv_tile
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale     # (BLOCK_M, BLOCK_N) scores
        s = tl.where(key_ok[None, :], s, float("-inf"))                  # keys past Nk get weight exp(-inf) = 0
        # region: online_softmax_update
        m_new = tl.maximum(m, tl.max(s, axis=1))
        # Every tile holds at least one real key, so m_new is finite here; the guard keeps a row
        # that has seen no key (lesson 06's causal mask makes those) at l = 0 instead of NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)                  # how much the old max overstated: rescales l and acc
        p = tl.exp(s - m_safe[:, None])             # this tile's unnormalised probabilities
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
        # endregion: online_softmax_update
    # END SOLUTION
    # region: write_o_and_lse
    o = acc / l[:, None]                   # the one normalisation, after the last tile
    lse = m + tl.log(l)                    # natural log: LSE_i = log Σ_j exp(s_ij)
    o_tile = o_ptr + z * stride_oz + rows[:, None] * stride_om + cols[None, :]
    tl.store(o_tile, o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + z * stride_lz + rows, lse, mask=row_ok)
    # endregion: write_o_and_lse


# ---- given code below this line: you do not edit it ----


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """The one launch configuration of this kernel, on both tiers: checks, tests and notebooks run it, the
    compile gate compiles it. Square tiles of 64 rows up to D = 64; past that a GPU holds the tiles in
    registers, and 32-row tiles avoid spilling. Each pipeline stage holds a K and a V tile in shared
    memory: with 256-wide fp32 rows, three stages need more than an A100's 163 KiB per block, two fit."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    block = 64 if block_d <= 64 else 32
    return triton.Config({"BLOCK_M": block, "BLOCK_N": block}, num_warps=4, num_stages=2 if block_d > 128 else 3)


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale · Q Kᵀ) V and its row log-sum-exp, for Q (..., Nq, D) and K, V (..., Nk, D).

    Returns O (..., Nq, D) in q's dtype and LSE (..., Nq) in float32. One program per BLOCK_M query
    rows of one batch entry.
    """
    check_qkv("tiled_attention", q, k, v)
    *batch, n_q, d = q.shape
    n_k = k.shape[-2]
    scale = d ** -0.5 if scale is None else float(scale)
    # Flatten every leading dim into one batch axis Z (free for contiguous tensors).
    q3, k3, v3 = (t.reshape(math.prod(batch), t.shape[-2], d).contiguous() for t in (q, k, v))
    z = q3.shape[0]
    o = torch.empty_like(q3)
    lse = torch.empty(z, n_q, dtype=torch.float32, device=q.device)
    if z and n_q:
        config = check_config(d, q.dtype)
        grid = (triton.cdiv(n_q, config.kwargs["BLOCK_M"]), z)
        tiled_attention_kernel[grid](
            q3, k3, v3, o, lse, n_q, n_k, d, scale,
            q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
            o.stride(0), o.stride(1), lse.stride(0),
            BLOCK_D=max(16, triton.next_power_of_2(d)), **config.all_kwargs(),
        )
    return o.reshape(*batch, n_q, d), lse.reshape(*batch, n_q)
