// Step 03 (Metal) · tiling: a threadgroup of query rows shares each K/V tile through threadgroup memory,
// and writes LSE.
//
// What changed from 01: in the naive kernel every thread read all of K and V from device memory by
// itself, so K and V crossed the memory bus once per query row. Now a threadgroup of block_m threads
// owns block_m consecutive query rows (one thread per row, as in 01) and the keys are streamed
// through threadgroup memory in tiles of block_n rows:
//   1. the threadgroup copies its Q tile (block_m x d) into threadgroup memory once;
//   2. for each K/V tile: all threads copy it into threadgroup memory together (thread t copies
//      elements t, t + block_m, ...: neighbouring threads touch neighbouring addresses), a barrier,
//      then every thread updates its own row with the whole tile at once:
//        m_new = max(m, max_j s_j)        correction = exp(m - m_new)
//        l     = l * correction + sum_j exp(s_j - m_new)
//        acc   = acc * correction + sum_j exp(s_j - m_new) * v_j
//      (the online softmax of 01, one tile instead of one key at a time: one rescale per tile);
//   3. each thread writes its row of O = acc / l and LSE = m + log(l), in natural-log units: the one
//      number per row the backward pass needs to rebuild P without storing it.
// K and V now cross the bus once per threadgroup instead of once per row.
//
// Two barriers per tile, and why both are needed: the one after the copy makes the tile complete
// before any thread reads it; the one before the copy (at the top of the loop) keeps a fast thread
// from overwriting the tile while slower threads still read the previous one. Step 04 gets this down
// to one barrier per tile with two buffers.
//
// Threadgroup memory comes in as three [[threadgroup(n)]] pointers, because its size depends on d,
// known only at launch: the host sets each length (setThreadgroupMemoryLength:atIndex: on a Mac) from
// the same formulas the launcher checks against the 32 KiB an Apple GPU gives one threadgroup
// (course/tracks/metal.py):
//   q_tile [[threadgroup(0)]]: block_m x d floats;  k_tile, v_tile [[threadgroup(1), (2)]]: block_n x d.
//
// Causal attention (causal = 1) is bottom-right aligned, the course's convention (course/reference.py):
// query i sees key j iff j <= i + (n_k - n_q). The tile loop stops after the last key the threadgroup's
// last row can see; inside a tile each score is masked on its own (step 05 masks only diagonal tiles).
// A row that sees no key at all (n_q > n_k) ends with l = 0 and gets O = 0, LSE = -inf.
//
// Why no -INFINITY inside the arithmetic: Metal compiles with fast math unless the host asks otherwise
// (MTLCompileOptions.fastMathEnabled defaults to YES; since macOS 15 Apple silicon defaults to the
// "relaxed" math mode, which keeps Inf and NaN, but the "fast" mode may assume no value is infinite).
// To be right under either, "no key seen yet" is m = -MAXFLOAT, masked scores are skipped by a flag
// rather than turned into -inf, and -INFINITY is only ever stored into LSE, at the end.
//
// Layout: Q (H, n_q, d), K and V (H, n_k, d), O (H, n_q, d), LSE (H, n_q), row-major float32, one head
// per threadgroup column (threadgroup_position_in_grid.y). Launch: block_m threads per threadgroup,
// ceil(n_q / block_m) x H threadgroups; d <= MAX_HEAD_DIM, 1 <= block_n <= MAX_BLOCK_N.
//
// Your part: the `tile_loop` region of tiled_attention, just below; the lines around it are given.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 03 --track metal
#include <metal_stdlib>
using namespace metal;

#define MAX_HEAD_DIM 128  // acc[] is a thread array of this many floats
#define MAX_BLOCK_N 32    // s[] holds one tile's scores

kernel void tiled_attention(device const float* q [[buffer(0)]],
                            device const float* k [[buffer(1)]],
                            device const float* v [[buffer(2)]],
                            device float* o [[buffer(3)]],
                            device float* lse [[buffer(4)]],
                            constant uint& n_q [[buffer(5)]],
                            constant uint& n_k [[buffer(6)]],
                            constant uint& d [[buffer(7)]],
                            constant float& scale [[buffer(8)]],
                            constant uint& block_n [[buffer(9)]],
                            constant uint& causal [[buffer(10)]],
                            threadgroup float* q_tile [[threadgroup(0)]],
                            threadgroup float* k_tile [[threadgroup(1)]],
                            threadgroup float* v_tile [[threadgroup(2)]],
                            uint2 group [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]],
                            uint2 group_size [[threads_per_threadgroup]]) {
    // uint2 like `group`: MSL wants a kernel's vector position attributes to have one number of components.
    const uint block_m = group_size.x;
    const uint row0 = group.x * block_m;
    const uint row = row0 + tid;  // this thread's query row (may be past n_q in the last threadgroup)
    const ulong q_base = ulong(group.y) * n_q * d, kv_base = ulong(group.y) * n_k * d;

    // Rows past n_q are zeros: their threads still compute (they must reach every barrier) and write nothing.
    for (uint i = tid; i < block_m * d; i += block_m) {
        const uint r = row0 + i / d;
        q_tile[i] = r < n_q ? q[q_base + ulong(r) * d + i % d] : 0.0f;
    }
    threadgroup const float* q_row = q_tile + tid * d;

    float m = -MAXFLOAT;  // no key seen yet
    float l = 0.0f;
    float acc[MAX_HEAD_DIM];
    for (uint c = 0; c < d; ++c) acc[c] = 0.0f;

    // region: tile_range
    const int offset = int(n_k) - int(n_q);  // causal: query i sees keys j <= i + offset
    // The same for every thread of the threadgroup (every thread must run the same barriers).
    const uint kv_end = causal ? uint(clamp(int(row0 + block_m) + offset, 0, int(n_k))) : n_k;
    // endregion: tile_range

    // region: tile_loop
    // BEGIN SOLUTION
    for (uint j0 = 0; j0 < kv_end; j0 += block_n) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // done with the previous tile (and Q is complete)
        for (uint i = tid; i < block_n * d; i += block_m) {
            const uint key = j0 + i / d;
            const bool in = key < n_k;  // the last tile may run past the last key
            k_tile[i] = in ? k[kv_base + ulong(key) * d + i % d] : 0.0f;
            v_tile[i] = in ? v[kv_base + ulong(key) * d + i % d] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete

        const uint keys = min(block_n, kv_end - j0);
        float s[MAX_BLOCK_N];
        float tile_max = -MAXFLOAT;
        for (uint jj = 0; jj < keys; ++jj) {
            float dot = 0.0f;
            for (uint c = 0; c < d; ++c) dot += q_row[c] * k_tile[jj * d + c];
            s[jj] = dot * scale;
            const bool visible = !causal || int(j0 + jj) <= int(row) + offset;
            if (visible) tile_max = max(tile_max, s[jj]);
        }
        const float m_new = max(m, tile_max);
        const float correction = exp(m - m_new);  // 0 when m was still -MAXFLOAT and m_new is a score
        l *= correction;
        for (uint c = 0; c < d; ++c) acc[c] *= correction;
        for (uint jj = 0; jj < keys; ++jj) {
            const bool visible = !causal || int(j0 + jj) <= int(row) + offset;
            if (!visible) continue;
            const float p = exp(s[jj] - m_new);
            l += p;
            for (uint c = 0; c < d; ++c) acc[c] += p * v_tile[jj * d + c];
        }
        m = m_new;
    }
    // END SOLUTION
    // endregion: tile_loop

    // region: epilogue
    if (row < n_q) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that saw no key: O = 0
        device float* o_row = o + q_base + ulong(row) * d;
        for (uint c = 0; c < d; ++c) o_row[c] = acc[c] * inv_l;
        lse[ulong(group.y) * n_q + row] = l > 0.0f ? m + log(l) : -INFINITY;
    }
    // endregion: epilogue
}
