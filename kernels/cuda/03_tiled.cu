// Step 03 · tiling: a block of rows shares each K/V tile through shared memory, and writes LSE.
//
// What changed from 02: in step 02 every warp (one query row) read all of K and V from global memory
// by itself, so K and V crossed the memory bus n_q times. Now a block of block_m warps owns block_m
// consecutive query rows, and the keys are streamed through shared memory in tiles of block_n rows:
//   1. the block copies its Q tile (block_m x d) into shared memory once;
//   2. for each K/V tile: all threads copy it into shared memory together (thread t copies elements
//      t, t + blockDim.x, ...: neighbouring threads read neighbouring addresses, so the copy is
//      coalesced), __syncthreads(), then every warp runs step 02's chunk update on its own row,
//      reading K and V from shared memory;
//   3. each warp writes its row of O and its row's LSE = m + log(l) (natural log), the one number per
//      row that the backward pass needs to rebuild P without storing it. A row that saw no key has
//      l = 0: it gets O = 0 and LSE = -inf (step 06's causal mask makes such rows).
// K and V now cross the bus n_q / block_m times instead of n_q times.
//
// Two barriers per tile, and why both are needed: the one after the copy makes the tile complete
// before any warp reads it; the one before the copy (at the top of the loop) keeps a fast warp from
// overwriting the tile while slower warps are still reading the previous one. Step 04 gets this down
// to one barrier per tile with two buffers.
//
// Shared memory is `extern __shared__`: its size is not known when the kernel is compiled, but given
// at launch, computed from the tile sizes by the launcher (course.tracks.cuda.forward_config, which
// also refuses a size over the device's limit). The kernel carves it up with the same formula:
//   [ Q tile: block_m x d | K tile: block_n x (d + 1) | V tile: block_n x d ]   (floats)
// Why K's rows have one float of padding: lane j reads row j of the K tile, column c, at the same time
// as the other lanes. Shared memory has 32 banks of 4-byte words (word w is in bank w % 32); with rows
// of d = 64 floats all 32 lanes would hit the same bank and wait for each other (a 32-way bank
// conflict). With rows of d + 1 floats, lane j's word is in bank (j * (d + 1) + c) % 32: 32 different
// banks. V needs no padding: its reads go along a row (consecutive banks), and Q's are broadcasts.
//
// Layout: Q (H, n_q, d), K and V (H, n_k, d), O (H, n_q, d), LSE (H, n_q), float32, H = gridDim.y.
// Launch: blockDim.x = 32 * block_m, gridDim.x = ceil(n_q / block_m); block_n a multiple of 32.
//
// Your part: the `tile_loop` region of tiled_attention, the first function below. The warp_max and
// warp_sum shuffles it calls are given, under the "given code" line at the end of the file.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 03 --track cuda

#define MAX_HEAD_DIM 128
#define WARP 32
#define FULL_MASK 0xffffffffu
// -inf from its bit pattern: NVRTC (the GPU tier's compiler) has no INFINITY macro.
#define NEG_INF __uint_as_float(0xff800000u)
#define SLOTS (MAX_HEAD_DIM / WARP)  // accumulator columns per lane
#define K_PAD 1                      // floats of padding per K row (see above)

// Given below: every lane ends up with the max (sum) of the 32 lanes' values.
__device__ __forceinline__ float warp_max(float x);
__device__ __forceinline__ float warp_sum(float x);

extern "C" __global__ void tiled_attention(const float* __restrict__ q, const float* __restrict__ k,
                                           const float* __restrict__ v, float* __restrict__ o,
                                           float* __restrict__ lse, int n_q, int n_k, int d, float scale,
                                           int block_n) {
    extern __shared__ float smem[];
    const int block_m = blockDim.x / WARP;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int row0 = blockIdx.x * block_m;
    const int row = row0 + warp;  // this warp's query row (may be past n_q in the last block)
    const size_t head = blockIdx.y;
    q += head * n_q * d;
    k += head * n_k * d;
    v += head * n_k * d;

    // region: shared_layout
    const int ldk = d + K_PAD;
    float* q_tile = smem;                    // block_m x d
    float* k_tile = q_tile + block_m * d;    // block_n x ldk
    float* v_tile = k_tile + block_n * ldk;  // block_n x d
    // endregion: shared_layout

    // Rows past n_q are zeros: their warps compute on them (they must reach every __syncthreads)
    // and write nothing.
    for (int i = threadIdx.x; i < block_m * d; i += blockDim.x) {
        const int r = row0 + i / d;
        q_tile[i] = r < n_q ? q[(size_t)r * d + i % d] : 0.0f;
    }
    const float* q_row = q_tile + warp * d;

    float m = NEG_INF, l = 0.0f;
    float acc[SLOTS];
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) acc[s] = 0.0f;

    // region: tile_loop
    // BEGIN SOLUTION
    for (int j0 = 0; j0 < n_k; j0 += block_n) {
        __syncthreads();  // every warp is done with the previous tile (and Q is complete)
        for (int i = threadIdx.x; i < block_n * d; i += blockDim.x) {
            const int r = i / d, c = i % d, key = j0 + r;
            const bool in = key < n_k;  // the last tile may run past the last key
            k_tile[r * ldk + c] = in ? k[(size_t)key * d + c] : 0.0f;
            v_tile[r * d + c] = in ? v[(size_t)key * d + c] : 0.0f;
        }
        __syncthreads();  // the tile is complete

        const int keys = min(block_n, n_k - j0);
        for (int c0 = 0; c0 < keys; c0 += WARP) {
            const int jj = c0 + lane;  // this lane's key within the tile
            float score = NEG_INF;
            if (jj < keys) {
                const float* k_row = k_tile + jj * ldk;
                float dot = 0.0f;
                for (int c = 0; c < d; ++c) dot += q_row[c] * k_row[c];
                score = dot * scale;
            }
            const float m_new = fmaxf(m, warp_max(score));
            const float p = expf(score - m_new);
            const float correction = expf(m - m_new);
            l = l * correction + warp_sum(p);
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) acc[s] *= correction;
            const int chunk = min(WARP, keys - c0);
            for (int t = 0; t < chunk; ++t) {
                const float p_t = __shfl_sync(FULL_MASK, p, t);
                const float* v_row = v_tile + (c0 + t) * d;
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const int c = lane + s * WARP;
                    if (c < d) acc[s] += p_t * v_row[c];
                }
            }
            m = m_new;
        }
    }
    // END SOLUTION
    // endregion: tile_loop

    // region: epilogue
    if (row < n_q) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row that saw no key: O = 0
        float* o_row = o + (head * n_q + row) * d;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const int c = lane + s * WARP;
            if (c < d) o_row[c] = acc[s] * inv_l;
        }
        if (lane == 0) lse[head * n_q + row] = l > 0.0f ? m + logf(l) : NEG_INF;
    }
    // endregion: epilogue
}

// ---- given code below this line: you do not edit it ----

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}
