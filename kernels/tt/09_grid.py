# Lesson 09 · the core grid: query tiles spread over cores, causal masking, and a balanced assignment.
#
# One core did everything in 09_one_core.py. A Wormhole chip has 8×10 Tensix cores and each runs its
# own reader, compute and writer, so FlashAttention spreads the query tiles over the grid, as a GPU
# spreads query blocks over its streaming multiprocessors: every core owns some query tiles, streams
# all of K and V past each of them, and writes its own rows of O. No core ever needs another core's
# results, so the cores never talk to each other.
#
# With a causal mask, query tile i only sees key tiles up to the diagonal (bottom-right aligned:
# i + Nk/32 - Nq/32), so tile i costs i + 1 steps (when Nq = Nk) and the last query tiles cost the most.
# Handing each core a contiguous run of query tiles leaves the last core with most of the work; the
# assignment below gives each tile, most expensive first, to the core with the least work so far.
# On the diagonal tile the compute kernel adds a bias tile (0 on and below the diagonal, -1e30 above it)
# to the scores; tiles past the diagonal are never read at all.
#
# Your part: the `assignment` region of assign_query_tiles and the `causal_scores` region of
# grid_attention, below. The lines around them are given, and so are key_tiles_seen (the cost of a
# query tile, which the assignment calls) and everything under the "given code" line.
#
# Check this file against the float64 oracle on the simulator:
#     .venv/bin/python kernels/tt/09_grid.py
import math

from course.lessons.dataflow import simulator

ttl, ttnn = simulator()

# region: plan
def assign_query_tiles(q_tiles, k_tiles, cores, causal):
    """Which query tiles each core computes: a list of `cores` lists that together hold 0..q_tiles-1 once."""
    # region: assignment
    # BEGIN SOLUTION
    work = [0] * cores
    plan = [[] for _ in range(cores)]
    costly_first = sorted(range(q_tiles), key=lambda i: -key_tiles_seen(i, q_tiles, k_tiles, causal))
    for i in costly_first:
        core = min(range(cores), key=lambda c: (work[c], c))
        plan[core].append(i)
        work[core] += key_tiles_seen(i, q_tiles, k_tiles, causal)
    return plan
    # END SOLUTION
    # endregion: assignment


def key_tiles_seen(i, q_tiles, k_tiles, causal):
    """How many key tiles query tile i attends to: all of them, or up to the (bottom-right) diagonal."""
    return min(k_tiles, i + k_tiles - q_tiles + 1) if causal else k_tiles
# endregion: plan


# region: operation
TILE = 32
KV_BUFFERS = 2


@ttl.operation(grid=(2, 2))
def grid_attention(q, k, v, bias, o, lse, causal):
    """O (Nq, D) and LSE (Nq, 32; column 0) of softmax(Q Kᵀ / sqrt(D) [+ causal mask]) V, on a 2×2 grid."""
    d_tiles = q.shape[1] // TILE
    q_tiles, k_tiles = q.shape[0] // TILE, k.shape[0] // TILE
    scale = 1.0 / math.sqrt(q.shape[1])
    grid_cols, grid_rows = ttl.grid_size(dims=2)
    plan = assign_query_tiles(q_tiles, k_tiles, grid_cols * grid_rows, causal)

    q_buf = ttl.make_dataflow_buffer_like(q, shape=(1, d_tiles), block_count=1)
    k_buf = ttl.make_dataflow_buffer_like(k, shape=(1, d_tiles), block_count=KV_BUFFERS)
    v_buf = ttl.make_dataflow_buffer_like(v, shape=(1, d_tiles), block_count=KV_BUFFERS)
    bias_buf = ttl.make_dataflow_buffer_like(bias, shape=(1, 1), block_count=1)
    s_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    p_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    alpha_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    m_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=2)
    l_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=2)
    pv_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=1)
    acc_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=2)
    o_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=1)
    lse_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=1)

    def my_tiles():
        col, row = ttl.node(dims=2)
        return plan[row * grid_cols + col]

    @ttl.datamovement()
    def reader():
        mine = my_tiles()
        # region: reader
        for i in mine:
            with q_buf.reserve() as q_blk:
                ttl.copy(q[i, 0:d_tiles], q_blk).wait()
            if causal:  # the diagonal tile's bias, once per query tile
                with bias_buf.reserve() as bias_blk:
                    ttl.copy(bias[0, 0], bias_blk).wait()
            for j in range(key_tiles_seen(i, q_tiles, k_tiles, causal)):
                with k_buf.reserve() as k_blk, v_buf.reserve() as v_blk:
                    k_copy = ttl.copy(k[j, 0:d_tiles], k_blk)
                    v_copy = ttl.copy(v[j, 0:d_tiles], v_blk)
                    k_copy.wait()
                    v_copy.wait()
        # endregion: reader

    @ttl.compute()
    def compute():
        mine = my_tiles()
        for i in mine:
            seen = key_tiles_seen(i, q_tiles, k_tiles, causal)
            with q_buf.wait() as q_blk:
                with m_buf.reserve() as m_blk:
                    m_blk.store(ttl.block.fill(-1.0e30, shape=(1, 1)))
                with l_buf.reserve() as l_blk:
                    l_blk.store(ttl.block.fill(0.0, shape=(1, 1)))
                with acc_buf.reserve() as acc_blk:
                    acc_blk.store(ttl.block.fill(0.0, shape=(1, d_tiles)))
                for j in range(seen):
                    with k_buf.wait() as k_blk, v_buf.wait() as v_blk:
                        # region: causal_scores
                        # BEGIN SOLUTION
                        with s_buf.reserve() as s_blk:
                            scores = q_blk @ ttl.block.transpose(k_blk) * ttl.block.fill(scale, shape=(1, 1))
                            if causal and j == seen - 1:  # the diagonal tile: hide the keys after each row's own
                                with bias_buf.wait() as bias_blk:
                                    s_blk.store(scores + bias_blk)
                            else:
                                s_blk.store(scores)
                        # END SOLUTION
                        # endregion: causal_scores
                        with s_buf.wait() as s_blk, m_buf.wait() as m_old:
                            m_new = ttl.math.max(m_old, ttl.math.reduce_max(s_blk, dims=[-1], shape=(1, 1)))
                            with m_buf.reserve() as m_blk:
                                m_blk.store(m_new)
                            with alpha_buf.reserve() as alpha_blk:
                                alpha_blk.store(ttl.math.exp(m_old - m_new))
                            with p_buf.reserve() as p_blk:
                                p_blk.store(ttl.math.exp(s_blk - ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))))
                        with p_buf.wait() as p_blk, alpha_buf.wait() as alpha_blk:
                            with l_buf.wait() as l_old, l_buf.reserve() as l_blk:
                                l_blk.store(alpha_blk * l_old + ttl.math.reduce_sum(p_blk, dims=[-1], shape=(1, 1)))
                            with pv_buf.reserve() as pv_blk:  # P·V in a step of its own: see the DST note above
                                pv_blk.store(p_blk @ v_blk)
                            with pv_buf.wait() as pv_blk, acc_buf.wait() as acc_old, acc_buf.reserve() as acc_blk:
                                acc_blk.store(acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk)
                with m_buf.wait() as m_blk, l_buf.wait() as l_blk, acc_buf.wait() as acc_blk:
                    with o_buf.reserve() as o_blk:
                        o_blk.store(acc_blk * ttl.block.broadcast(ttl.math.recip(l_blk), dims=[-1], shape=(1, d_tiles)))
                    with lse_buf.reserve() as lse_blk:
                        lse_blk.store(m_blk + ttl.math.log(l_blk))

    @ttl.datamovement()
    def writer():
        mine = my_tiles()
        # region: writer
        for i in mine:
            with o_buf.wait() as o_blk:
                ttl.copy(o_blk, o[i, 0:d_tiles]).wait()
            with lse_buf.wait() as lse_blk:
                ttl.copy(lse_blk, lse[i, 0:1]).wait()
        # endregion: writer

# endregion: operation


# ---- given code below this line: you do not edit it ----


if __name__ == "__main__":
    import course
    course.check("09.grid_assignment", assign_query_tiles)
    course.check("09.grid_causal_tt", grid_attention)
