# Lesson 01 · naive attention in Triton: one program per query row.
#
# Program i owns query row i. It walks over every key j, one at a time, reading k_j and v_j
# straight from global memory, and keeps three running values for its row:
#   m    the largest score seen so far          (so exp() never overflows)
#   l    the sum of exp(score - m) so far       (the softmax denominator)
#   acc  the sum of exp(score - m) * v_j so far (the numerator, a D-vector)
# When a larger score arrives, everything accumulated so far was measured against the old max,
# so l and acc are multiplied by exp(m_old - m_new) before the new key is added. At the end,
# O_i = acc / l. Nothing of size N×N is ever stored, but every program re-reads all of K and V:
# that global-memory traffic is what lessons 02-04 remove.
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
    BLOCK_D: tl.constexpr,            # D rounded up to a power of two (Triton's vectors need one)
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    in_row = cols < head_dim          # lanes past D are masked off in every load and store
    q = tl.load(q_ptr + row * stride_q + cols, mask=in_row, other=0.0).to(tl.float32)

    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    # BEGIN SOLUTION
    for j in range(0, n_keys):
        k = tl.load(k_ptr + j * stride_k + cols, mask=in_row, other=0.0).to(tl.float32)
        score = tl.sum(q * k, axis=0) * scale
        m_new = tl.maximum(m, score)
        correction = tl.exp(m - m_new)  # rescales what was summed against the old max (exp(-inf) = 0 at j = 0)
        p = tl.exp(score - m_new)
        v = tl.load(v_ptr + j * stride_v + cols, mask=in_row, other=0.0).to(tl.float32)
        l = l * correction + p
        acc = acc * correction + p * v
        m = m_new
    # END SOLUTION
    out = acc / l
    tl.store(o_ptr + row * stride_o + cols, out.to(o_ptr.dtype.element_ty), mask=in_row)


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
        BLOCK_D=triton.next_power_of_2(d),
    )
    return o
