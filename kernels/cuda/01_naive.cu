// Lesson 01 · naive attention in CUDA C: one thread per query row, the textbook softmax.
//
// Thread `row` owns query row `row` and makes the two sweeps over the keys that a safe softmax needs,
// reading every k_j and v_j straight from global memory, one key at a time:
//   pass 1   m = max_j s_j, where s_j = scale * (q_row . k_j)   (so expf() never overflows)
//   pass 2   with m fixed:  l   = sum_j exp(s_j - m)           (the softmax denominator)
//                           acc = sum_j exp(s_j - m) * v_j     (the numerator, d floats)
//   O_row = acc / l
// m is already the true row max during pass 2, so each weight exp(s_j - m) is final when it is made:
// l and acc only grow, and nothing is ever rescaled. Each score is computed twice, once per pass,
// rather than kept: n_k scores would not fit in one thread.
//
// Nothing of size N×N is stored, but every thread reads all of K twice and all of V once: 3·n_k·d
// loads per row. Neighbouring threads read the same k_j at the same moment, which the cache absorbs;
// lesson 02 fuses the two passes into one (the online softmax), and lessons 03-04 make the sharing
// of K and V between rows explicit.
//
// Layout: Q (n_q, d), K and V (n_k, d), O (n_q, d), row-major float32. The launcher checks
// d <= MAX_HEAD_DIM, since acc lives in a fixed-size per-thread array. Because d is only known at
// run time, the compiler cannot keep acc in registers: ptxas places it in local memory (a 512-byte
// stack frame per thread, see `python -m course.tools.nvcc_gate`), which is global memory cached in L1.
//
// Your part: the `two_passes` region of naive_attention, just below; the lines around it are given.
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

    // region: two_passes
    // BEGIN SOLUTION
    // Pass 1: the largest scaled score of the row.
    for (int j = 0; j < n_k; ++j) {
        const float* k_row = k + (size_t)j * d;
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
        m = fmaxf(m, dot * scale);
    }
    // Pass 2: m is final, so every weight is final too; add them up, and the rows of V they weigh.
    for (int j = 0; j < n_k; ++j) {
        const float* k_row = k + (size_t)j * d;
        float score = 0.0f;
        for (int c = 0; c < d; ++c) score += q_row[c] * k_row[c];
        const float p = expf(score * scale - m);  // in (0, 1]
        const float* v_row = v + (size_t)j * d;
        l += p;
        for (int c = 0; c < d; ++c) acc[c] += p * v_row[c];
    }
    float* o_row = o + (size_t)row * d;
    for (int c = 0; c < d; ++c) o_row[c] = acc[c] / l;
    // END SOLUTION
    // endregion: two_passes
}
