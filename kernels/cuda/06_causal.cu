// Step 06 · causal attention: skip the future, mask only the diagonal tiles.
//
// What changed from 05: with causal=1, query i may only see keys j <= i + (n_k - n_q). The offset
// n_k - n_q aligns the mask bottom-right, the course's convention (course/reference.py): the last
// query sees every key, as when the queries are the newest tokens at the end of a longer KV cache.
// With n_q = n_k it is the familiar j <= i; with n_q > n_k the first n_q - n_k rows see no key at all,
// and by definition get O = 0 and LSE = -inf.
//
// Seen as tiles of S, the mask splits the K/V tiles of one block of query rows row0 .. row0+block_m-1
// into three kinds:
//   (a) tiles every row of the block sees entirely (last key <= row0 + offset): no mask at all;
//   (b) tiles the diagonal crosses: some entries visible, some not; only these pay for the
//       element-wise test `j <= i + offset`;
//   (c) tiles no row of the block sees (first key > row0 + block_m - 1 + offset): never loaded,
//       never multiplied; the tile loop stops before them (kv_end below).
// With n_q = n_k = N and square tiles that is 1 + 2 + ... + T of T x T tiles: about half the work.
//
// Rows that have seen no visible key yet have m = -inf, and exp(s - m) would be exp(-inf - (-inf))
// = NaN. The softmax subtracts m_use = (m_new == -inf ? 0 : m_new) instead: every p is then
// exp(-inf) = 0 and alpha = exp(-inf - 0) = 0, the row stays at l = 0 and O = 0 until it meets a key.
// (In steps 02-05 every tile had at least one key for every row, so m_new was always finite.)
//
// Everything else (tensor-core matmuls, the spill-scale-reload rescale, ping-pong buffers, padding)
// is step 05's; causal=0 gives step 05's results.
//
// Layout: Q, K, V (H, n, d) float16; O (H, n_q, d) and LSE (H, n_q) float32; H = gridDim.y.
// Launch: blockDim.x = 32 * block_m / 16, gridDim.x = ceil(n_q / block_m); block_n % 16 == 0, d % 16 == 0.
//
// Your part: the `tile_range` and `softmax_and_rescale` regions of causal_attention, the first function below. The
// carve and load_rows helpers it calls are given, under the "given code" line at the end.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 06 --track cuda

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

extern "C" __global__ void causal_attention(const __half* __restrict__ q, const __half* __restrict__ k,
                                            const __half* __restrict__ v, float* __restrict__ o,
                                            float* __restrict__ lse, int n_q, int n_k, int d, float scale,
                                            int block_n, int causal) {
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
    const int row = row0 + warp * 16 + my_row;  // the query row of the lane pair

    // region: tile_range
    const int offset = n_k - n_q;  // query i sees keys j <= i + offset
    int kv_end = n_k;              // the tile loop visits keys 0 .. kv_end - 1
    // BEGIN SOLUTION
    // Keys past the block's last row's last visible key are never needed: tiles of kind (c).
    if (causal) kv_end = max(0, min(n_k, row0 + block_m + offset));
    // END SOLUTION
    // endregion: tile_range
    const int n_tiles = (kv_end + block_n - 1) / block_n;  // 0 when no row of the block sees any key

    load_rows(q_tile, ldh, q, row0, block_m, n_q, d);
    if (n_tiles > 0) {
        load_rows(k_bufs, ldh, k, 0, block_n, n_k, d);
        load_rows(v_bufs, ldh, v, 0, block_n, n_k, d);
    }
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
        // Kind (b): the diagonal crosses this tile (its last key is past the block's first row's last).
        const bool diagonal = causal && j0 + block_n - 1 > row0 + offset;

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
        // 2. Online softmax on row `my_row`, shared by the lane pair; the fine mask only on diagonal tiles.
        const float* s_row = s_strip + my_row * lds;
        __half* p_row = p_strip + my_row * ldp;
        const int visible = diagonal ? min(keys, row + offset - j0 + 1) : keys;  // columns c < visible count
        float tile_max = NEG_INF;
        for (int c = half_id; c < visible; c += 2) tile_max = fmaxf(tile_max, s_row[c] * scale);
        tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL_MASK, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        const float m_use = m_new == NEG_INF ? 0.0f : m_new;  // no key seen yet: keep every exp() at 0
        float sum = 0.0f;
        for (int c = half_id; c < block_n; c += 2) {
            const __half p = __float2half(c < visible ? expf(s_row[c] * scale - m_use) : 0.0f);
            p_row[c] = p;
            sum += __half2float(p);
        }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        const float alpha = expf(m - m_use);
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
