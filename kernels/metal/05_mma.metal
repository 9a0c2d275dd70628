// Step 05 (Metal) · simdgroup matrices: Q·Kᵀ and P·V as 8 x 8 matrix products, causal with block skip.
//
// What changed from 04: the two products that are most of the work, S = Q Kᵀ and O += P V, are done
// with Metal's simdgroup matrices. A simdgroup_matrix<T, 8, 8> is an 8 x 8 matrix spread over the 32
// threads of a simdgroup (two elements each); simdgroup_load / simdgroup_store move it between memory
// and those registers, and simdgroup_multiply_accumulate(D, A, B, C) computes D = A B + C as one
// operation of the whole simdgroup. Inputs are half (simdgroup_half8x8), products are accumulated in
// float (simdgroup_float8x8): half's 11-bit mantissa would lose a sum over hundreds of keys.
//
// Work split: a threadgroup of block_m / 8 simdgroups owns block_m query rows; simdgroup g owns the 8
// rows row0 + 8g .. row0 + 8g + 7 and keeps, in registers, its Q strip as d/8 half matrices and its
// O accumulator as d/8 float matrices (one per 8 columns of O). Per K/V tile of block_n keys:
//   1. S strip (8 x block_n) = Q strip · Kᵀ: for every 8 keys, d/8 multiply-accumulates; K is loaded
//      transposed (simdgroup_load's last argument), so the tile is stored row-major like K itself;
//   2. the S strip goes to threadgroup memory and four lanes per row run the online softmax on it,
//      writing P (half) and each row's correction = exp(m_old - m_new);
//   3. the O accumulator is rescaled by the correction of its row: SPILL, SCALE, RELOAD (below);
//   4. O += P V: for every 8 columns of O, block_n/8 multiply-accumulates.
//
// Spill, scale, reload. Rescaling multiplies row r of the accumulator by correction_r. But which lane
// holds which element of a simdgroup_matrix is not part of Metal's specification (thread_elements()
// gives a lane its two elements, in an order Apple does not document), so a lane cannot know which row
// its elements belong to. The portable way: simdgroup_store the accumulator into threadgroup memory,
// where element (r, c) is at a known address; let the lanes that own row r multiply it; simdgroup_load
// it back. simdgroup_barrier between the steps, because the lanes that scale an element are not the
// lanes that stored it. (An 8 x 8 diagonal matrix of corrections and a simdgroup_multiply would also
// do it, at the cost of one more product per 8 columns.)
//
// Causal attention, bottom-right aligned as everywhere in the course (query i sees key j iff
// j <= i + n_k - n_q), costs three kinds of tiles for a threadgroup's rows row0 .. row0 + block_m - 1:
//   - tiles past the last key the threadgroup's last row can see: never loaded (the loop ends before);
//   - tiles the diagonal crosses (their last key is past what the first row sees): the fine mask,
//     column by column, on these tiles only;
//   - every other tile: no mask at all.
// Tail guards: rows past n_q are zero in the Q tile and never written; keys past n_k are zero in the
// K/V tiles and masked out of the softmax; any N works, D must be a multiple of 8.
// As in 03 and 04 there is no -INFINITY inside the arithmetic (Metal's fast math may assume none), and a
// row that sees no key gets O = 0, LSE = -inf.
//
// Threadgroup memory, sized at launch (course/tracks/metal.py, checked against 32 KiB):
//   q_tile (0): block_m x d half;  k_tile (1), v_tile (2): block_n x d half;
//   s_strips (3): block_m x block_n float;  p_strips (4): block_m x block_n half;
//   o_strips (5): block_m x d float (where the accumulator is spilled).
// One K/V buffer and two barriers per tile, as in 03: next to these strips, step 04's second buffer would
// fit 32 KiB at D = 128 only with tiles of 16 keys (16 rows and 32 keys would need 48,128 bytes).
// Layout: Q, K, V (H, n, d) float16; O (H, n_q, d), LSE (H, n_q) float32; one head per threadgroup column.
// Launch: 32 * block_m / 8 threads per threadgroup, ceil(n_q / block_m) x H threadgroups.
//
// Your part: the `causal_block_skip` and `softmax_and_rescale` regions of simdgroup_attention, the first
// function below. The load_rows helper it calls is given, under the "given code" line at the end.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 05 --track metal
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

#define MAX_HEAD_DIM 128  // Q and O strips: MAX_HEAD_DIM / 8 matrices each per simdgroup

// Given below: copies rows of an (n, d) half matrix into threadgroup memory.
static void load_rows(threadgroup half* dst, device const half* src, uint row0, uint rows, uint n, uint d,
                      uint tid, uint threads);

kernel void simdgroup_attention(device const half* q [[buffer(0)]],
                                device const half* k [[buffer(1)]],
                                device const half* v [[buffer(2)]],
                                device float* o [[buffer(3)]],
                                device float* lse [[buffer(4)]],
                                constant uint& n_q [[buffer(5)]],
                                constant uint& n_k [[buffer(6)]],
                                constant uint& d [[buffer(7)]],
                                constant float& scale [[buffer(8)]],
                                constant uint& block_n [[buffer(9)]],
                                constant uint& causal [[buffer(10)]],
                                threadgroup half* q_tile [[threadgroup(0)]],
                                threadgroup half* k_tile [[threadgroup(1)]],
                                threadgroup half* v_tile [[threadgroup(2)]],
                                threadgroup float* s_strips [[threadgroup(3)]],
                                threadgroup half* p_strips [[threadgroup(4)]],
                                threadgroup float* o_strips [[threadgroup(5)]],
                                uint2 group [[threadgroup_position_in_grid]],
                                uint tid [[thread_index_in_threadgroup]],
                                uint2 group_size [[threads_per_threadgroup]],
                                uint sg [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]]) {
    const uint threads = group_size.x;
    const uint block_m = threads / 4;  // 8 rows per simdgroup of 32 threads
    const uint row0 = group.x * block_m;
    device const half* qh = q + ulong(group.y) * n_q * d;
    device const half* kh = k + ulong(group.y) * n_k * d;
    device const half* vh = v + ulong(group.y) * n_k * d;

    // This simdgroup's strips, and the row and column phase of this lane in them: lanes 4r .. 4r + 3
    // share strip row r and take every fourth column.
    threadgroup float* s_strip = s_strips + sg * 8 * block_n;
    threadgroup half* p_strip = p_strips + sg * 8 * block_n;
    threadgroup float* o_strip = o_strips + sg * 8 * d;
    const uint r = lane / 4, phase = lane % 4;
    const uint row = row0 + sg * 8 + r;
    threadgroup float* s_row = s_strip + r * block_n;
    threadgroup half* p_row = p_strip + r * block_n;
    threadgroup float* o_row = o_strip + r * d;

    load_rows(q_tile, qh, row0, block_m, n_q, d, tid, threads);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint blocks = d / 8;  // 8-column blocks of Q and O
    simdgroup_half8x8 q_frag[MAX_HEAD_DIM / 8];
    simdgroup_float8x8 o_acc[MAX_HEAD_DIM / 8];
    for (uint b = 0; b < blocks; ++b) {
        simdgroup_load(q_frag[b], q_tile + sg * 8 * d + b * 8, d);
        o_acc[b] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    float m = -MAXFLOAT;  // this lane's row: running max (no key yet) and sum, the same in its 4 lanes
    float l = 0.0f;

    // region: causal_block_skip
    const int offset = int(n_k) - int(n_q);  // query i sees keys j <= i + offset
    uint kv_end = n_k;                        // the tile loop visits keys 0 .. kv_end - 1
    // BEGIN SOLUTION
    // Keys past the last one the threadgroup's last row can see are never loaded. (Without this the
    // result is the same, since the fine mask hides them, only slower.)
    if (causal) kv_end = uint(clamp(int(row0 + block_m) + offset, 0, int(n_k)));
    // END SOLUTION
    // endregion: causal_block_skip

    for (uint j0 = 0; j0 < kv_end; j0 += block_n) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // every simdgroup is done with the previous tile
        load_rows(k_tile, kh, j0, block_n, n_k, d, tid, threads);
        load_rows(v_tile, vh, j0, block_n, n_k, d, tid, threads);
        threadgroup_barrier(mem_flags::mem_threadgroup);  // the tile is complete

        // region: scores
        for (uint n0 = 0; n0 < block_n; n0 += 8) {
            simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (uint b = 0; b < blocks; ++b) {
                simdgroup_half8x8 k_t;  // keys n0 .. n0 + 7, columns 8b .. 8b + 7, transposed: a block of Kᵀ
                simdgroup_load(k_t, k_tile + n0 * d + b * 8, d, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(s, q_frag[b], k_t, s);
            }
            simdgroup_store(s, s_strip + n0, block_n);
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);  // the S strip is complete before lanes read rows of it
        // endregion: scores

        // region: softmax_and_rescale
        // BEGIN SOLUTION
        // Visible columns of this row: c < limit. Only tiles the diagonal crosses pay for the fine mask.
        const uint keys = min(block_n, n_k - j0);
        const bool diagonal = causal && int(j0 + block_n) - 1 > int(row0) + offset;
        const uint limit = diagonal ? uint(clamp(int(row) + offset - int(j0) + 1, 0, int(keys))) : keys;
        float part_max = -MAXFLOAT;
        for (uint c = phase; c < limit; c += 4) part_max = max(part_max, s_row[c] * scale);
        float tile_max = max(part_max, simd_shuffle_xor(part_max, 1));
        tile_max = max(tile_max, simd_shuffle_xor(tile_max, 2));
        const float m_new = max(m, tile_max);
        const float correction = exp(m - m_new);
        float part_sum = 0.0f;
        for (uint c = phase; c < block_n; c += 4) {
            const half p = c < limit ? half(exp(s_row[c] * scale - m_new)) : half(0.0f);
            p_row[c] = p;
            part_sum += float(p);  // sum the rounded weights: the ones P·V will use
        }
        float sum = part_sum + simd_shuffle_xor(part_sum, 1);
        sum += simd_shuffle_xor(sum, 2);
        l = l * correction + sum;
        m = m_new;

        // Spill, scale, reload the opaque accumulator.
        for (uint b = 0; b < blocks; ++b) simdgroup_store(o_acc[b], o_strip + b * 8, d);
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = phase; c < d; c += 4) o_row[c] *= correction;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint b = 0; b < blocks; ++b) simdgroup_load(o_acc[b], o_strip + b * 8, d);
        // END SOLUTION
        // endregion: softmax_and_rescale

        // region: pv_product
        for (uint n0 = 0; n0 < block_n; n0 += 8) {
            simdgroup_half8x8 p_frag;
            simdgroup_load(p_frag, p_strip + n0, block_n);
            for (uint b = 0; b < blocks; ++b) {
                simdgroup_half8x8 v_frag;  // keys n0 .. n0 + 7, columns 8b .. 8b + 7
                simdgroup_load(v_frag, v_tile + n0 * d + b * 8, d);
                simdgroup_multiply_accumulate(o_acc[b], p_frag, v_frag, o_acc[b]);
            }
        }
        // endregion: pv_product
    }

    // region: epilogue
    for (uint b = 0; b < blocks; ++b) simdgroup_store(o_acc[b], o_strip + b * 8, d);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (row < n_q) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that saw no key: O = 0
        device float* o_out = o + (ulong(group.y) * n_q + row) * d;
        for (uint c = phase; c < d; c += 4) o_out[c] = o_row[c] * inv_l;
        if (phase == 0) lse[ulong(group.y) * n_q + row] = l > 0.0f ? m + log(l) : -INFINITY;
    }
    // endregion: epilogue
}

// ---- given code below this line: you do not edit it ----

// Rows row0 .. row0 + rows - 1 of an (n, d) half matrix into threadgroup memory; rows past n are zeros.
static void load_rows(threadgroup half* dst, device const half* src, uint row0, uint rows, uint n, uint d,
                      uint tid, uint threads) {
    for (uint i = tid; i < rows * d; i += threads) {
        const uint r = row0 + i / d;
        dst[i] = r < n ? src[ulong(r) * d + i % d] : half(0.0f);
    }
}
