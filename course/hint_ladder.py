"""Getting unstuck on purpose: a ladder of hints per exercise, and a reveal that says it is revealing.

    course.hint("01.naive_triton")          # the first hint; call again for the next, more specific one
    course.hint("01.naive_triton", 3)       # a given rung
    course.reveal("01.naive_triton")        # the reference solution, under a banner that says so

A failing check tells the learner what is wrong; the ladder is for when they still do not see how
to fix it. Rungs go from a question that points at the idea to the line that does it, so a learner
can stop climbing as soon as they can go on alone. ``reveal`` shows the solution region of the
kernel file (kernel exercises) or the solution cell of the instructor notebook (Python exercises),
read from the repository, never from the folder the learner's lab serves.

Hints are tested like answers (tests/course/test_hint_ladder.py). Code in a rung is marked, so the
tests can find it: inline code in backticks, and a block the learner can type as lines indented by
four spaces below the rung's sentence. Formulas (m' = max(m, rowmax S)) stay unmarked, as maths.

- Marked code names only what the learner has (the stub, the notebook's earlier names, the kernel
  file) or writes (names the ladder's own code assigns); language words are allowed.
- The code blocks of a ladder, typed in order in place of the stub (a notebook cell's
  ``raise NotImplementedError()``; in a kernel file, its solution regions, one block a region in file
  order), are an answer: at the last rung with a block the exercise's check passes, and at every
  earlier one the answer still builds.
- Text outside the marks holds no code (a dotted call, a keyword argument, a subscript): whatever
  a learner may type exactly is marked, and so tested.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from course.errors import CourseError
from course.paths import REPO, SOLUTIONS

__all__ = ["LADDERS", "Ladder", "hint", "reveal", "solution_text", "code_spans", "code_blocks", "prose_of",
           "typed_answer"]


@dataclass(frozen=True)
class Ladder:
    exercise: str
    rungs: tuple[str, ...]
    cell: str = ""
    """For a Python exercise: ``<lesson folder>/<grade_id>`` of its solution cell in ``solutions/``."""
    functions: tuple[str, ...] = ()
    """For a kernel file that holds several exercises: the functions whose solution regions ``reveal`` shows
    (lesson 07's split backward is ``dq_kernel``, not the atomic exercise's regions beside it)."""


def _ladder(exercise: str, *rungs: str, cell: str = "", functions: tuple[str, ...] = ()) -> Ladder:
    return Ladder(exercise, rungs, cell, functions)


_BLOCK = re.compile(r"(?:^|\n)((?: {4}.*(?:\n|$))+)")
_SPAN = re.compile(r"`([^`\n]+)`")


def code_blocks(rung: str) -> list[str]:
    """The blocks of code in ``rung`` (runs of lines indented by four spaces), dedented."""
    import textwrap
    return [textwrap.dedent(block).rstrip("\n") for block in _BLOCK.findall(rung)]


# The line of a handed-out answer cell where the learner's code goes.
_STUB_LINE = re.compile(r"^([ \t]*)(?:# YOUR CODE HERE\n[ \t]*)?raise NotImplementedError\(\)[ \t]*$", re.M)


def typed_answer(ladder: Ladder, up_to: int, handed_out: str) -> str:
    """The handed-out cell with the code blocks of rungs 1..up_to typed in place of its stub line, as a learner who
    follows the ladder would type them (the tests hold each ladder to passing this way)."""
    import textwrap
    blocks = [block for rung in ladder.rungs[:up_to] for block in code_blocks(rung)]
    match = _STUB_LINE.search(handed_out)
    if match is None:
        raise CourseError(f"{ladder.cell}: the handed-out cell has no `raise NotImplementedError()` line to replace")
    return handed_out[:match.start()] + textwrap.indent("\n".join(blocks), match.group(1)) + handed_out[match.end():]


def code_spans(rung: str) -> list[str]:
    """The inline code of ``rung`` (text in backticks), outside its blocks."""
    return _SPAN.findall(_BLOCK.sub("\n", rung))


def prose_of(rung: str) -> str:
    """``rung`` without its marked code."""
    return _SPAN.sub(" ", _BLOCK.sub("\n", rung))


_TWO_PASS = (
    "Two sweeps over the keys of your row. What does the first sweep need to find before any exp() is safe?",
    "Sweep 1: m = max over every key j of s_j = scale · (q · k_j). Start m at -inf, not 0: scores can all be negative.",
    "Sweep 2, with m fixed: p_j = exp(s_j - m); add p_j to l and p_j · v_j to acc. No rescale is needed, because m "
    "no longer changes. Finally O = acc / l.",
)
_ONE_PASS = (
    "One sweep: keep m, l and acc for the keys seen so far. What happens to l and acc when a larger score arrives?",
    "Everything in l and acc was measured against the old max. Against the new one, each term is smaller by the same "
    "factor c = exp(m_old - m_new).",
    "Per step: m_new = max(m, new scores); c = exp(m - m_new); l = l·c + Σ exp(s - m_new); acc = acc·c + Σ exp(s - m_new)·v; "
    "m = m_new. At the end O = acc / l.",
)

_TILED = (
    "The Q tile stays on chip; K and V come through in tiles. Which three things per query row survive from one "
    "K/V tile to the next?",
    "m, l and the accumulator, exactly as in lesson 02; a tile of keys is one online step for every row of the Q "
    "tile at once.",
)

_BACKWARD = (
    "One program per block of keys keeps K, V and its dK, dV accumulators on chip and walks over the query blocks. "
    "What does it rebuild for each query block, and from what?",
    "P = exp(scale · Q Kᵀ − LSE) (masked entries 0, a row with LSE = −inf gives 0), then dV += Pᵀ dO, dP = dO Vᵀ, "
    "dS = P ∘ (dP − Δ) with Δ = rowsum(dO ∘ O) from a pre-pass, dK += dSᵀ Q; scale dK once at the end.",
)

_PING_PONG = (
    "Two buffers for K and two for V: tile t is computed on in buffer t % 2. Which buffer does the copy of tile "
    "t + 1 go to, and when may it start?",
    "One barrier per tile is enough: it publishes the tile about to be read (read-after-write) and retires the "
    "buffer about to be overwritten, whose last reader was the previous step (write-after-read).",
)

_SPILL = (
    "The online update needs row r of the O accumulator multiplied by alpha_r. Can a lane tell which row its "
    "fragment elements belong to?",
    "It cannot (the layout is not specified), so go through shared memory, where element (r, c) has a known "
    "address: spill, scale, reload, with a barrier after the spill and after the scale.",
)

LADDERS: dict[str, Ladder] = {ladder.exercise: ladder for ladder in [
    _ladder("00.attention_flops",
            "Attention has two matrix products. Which, and what are their shapes?",
            "Q·Kᵀ is Nq × Nk dot products of length D; P·V is Nq × D dot products of length Nk.",
            "Each dot product of length n is n multiply-adds, and a multiply-add is 2 FLOPs: 2·(2·Nq·Nk·D) in all.",
            cell="00_orientation/attention_flops"),
    _ladder("00.flash_intensity",
            "Intensity is FLOPs divided by bytes. You have the FLOPs already; which tensors must a fused kernel move?",
            "A fused kernel reads Q, K and V once and writes O once: four N × D tensors.",
            "Bytes over four N × D tensors, then FLOPs over bytes:\n"
            "    moved = 4 * n * d * bytes_per_element\n"
            "    return attention_flops(n, n, d) / moved",
            cell="00_orientation/flash_intensity"),
    _ladder("01.attention_torch",
            "Follow the formula: scores, softmax over each row, then the weighted sum of V.",
            "`s = (q @ k.transpose(-1, -2)) * scale`, with scale = 1/sqrt(D) when none is given.",
            "Subtract each row's max before exp (`s.amax(dim=-1, keepdim=True)`), divide by the row sum, then multiply "
            "by v.",
            cell="01_naive_attention/attention_torch"),
    _ladder("01.naive_bytes_read",
            "Count per program (one query row), then multiply by the number of programs.",
            "One program reads its own q row once, then sweeps over every key twice (for the max, then for the sums).",
            "Per program: D + 2·Nk·D (K twice) + Nk·D (V once) elements; times N programs; times the element size.",
            cell="01_naive_attention/naive_bytes_read"),
    _ladder("01.naive_triton", *_TWO_PASS,
            "In Triton a block of keys is one tile: `k = tl.load(k_ptr + keys[:, None] * stride_k + cols[None, :], "
            "mask=...)`, `scores = tl.sum(q[None, :] * k, axis=1) * scale`; mask keys past `n_keys` with -inf."),
    _ladder("01.naive_cuda", *_TWO_PASS,
            "In CUDA C each thread loops over keys with a plain for loop; acc is a float array of MAX_HEAD_DIM in the "
            "thread. Keep the `if (row >= n_q) return;` guard first."),
    _ladder("01.naive_metal", *_TWO_PASS,
            "In Metal the thread's row is the `[[thread_position_in_grid]]` parameter; use exp and max (Metal's names), "
            "and return early for rows past n_q."),
    _ladder("02.softmax_bytes",
            "Each pass reads the whole matrix once; the result is written once at the end. How many passes does each "
            "softmax make?",
            "The safe softmax reads three times: once for the max, once for the sum, once to normalise.",
            "The online softmax finds m and l together, so it reads twice. Bytes = (passes + 1) · rows · cols · bytes.",
            cell="02_online_softmax/softmax_bytes"),
    _ladder("02.merge_torch",
            "A state (m, l) stands for l·exp(m). Merging two must stand for the sum of the two numbers.",
            "Write both against the larger max m = max(m_a, m_b): l = l_a·exp(m_a - m) + l_b·exp(m_b - m).",
            "Two empty states have m = -inf; exp(-inf - (-inf)) is NaN. Subtract 0 instead of m when m is -inf "
            "(`torch.where`), so l stays 0.",
            cell="02_online_softmax/merge_torch"),
    _ladder("02.online_softmax_merge_triton",
            "It is the merge you wrote in PyTorch, with `tl.maximum`, `tl.where` and `tl.exp`.",
            "`m = tl.maximum(m_a, m_b)`; `m_safe = tl.where(m == float('-inf'), 0.0, m)`.",
            "`l = l_a * tl.exp(m_a - m_safe) + l_b * tl.exp(m_b - m_safe)`."),
    _ladder("02.online_softmax_triton",
            "stream_state reads BLOCK columns at a time; each block is one online update of (m, l).",
            "Pad the tail of the row with -inf, not 0: exp(-inf) = 0 adds nothing to l.",
            "Per block: `m_new = tl.maximum(m, tl.max(x))`; `l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new))`; "
            "`m = m_new`. The second pass writes exp(x - m) / l."),
    _ladder("02.online_softmax_attention_triton", *_ONE_PASS),
    _ladder("02.online_softmax_cuda", *_ONE_PASS,
            "In the warp kernel each chunk of 32 keys is one online step: the chunk's max and sum come from the "
            "butterfly reductions, and every lane rescales its own accumulator columns by the same factor."),
    _ladder("02.online_softmax_metal", *_ONE_PASS),
    _ladder("03.tiled_torch",
            "Two loops: over Q tiles of block_m rows (outside), over K/V tiles of block_n keys (inside). What must a "
            "Q tile carry from one K/V tile to the next?",
            "Per Q tile (`for i in range(0, n_q, block_m):`, `q_i = q[i:i + block_m]`): m (block_m,) at -inf, l "
            "(block_m,) at 0, acc (block_m, D) at 0. Per K/V tile (`for j in range(0, n_k, block_n):`, "
            "`k_j, v_j = k[j:j + block_n], v[j:j + block_n]`): `s = q_i @ k_j.T * scale`, a (block_m, block_n) score "
            "tile, and lesson 02's online update row by row.",
            "`m_new = torch.maximum(m, s.amax(1))`; `a = torch.exp(m - m_new)`; `p = torch.exp(s - m_new[:, None])`; "
            "`l = l * a + p.sum(1)`; `acc = acc * a[:, None] + p @ v_j`; `m = m_new`. After the last K/V tile: O_i = acc "
            "/ l, row by row, and LSE_i = m + log(l).",
            cell="03_tiling/tiled_torch"),
    _ladder("03.tiled_bytes",
            "Count per program (one Q tile of BLOCK_M rows), then multiply by the number of programs. How many "
            "programs cover Nq rows?",
            "ceil(Nq / BLOCK_M) programs; each reads its Q tile once and every K and V row once (2·Nk·D elements).",
            "bytes = b·(Nq·D [Q] + ceil(Nq/BLOCK_M)·2·Nk·D [K, V] + Nq·D [O]) + 4·Nq [LSE, float32].",
            cell="03_tiling/tiled_bytes"),
    _ladder("03.shared_bytes",
            "Which tiles does one block keep in shared memory at the same time, and how big is each, in floats?",
            "The Q tile (block_m × d), one K tile and one V tile (block_n rows each). K's rows carry one float of "
            "padding.",
            "4 · (block_m·d + block_n·(d + 1) + block_n·d) bytes.",
            cell="03_tiling/shared_bytes"),
    _ladder("04.warp_sectors",
            "List the byte ranges the 32 lanes read: lane i reads access_bytes bytes from offset + i · stride.",
            "A byte at address a lies in sector a // 32. A lane's access may cover more than one sector.",
            "Collect every sector of every lane's bytes in a set (first byte // 32 .. last byte // 32) and count "
            "the set.",
            cell="04_double_buffering/warp_sectors"),
    _ladder("04.bank_ways",
            "Lane j reads word j · (row_floats + pad_floats) of the tile. Which bank is that word in?",
            "Bank = word % 32. Count, for each bank, how many different words the 32 lanes ask it for.",
            "The degree is the largest of those counts; it equals gcd(row_floats + pad_floats, 32).",
            cell="04_double_buffering/bank_ways"),
    _ladder("04.double_buffer_triton", *_TILED[:1],
            "Write the loop with `tl.range` over the K/V tiles: the compiler pipelines it num_stages deep. Load the "
            "tiles with `k_desc.load([start_n, 0])` and `v_desc.load([start_n, 0])`.",
            "The descriptor pads missing keys with zeros, which would score 0: set scores of keys past `N_CTX_K` to "
            "-inf. The softmax is in base 2 here (`tl.exp2`, the scale already holds log2 e)."),
    _ladder("04.double_buffer_cuda", *_PING_PONG,
            "CUDA C: `load_tile` the next tile into buffer (t + 1) % 2 at the top of step t, compute on buffer "
            "t % 2, then one `__syncthreads()` at the end of the step."),
    _ladder("04.double_buffer_metal", *_PING_PONG,
            "Metal: threadgroup_barrier(mem_flags::mem_threadgroup) at the top of each step, then the copy of tile "
            "t + 1 into buffer (t + 1) % 2, then the compute on buffer t % 2."),
    _ladder("05.fragment_lane",
            "Print the stored lane map of each fragment and look along a row: when does the lane number change?",
            "CUDA (16 × 16, 8 elements a lane on this runtime): two lanes share a row. Metal (8 × 8, 2 a lane): "
            "write the lane's bits out and see which bits give the row and which the column.",
            "Write a formula per track from row and col (integer division, modulo, bit tests) and compare it with "
            "the map for every cell before you check it.",
            cell="05_matrix_units/fragment_lane"),
    _ladder("05.mma_triton",
            "Keep the Q, K and V tiles in their 16-bit dtype: `tl.dot` runs on the tensor cores only when its inputs "
            "are fp16/bf16.",
            "`s = tl.dot(q, tl.trans(k))` accumulates in fp32; p is fp32 too: cast it with `p.to(v.dtype)` right before "
            "`tl.dot(p, v, acc)`.",
            "`acc = acc * alpha[:, None]` is fine here: Triton knows which row each register of acc holds, so no "
            "spill is needed."),
    _ladder("05.mma_cuda", *_SPILL,
            "CUDA C: `store_matrix_sync` each O fragment to the warp's O strip (`mem_row_major`), `__syncwarp()`, lanes "
            "2r and 2r + 1 scale row r by alpha_r, `__syncwarp()`, `load_matrix_sync` it back."),
    _ladder("05.mma_metal", *_SPILL,
            "Metal: simdgroup_store each O matrix to threadgroup memory, simdgroup_barrier, the lanes of row r scale "
            "it by correction_r, simdgroup_barrier, simdgroup_load it back."),
    _ladder("06.causal_mask",
            "Query i sees key j when j <= i + offset. What is the offset of each alignment?",
            "Bottom-right: offset = Nk − Nq (the last query sees every key). Top-left: offset = 0.",
            "Rows against columns, by broadcasting:\n"
            "    offset = 0 if top_left else n_k - n_q\n"
            "    i = torch.arange(n_q)[:, None]\n"
            "    j = torch.arange(n_k)[None, :]\n"
            "    return j <= i + offset",
            cell="06_causal_masking/causal_mask"),
    _ladder("06.causal_torch",
            "Lesson 01's attention with the masked scores set to -inf before the softmax. What happens to a row that "
            "sees no key?",
            "Its scores are all -inf: logsumexp gives -inf, and exp(s - lse) is exp(-inf + inf) = NaN.",
            "Subtract 0 instead of the LSE where the LSE is -inf (`torch.where`): P is 0 there, O = P @ V = 0, and the "
            "LSE stays -inf.",
            cell="06_causal_masking/causal_torch"),
    _ladder("06.tile_counts",
            "A tile's rows are r0 .. r1 and its keys c0 .. c1 (clip both at N). Which row sees the most keys, and which "
            "the fewest?",
            "Skipped: even the last row r1 does not reach the first key, c0 > r1 + offset. Full: even the first row "
            "sees the last key, c1 <= r0 + offset.",
            "Loop over every (query tile, key tile), classify it with those two tests (diagonal otherwise) and count; "
            "offset = Nk − Nq.",
            cell="06_causal_masking/tile_counts"),
    _ladder("06.causal_triton",
            "Three kinds of key tiles for a query block: skipped (never loaded), full (no mask), diagonal (masked). Two "
            "numbers split the key axis between them, `lo` and `hi`: which row of the block decides each, and which "
            "keys does the masked stage hide?",
            "`hi` is one past the last key the block's last real row sees: that row is min(start_m + BLOCK_M, Nq) − 1 "
            "and sees keys up to it + (Nk − Nq); never below 0. `lo` ends the tiles every row sees in full: the "
            "first row, start_m, sees keys up to start_m + (Nk − Nq), so round one past that down to a multiple of "
            "`BLOCK_N`. The masked stage keeps key j for row i when j < Nk and, causal, j <= i + (Nk − Nq); a row "
            "whose max is still -inf subtracts 0 instead (2^(-inf − (-inf)) is NaN).",
            "The masked stage, in `attend_key_blocks`:\n"
            "    visible = key_ok[None, :]\n"
            "    if CAUSAL:\n"
            "        visible = visible & (key_idx[None, :] <= rows[:, None] + diagonal)\n"
            "    s = tl.where(visible, s, float(\"-inf\"))\n"
            "    m_new = tl.maximum(m, tl.max(s, axis=1))\n"
            "    m_sub = tl.where(m_new == float(\"-inf\"), 0.0, m_new)",
            "The bounds, in `causal_attention_kernel` (`diagonal` is Nk − Nq):\n"
            "    hi = tl.maximum(tl.minimum(start_m + BLOCK_M, n_q) + diagonal, 0)\n"
            "    lo = tl.maximum(start_m + diagonal + 1, 0) // BLOCK_N * BLOCK_N",
            functions=("attend_key_blocks", "causal_attention_kernel")),
    _ladder("06.causal_cuda",
            "Three kinds of key tiles for a block: skipped (never loaded), full (no mask), diagonal (mask). Where does "
            "the tile loop have to stop?",
            "Stop after the last key the block's last row sees: row0 + block_m - 1 + n_k - n_q. Mask keys j > i + "
            "n_k - n_q on tiles the diagonal crosses.",
            "Rows that have seen no key yet keep m = -inf: subtract `m_use = m_new == NEG_INF ? 0.0f : m_new` instead "
            "of m_new, so every p and alpha is exp(-inf) = 0 and the row stays empty (the epilogue, given, writes "
            "O = 0 and LSE = -inf for a row that never saw a key)."),
    _ladder("07.backward_torch",
            "Four products and one row term: dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − Δ), then dQ and dK from dS. Where does "
            "P come from when the forward kept only O and the LSE?",
            "P = exp(scale · Q Kᵀ − LSE), masked entries 0: no max and no row sum, the LSE already is the normaliser. "
            "Δ_i = Σ_d dO_id · O_id, from the O you are given.",
            "A row with LSE = −inf sees no key: subtract +inf there (`torch.where`) so its P is 0, not NaN. Then "
            "dQ = scale · dS K and dK = scale · dSᵀ Q.",
            cell="07_backward_pass/backward_torch"),
    _ladder("07.backward_flops",
            "List the matrix products of the backward one by one. Each is Nq · Nk · D multiply-adds; how many FLOPs is "
            "a multiply-add?",
            "With P stored: dV = Pᵀ dO, dP = dO Vᵀ, dK = dSᵀ Q, dQ = dS K. Without it, S = Q Kᵀ comes first to rebuild P.",
            "stored_p 4, atomic 5, split 4 + 3 = 7 (the dQ kernel recomputes S and dP); FLOPs = 2 · products · Nq · Nk · D.",
            cell="07_backward_pass/backward_flops"),
    _ladder("07.differing_elements",
            "Two floats can be equal as numbers and differ as bits, and the other way round. Which two values are the "
            "examples?",
            "-0.0 == 0.0 but their bits differ; NaN != NaN although its bits are the same. Compare the bit patterns: "
            "`[run.view(torch.int32) for run in runs]`.",
            "Stack the runs' bit patterns, compare each run with the first, and count the elements that differ in any "
            "run:\n"
            "    bits = torch.stack([run.view(torch.int32) for run in runs])\n"
            "    return int((bits != bits[0]).any(dim=0).sum())",
            cell="07_backward_pass/differing_elements"),
    _ladder("07.backward_atomic_triton", *_BACKWARD,
            "The dQ share of this program for the query block is scale · dS K: add it with `tl.atomic_add` into a "
            "float32 "
            "dQ zeroed before the launch (mask the padded rows).",
            "When causal, the loop over query blocks starts at the first block whose rows see key start_n (query i "
            "sees key j when j <= i + `diag`): `start_m = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M`. The "
            "blocks before it are wholly above this program's keys and are never loaded.",
            functions=("preprocess_delta_kernel", "dkdv_kernel")),
    _ladder("07.backward_split_triton",
            "dQ of query row i sums over every key: scale · Σ_j dS_ij k_j. In `dq_kernel` one program owns a block of "
            "query rows. What must it rebuild for each key block, since the dK/dV kernel kept nothing, and why does "
            "it need no atomics?",
            "Before the loop, Q, dO, the LSE and Δ of the block are loaded (given). Per key block: S = scale · Q Kᵀ, "
            "P = exp(S − LSE) with the hidden entries 0, dP = dO Vᵀ, dS = P ∘ (dP − Δ), then `dq += tl.dot(ds.to(k.dtype), "
            "k)`: the sum stays in registers, in one order, and the one `tl.store` after the loop (given) writes the "
            "rows. No `tl.atomic_add` anywhere.",
            "When causal, `end_n` is one past the last key the block's last row, start_m + BLOCK_M − 1, sees: "
            "`end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)`, and the loop is `for n0 in range(0, end_n, BLOCK_N):`. "
            "Key blocks past it are wholly in the future and are never loaded.",
            functions=("dq_kernel",)),
    _ladder("07.backward_atomic_cuda", *_BACKWARD,
            "In CUDA C: after `__syncthreads()` (the dS tile is complete) each thread adds its rows' share of dS K · "
            "scale into `dq` with `atomicAdd`; a plain += from two blocks loses one of the updates."),
    _ladder("07.backward_split_cuda", *_BACKWARD,
            "In CUDA C: backward_dq loads its Q, dO, LSE and Δ once, loops over K/V tiles with __syncthreads() before "
            "and after each copy, and writes its dQ rows with plain stores at the end."),
    _ladder("07.backward_atomic_metal", *_BACKWARD,
            "In Metal there is no float atomicAdd on device memory in every version: add with a compare-and-swap loop "
            "on the float's bits (atomic_compare_exchange_weak_explicit) until no other thread got in between."),
    _ladder("07.backward_split_metal", *_BACKWARD,
            "In Metal: backward_dq is one threadgroup per query block; threadgroup_barrier(mem_flags::mem_threadgroup) "
            "around each K/V tile, and plain stores of its own dQ rows at the end."),
    _ladder("08.flash_attention_triton",
            "forward(ctx, q, k, v, causal, scale, deterministic) runs lesson 06's forward; what must it keep for "
            "backward, and what must it not keep?",
            "`o, lse = _forward.causal_attention_forward(q, k, v, causal, scale)`; "
            "`ctx.save_for_backward(q, k, v, o, lse)`; keep causal, scale and the dq_mode (\"split\" when "
            "deterministic) on ctx. Never P.",
            "backward(ctx, do): restore what forward saved (`q, k, v, o, lse = ctx.saved_tensors`), call "
            "`_backward.attention_backward_bhnd` with K and V as saved (their own H_kv heads: the kernels map query "
            "head h to K/V head h // (H / H_kv) and sum dK, dV over each group), and return dq, dk, dv, None, None, "
            "None."),
    _ladder("08.training",
            "The training run uses your flash_attention as it is: if the operator check passes, this one should too. "
            "Which step's loss differs first?",
            "Step 0 differs: the forward is wrong for this model (causal, 4 query heads over 2 K/V heads). A later step: "
            "a gradient is wrong.",
            "Check the backward's causal flag and scale (`ctx.causal`, `ctx.scale`), and that dK and dV are summed over "
            "each group of query heads, not taken from one of them.",
            cell="08_capstone/flash_attention_triton"),
    _ladder("09.one_core_tt",
            "Follow the formulas above in order: first the new maximum, then what depends on it. Which values need "
            "the old m, and which the new one?",
            "`with s_buf.wait() as s_blk, m_buf.wait() as m_old:` gives S and the old m. The new maximum, once: "
            "`m_new = ttl.math.max(m_old, ttl.math.reduce_max(s_blk, dims=[-1], shape=(1, 1)))`. alpha = "
            "exp(m_old − m_new) and P = exp(S − m_new) both need it, P with m_new copied across the columns "
            "(`ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))`). Each goes into a block of its own buffer.",
            "The first step, in place of `raise NotImplementedError()`:\n"
            "    with s_buf.wait() as s_blk, m_buf.wait() as m_old:\n"
            "        m_new = ttl.math.max(m_old, ttl.math.reduce_max(s_blk, dims=[-1], shape=(1, 1)))\n"
            "        with m_buf.reserve() as m_blk:\n"
            "            m_blk.store(m_new)\n"
            "        with alpha_buf.reserve() as alpha_blk:\n"
            "            alpha_blk.store(ttl.math.exp(m_old - m_new))\n"
            "        with p_buf.reserve() as p_blk:\n"
            "            p_blk.store(ttl.math.exp(s_blk - ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))))",
            "The second step waits on P and alpha. l is one store; the accumulator takes two, P·V into pv_buf first "
            "(one store of the rescale and P·V together keeps the broadcast alpha, the product and PV live at once: "
            "3·D/32 tiles of DST, 12 at D = 128, where DST holds 8). Each waits on its old value and reserves the "
            "new one of the same two-slot buffer:\n"
            "    with p_buf.wait() as p_blk, alpha_buf.wait() as alpha_blk:\n"
            "        with l_buf.wait() as l_old, l_buf.reserve() as l_blk:\n"
            "            l_blk.store(alpha_blk * l_old + ttl.math.reduce_sum(p_blk, dims=[-1], shape=(1, 1)))\n"
            "        with pv_buf.reserve() as pv_blk:\n"
            "            pv_blk.store(p_blk @ v_blk)\n"
            "        with pv_buf.wait() as pv_blk, acc_buf.wait() as acc_old, acc_buf.reserve() as acc_blk:\n"
            "            acc_blk.store(acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk)",
            cell="09_dataflow/one_core_attention"),
    _ladder("09.rows_per_step",
            "How many tiles does DST hold in each mode, and how many does one row of tiles of a step need?",
            "16-bit data: 16 tiles in full sync, 8 in half sync; 32-bit data: half of those. One row of tiles costs "
            "operands × block_cols tiles.",
            "capacity // (operands * block_cols), with capacity = (16 if full_sync else 8) // (dtype_bits // 16).",
            cell="09_dataflow/rows_per_step"),
    _ladder("09.grid_assignment",
            "With a causal mask, which query tiles cost the most, and what happens to the core that gets them all?",
            "Tile i costs `key_tiles_seen(i, q_tiles, k_tiles, causal)` steps: the last tiles cost the most, so "
            "contiguous runs overload the last core. Think of packing the most expensive items first.",
            "Sort the tiles by cost, most expensive first, and give each to the core whose work so far is smallest "
            "(keep a running total per core).",
            cell="09_dataflow/assign_query_tiles"),
    _ladder("09.grid_causal_tt",
            "Which key tile of query tile i holds its diagonal, and what must happen to the scores above it?",
            "The last key tile the loop visits (j == seen - 1) is the diagonal one; add the bias tile to its scores "
            "so the keys after each row's own get -1e30 and vanish in exp.",
            "Compute the scaled scores; when causal and j == seen - 1, wait on bias_buf and store scores + bias_blk, "
            "otherwise store the scores. The reader sends the bias only when causal, so wait for it only then.",
            cell="09_dataflow/grid_attention"),
    _ladder("03.tiled_triton", *_TILED,
            "In Triton: `keys = start_n + tl.arange(0, BLOCK_N)`; load K and V tiles with the mask `keys < n_k`; "
            "`s = tl.dot(q, tl.trans(k), input_precision=\"ieee\") * scale`; mask keys past n_k with -inf; "
            "`acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=\"ieee\")`."),
    _ladder("03.tiled_cuda", *_TILED,
            "In CUDA C: `__syncthreads()` before the copy (nobody still reads the old tile) and after it (the tile is "
            "complete); the copy is a loop `for (int i = threadIdx.x; i < block_n * d; i += blockDim.x)`; then step 02's "
            "warp update on each chunk of 32 keys of the tile, reading K and V from shared memory."),
    _ladder("03.tiled_metal", *_TILED,
            "In Metal: threadgroup_barrier(mem_flags::mem_threadgroup) before and after the cooperative copy of the "
            "tile into threadgroup memory; then each thread runs the online update over the tile's keys."),
]}

# How often each exercise's ladder has been climbed in this kernel (a fresh kernel starts again).
_climbed: dict[str, int] = {}


def _known(exercise: str) -> Ladder:
    try:
        return LADDERS[exercise]
    except KeyError:
        raise CourseError(f"no hints for {exercise!r}; exercises with hints: {', '.join(sorted(LADDERS))}") from None


def hint(exercise: str, rung: int | None = None) -> None:
    """Print the next hint for ``exercise``, or hint number ``rung`` (1 is the gentlest).

    It prints and returns nothing, so a cell that ends with ``course.hint(...)`` shows the hint once."""
    ladder = _known(exercise)
    top = len(ladder.rungs)
    if rung is None:
        rung = min(_climbed.get(exercise, 0) + 1, top)
    if not 1 <= rung <= top:
        raise CourseError(f"{exercise} has hints 1 to {top}; asked for {rung}")
    _climbed[exercise] = max(_climbed.get(exercise, 0), rung)
    more = (f"(call course.hint({exercise!r}) again for hint {rung + 1})" if rung < top
            else f"(that was the last hint; course.reveal({exercise!r}) shows the solution)")
    print(f"hint {rung} of {top} for {exercise}: {ladder.rungs[rung - 1]}\n{more}")


_REGION = re.compile(r"^[ \t]*(?:#|//)+[ \t]*BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*(?:#|//)+[ \t]*END SOLUTION[ \t]*$", re.S | re.M)


def _kernel_file(exercise: str) -> str:
    from course.tracks.table import exercise as row
    return row(exercise).kernel_file


def solution_text(exercise: str) -> tuple[str, str]:
    """(where it comes from, the solution text) for ``exercise``."""
    ladder = _known(exercise)
    if ladder.cell:
        lesson, grade_id = ladder.cell.split("/")
        path = SOLUTIONS / lesson / f"{lesson}.ipynb"
        if not path.is_file():
            raise CourseError(f"the solutions are not in this copy of the course ({path.relative_to(REPO)} is missing), "
                              "so there is nothing to reveal")
        cells = [c for c in json.loads(path.read_text())["cells"]
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
        if not cells:
            raise CourseError(f"no solution cell {grade_id!r} in {path.relative_to(REPO)}")
        source = "".join(cells[0]["source"])
        regions = _REGION.findall(source)
        return f"{path.relative_to(REPO)}, cell {grade_id}", "\n".join(r.rstrip("\n") for r in regions) or source
    kernel_file = _kernel_file(exercise)
    path = REPO / kernel_file
    text = path.read_text() if path.is_file() else ""
    if text and ladder.functions:  # only the regions of the exercise's own functions
        import ast
        lines = text.splitlines(keepends=True)
        text = "".join("".join(lines[node.lineno - 1:node.end_lineno]) for node in ast.parse(text).body
                       if isinstance(node, ast.FunctionDef) and node.name in ladder.functions)
    regions = _REGION.findall(text)
    if not regions:
        raise CourseError(f"{kernel_file} has no solution region in this copy of the course, so there is nothing to reveal")
    return kernel_file, "\n    ...\n".join(r.rstrip("\n") for r in regions)


def reveal(exercise: str) -> None:
    """Print the reference solution of ``exercise``, under a banner that says what it is (and return nothing,
    so a cell that ends with ``course.reveal(...)`` shows it once)."""
    where, text = solution_text(exercise)
    banner = (f"REVEALING the reference solution of {exercise} (from {where}).\n"
              "Type it in yourself rather than pasting it, and run the check again: the point is the idea, not the points.")
    rule = "-" * 80
    print(f"{banner}\n{rule}\n{text}\n{rule}")
