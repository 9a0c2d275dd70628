// Step 04 · float4 loads and stores, and two K/V buffers in ping-pong: one barrier per tile.
//
// What changed from 03, two things that both attack the cost of moving tiles:
//
// 1. Vector accesses. A float4 is 16 bytes, and one load of a float4 is one instruction instead of
//    four: the tile copies, the dot products and the output store all move float4s. A float4 access
//    must start at a multiple of 16 bytes, or the GPU faults ("misaligned address"): rows of Q, K, V
//    and O are d floats long, so every row starts 16-byte aligned only when d is a multiple of 4
//    (the launcher refuses any other d), and K's shared rows are padded by 4 floats, not by 1 as in
//    step 03, to keep them aligned. Each lane now owns 4 consecutive columns of its row, c = 4*lane
//    .. 4*lane + 3, as one float4 accumulator (d <= 128 = 32 lanes x 4). Bank conflicts: a warp's
//    16-byte accesses are served 8 lanes at a time; 8 lanes reading rows d + 4 floats apart start
//    4 banks apart (for d a multiple of 32) and together cover all 32 banks once.
//
// 2. Double buffering. Step 03 needed two barriers per tile because the tile it loads into is the one
//    it computes on. With two buffers, tile t is computed on in buffer t % 2 while tile t + 1 is
//    copied into buffer (t + 1) % 2, and a single __syncthreads() at the end of each step suffices:
//      - read-after-write: tile t + 1 was written during step t, and is read during step t + 1; the
//        barrier at the end of step t lies between;
//      - write-after-read: buffer (t + 1) % 2 is written during step t; it was last read during step
//        t - 1 (it held tile t - 1), and the barrier at the end of step t - 1 lies between.
//    And with the copy of tile t + 1 and the compute on tile t between the same two barriers, a warp
//    that has issued its share of the copy goes straight on to compute while other warps' loads are
//    still in flight: the GPU overlaps memory latency with arithmetic across warps.
//    (Ampere's cp.async copies global to shared memory without passing through registers, so that a
//    single thread can have the next tile in flight while it computes; this kernel uses plain loads.)
//
// Shared memory: [ Q tile: block_m x d | K buffers: 2 x block_n x (d + 4) | V buffers: 2 x block_n x d ]
// Layout: Q (H, n_q, d), K and V (H, n_k, d), O (H, n_q, d), LSE (H, n_q), float32, H = gridDim.y.
// Launch: blockDim.x = 32 * block_m, gridDim.x = ceil(n_q / block_m); block_n a multiple of 32; d % 4 == 0.
//
// Your part: the `ping_pong` region of double_buffer_attention, the first function below. The helpers
// it calls (warp_max, warp_sum, dot4, load_tile) are given, under the "given code" line at the end.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 04 --track cuda

#define WARP 32
#define FULL_MASK 0xffffffffu
// -inf from its bit pattern: NVRTC (the GPU tier's compiler) has no INFINITY macro.
#define NEG_INF __uint_as_float(0xff800000u)
#define K_PAD 4  // floats of padding per K row: rows stay 16-byte aligned

// Given below: the warp reductions (every lane ends up with the max or sum of the 32 lanes), a
// float4 dot product, and the copy of one K/V tile into a buffer.
__device__ __forceinline__ float warp_max(float x);
__device__ __forceinline__ float warp_sum(float x);
__device__ __forceinline__ float dot4(float4 a, float4 b);
__device__ __forceinline__ void load_tile(float* k_buf, float* v_buf, const float* k, const float* v, int j0,
                                          int n_k, int d, int block_n);

extern "C" __global__ void double_buffer_attention(const float* __restrict__ q, const float* __restrict__ k,
                                                   const float* __restrict__ v, float* __restrict__ o,
                                                   float* __restrict__ lse, int n_q, int n_k, int d, float scale,
                                                   int block_n) {
    extern __shared__ __align__(16) float smem[];
    const int block_m = blockDim.x / WARP;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int row0 = blockIdx.x * block_m;
    const int row = row0 + warp;
    const int d4 = d / 4, ldk = d + K_PAD;
    const size_t head = blockIdx.y;
    q += head * n_q * d;
    k += head * n_k * d;
    v += head * n_k * d;

    // region: shared_layout
    float* q_tile = smem;                      // block_m x d
    float* k_bufs = q_tile + block_m * d;      // 2 x block_n x ldk: buffer b starts at k_bufs + b * k_size
    float* v_bufs = k_bufs + 2 * block_n * ldk;  // 2 x block_n x d
    const int k_size = block_n * ldk, v_size = block_n * d;
    // endregion: shared_layout

    for (int i = threadIdx.x; i < block_m * d4; i += blockDim.x) {
        const int r = row0 + i / d4;
        float4 qv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < n_q) qv = reinterpret_cast<const float4*>(q + (size_t)r * d)[i % d4];
        reinterpret_cast<float4*>(q_tile)[i] = qv;
    }
    const float4* q_row = reinterpret_cast<const float4*>(q_tile + warp * d);

    float m = NEG_INF, l = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // columns 4*lane .. 4*lane + 3 (lanes < d/4)
    const int n_tiles = (n_k + block_n - 1) / block_n;

    // region: ping_pong
    // BEGIN SOLUTION
    load_tile(k_bufs, v_bufs, k, v, 0, n_k, d, block_n);
    __syncthreads();  // Q and tile 0 are complete
    for (int t = 0; t < n_tiles; ++t) {
        const int cur = t % 2, j0 = t * block_n;
        // Fill the other buffer with tile t + 1. Nobody reads it during this step: it held tile t - 1,
        // whose readers all passed the barrier at the end of step t - 1.
        if (t + 1 < n_tiles)
            load_tile(k_bufs + (cur ^ 1) * k_size, v_bufs + (cur ^ 1) * v_size, k, v, j0 + block_n, n_k, d, block_n);

        const float* k_tile = k_bufs + cur * k_size;
        const float4* v_tile = reinterpret_cast<const float4*>(v_bufs + cur * v_size);
        const int keys = min(block_n, n_k - j0);
        for (int c0 = 0; c0 < keys; c0 += WARP) {
            const int jj = c0 + lane;
            float score = NEG_INF;
            if (jj < keys) {
                const float4* k_row = reinterpret_cast<const float4*>(k_tile + jj * ldk);
                float dot = 0.0f;
                for (int c4 = 0; c4 < d4; ++c4) dot += dot4(q_row[c4], k_row[c4]);
                score = dot * scale;
            }
            const float m_new = fmaxf(m, warp_max(score));
            const float p = expf(score - m_new);
            const float correction = expf(m - m_new);
            l = l * correction + warp_sum(p);
            acc.x *= correction;
            acc.y *= correction;
            acc.z *= correction;
            acc.w *= correction;
            const int chunk = min(WARP, keys - c0);
            for (int u = 0; u < chunk; ++u) {
                const float p_u = __shfl_sync(FULL_MASK, p, u);
                if (lane < d4) {
                    const float4 vv = v_tile[(c0 + u) * d4 + lane];
                    acc.x += p_u * vv.x;
                    acc.y += p_u * vv.y;
                    acc.z += p_u * vv.z;
                    acc.w += p_u * vv.w;
                }
            }
            m = m_new;
        }
        __syncthreads();  // tile t + 1 is complete, and buffer `cur` is free for tile t + 2
    }
    // END SOLUTION
    // endregion: ping_pong

    if (row < n_q) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        if (lane < d4)
            reinterpret_cast<float4*>(o + (head * n_q + row) * d)[lane] =
                make_float4(acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l);
        if (lane == 0) lse[head * n_q + row] = l > 0.0f ? m + logf(l) : NEG_INF;
    }
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

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// region: load_tile
// Copy keys j0 .. j0 + block_n - 1 of K and V into one buffer, a float4 per thread per step; keys
// past n_k become zeros (their scores are masked, and zero rows of V add nothing).
__device__ __forceinline__ void load_tile(float* k_buf, float* v_buf, const float* k, const float* v, int j0,
                                          int n_k, int d, int block_n) {
    const int d4 = d / 4, ldk = d + K_PAD;
    for (int i = threadIdx.x; i < block_n * d4; i += blockDim.x) {
        const int r = i / d4, c4 = i % d4, key = j0 + r;
        float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
        if (key < n_k) {
            kv = reinterpret_cast<const float4*>(k + (size_t)key * d)[c4];
            vv = reinterpret_cast<const float4*>(v + (size_t)key * d)[c4];
        }
        reinterpret_cast<float4*>(k_buf + r * ldk)[c4] = kv;
        reinterpret_cast<float4*>(v_buf + r * d)[c4] = vv;
    }
}
// endregion: load_tile
