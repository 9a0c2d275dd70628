// Step 02 · one warp per query row: the online softmax, 32 keys at a time.
//
// What changed from 01: 01's two passes over the keys (the row max, then l and acc against it) become
// one sweep, the online softmax, and a query row is no longer one thread's job but one warp's (32
// threads that execute together and can read each other's registers through shuffles). The warp walks
// the keys in chunks of 32 and splits the work two ways:
//   * scores: lane j takes key j of the chunk and computes its whole dot product q·k_j;
//   * output: lane i owns columns i, i + 32, i + 64, i + 96 of the row's accumulator, so a row of
//     up to MAX_HEAD_DIM = 128 columns is 4 registers per lane instead of 128 floats in one thread
//     (step 01's acc[] lived in local memory; these stay in registers, see the nvcc gate's table).
// Each chunk is one step of the online softmax, done by the whole warp:
//   m_chunk  = max over the 32 lanes' scores   (__shfl_xor_sync butterfly: 5 exchanges)
//   m_new    = max(m, m_chunk)
//   p_j      = exp(s_j - m_new)                (lane j, its own key)
//   l        = l * exp(m - m_new) + sum_j p_j  (__shfl_xor_sync butterfly for the sum)
//   acc[c]   = acc[c] * exp(m - m_new) + sum_j p_j * v_j[c]   (p_j handed to every lane by __shfl_sync)
// so the rescale by exp(m - m_new) happens once per 32 keys (one thread per row would do it per key).
// K is read once per row instead of twice.
//
// Why a butterfly: after `x = op(x, shfl_xor(x, 16))` lanes j and j^16 hold the same value; after
// offsets 8, 4, 2, 1 all 32 lanes hold the reduction of all 32, with no lane left out (a tree
// reduction with __shfl_down_sync would leave the result in lane 0 only).
//
// Memory: reads of V are coalesced (lanes read consecutive columns of one row), reads of q are
// broadcasts (all lanes read the same address, one transaction). Reads of K are not coalesced:
// lane j reads row j, so the 32 lanes touch 32 rows d floats apart, and every warp re-reads all of
// K and V from global memory. Step 03 stages K and V tiles in shared memory, shared by many rows.
//
// Layout: Q (H, n_q, d), K and V (H, n_k, d), O (H, n_q, d), row-major float32, H = gridDim.y heads.
// Launch (course.tracks.cuda): blockDim.x = 32 * rows per block, gridDim.x = ceil(n_q / rows).
//
// Your part: the `chunk_update` region of warp_attention, the first function below. The warp_max and
// warp_sum shuffles it calls are given, under the "given code" line at the end of the file.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 02 --track cuda

#define MAX_HEAD_DIM 128
#define WARP 32
#define FULL_MASK 0xffffffffu
// -inf from its bit pattern: NVRTC (the GPU tier's compiler) has no INFINITY macro.
#define NEG_INF __uint_as_float(0xff800000u)
#define SLOTS (MAX_HEAD_DIM / WARP)  // accumulator columns per lane

// Given below: every lane ends up with the max (sum) of the 32 lanes' values.
__device__ __forceinline__ float warp_max(float x);
__device__ __forceinline__ float warp_sum(float x);

extern "C" __global__ void warp_attention(const float* __restrict__ q, const float* __restrict__ k,
                                          const float* __restrict__ v, float* __restrict__ o,
                                          int n_q, int n_k, int d, float scale) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    // The whole warp shares `row`, so it leaves together: every shuffle below has all 32 lanes.
    if (row >= n_q) return;
    const size_t head = blockIdx.y;
    q += (head * n_q + row) * d;
    k += head * n_k * d;
    v += head * n_k * d;

    float m = NEG_INF, l = 0.0f;
    float acc[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) acc[s] = 0.0f;

    // region: chunk_update
    // BEGIN SOLUTION
    for (int j0 = 0; j0 < n_k; j0 += WARP) {
        const int j = j0 + lane;  // this lane's key
        float score = NEG_INF;  // lanes past the last key take part with a weight of exp(-inf) = 0
        if (j < n_k) {
            const float* k_row = k + (size_t)j * d;
            float dot = 0.0f;
            for (int c = 0; c < d; ++c) dot += q[c] * k_row[c];
            score = dot * scale;
        }
        const float m_new = fmaxf(m, warp_max(score));  // finite: the chunk has at least one key
        const float p = expf(score - m_new);
        const float correction = expf(m - m_new);       // 0 on the first chunk, where m = -inf
        l = l * correction + warp_sum(p);
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) acc[s] *= correction;
        const int keys = min(WARP, n_k - j0);
        for (int t = 0; t < keys; ++t) {
            const float p_t = __shfl_sync(FULL_MASK, p, t);  // lane t's weight, to every lane
            const float* v_row = v + (size_t)(j0 + t) * d;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const int c = lane + s * WARP;
                if (c < d) acc[s] += p_t * v_row[c];
            }
        }
        m = m_new;
    }
    // END SOLUTION
    // endregion: chunk_update

    float* o_row = o + (head * n_q + row) * d;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int c = lane + s * WARP;
        if (c < d) o_row[c] = acc[s] / l;
    }
}

// ---- given code below this line: you do not edit it ----

// region: warp_reductions
// Every lane ends up with the max (sum) of the 32 lanes' values.
__device__ __forceinline__ float warp_max(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}
// endregion: warp_reductions
