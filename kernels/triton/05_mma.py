# Lesson 05 · matrix intrinsics: both matmuls of attention on tensor cores.
#
# A tiled FlashAttention forward (lesson 03-04) spends almost all its arithmetic in two small
# matrix products per key tile: S = Q Kᵀ (BLOCK_M × BLOCK_N) and acc += P V (BLOCK_M × D). A GPU
# has a unit built for exactly that: the tensor core, driven by an MMA ("matrix multiply-
# accumulate") instruction. One MMA is issued by a whole warp of 32 threads at once and computes
# D = A·B + C on a small fixed tile, e.g. mma.sync m16n8k16: A is 16×16 fp16, B is 16×8 fp16,
# C and D are 16×8 fp32. That is 2048 multiply-adds in one instruction, where ordinary FMA
# units do 32 per warp per instruction. The operands never pass through memory: each thread
# holds a few elements of A, B and C in its own registers (a "fragment"), and the instruction
# reads all 32 threads' fragments together and writes D back into them. Products of two fp16
# values are exact in fp32 and the sums are kept in fp32, so "fp16 in, fp32 accumulate" loses
# nothing beyond the rounding of the inputs themselves. (On Hopper, Triton emits the bigger
# warpgroup form, wgmma, but the idea is the same.)
#
# Which (row, column) of C a given thread holds is decided by the hardware and differs between
# instructions and generations. CUDA's WMMA API and Metal's simdgroup_float8x8 therefore treat
# an accumulator fragment as opaque: you may load it, store it and feed it to the next MMA, but
# you cannot ask "which row is my element in?". The online softmax needs exactly that: every
# new key tile rescales row i of acc by alpha_i = exp(m_old_i - m_new_i). With WMMA or simdgroup
# matrices the rescale becomes a spill-scale-reload: store the fragment to shared (threadgroup)
# memory, scale the rows there, wait at a barrier, load it back. In Triton the compiler chose
# the MMA layout itself, so it knows which row every register belongs to: `acc * alpha[:, None]`
# compiles to each thread multiplying its own registers by the right alpha, in place, with no
# trip through memory. That is why this kernel is short.
#
# To let tl.dot become an MMA, the tiles must reach it in a 16-bit type: fp16/bf16 Q, K and V
# tiles go in as loaded (no upcast to fp32), and the probabilities P, computed in fp32, are cast
# to V's dtype right before P·V. Every dimension of a tl.dot must be at least 16.
#
# Your part: the marked loop of tensor_core_attention_kernel, the first function below. The launch
# configurations, the autotuned copy and the wrapper are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 05 --track triton
import math

import torch
import triton
import triton.language as tl

from course.tracks.common import check_qkv
from course.tracks.triton import autotuning  # importing course first also selects the interpreter on CPU

@triton.jit
def tensor_core_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,  # Q (Z, Nq, D), K and V (Z, Nk, D), O like Q, LSE (Z, Nq) float32
    n_q, n_k, qk_scale,                   # qk_scale = scale · log2(e): scores come out in base-2 units
    stride_qz, stride_qm, stride_kz, stride_kn, stride_vz, stride_vn, stride_oz, stride_om, stride_lz,
    HEAD_DIM: tl.constexpr,               # D
    BLOCK_D: tl.constexpr,                # D padded to a power of two >= 16 (lanes past D are masked)
    DOT_PRECISION: tl.constexpr,          # "ieee" for fp32 inputs (see the wrapper), "tf32" (= default) otherwise
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M  # this program owns query rows start_m .. start_m + BLOCK_M - 1
    z = tl.program_id(1).to(tl.int64)     # which (batch, head) slice; int64 so z·stride cannot overflow
    rows = start_m + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_q
    col_ok = cols < HEAD_DIM

    # The Q tile stays in registers for the whole loop, in its own dtype: fp16 stays fp16.
    q = tl.load(q_ptr + z * stride_qz + rows[:, None] * stride_qm + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    # K is addressed as a (BLOCK_D, BLOCK_N) tile, i.e. already transposed: Q·Kᵀ is then a plain
    # tl.dot(q, kT). Only the addressing changes; the bytes read are the same rows of K.
    kT_ptrs = k_ptr + z * stride_kz + keys[None, :] * stride_kn + cols[:, None]
    v_ptrs = v_ptr + z * stride_vz + keys[:, None] * stride_vn + cols[None, :]

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row max, base-2 units
    l = tl.zeros([BLOCK_M], tl.float32)                 # running row sum of 2^(s - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)      # running numerator; lives in MMA accumulator registers
    # BEGIN SOLUTION
    for start_n in range(0, n_k, BLOCK_N):
        key_ok = start_n + keys < n_k
        kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[:, None] & key_ok[None, :], other=0.0)
        # region: qk_on_tensor_cores
        # fp16 × fp16 → fp32 on the tensor cores. The scale is applied to the fp32 result (not
        # folded into q, which would round it to fp16 again). Multiplying by scale·log2(e) puts the
        # scores in base 2, so the softmax below can use exp2: the GPU's special-function unit
        # implements 2^x (ex2) directly, and exp(x) would cost an extra multiply by log2(e) per
        # score. Folding log2(e) into the scale we multiply by anyway makes that free.
        s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(key_ok[None, :], s, float("-inf"))  # keys past Nk in the last tile weigh 0
        # endregion: qk_on_tensor_cores
        m_new = tl.maximum(m, tl.max(s, axis=1))          # finite: every tile holds at least one real key
        alpha = tl.math.exp2(m - m_new)                   # 0 on the first tile (m = -inf)
        p = tl.math.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)                 # the row sum uses P in fp32
        v = tl.load(v_ptrs + start_n * stride_vn, mask=key_ok[:, None] & col_ok[None, :], other=0.0)
        # region: pv_on_tensor_cores
        # Rescale, then accumulate in place: tl.dot(a, b, acc) is one MMA chain D = A·B + C whose
        # C is acc's own registers. The rescale is a register-by-register multiply because Triton
        # knows which row each accumulator register holds (no spill-scale-reload as with WMMA).
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)  # P rounded to V's 16-bit type
        # endregion: pv_on_tensor_cores
        m = m_new
    # END SOLUTION
    o = acc / l[:, None]
    lse = (m + tl.math.log2(l)) * 0.6931471805599453  # log(Σ e^x) = (m₂ + log₂ l) · ln 2
    tl.store(o_ptr + z * stride_oz + rows[:, None] * stride_om + cols[None, :], o.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + z * stride_lz + rows, lse, mask=row_ok)


# ---- given code below this line: you do not edit it ----

LOG2E = 1.4426950408889634  # log2(e): exp(x) = 2^(x·log2 e)


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """The launch configuration of checks, tests and notebooks, on both tiers (the compile gate compiles
    it; nothing is timed). 16-bit tiles: 128 query rows and 64 keys on 8 warps, three stages, up to
    D = 128. fp32 tiles take twice the shared memory and run on the FMA units ("ieee"): 64 x 32, and one
    stage at D = 256, the only fp32 tile that fits there in an A100's shared memory."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if dtype == torch.float32:
        return triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=1 if block_d > 128 else 2)
    if block_d > 128:
        return triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)
    return triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)


def _configs() -> list[triton.Config]:
    """The benchmarks' autotune list (course.tracks.triton.autotune): each is compiled and timed per new shape."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in [(128, 64, 8, 3), (128, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 2), (64, 32, 4, 1)]]


def _prune(configs, named_args, **kwargs):
    """Wide heads (D > 128) with big tiles run out of shared memory/registers: keep the small ones.

    fp32 tiles take twice the bytes: at D = 256 only the 64×32 single-stage tile fits in shared memory.
    """
    if kwargs.get("BLOCK_D", named_args.get("BLOCK_D", 0)) > 128:
        fp32 = named_args["q_ptr"].element_size() > 2
        small = [c for c in configs if c.kwargs["BLOCK_N"] <= (32 if fp32 else 64) and c.num_stages <= (1 if fp32 else 2)]
        return small or configs[-1:]
    return configs


# The same kernel behind an autotuner, for the benchmarks.
tensor_core_attention_tuned = triton.autotune(configs=_configs(), key=["n_q", "n_k", "HEAD_DIM"],
                                              prune_configs_by={"early_config_prune": _prune})(tensor_core_attention_kernel)


def tensor_core_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale · Q Kᵀ) V with both matmuls on tensor cores; returns (O, LSE).

    Q (..., Nq, D), K and V (..., Nk, D), any number of leading batch dims. O has q's dtype;
    LSE (..., Nq) is float32, natural log.
    """
    check_qkv("tensor_core_attention", q, k, v)
    *batch, n_q, d = q.shape
    n_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    z = math.prod(batch)  # flatten the leading dims into one axis Z (1 when there are none)
    q3 = q.reshape(z, n_q, d).contiguous()
    k3 = k.reshape(z, n_k, d).contiguous()
    v3 = v.reshape(z, n_k, d).contiguous()
    o = torch.empty_like(q3)
    lse = torch.empty((z, n_q), dtype=torch.float32, device=q.device)
    if n_q > 0 and z > 0:
        # fp32 operands: tl.dot's default on NVIDIA is TF32, which rounds each input to 10 mantissa
        # bits (fp16's precision) before the tensor core sees it: about 1e-3 relative error, a
        # thousand times worse than fp32 and far outside an fp32 error budget. "ieee" keeps exact
        # fp32 products (on the FMA units, slower). 16-bit operands are exact on tensor cores
        # already; for them the flag does nothing and we leave it at the default.
        precision = "ieee" if q.dtype == torch.float32 else "tf32"
        args = (q3, k3, v3, o, lse, n_q, n_k, scale * LOG2E,
                q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), v3.stride(0), v3.stride(1),
                o.stride(0), o.stride(1), lse.stride(0))
        meta = dict(HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), DOT_PRECISION=precision)
        if autotuning():  # a benchmark: time the autotune list once per shape, keep the fastest
            grid = lambda cfg: (triton.cdiv(n_q, cfg["BLOCK_M"]), z)  # noqa: E731
            tensor_core_attention_tuned[grid](*args, **meta)
        else:             # a check, a test, a notebook: one known-good configuration, nothing timed
            config = check_config(d, q.dtype)
            tensor_core_attention_kernel[(triton.cdiv(n_q, config.kwargs["BLOCK_M"]), z)](
                *args, **meta, **config.all_kwargs())
    return o.reshape(*batch, n_q, d), lse.reshape(*batch, n_q)
