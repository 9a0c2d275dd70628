# Lesson 08 · the fp8 forward: Q, K and V in 8 bits, descaled in the kernel.
#
# Lesson 06's causal forward with its operands in an 8-bit float format. Hopper's tensor cores multiply
# fp8 at twice their fp16 rate, and an fp8 tile is half the bytes of an fp16 one. Eight bits hold a
# sign, 4 exponent and 3 mantissa bits (e4m3: up to 448) or 5 and 2 (e5m2: up to 57,344), so a
# tensor is first *scaled* onto the format: the wrapper multiplies each head by max / amax (its
# absolute maximum lands on the format's largest number) and keeps the *descale* amax / max, one
# float32 per head (course.models.fp8.quantize_per_head). The kernel computes with the 8-bit
# numbers and multiplies the descales back in:
#
#     S = scale · (Q8 dq)(K8 dk)ᵀ = (scale · dq · dk) · Q8 K8ᵀ        one multiply per score, as before
#     O = P (V8 dv) / l          = (dv / l) · P V8                    one multiply per output, at the end
#
# so the descales of Q and K fold into the softmax scale the kernel already applies, and V's into the
# final division by l. Both products run in fp8 on the tensor cores with float32 accumulators; the
# products of two fp8 numbers are exact in float32 (3 + 3 mantissa bits), only the sums round.
#
# P, the softmax weights in [0, 1], goes into the second product in V's format. Cast as it is, every
# weight below e4m3's smallest normal 2^-6 would keep fewer bits or flush to 0; the kernel casts
# P · 256 instead (P_SCALE, 2^15 for e5m2): the weights down to 2^-14 stay normal, a power of two
# changes no mantissa bit, and the 256 comes out with V's descale at the end.
#
# Everything else is lesson 06: the online softmax in base 2, the stage split of causal attention
# (full tiles unmasked, the diagonal masked, the future never loaded), grouped-query heads (query
# head h reads K/V head h // (H / H_kv)). O is written in float16, the LSE in float32.
#
# What you write: the descaling, the `descale` region of fp8_attention_kernel: read the three
# descales of this program's heads, fold Q's and K's into qk_scale and V's into o_scale.
#
# Your part: the marked `descale` region of fp8_attention_kernel. The inner loop, the wrappers and the
# quantisation are given, under the "given code" line and in course.models.fp8.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 08 --track triton
import math

import torch
import triton
import triton.language as tl

from course import tiers
from course.models import fp8
from course.tracks.common import check_qkv
from course.tracks.triton import autotuning  # importing course first also selects the interpreter on CPU


@triton.jit
def fp8_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,   # Q (B, H, Nq, D), K, V (B, H_kv, Nk, D) in fp8; O fp16; LSE fp32
    q_descale_ptr, k_descale_ptr, v_descale_ptr,  # float32 descales: Q's (B, H), K's and V's (B, H_kv)
    n_q, n_k, n_heads, group, sm_scale_log2e,     # sm_scale_log2e = softmax scale · log2 e
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, stride_lb, stride_lh,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    P_SCALE: tl.constexpr, P_MANTISSA_BITS: tl.constexpr, P_MIN_NORMAL: tl.constexpr,  # P's power-of-two scale, V's format
    ROUND_FIRST: tl.constexpr,       # True on Triton's interpreter only (see round_to_format)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // n_heads).to(tl.int64)
    h = (bh % n_heads).to(tl.int64)
    kv_h = h // group
    n_kv_heads = n_heads // group
    rows = start_m + tl.arange(0, BLOCK_M)
    keys = tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_q
    col_ok = cols < HEAD_DIM

    # region: descale
    # The descales of this program's query head h (Q) and of its K/V head kv_h; qk_scale turns
    # Q8 · K8ᵀ into base-2 scores, o_scale turns the fp8 product P · V8 into O times l.
    # BEGIN SOLUTION
    q_descale = tl.load(q_descale_ptr + b * n_heads + h)
    k_descale = tl.load(k_descale_ptr + b * n_kv_heads + kv_h)
    v_descale = tl.load(v_descale_ptr + b * n_kv_heads + kv_h)
    qk_scale = sm_scale_log2e * q_descale * k_descale  # S = scale · (Q8 dq)(K8 dk)ᵀ, in log2 units
    o_scale = v_descale / P_SCALE                       # P was cast as P · P_SCALE, V as V / dv
    # END SOLUTION
    # endregion: descale

    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    kT_ptrs = k_ptr + b * stride_kb + kv_h * stride_kh + keys[None, :] * stride_kn + cols[:, None]
    v_ptrs = v_ptr + b * stride_vb + kv_h * stride_vh + keys[:, None] * stride_vn + cols[None, :]
    diagonal = n_k - n_q

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if CAUSAL:  # lesson 06's stage split
        hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)
        lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N
    else:
        hi = n_k
        lo = n_k // BLOCK_N * BLOCK_N
    acc, l, m = attend_fp8_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                                  n_k, diagonal, qk_scale, 0, lo,
                                  MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, P_SCALE=P_SCALE,
                                  P_MANTISSA_BITS=P_MANTISSA_BITS, P_MIN_NORMAL=P_MIN_NORMAL, ROUND_FIRST=ROUND_FIRST)
    acc, l, m = attend_fp8_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                                  n_k, diagonal, qk_scale, lo, hi,
                                  MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, P_SCALE=P_SCALE,
                                  P_MANTISSA_BITS=P_MANTISSA_BITS, P_MIN_NORMAL=P_MIN_NORMAL, ROUND_FIRST=ROUND_FIRST)
    empty = l == 0.0
    l_div = tl.where(empty, 1.0, l)
    o = acc * (o_scale / l_div)[:, None]
    lse = tl.where(empty, float("-inf"), (m + tl.math.log2(l_div)) * 0.6931471805599453)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + cols[None, :],
             o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    tl.store(lse_ptr + b * stride_lb + h * stride_lh + rows, lse, mask=row_ok)


# ---- given code below this line: you do not edit it ----


@triton.jit
def round_to_format(x, MANTISSA_BITS: tl.constexpr, MIN_NORMAL: tl.constexpr):
    """x (float32, >= 0, within the format's range) rounded to nearest with the format's bits, still in float32.

    Only Triton's interpreter needs it: its float32 → fp8 cast (Triton 3.9) truncates the carry of a mantissa that
    rounds up into an odd exponent (126.8 → 64 in e4m3 instead of 128), while a value the format holds exactly
    converts right. A GPU's cvt instruction rounds correctly, and the compiled kernel casts directly."""
    split = x * (2.0 ** (23 - MANTISSA_BITS) + 1.0)   # Veltkamp's split: keeps MANTISSA_BITS + 1 significant bits
    normal = split - (split - x)
    step = MIN_NORMAL / (2 ** MANTISSA_BITS)           # below MIN_NORMAL the numbers are multiples of one step
    return tl.where(x < MIN_NORMAL, tl.math.floor(x / step + 0.5) * step, normal)


@triton.jit
def attend_fp8_blocks(acc, l, m, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, rows, keys, col_ok,
                      n_k, diagonal, qk_scale, lo, hi,
                      MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, P_SCALE: tl.constexpr,
                      P_MANTISSA_BITS: tl.constexpr, P_MIN_NORMAL: tl.constexpr, ROUND_FIRST: tl.constexpr):
    """Fold key blocks [lo, hi) into the running (acc, l, m) of one query block (lesson 06's loop, fp8 tiles)."""
    for start_n in range(lo, hi, BLOCK_N):
        key_idx = start_n + keys
        key_ok = key_idx < n_k
        if MASKED:
            kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[:, None] & key_ok[None, :], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=key_ok[:, None] & col_ok[None, :], other=0.0)
        else:
            kT = tl.load(kT_ptrs + start_n * stride_kn, mask=col_ok[:, None], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_vn, mask=col_ok[None, :], other=0.0)
        s = tl.dot(q, kT) * qk_scale  # fp8 × fp8 on tensor cores, fp32 out; descaled, in base-2 units
        if MASKED:
            visible = key_ok[None, :]
            if CAUSAL:
                visible = visible & (key_idx[None, :] <= rows[:, None] + diagonal)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new = tl.maximum(m, tl.max(s, axis=1))
            m_sub = m_new
        alpha = tl.math.exp2(m - m_sub)
        p = tl.math.exp2(s - m_sub[:, None])
        l = l * alpha + tl.sum(p, axis=1)      # l sums the float32 weights: the cast below does not touch it
        acc = acc * alpha[:, None]
        # P · P_SCALE in V's 8-bit format: the second product runs in fp8 too.
        p_scaled = p * P_SCALE
        if ROUND_FIRST:  # the interpreter only (see round_to_format)
            p_scaled = round_to_format(p_scaled, P_MANTISSA_BITS, P_MIN_NORMAL)
        acc = tl.dot(p_scaled.to(v.dtype), v, acc)
        m = m_new
    return acc, l, m

LOG2E = 1.4426950408889634

# ----------------------------------------------------------------------------------------------
# Launch configurations and the wrappers (given).
#
# The check config is lesson 06's 16-bit one: an fp8 tile is half its bytes, so it fits wherever
# lesson 06's does. tl.dot on fp8 needs every dimension a multiple of 16 and, on Hopper, a
# reduction dimension of at least 32 for wgmma: BLOCK_D and BLOCK_N are at least 32. The benchmark
# autotunes over _configs().
# ----------------------------------------------------------------------------------------------


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """128 query rows, 64 keys, two stages; 4 warps up to D = 64, 8 above (a 128 × 128 fp32 accumulator in 128
    threads spills on sm_90, in 256 it does not); 64 × 64 above D = 128."""
    block_d = max(32, triton.next_power_of_2(head_dim))
    if block_d > 128:
        return triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=8, num_stages=2)
    return triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4 if block_d <= 64 else 8, num_stages=2)


def _configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn in [(128, 64), (128, 128), (64, 64)] for w in (4, 8) for s in (2, 3, 4)]


fp8_attention_tuned = triton.autotune(configs=_configs(), key=["n_q", "n_k", "HEAD_DIM", "CAUSAL"])(fp8_attention_kernel)

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_attention_forward(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, q_descale: torch.Tensor,
                          k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool, scale: float,
                          out_dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
    """The launch: Q8 (B, H, Nq, D), K8 and V8 (B, H_kv, Nk, D) in float8_e4m3fn or float8_e5m2 (Q and K one
    format, V either), descales (B, H) and (B, H_kv) float32. Returns O (B, H, Nq, D) in ``out_dtype`` and the
    LSE (B, H, Nq) float32, natural log, -inf on a row that sees no key."""
    name = "fp8_attention_forward"
    for t, what in ((q8, "q"), (k8, "k"), (v8, "v")):
        if t.dtype not in FP8_DTYPES or t.dim() != 4:
            raise ValueError(f"{name}: {what} must be a 4-D float8_e4m3fn or float8_e5m2 tensor; got {t.dtype} "
                             f"{tuple(t.shape)}")
    if q8.dtype != k8.dtype:
        raise ValueError(f"{name}: q and k must share an fp8 format (one tensor-core product); got {q8.dtype}, {k8.dtype}")
    batch, n_heads, n_q, d = q8.shape
    n_kv_heads, n_k = k8.shape[1], k8.shape[2]
    if k8.shape != v8.shape or k8.shape[0] != batch or k8.shape[3] != d or n_kv_heads == 0 or n_heads % n_kv_heads:
        raise ValueError(f"{name}: K and V must be (B, H_kv, Nk, D) with H_kv dividing Q's heads; got Q "
                         f"{tuple(q8.shape)}, K {tuple(k8.shape)}, V {tuple(v8.shape)}")
    q8, k8, v8 = q8.contiguous(), k8.contiguous(), v8.contiguous()
    descales = [t.to(torch.float32).contiguous() for t in (q_descale, k_descale, v_descale)]
    o = torch.empty((batch, n_heads, n_q, d), dtype=out_dtype, device=q8.device)
    lse = torch.empty((batch, n_heads, n_q), dtype=torch.float32, device=q8.device)
    if o.numel() == 0:
        return o, lse
    args = (q8, k8, v8, o, lse, *descales, n_q, n_k, n_heads, n_heads // n_kv_heads, scale * LOG2E,
            *q8.stride()[:3], *k8.stride()[:3], *v8.stride()[:3], *o.stride()[:3], *lse.stride()[:2])
    v_format = fp8.fmt(v8.dtype)
    meta = dict(CAUSAL=bool(causal), HEAD_DIM=d, BLOCK_D=max(32, triton.next_power_of_2(d)),
                P_SCALE=fp8.P_SCALES[v_format.name], P_MANTISSA_BITS=v_format.mantissa_bits,
                P_MIN_NORMAL=v_format.smallest_normal, ROUND_FIRST=tiers.triton_interpreted())
    if autotuning():
        grid = lambda cfg: (triton.cdiv(n_q, cfg["BLOCK_M"]), batch * n_heads)  # noqa: E731
        fp8_attention_tuned[grid](*args, **meta)
    else:
        config = check_config(d, q8.dtype)
        fp8_attention_kernel[(triton.cdiv(n_q, config.kwargs["BLOCK_M"]), batch * n_heads)](
            *args, **meta, **config.all_kwargs())
    return o, lse


def quantize(x: torch.Tensor, fp8_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, H, N, D) → (x8, descale (B, H)), per head, in ``fp8_dtype`` or the format course.models.fp8 chooses
    for x (e4m3 unless more than 1% of its values would fall below e4m3's normal range)."""
    chosen = fp8.choose_format(x) if fp8_dtype is None else fp8.fmt(fp8_dtype)
    return fp8.quantize_per_head(x, chosen)


def fp8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  scale: float | None = None, formats: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(scale · Q Kᵀ [+ causal mask]) V with Q, K, V quantised to fp8 per head; returns (O, LSE).

    Q (B, H, Nq, D), K and V (B, H_kv, Nk, D) in float16 or float32. ``formats`` (Q's, K's, V's fp8 dtype) or None:
    the format of each tensor as course.models.fp8.choose_format picks it (Q and K share the wider of their two).
    O is float16; the LSE float32.
    """
    check_qkv("fp8_attention", q, k, v, same_batch=False)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"fp8_attention takes 4-D (B, H, N, D) tensors; got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if formats is None:
        qk = max(fp8.choose_format(q), fp8.choose_format(k), key=lambda f: f.binades).dtype
        formats = (qk, qk, fp8.choose_format(v).dtype)
    (q8, dq), (k8, dk), (v8, dv) = (quantize(t, f) for t, f in zip((q, k, v), formats))
    return fp8_attention_forward(q8, k8, v8, dq, dk, dv, causal, scale)
