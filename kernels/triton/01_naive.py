# Lesson 01 · naive attention in Triton: one program per query row, the textbook softmax.
#
# Program i owns query row i and computes O_i = softmax(scale · q_i Kᵀ) V with the two sweeps over the
# keys that the definition of a safe softmax asks for:
#   pass 1   m = max_j s_j, where s_j = scale · (q_i · k_j)    (the row max, so no exp() can overflow)
#   pass 2   with m fixed:  l = Σ_j exp(s_j - m)                (the softmax denominator)
#                           acc = Σ_j exp(s_j - m) · v_j        (the numerator, a D-vector)
#   O_i = acc / l
# Because m is already the true row max in pass 2, every weight exp(s_j - m) is final the moment it is
# computed: l and acc only ever grow, nothing is rescaled. The scores are computed twice (once per pass)
# instead of being kept: a row of N scores would not fit in a program's registers for long rows, and
# nothing of size N×N is ever stored.
#
# Keys are walked BLOCK_N at a time: k is a [BLOCK_N, BLOCK_D] tile, and one multiply and one sum
# along D give BLOCK_N scores at once. Keys past the end of K are masked: their score is -inf, so
# they add exp(-inf) = 0 to l and acc. Every program still reads all of K twice and all of V once
# from global memory; lesson 02 fuses the two passes into one, and lessons 03-04 share K and V tiles
# between the rows of a block.
#
# Your part: the `two_passes` region of naive_attention_kernel, just below. The launch configuration
# and the wrapper are given, under the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 01 --track triton
import torch
import triton
import triton.language as tl


@triton.jit
def naive_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,       # Q (Nq, D), K and V (Nk, D), O (Nq, D), row-major
    n_keys, head_dim, scale,          # Nk, D, and the softmax scale (usually 1/sqrt(D))
    stride_q, stride_k, stride_v, stride_o,  # elements between consecutive rows
    BLOCK_N: tl.constexpr,            # keys per step of each pass
    BLOCK_D: tl.constexpr,            # D rounded up to a power of two (Triton's vectors need one)
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    in_row = cols < head_dim          # lanes past D are masked off in every load and store
    q = tl.load(q_ptr + row * stride_q + cols, mask=in_row, other=0.0).to(tl.float32)
    offs_n = tl.arange(0, BLOCK_N)

    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    # region: two_passes
    # BEGIN SOLUTION
    # Pass 1: the largest scaled score of the row.
    for start in range(0, n_keys, BLOCK_N):
        keys = start + offs_n
        key_ok = keys < n_keys
        k = tl.load(k_ptr + keys[:, None] * stride_k + cols[None, :],
                    mask=key_ok[:, None] & in_row[None, :], other=0.0).to(tl.float32)
        s = tl.sum(q[None, :] * k, axis=1) * scale
        s = tl.where(key_ok, s, float("-inf"))   # keys past the end never win the max
        m = tl.maximum(m, tl.max(s, axis=0))
    # Pass 2: m is final, so every weight is final too; add them up, and the rows of V they weigh.
    for start in range(0, n_keys, BLOCK_N):
        keys = start + offs_n
        key_ok = keys < n_keys
        tile = key_ok[:, None] & in_row[None, :]
        k = tl.load(k_ptr + keys[:, None] * stride_k + cols[None, :], mask=tile, other=0.0).to(tl.float32)
        scores = tl.sum(q[None, :] * k, axis=1) * scale
        scores = tl.where(key_ok, scores, float("-inf"))
        p = tl.exp(scores - m)                   # in (0, 1]; 0 for keys past the end
        v = tl.load(v_ptr + keys[:, None] * stride_v + cols[None, :], mask=tile, other=0.0).to(tl.float32)
        l += tl.sum(p, axis=0)
        acc += tl.sum(p[:, None] * v, axis=0)
    out = acc / l
    # END SOLUTION
    # endregion: two_passes
    tl.store(o_ptr + row * stride_o + cols, out.to(o_ptr.dtype.element_ty), mask=in_row)


# ---- given code below this line: you do not edit it ----


BLOCK_KEYS = 32  # keys per step: large enough to use a GPU's lanes, small enough to stay in registers at D = 128


def check_config(head_dim: int, dtype: torch.dtype) -> triton.Config:
    """How this kernel is launched, on the CPU tier and on a GPU alike (the compile gate compiles the same)."""
    return triton.Config({"BLOCK_N": BLOCK_KEYS}, num_warps=4, num_stages=3)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """softmax(scale · Q Kᵀ) V for Q (Nq, D) and K, V (Nk, D), one Triton program per query row."""
    if q.dim() != 2 or k.dim() != 2 or v.dim() != 2:
        raise ValueError(f"naive_attention takes (N, D) matrices; got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape or q.shape[1] != k.shape[1]:
        raise ValueError(f"need Q (Nq, D) and K, V (Nk, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[0] == 0:
        raise ValueError("attention over zero keys is undefined")
    n_q, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    naive_attention_kernel[(n_q,)](
        q, k, v, o, k.shape[0], d, scale,
        q.stride(0), k.stride(0), v.stride(0), o.stride(0),
        BLOCK_D=triton.next_power_of_2(d), **check_config(d, q.dtype).all_kwargs(),
    )
    return o
