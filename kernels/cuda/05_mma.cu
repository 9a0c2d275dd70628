// Step 05 · both matmuls on tensor cores: nvcuda::wmma, half in, float accumulate.
//
// What changed from 04: the two products of a tile, S = Q Kᵀ and O += P V, were dot products done by
// each lane in float. Tensor cores multiply whole 16 x 16 x 16 tiles per warp per instruction, from
// half (fp16) inputs, accumulating in float; nvcuda::wmma exposes them as *fragments*: a 16 x 16 tile
// spread over the 32 lanes' registers (8 elements each), loaded from memory (load_matrix_sync),
// multiplied (mma_sync: D = A B + C) and stored (store_matrix_sync) by the whole warp together.
//
// Work split: a warp owns a strip of 16 query rows (block_m = 16 x warps). For each K/V tile:
//   1. S strip (16 x block_n) = Q strip · K tileᵀ, 16 key columns at a time, summed over d in steps
//      of 16; each 16 x 16 block of S is stored to the warp's S strip in shared memory. Kᵀ costs
//      nothing: the K tile is stored row-major (key, column), which read column-major is Kᵀ, so K's
//      fragment is a matrix_b loaded with wmma::col_major.
//   2. The online softmax on the S strip, by lane pairs: lanes 2r and 2r + 1 own row r, take every
//      other column, and combine their max and sum with one __shfl_xor_sync(…, 1). P = exp(S - m_new)
//      goes to the warp's P strip as half (the next tensor-core input); the row sum l adds the halves
//      as rounded, so the normalisation matches the weights actually multiplied.
//   3. The rescale. O's accumulator fragments are opaque: which (row, column) a lane's x[e] holds is
//      not specified (it differs between GPU generations), so "multiply row r by alpha_r" cannot be
//      done in registers. It goes through shared memory, where positions are known: spill each O
//      fragment (store_matrix_sync), __syncwarp(), each lane pair scales its row by
//      alpha = exp(m_old - m_new), __syncwarp(), reload (load_matrix_sync). (The __syncwarp()s order
//      the lanes' shared-memory accesses: a lane must not read an element another lane has not
//      written yet.) The fragments themselves live in registers between tiles: acc[] has a fixed
//      size and every index is a compile-time constant after unrolling, like acc[] in steps 02-03.
//   4. O += P V on tensor cores, from the P strip (matrix_a, row-major) and the V tile (matrix_b,
//      row-major), 16 keys at a time.
// The copy loop (16-byte vectors, now 8 halves each, two buffers in ping-pong, one barrier per
// tile) is step 04's.
//
// Ragged edges: wmma works on whole 16 x 16 tiles, so tails are padded, never read out of bounds.
// Keys past n_k in the last tile are zero rows of K and V (their S columns are masked to weight 0,
// and a zero V row adds nothing); query rows past n_q are zero rows of Q, computed and not written.
// D must be a multiple of 16 (the launcher refuses others).
//
// wmma's rules: every lane of the warp makes every wmma call (so no lane returns early); pointers
// are 32-byte aligned and leading dimensions (ldm) a multiple of 16 bytes. Rows in shared memory
// are padded by 16 bytes (8 halves, 4 floats), which keeps ldm legal, keeps each 16-row region a
// multiple of 32 bytes long, and shifts consecutive rows to different banks.
//
// Shared memory (each region starts 32-byte aligned):
//   [ Q tile: block_m x (d + 8) half | K buffers: 2 x block_n x (d + 8) half | V buffers: same |
//     per warp: S strip 16 x (block_n + 4) float, P strip 16 x (block_n + 8) half,
//     O strip 16 x (d + 4) float ]
// Layout: Q, K, V (H, n, d) float16; O (H, n_q, d) and LSE (H, n_q) float32; H = gridDim.y.
// Launch: blockDim.x = 32 * block_m / 16, gridDim.x = ceil(n_q / block_m); block_n % 16 == 0, d % 16 == 0.
//
// Your part: the `softmax_and_rescale` region of wmma_attention, the first function below. The
// carve and load_rows helpers it calls are given, under the "given code" line at the end.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 05 --track cuda

#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define WARP 32
#define FULL_MASK 0xffffffffu
// -inf from its bit pattern: NVRTC (the GPU tier's compiler) has no INFINITY macro.
#define NEG_INF __uint_as_float(0xff800000u)
#define MAX_HEAD_DIM 128
#define FRAGS (MAX_HEAD_DIM / 16)  // O accumulator fragments per warp (16 columns each)
#define HALF_PAD 8
#define FLOAT_PAD 4

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> FragKt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> FragV;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragAcc;

// Given below: carve hands out the next region of shared memory, load_rows copies rows of a half
// matrix into shared memory (rows past the end become zeros).
template <class T> __device__ __forceinline__ T* carve(unsigned char*& cursor, int count);
__device__ __forceinline__ void load_rows(__half* dst, int ld, const __half* src, int row0, int rows, int n, int d);

extern "C" __global__ void wmma_attention(const __half* __restrict__ q, const __half* __restrict__ k,
                                          const __half* __restrict__ v, float* __restrict__ o,
                                          float* __restrict__ lse, int n_q, int n_k, int d, float scale,
                                          int block_n) {
    extern __shared__ __align__(32) unsigned char smem[];
    const int warps = blockDim.x / WARP, block_m = 16 * warps;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int row0 = blockIdx.x * block_m;
    const size_t head = blockIdx.y;
    q += head * n_q * d;
    k += head * n_k * d;
    v += head * n_k * d;

    // region: shared_layout
    const int ldh = d + HALF_PAD, lds = block_n + FLOAT_PAD, ldp = block_n + HALF_PAD, ldo = d + FLOAT_PAD;
    unsigned char* cursor = smem;
    __half* q_tile = carve<__half>(cursor, block_m * ldh);
    __half* k_bufs = carve<__half>(cursor, 2 * block_n * ldh);  // buffer b starts at k_bufs + b * kv_size
    __half* v_bufs = carve<__half>(cursor, 2 * block_n * ldh);
    float* s_strip = carve<float>(cursor, warps * 16 * lds) + warp * 16 * lds;    // this warp's 16 rows
    __half* p_strip = carve<__half>(cursor, warps * 16 * ldp) + warp * 16 * ldp;
    float* o_strip = carve<float>(cursor, warps * 16 * ldo) + warp * 16 * ldo;
    const int kv_size = block_n * ldh;
    // endregion: shared_layout
    const __half* q_strip = q_tile + warp * 16 * ldh;
    const int my_row = lane / 2, half_id = lane % 2;  // the lane pair (2r, 2r + 1) owns strip row r

    FragAcc acc[FRAGS];
#pragma unroll
    for (int f = 0; f < FRAGS; ++f) wmma::fill_fragment(acc[f], 0.0f);
    float m = NEG_INF, l = 0.0f;  // the running max and sum of row `my_row` (same in both lanes of the pair)
    const int n_tiles = (n_k + block_n - 1) / block_n;

    load_rows(q_tile, ldh, q, row0, block_m, n_q, d);
    load_rows(k_bufs, ldh, k, 0, block_n, n_k, d);
    load_rows(v_bufs, ldh, v, 0, block_n, n_k, d);
    __syncthreads();
    for (int t = 0; t < n_tiles; ++t) {
        const int cur = t % 2, j0 = t * block_n;
        if (t + 1 < n_tiles) {  // step 04's ping-pong: the other buffer is free
            load_rows(k_bufs + (cur ^ 1) * kv_size, ldh, k, j0 + block_n, block_n, n_k, d);
            load_rows(v_bufs + (cur ^ 1) * kv_size, ldh, v, j0 + block_n, block_n, n_k, d);
        }
        const __half* k_tile = k_bufs + cur * kv_size;
        const __half* v_tile = v_bufs + cur * kv_size;
        const int keys = min(block_n, n_k - j0);

        // region: scores
        // 1. S = Q Kᵀ for this warp's 16 rows.
        for (int n0 = 0; n0 < block_n; n0 += 16) {
            FragAcc s;
            wmma::fill_fragment(s, 0.0f);
            for (int c0 = 0; c0 < d; c0 += 16) {
                FragA a;
                FragKt b;
                wmma::load_matrix_sync(a, q_strip + c0, ldh);
                wmma::load_matrix_sync(b, k_tile + n0 * ldh + c0, ldh);
                wmma::mma_sync(s, a, b, s);
            }
            wmma::store_matrix_sync(s_strip + n0, s, lds, wmma::mem_row_major);
        }
        __syncwarp();  // the S strip is complete before lanes read other lanes' elements
        // endregion: scores

        // region: softmax_and_rescale
        // BEGIN SOLUTION
        // 2. Online softmax on row `my_row`, shared by the lane pair.
        const float* s_row = s_strip + my_row * lds;
        __half* p_row = p_strip + my_row * ldp;
        float tile_max = NEG_INF;
        for (int c = half_id; c < keys; c += 2) tile_max = fmaxf(tile_max, s_row[c] * scale);
        tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL_MASK, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        float sum = 0.0f;
        for (int c = half_id; c < block_n; c += 2) {
            const __half p = __float2half(c < keys ? expf(s_row[c] * scale - m_new) : 0.0f);
            p_row[c] = p;
            sum += __half2float(p);
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        const float alpha = expf(m - m_new);
        l = l * alpha + sum;
        m = m_new;

        // 3. Rescale the accumulator: spill, scale rows in shared memory, reload.
        float* o_row = o_strip + my_row * ldo;
#pragma unroll
        for (int f = 0; f < FRAGS; ++f)
            if (f * 16 < d) wmma::store_matrix_sync(o_strip + f * 16, acc[f], ldo, wmma::mem_row_major);
        __syncwarp();
        for (int c = half_id; c < d; c += 2) o_row[c] *= alpha;
        __syncwarp();
#pragma unroll
        for (int f = 0; f < FRAGS; ++f)
            if (f * 16 < d) wmma::load_matrix_sync(acc[f], o_strip + f * 16, ldo, wmma::mem_row_major);
        // END SOLUTION
        // endregion: softmax_and_rescale

        // region: pv
        // 4. O += P V.
        for (int k0 = 0; k0 < block_n; k0 += 16) {
            FragA p;
            wmma::load_matrix_sync(p, p_strip + k0, ldp);
#pragma unroll
            for (int f = 0; f < FRAGS; ++f) {
                if (f * 16 < d) {
                    FragV b;
                    wmma::load_matrix_sync(b, v_tile + k0 * ldh + f * 16, ldh);
                    wmma::mma_sync(acc[f], p, b, acc[f]);
                }
            }
        }
        // endregion: pv
        __syncthreads();  // the next tile is complete; this one's buffer is free (step 04)
    }

    // region: epilogue
    // O = acc / l, through the O strip once more (a fragment's rows are not known in registers).
#pragma unroll
    for (int f = 0; f < FRAGS; ++f)
        if (f * 16 < d) wmma::store_matrix_sync(o_strip + f * 16, acc[f], ldo, wmma::mem_row_major);
    __syncwarp();
    const int row = row0 + warp * 16 + my_row;
    if (row < n_q) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        const float* o_row = o_strip + my_row * ldo;
        float* out = o + (head * n_q + row) * d;
        for (int c = half_id; c < d; c += 2) out[c] = o_row[c] * inv_l;
        if (half_id == 0) lse[head * n_q + row] = l > 0.0f ? m + logf(l) : NEG_INF;
    }
    // endregion: epilogue
}

// ---- given code below this line: you do not edit it ----

// The next `count` elements of type T from the shared-memory cursor. Every region's size is a
// multiple of 32 bytes (16 rows of a padded row length), so every region stays 32-byte aligned.
template <class T> __device__ __forceinline__ T* carve(unsigned char*& cursor, int count) {
    T* region = reinterpret_cast<T*>(cursor);
    cursor += count * sizeof(T);
    return region;
}

// Copy rows row0 .. row0 + rows - 1 of a (n, d) half matrix into shared rows of ld halves, 8 halves
// (16 bytes) per access; rows past n become zeros.
__device__ __forceinline__ void load_rows(__half* dst, int ld, const __half* src, int row0, int rows, int n, int d) {
    const int d8 = d / 8;
    for (int i = threadIdx.x; i < rows * d8; i += blockDim.x) {
        const int r = i / d8, c8 = i % d8;
        uint4 chunk = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < n) chunk = reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * d)[c8];
        reinterpret_cast<uint4*>(dst + r * ld)[c8] = chunk;
    }
}
