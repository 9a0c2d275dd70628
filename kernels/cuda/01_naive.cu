// Lesson 01 · naive attention in CUDA C: one thread per query row.
//
// Thread `row` owns query row `row`. It walks over every key j, reading k_j and v_j straight from
// global memory, and keeps three running values for its row (the online softmax):
//   m    the largest score seen so far          (so expf() never overflows)
//   l    the sum of exp(score - m) so far       (the softmax denominator)
//   acc  the sum of exp(score - m) * v_j so far (the numerator, a D-vector)
// When a larger score arrives, l and acc were measured against the old max, so both are multiplied
// by exp(m_old - m_new) before the new key is added. At the end O_row = acc / l.
//
// Nothing of size N×N is stored, but every thread reads all of K and V: N·2·N·D loads for the grid.
// Neighbouring threads read the same k_j at the same moment, which the cache absorbs; lessons 02-04
// make that sharing explicit.
//
// Layout: Q (n_q, d), K and V (n_k, d), O (n_q, d), row-major float32. The launcher checks
// d <= MAX_HEAD_DIM, since acc lives in a fixed-size per-thread array. Because d is only known at
// run time, the compiler cannot keep acc in registers: ptxas places it in local memory (a 512-byte
// stack frame per thread, see `python -m course.tools.nvcc_gate`), which is global memory cached in L1.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 01 --track cuda

#define MAX_HEAD_DIM 128

extern "C" __global__ void naive_attention(const float* __restrict__ q, const float* __restrict__ k,
                                           const float* __restrict__ v, float* __restrict__ o,
                                           int n_q, int n_k, int d, float scale) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n_q) return;  // the last block may have more threads than rows
    const float* q_row = q + (size_t)row * d;

    float m = __uint_as_float(0xff800000u);  // -infinity (NVRTC, CUDA's run-time compiler, has no INFINITY macro)
    float l = 0.0f;
    float acc[MAX_HEAD_DIM];
    for (int c = 0; c < d; ++c) acc[c] = 0.0f;

    // region: online_softmax_update
    // BEGIN SOLUTION
    for (int j = 0; j < n_k; ++j) {
        const float* k_row = k + (size_t)j * d;
        float score = 0.0f;
        for (int c = 0; c < d; ++c) score += q_row[c] * k_row[c];
        score *= scale;
        const float m_new = fmaxf(m, score);
        const float correction = expf(m - m_new);  // 0 on the first key, where m = -inf
        const float p = expf(score - m_new);
        const float* v_row = v + (size_t)j * d;
        l = l * correction + p;
        for (int c = 0; c < d; ++c) acc[c] = acc[c] * correction + p * v_row[c];
        m = m_new;
    }
    // END SOLUTION
    // endregion: online_softmax_update

    float* o_row = o + (size_t)row * d;
    for (int c = 0; c < d; ++c) o_row[c] = acc[c] / l;
}
