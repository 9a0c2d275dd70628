// Lesson 02 · the online softmax in Metal: one thread per query row, one sweep over the keys.
//
// What changed from 01: 01_naive.metal swept over the keys twice, first for the row max m, then for
// l and acc against that final m. Here the two sweeps become one. The thread keeps, for the keys it
// has seen so far,
//   m    the largest score,
//   l    the sum of exp(score - m),
//   acc  the sum of exp(score - m) * v_j (D floats in thread memory),
// and when key j raises the max to m_new, everything in l and acc was measured against the old max:
// both are multiplied by exp(m - m_new) before key j's own term is added. On the first key m = -inf
// and that factor is exp(-inf) = 0, which empties the (still empty) sums. At the end O_row = acc / l,
// the same answer as lesson 01, but K is read once per row instead of twice.
//
// The launch is the same as lesson 01's: one thread per row, the dispatch rounded up to whole
// threadgroups, Q (n_q, d), K and V (n_k, d), O (n_q, d) row-major float32, d <= MAX_HEAD_DIM.
//
// Your part: the `online_softmax_update` region of online_attention, just below; the lines around it
// are given.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 02 --track metal
#include <metal_stdlib>
using namespace metal;

constant uint MAX_HEAD_DIM = 128;

kernel void online_attention(device const float* q [[buffer(0)]],
                             device const float* k [[buffer(1)]],
                             device const float* v [[buffer(2)]],
                             device float* o [[buffer(3)]],
                             constant uint& n_q [[buffer(4)]],
                             constant uint& n_k [[buffer(5)]],
                             constant uint& d [[buffer(6)]],
                             constant float& scale [[buffer(7)]],
                             uint row [[thread_position_in_grid]]) {
    if (row >= n_q) return;  // the dispatch is rounded up to whole threadgroups
    device const float* q_row = q + row * d;

    float m = -INFINITY;
    float l = 0.0f;
    float acc[MAX_HEAD_DIM];
    for (uint c = 0; c < d; ++c) acc[c] = 0.0f;

    for (uint j = 0; j < n_k; ++j) {
        device const float* k_row = k + j * d;
        float score = 0.0f;
        for (uint c = 0; c < d; ++c) score += q_row[c] * k_row[c];
        score *= scale;
        device const float* v_row = v + j * d;
        // region: online_softmax_update
        // BEGIN SOLUTION
        const float m_new = max(m, score);
        const float correction = exp(m - m_new);  // 0 on the first key, where m = -inf
        const float p = exp(score - m_new);
        l = l * correction + p;
        for (uint c = 0; c < d; ++c) acc[c] = acc[c] * correction + p * v_row[c];
        m = m_new;
        // END SOLUTION
        // endregion: online_softmax_update
    }

    device float* o_row = o + row * d;
    for (uint c = 0; c < d; ++c) o_row[c] = acc[c] / l;
}
