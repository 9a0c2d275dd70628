# Lesson 09 · one Tensix core: FlashAttention's forward pass as three kernels and their dataflow buffers.
#
# A Tensix core runs three programs at once: a reader moves tiles from DRAM into L1, a compute kernel
# turns them into other tiles, and a writer moves results back to DRAM. They talk only through dataflow
# buffers: rings of tile blocks in L1. The producer `reserve()`s a free slot, fills it and pushes it (the
# end of its `with`); the consumer `wait()`s for a filled slot, reads it and pops it. Everything is a
# 32×32 tile, so Q, K and V arrive as tiles, a row vector such as the running max lives in column 0
# of a tile (where a row reduction leaves it), and `broadcast` copies it across the columns.
#
# The algorithm is lesson 03's, with one query tile (32 rows) and one K/V tile (32 keys) per step:
#   S   = Q Kᵀ · scale                               (1 tile)
#   m'  = max(m, rowmax(S));  α = exp(m - m');  P = exp(S - m')
#   l'  = α · l + rowsum(P)
#   acc'= α · acc + P V                               (D/32 tiles)
# and at the end O = acc / l, LSE = m + log(l). A compute kernel has no registers that survive a step
# the way a GPU thread's do: m, l and acc go round through buffers of their own, each step waiting on
# the old value and reserving a slot for the new one. Every `store` is one step through DST, the math
# unit's register file of 8 tiles (16-bit data, double-buffered), which is why S, P, α and P·V are
# stored to buffers of their own rather than fused into one long expression (see `course/lessons/dst.py`):
# at D = 128, `acc * α + P @ V` in one step would hold α broadcast, the product and P·V, 4 tiles
# each, 12 in all; split in two steps, neither holds more than 8.
#
# KV_BUFFERS is the depth of the K and V buffers: with 2 the reader fills one slot while compute
# works on the other (double buffering); with 1 each waits for the other.
#
# Your part: the `online_softmax_update` region of one_core_attention, below; the lines around it are
# given, and so is everything under the "given code" line.
#
# Check this file against the float64 oracle on the simulator:
#     .venv/bin/python kernels/tt/09_one_core.py
import math

from course.lessons.dataflow import simulator

ttl, ttnn = simulator()

# region: operation
TILE = 32
KV_BUFFERS = 2


@ttl.operation(grid=(1, 1))
def one_core_attention(q, k, v, o, lse):
    """O (Nq, D) and LSE (Nq, 32; column 0) of softmax(Q Kᵀ / sqrt(D)) V, on one core."""
    d_tiles = q.shape[1] // TILE
    q_tiles, k_tiles = q.shape[0] // TILE, k.shape[0] // TILE
    scale = 1.0 / math.sqrt(q.shape[1])

    # region: buffers
    q_buf = ttl.make_dataflow_buffer_like(q, shape=(1, d_tiles), block_count=1)
    k_buf = ttl.make_dataflow_buffer_like(k, shape=(1, d_tiles), block_count=KV_BUFFERS)
    v_buf = ttl.make_dataflow_buffer_like(v, shape=(1, d_tiles), block_count=KV_BUFFERS)
    s_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    p_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    alpha_buf = ttl.make_dataflow_buffer_like(o, shape=(1, 1), block_count=1)
    m_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=2)       # old and new value
    l_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=2)
    pv_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=1)
    acc_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=2)
    o_buf = ttl.make_dataflow_buffer_like(o, shape=(1, d_tiles), block_count=1)
    lse_buf = ttl.make_dataflow_buffer_like(lse, shape=(1, 1), block_count=1)
    # endregion: buffers

    @ttl.datamovement()
    def reader():
        # region: reader
        for i in range(q_tiles):
            with q_buf.reserve() as q_blk:
                ttl.copy(q[i, 0:d_tiles], q_blk).wait()
            for j in range(k_tiles):
                with k_buf.reserve() as k_blk, v_buf.reserve() as v_blk:
                    k_copy = ttl.copy(k[j, 0:d_tiles], k_blk)
                    v_copy = ttl.copy(v[j, 0:d_tiles], v_blk)
                    k_copy.wait()
                    v_copy.wait()
        # endregion: reader

    @ttl.compute()
    def compute():
        for _ in range(q_tiles):
            with q_buf.wait() as q_blk:
                # region: initial_state
                with m_buf.reserve() as m_blk:
                    m_blk.store(ttl.block.fill(-1.0e30, shape=(1, 1)))
                with l_buf.reserve() as l_blk:
                    l_blk.store(ttl.block.fill(0.0, shape=(1, 1)))
                with acc_buf.reserve() as acc_blk:
                    acc_blk.store(ttl.block.fill(0.0, shape=(1, d_tiles)))
                # endregion: initial_state
                for _ in range(k_tiles):
                    with k_buf.wait() as k_blk, v_buf.wait() as v_blk:
                        # region: scores
                        with s_buf.reserve() as s_blk:
                            s_blk.store(q_blk @ ttl.block.transpose(k_blk) * ttl.block.fill(scale, shape=(1, 1)))
                        # endregion: scores
                        # region: online_softmax_update
                        # BEGIN SOLUTION
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
                        # END SOLUTION
                        # endregion: online_softmax_update
                # region: finish
                with m_buf.wait() as m_blk, l_buf.wait() as l_blk, acc_buf.wait() as acc_blk:
                    with o_buf.reserve() as o_blk:
                        o_blk.store(acc_blk * ttl.block.broadcast(ttl.math.recip(l_blk), dims=[-1], shape=(1, d_tiles)))
                    with lse_buf.reserve() as lse_blk:
                        lse_blk.store(m_blk + ttl.math.log(l_blk))
                # endregion: finish

    @ttl.datamovement()
    def writer():
        # region: writer
        for i in range(q_tiles):
            with o_buf.wait() as o_blk:
                ttl.copy(o_blk, o[i, 0:d_tiles]).wait()
            with lse_buf.wait() as lse_blk:
                ttl.copy(lse_blk, lse[i, 0:1]).wait()
        # endregion: writer

# endregion: operation


# ---- given code below this line: you do not edit it ----


if __name__ == "__main__":
    import course
    course.check("09.one_core_tt", one_core_attention)
