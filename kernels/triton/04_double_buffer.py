# Lesson 04 · pipelining and vectorised loads: the same algorithm, written the way fast kernels are.
#
# Lesson 03's kernel is correct and already moves little data, but as written it would leave a GPU
# idle much of the time: each K/V tile is requested, then the program *waits* for it, then
# computes, then requests the next one. Memory latency (hundreds of cycles) is paid once per tile.
# Fast kernels overlap the two: while the math runs on tile i, the copies of tiles i+1, i+2, … are
# already in flight. In CUDA you write that yourself (lesson 04's CUDA kernel: float4 loads into two
# shared-memory buffers, ping-ponging between them). In Triton you describe the tiles and say how
# deep the pipeline should be, and the compiler writes the ping-pong:
#
#   num_stages  Triton allocates num_stages shared-memory buffers for each tile the loop loads (K
#               and V here) and issues asynchronous copies (cp.async, or TMA on Hopper) for the next
#               num_stages - 1 iterations before it starts computing on the current one. Each
#               iteration then waits only for a tile that was requested long ago. num_stages = 2 is
#               double buffering; more stages hide more latency but cost more shared memory.
#   num_warps   how many warps (groups of 32 threads) run one program. The tile is split between
#               them: more warps means more threads to share a big tile (fewer registers each) and
#               more loads in flight, but also more synchronisation and, with small tiles, idle warps.
#   tensor descriptors  tl.make_tensor_descriptor(base, shape, strides, block_shape) describes a 2-D
#               array and the tile shape once; desc.load([row, col]) fetches a whole tile. The compiler
#               knows the tile is a dense rectangle with a unit-stride last dimension, so it emits
#               wide, coalesced 16-byte loads (a float4 per thread, the same trick as the CUDA
#               kernel), and on Hopper it hands the copy to the TMA unit, a copy engine that moves a
#               whole tile to shared memory without the threads computing any address. Tails are
#               handled by the descriptor: rows or columns past `shape` read as zero and are never
#               written, so loads and stores need no mask. The scores still do: a key row of zeros
#               scores 0, not -inf, so keys past Nk are set to -inf. Older Triton had block pointers
#               (tl.make_block_ptr + tl.advance) for the same purpose; Triton 3.9 removed them in favour
#               of descriptors.
#               On GPUs before Hopper (no TMA) Triton 3.4+ turns descriptor loads into ordinary
#               vectorised loads. The price: base address and row strides must be multiples of 16 bytes.
#
# Which BLOCK_M, BLOCK_N, num_warps and num_stages is fastest depends on the GPU, D and the
# sequence lengths, so a benchmark hands the launch to @triton.autotune, which times a few
# configurations the first time it sees a new (Nq, Nk, D, dtype) and reuses the winner. A check
# never times anything: it runs check_config, one configuration known to compile and fit. The softmax is also done in base 2: exp(x) = 2^(x·log2 e),
# and exp2 is the instruction the hardware actually has; log2 e is folded into the softmax scale,
# so the base change costs nothing. Only the LSE is converted back to natural-log units at the end.
#
# Your part: the marked loop of pipelined_attention_kernel, the first function below. The launch
# configurations, the autotuned copy and the wrapper are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 04 --track triton
import math

import torch
import triton
import triton.language as tl

from course.tracks.common import check_qkv
from course.tracks.triton import autotuning

@triton.jit
def pipelined_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,   # Q, O (Z, Nq, Dp); K, V (Z, Nk, Dp); LSE (Z, Nq) float32
    N_CTX_Q, N_CTX_K, HEAD_DIM,            # Nq, Nk, D (D <= Dp: the row stride may include padding)
    qk_scale,                              # softmax scale · log2(e)
    stride_qz, stride_qm, stride_kz, stride_kn, stride_vz, stride_vn, stride_oz, stride_om, stride_lz,
    BLOCK_D: tl.constexpr,                 # D rounded up to a power of two, at least 16
    BLOCK_M: tl.constexpr,                 # check_config's, or the autotuner's choice
    BLOCK_N: tl.constexpr,
):
    z = tl.program_id(1).to(tl.int64)
    start_m = tl.program_id(0) * BLOCK_M
    # region: tensor_descriptors
    # One descriptor per matrix of this batch entry: (rows, D) with unit stride along D. The tile
    # shape is fixed here; every load below is one rectangle, bounds-checked for us.
    q_desc = tl.make_tensor_descriptor(q_ptr + z * stride_qz, shape=[N_CTX_Q, HEAD_DIM], strides=[stride_qm, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])
    k_desc = tl.make_tensor_descriptor(k_ptr + z * stride_kz, shape=[N_CTX_K, HEAD_DIM], strides=[stride_kn, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])
    v_desc = tl.make_tensor_descriptor(v_ptr + z * stride_vz, shape=[N_CTX_K, HEAD_DIM], strides=[stride_vn, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])
    o_desc = tl.make_tensor_descriptor(o_ptr + z * stride_oz, shape=[N_CTX_Q, HEAD_DIM], strides=[stride_om, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])
    # endregion: tensor_descriptors
    q = q_desc.load([start_m, 0]).to(tl.float32)  # rows past Nq and columns past D arrive as 0

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)   # running row max, in log2 units
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    # Loop with tl.range over K/V tiles: the compiler software-pipelines it num_stages deep (the
    # config's value), prefetching the K and V tiles of later iterations while this one computes.
    # BEGIN SOLUTION
    for start_n in tl.range(0, N_CTX_K, BLOCK_N):
        # region: load_kv_tile
        k = k_desc.load([start_n, 0]).to(tl.float32)    # keys past Nk arrive as zero rows
        v = v_desc.load([start_n, 0]).to(tl.float32)
        # endregion: load_kv_tile
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale  # scores · log2(e)
        # The descriptor padded missing keys with zeros, which would score 0, not -inf: mask them.
        s = tl.where((start_n + offs_n < N_CTX_K)[None, :], s, float("-inf"))
        # region: online_softmax_update
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet stays at l = 0
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
        # endregion: online_softmax_update
    # END SOLUTION
    # region: write_o_and_lse
    o = acc / l[:, None]
    o_desc.store([start_m, 0], o.to(o_ptr.dtype.element_ty))     # rows past Nq, columns past D: not written
    lse = (m + tl.log2(l)) * 0.6931471805599453          # times ln 2: back from log2 to natural-log units
    rows = start_m + tl.arange(0, BLOCK_M)
    tl.store(lse_ptr + z * stride_lz + rows, lse, mask=rows < N_CTX_Q)
    # endregion: write_o_and_lse


# ---- given code below this line: you do not edit it ----

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """The launch configuration of checks, tests and notebooks, on both tiers (the compile gate compiles
    it): 64 query rows, 32 keys, 4 warps, double buffering. Only 256-wide fp32 rows are too big for it
    (Q, and two stages of K and V, would pass an A100's 163 KiB of shared memory): one stage of 32 x 32."""
    if max(16, triton.next_power_of_2(head_dim)) > 128 and dtype == torch.float32:
        return triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1)
    return triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)


def _configs() -> list[triton.Config]:
    # The benchmarks' search (every config is compiled and timed once per new key): 4 warps for 64
    # query rows, 8 warps for 128 so each thread holds about as much of the tile; 2 or 3 stages.
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=4 if bm == 64 else 8, num_stages=s)
        for bm in (64, 128) for bn in (32, 64) for s in (2, 3)
    ]
    # Small tiles, shallow pipeline: fits in shared memory and registers even at D = 256 in float32.
    configs.append(triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1))
    return configs


# The same kernel behind an autotuner, for the benchmarks (course.tracks.triton.autotune).
pipelined_attention_tuned = triton.autotune(configs=_configs(), key=["N_CTX_Q", "N_CTX_K", "HEAD_DIM"])(
    pipelined_attention_kernel)


def _descriptor_ready(t: torch.Tensor, d: int) -> torch.Tensor:
    """t (Z, N, d) laid out as a descriptor needs it: 16-byte aligned base and row stride.

    Real models use D = 64 or 128, which already qualify; an odd D (say 5 in float32) is copied
    into rows padded with zeros to the next multiple of 16 bytes. The padding is never read as
    data: the descriptor's shape still says D columns.
    """
    per_16_bytes = 16 // t.element_size()
    padded_d = -(-d // per_16_bytes) * per_16_bytes
    if padded_d == d and t.data_ptr() % 16 == 0:
        return t
    out = torch.zeros(*t.shape[:-1], padded_d, dtype=t.dtype, device=t.device)
    out[..., :d] = t
    return out


def _cuda_scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def pipelined_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale · Q Kᵀ) V and its row log-sum-exp, for Q (..., Nq, D) and K, V (..., Nk, D).

    Returns O (..., Nq, D) in q's dtype and LSE (..., Nq) in float32. Tile sizes, warps and pipeline
    depth are check_config's, or the autotuner's inside course.tracks.triton.autotune() (the benchmarks).
    """
    check_qkv("pipelined_attention", q, k, v)
    *batch, n_q, d = q.shape
    n_k = k.shape[-2]
    scale = d ** -0.5 if scale is None else float(scale)
    q3, k3, v3 = (_descriptor_ready(t.reshape(math.prod(batch), t.shape[-2], d).contiguous(), d) for t in (q, k, v))
    z = q3.shape[0]
    o = torch.empty_like(q3)   # same padded layout as q3; the padding columns are sliced off below
    lse = torch.empty(z, n_q, dtype=torch.float32, device=q.device)
    if z and n_q:
        if q.is_cuda:
            # Descriptors built inside a kernel live in a small global-memory scratch area per
            # program; Triton asks the allocator for it at launch.
            triton.set_allocator(_cuda_scratch)
        args = (q3, k3, v3, o, lse, n_q, n_k, d, scale * LOG2E,
                q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
                o.stride(0), o.stride(1), lse.stride(0))
        block_d = max(16, triton.next_power_of_2(d))
        if autotuning():  # a benchmark: the autotuner times its configs and picks BLOCK_M, BLOCK_N, warps, stages
            grid = lambda meta: (triton.cdiv(n_q, meta["BLOCK_M"]), z)  # noqa: E731
            pipelined_attention_tuned[grid](*args, BLOCK_D=block_d)
        else:             # a check, a test, a notebook: the one known-good configuration, nothing timed
            config = check_config(d, q.dtype)
            grid = (triton.cdiv(n_q, config.kwargs["BLOCK_M"]), z)
            pipelined_attention_kernel[grid](*args, BLOCK_D=block_d, **config.all_kwargs())
    if o.shape[-1] != d:
        o = o[..., :d].contiguous()
    return o.reshape(*batch, n_q, d), lse.reshape(*batch, n_q)
