// Lesson 01 · naive attention in Metal: one thread per query row.
//
// The same algorithm as kernels/cuda/01_naive.cu, in Metal's words: a thread's index in the whole
// dispatch arrives as a parameter marked [[thread_position_in_grid]] (CUDA computes it from blockIdx,
// blockDim and threadIdx), buffers are `device` pointers bound to [[buffer(n)]] slots, and sizes come
// in as `constant` references. Each thread keeps the online-softmax state of its row:
//   m    the largest score seen so far,
//   l    the sum of exp(score - m) so far,
//   acc  the sum of exp(score - m) * v_j so far (D floats in thread memory),
// rescaling l and acc by exp(m_old - m_new) whenever the maximum grows; at the end O_row = acc / l.
//
// Layout: Q (n_q, d), K and V (n_k, d), O (n_q, d), row-major float32; the launcher checks
// d <= MAX_HEAD_DIM.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 01 --track metal
#include <metal_stdlib>
using namespace metal;

constant uint MAX_HEAD_DIM = 128;

kernel void naive_attention(device const float* q [[buffer(0)]],
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

    // region: online_softmax_update
    // BEGIN SOLUTION
    for (uint j = 0; j < n_k; ++j) {
        device const float* k_row = k + j * d;
        float score = 0.0f;
        for (uint c = 0; c < d; ++c) score += q_row[c] * k_row[c];
        score *= scale;
        const float m_new = max(m, score);
        const float correction = exp(m - m_new);  // 0 on the first key, where m = -inf
        const float p = exp(score - m_new);
        device const float* v_row = v + j * d;
        l = l * correction + p;
        for (uint c = 0; c < d; ++c) acc[c] = acc[c] * correction + p * v_row[c];
        m = m_new;
    }
    // END SOLUTION
    // endregion: online_softmax_update

    device float* o_row = o + row * d;
    for (uint c = 0; c < d; ++c) o_row[c] = acc[c] / l;
}
