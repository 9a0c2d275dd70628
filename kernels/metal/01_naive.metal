// Lesson 01 · naive attention in Metal: one thread per query row, the textbook softmax.
//
// The same algorithm as kernels/cuda/01_naive.cu, in Metal's words: a thread's index in the whole
// dispatch arrives as a parameter marked [[thread_position_in_grid]] (CUDA computes it from blockIdx,
// blockDim and threadIdx), buffers are `device` pointers bound to [[buffer(n)]] slots, and sizes come
// in as `constant` references. Each thread makes the two sweeps over the keys of a safe softmax:
//   pass 1   m = max_j s_j, where s_j = scale * (q_row . k_j),
//   pass 2   with m fixed: l = sum_j exp(s_j - m) and acc = sum_j exp(s_j - m) * v_j (D floats in
//            thread memory), with no rescaling, since m no longer changes,
// and writes O_row = acc / l. K is read twice and V once per row; lesson 02 fuses the two passes.
//
// Layout: Q (n_q, d), K and V (n_k, d), O (n_q, d), row-major float32; the launcher checks
// d <= MAX_HEAD_DIM.
//
// Your part: the `two_passes` region of naive_attention, just below; the lines around it are given.
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

    // region: two_passes
    // BEGIN SOLUTION
    // Pass 1: the largest scaled score of the row.
    for (uint j = 0; j < n_k; ++j) {
        device const float* k_row = k + j * d;
        float dot = 0.0f;
        for (uint c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
        m = max(m, dot * scale);
    }
    // Pass 2: m is final, so every weight is final too; add them up, and the rows of V they weigh.
    for (uint j = 0; j < n_k; ++j) {
        device const float* k_row = k + j * d;
        float score = 0.0f;
        for (uint c = 0; c < d; ++c) score += q_row[c] * k_row[c];
        const float p = exp(score * scale - m);  // in (0, 1]
        device const float* v_row = v + j * d;
        l += p;
        for (uint c = 0; c < d; ++c) acc[c] += p * v_row[c];
    }
    device float* o_row = o + row * d;
    for (uint c = 0; c < d; ++c) o_row[c] = acc[c] / l;
    // END SOLUTION
    // endregion: two_passes
}
