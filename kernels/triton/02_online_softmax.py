# Lesson 02 · online softmax: one pass for the statistics, and states that merge.
#
# softmax(x)_j = exp(x_j - m) / l  with  m = max_j x_j  and  l = Σ_j exp(x_j - m).
# Subtracting m keeps every exp() in [0, 1], so nothing overflows even when x reaches the hundreds.
# The textbook way reads the row three times (max, then sum, then normalise). The online way
# finds m and l together in one sweep: it keeps a running pair (m, l) and, when a block of the row
# holds a larger value, rescales the l it already has by exp(m_old - m_new) before adding the new
# block's terms. Lesson 01 did the same thing one key at a time; here it is a block at a time, so a
# row of any length streams through a fixed-size window of BLOCK columns.
#
# The pair (m, l) is a *summary* of a set of numbers: it stands for the quantity l · exp(m), which
# is Σ exp(x_j) over that set (m + log l is the set's log-sum-exp). Two summaries of disjoint sets
# combine into the summary of their union with merge_states below. Because that combination is
# associative and commutative, a row can be cut into pieces, the pieces summarised by different
# programs, and the summaries merged in any grouping and any order: that is what flash-decoding
# (split-K) does when one query row is too long for a single program to be fast.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 02 --track triton
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


def online_softmax(x: torch.Tensor, block: int = BLOCK_COLS) -> torch.Tensor:
    """Softmax over the last dimension of x (..., N), one program per row; output in x's dtype."""
    rows = _rows(x, "online_softmax")
    y = torch.empty_like(rows)
    if rows.shape[0]:
        online_softmax_kernel[(rows.shape[0],)](rows, y, rows.shape[1], rows.stride(0), y.stride(0), BLOCK=block)
    return y.reshape(x.shape)


def partial_states(x: torch.Tensor, n_splits: int, block: int = BLOCK_COLS) -> tuple[torch.Tensor, torch.Tensor]:
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
        partial_states_kernel[(n_rows, n_splits)](rows, m, l, n_cols, chunk, rows.stride(0), m.stride(0), BLOCK=block)
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
        block = 1024
        merge_kernel[(triton.cdiv(n, block),)](*flat, m, l, n, BLOCK=block)
    return m.reshape(m_a.shape), l.reshape(m_a.shape)
