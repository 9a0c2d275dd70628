# Lesson 02 · online softmax: one pass for the statistics, and states that merge.
#
# softmax(x)_j = exp(x_j - m) / l  with  m = max_j x_j  and  l = Σ_j exp(x_j - m).
# Subtracting m keeps every exp() in [0, 1], so nothing overflows even when x reaches the hundreds.
# The textbook way reads the row three times (max, then sum, then normalise). The online way
# finds m and l together in one sweep: it keeps a running pair (m, l) and, when a block of the row
# holds a larger value, rescales the l it already has by exp(m_old - m_new) before adding the new
# block's terms. A row of any length streams through a fixed-size window of BLOCK columns.
#
# The same trick turns lesson 01's attention kernel from two passes over K into one (online_attention
# below). Lesson 01 first found the row max m, then summed l and acc = Σ exp(s_j - m) · v_j against
# that final m. Here one sweep keeps (m, l, acc) for the keys seen so far; when a block of keys raises
# the max to m_new, the l and acc summed so far were measured against the old max, so both are
# multiplied by exp(m - m_new) before the block's own terms are added. At the end O = acc / l, exactly
# as before, but K is read once instead of twice.
#
# The pair (m, l) is a *summary* of a set of numbers: it stands for the quantity l · exp(m), which
# is Σ exp(x_j) over that set (m + log l is the set's log-sum-exp). Two summaries of disjoint sets
# combine into the summary of their union with merge_states below. Because that combination is
# associative and commutative, a row can be cut into pieces, the pieces summarised by different
# programs, and the summaries merged in any grouping and any order: that is what flash-decoding
# (split-K) does when one query row is too long for a single program to be fast.
#
# Your parts come first in each of the file's two sections: merge_states, stream_state and
# online_softmax_kernel open the online softmax section, whose split-K kernels and wrappers below them
# are given; online_attention_kernel opens the attention section, and its wrapper, under the "given
# code" line at the end of the file, is given.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 02 --track triton

# region: online_softmax
import math

import torch
import triton
import triton.language as tl


@triton.jit
def merge_states(m_a, l_a, m_b, l_b):
    """(m, l) of the union of two disjoint sets, from each set's (m, l). Works on scalars or blocks.

    Why merging is associative and commutative: (m, l) stands for the number L = l · exp(m), and
    merging computes exactly L_a + L_b, written against the larger of the two maxima:
        m = max(m_a, m_b),   l = l_a · exp(m_a - m) + l_b · exp(m_b - m),   so  l · exp(m) = L_a + L_b.
    max is associative and commutative, and so is +, so merge(merge(a, b), c) and merge(a, merge(b, c))
    describe the same number (up to float rounding, a few ulps). Nothing about the order in which the
    pieces of a row were seen survives in (m, l); that is why pieces can go to separate programs.

    The empty set is (m, l) = (-inf, 0): it is the identity, merge(empty, s) = s. Two empty states
    would compute exp(-inf - (-inf)) = exp(NaN); subtracting a finite stand-in for m avoids that.
    """
    # region: merge_states
    # BEGIN SOLUTION
    m = tl.maximum(m_a, m_b)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # both empty: exp(-inf - 0) = 0, not exp(NaN)
    l = l_a * tl.exp(m_a - m_safe) + l_b * tl.exp(m_b - m_safe)
    # END SOLUTION
    # endregion: merge_states
    return m, l


@triton.jit
def stream_state(row_ptr, start, stop, BLOCK: tl.constexpr):
    """(m, l) of row_ptr[start:stop], read BLOCK columns at a time; (-inf, 0) when the range is empty."""
    m = tl.full([], float("-inf"), tl.float32)  # the empty set's summary
    l = tl.zeros([], tl.float32)
    offsets = tl.arange(0, BLOCK)
    # BEGIN SOLUTION
    for c in range(start, stop, BLOCK):
        cols = c + offsets
        x = tl.load(row_ptr + cols, mask=cols < stop, other=float("-inf")).to(tl.float32)  # -inf adds exp(-inf) = 0
        # region: online_softmax_update
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row of -inf so far: keep l = 0, no NaN
        l = l * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)  # old terms rescaled to the new max
        m = m_new
        # endregion: online_softmax_update
    # END SOLUTION
    return m, l


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2**31 on big inputs
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    # Pass 1: the whole row's (m, l), in one sweep.
    m, l = stream_state(x_row, 0, n_cols, BLOCK)
    # Pass 2: now that m and l are final, every probability is one exp and one divide.
    offsets = tl.arange(0, BLOCK)
    # BEGIN SOLUTION
    for c in range(0, n_cols, BLOCK):
        cols = c + offsets
        in_row = cols < n_cols
        x = tl.load(x_row + cols, mask=in_row, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) / l
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=in_row)
    # END SOLUTION


# Given (you do not edit it): the split-K kernels and the wrappers of this section, down to the
# online_attention_kernel.
@triton.jit
def partial_states_kernel(x_ptr, m_ptr, l_ptr, n_cols, chunk, stride_x, stride_state, BLOCK: tl.constexpr):
    # Program (row, s) summarises columns [s·chunk, (s+1)·chunk) of its row, clipped to the row. In
    # flash-decoding each of these programs would run on a different SM, at the same time.
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * chunk
    stop = tl.minimum(start + chunk, n_cols)  # start >= n_cols leaves an empty range: (-inf, 0)
    m, l = stream_state(x_ptr + row * stride_x, start, stop, BLOCK)
    tl.store(m_ptr + row * stride_state + split, m)
    tl.store(l_ptr + row * stride_state + split, l)


@triton.jit
def merge_kernel(m_a_ptr, l_a_ptr, m_b_ptr, l_b_ptr, m_ptr, l_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = i < n
    m_a = tl.load(m_a_ptr + i, mask=inside, other=float("-inf"))
    l_a = tl.load(l_a_ptr + i, mask=inside, other=0.0)
    m_b = tl.load(m_b_ptr + i, mask=inside, other=float("-inf"))
    l_b = tl.load(l_b_ptr + i, mask=inside, other=0.0)
    m, l = merge_states(m_a, l_a, m_b, l_b)
    tl.store(m_ptr + i, m, mask=inside)
    tl.store(l_ptr + i, l, mask=inside)


BLOCK_COLS = 128  # columns per step: a fixed window, whatever the row length
MERGE_BLOCK = 1024  # states per program of the elementwise merge
BLOCK_KEYS = 32     # keys per online step of online_attention (below)


def check_config(head_dim: int, dtype: torch.dtype) -> dict[str, triton.Config]:
    """How each kernel of this file is launched, on the CPU tier and on a GPU alike (the compile gate
    compiles the same). ``head_dim`` and ``dtype`` change nothing here: the windows are fixed."""
    return {"online_softmax_kernel": triton.Config({"BLOCK": BLOCK_COLS}, num_warps=4, num_stages=3),
            "partial_states_kernel": triton.Config({"BLOCK": BLOCK_COLS}, num_warps=4, num_stages=3),
            "merge_kernel": triton.Config({"BLOCK": MERGE_BLOCK}, num_warps=4, num_stages=3),
            "online_attention_kernel": triton.Config({"BLOCK_N": BLOCK_KEYS}, num_warps=4, num_stages=3)}


def _launch(kernel: str, block: int | None = None) -> dict:
    """The keyword arguments of ``kernel``'s launch: its check config, with BLOCK replaced when one is given."""
    config = check_config(0, torch.float32)[kernel].all_kwargs()
    return config if block is None else dict(config, BLOCK=block)


def _rows(x: torch.Tensor, what: str) -> torch.Tensor:
    """x (..., N) as a contiguous (rows, N) matrix, after checking it is something we can softmax."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} takes a torch.Tensor; got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError(f"{what} needs at least one dimension (the row to normalise); got a scalar")
    if x.shape[-1] < 1:
        raise ValueError(f"{what} needs rows of at least one element; the last dimension is 0")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"{what} takes float16, bfloat16 or float32 input; got {x.dtype}")
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).contiguous()


def online_softmax(x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension of x (..., N), one program per row; output in x's dtype."""
    rows = _rows(x, "online_softmax")
    y = torch.empty_like(rows)
    if rows.shape[0]:
        online_softmax_kernel[(rows.shape[0],)](rows, y, rows.shape[1], rows.stride(0), y.stride(0),
                                                **_launch("online_softmax_kernel", block))
    return y.reshape(x.shape)


def partial_states(x: torch.Tensor, n_splits: int, block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, l), float32 tensors of shape (..., n_splits): the summaries of n_splits contiguous chunks
    of ceil(N / n_splits) columns of each row (a chunk past the end of the row is empty: m = -inf, l = 0)."""
    rows = _rows(x, "partial_states")
    if not isinstance(n_splits, int) or n_splits < 1:
        raise ValueError(f"n_splits must be a positive integer; got {n_splits!r}")
    n_rows, n_cols = rows.shape
    m = torch.empty(n_rows, n_splits, dtype=torch.float32, device=x.device)
    l = torch.empty_like(m)
    if n_rows:
        chunk = triton.cdiv(n_cols, n_splits)
        partial_states_kernel[(n_rows, n_splits)](rows, m, l, n_cols, chunk, rows.stride(0), m.stride(0),
                                                  **_launch("partial_states_kernel", block))
    shape = tuple(x.shape[:-1]) + (n_splits,)
    return m.reshape(shape), l.reshape(shape)


def merge(m_a: torch.Tensor, l_a: torch.Tensor, m_b: torch.Tensor, l_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise merge_states over four tensors of one shape; returns float32 (m, l) of that shape."""
    parts = (m_a, l_a, m_b, l_b)
    if not all(isinstance(t, torch.Tensor) for t in parts):
        raise ValueError("merge takes four torch.Tensors (m_a, l_a, m_b, l_b)")
    if len({tuple(t.shape) for t in parts}) != 1:
        raise ValueError(f"merge needs m_a, l_a, m_b, l_b of one shape; got {[tuple(t.shape) for t in parts]}")
    if not all(t.is_floating_point() for t in parts):
        raise ValueError(f"merge takes floating-point states; got {[t.dtype for t in parts]}")
    flat = [t.reshape(-1).to(torch.float32).contiguous() for t in parts]
    m = torch.empty_like(flat[0])
    l = torch.empty_like(flat[0])
    n = m.numel()
    if n:
        merge_kernel[(triton.cdiv(n, MERGE_BLOCK),)](*flat, m, l, n, **_launch("merge_kernel"))
    return m.reshape(m_a.shape), l.reshape(m_a.shape)
# endregion: online_softmax


# region: online_attention
@triton.jit
def online_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,       # Q (Nq, D), K and V (Nk, D), O (Nq, D), row-major
    n_keys, head_dim, scale,          # Nk, D, and the softmax scale
    stride_q, stride_k, stride_v, stride_o,
    BLOCK_N: tl.constexpr,            # keys per online step
    BLOCK_D: tl.constexpr,            # D rounded up to a power of two
):
    # One program per query row, as in lesson 01, but a single sweep over the keys.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    in_row = cols < head_dim
    q = tl.load(q_ptr + row * stride_q + cols, mask=in_row, other=0.0).to(tl.float32)
    offs_n = tl.arange(0, BLOCK_N)

    m = tl.full([], float("-inf"), tl.float32)  # nothing seen yet
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for start in range(0, n_keys, BLOCK_N):
        keys = start + offs_n
        key_ok = keys < n_keys
        tile = key_ok[:, None] & in_row[None, :]
        k = tl.load(k_ptr + keys[:, None] * stride_k + cols[None, :], mask=tile, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + keys[:, None] * stride_v + cols[None, :], mask=tile, other=0.0).to(tl.float32)
        s = tl.sum(q[None, :] * k, axis=1) * scale
        s = tl.where(key_ok, s, float("-inf"))  # keys past the end weigh exp(-inf) = 0
        # region: online_attention_update
        # BEGIN SOLUTION
        m_new = tl.maximum(m, tl.max(s, axis=0))  # finite: every block holds at least one real key
        alpha = tl.exp(m - m_new)                 # what the old terms shrink by; 0 on the first block
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new  # from here on, l and acc are measured against m_new
        # END SOLUTION
        # endregion: online_attention_update
    out = acc / l
    tl.store(o_ptr + row * stride_o + cols, out.to(o_ptr.dtype.element_ty), mask=in_row)


# ---- given code below this line: you do not edit it ----


def online_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """softmax(scale · Q Kᵀ) V for Q (Nq, D) and K, V (Nk, D): one program per query row, one sweep over K and V."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise ValueError("online_attention takes torch.Tensors q, k, v")
    if q.dim() != 2 or k.dim() != 2 or v.dim() != 2:
        raise ValueError(f"online_attention takes (N, D) matrices; got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape != v.shape or q.shape[1] != k.shape[1]:
        raise ValueError(f"need Q (Nq, D) and K, V (Nk, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[0] == 0:
        raise ValueError("attention over zero keys is undefined")
    n_q, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    if n_q:
        online_attention_kernel[(n_q,)](
            q, k, v, o, k.shape[0], d, scale,
            q.stride(0), k.stride(0), v.stride(0), o.stride(0),
            BLOCK_D=triton.next_power_of_2(d), **_launch("online_attention_kernel"),
        )
    return o
# endregion: online_attention
