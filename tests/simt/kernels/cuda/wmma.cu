// Conformance kernels for nvcuda::wmma (<mma.h>): 16x16x16 tiles with half inputs.
// Valid CUDA: tests/simt/test_simt_cuda.py also compiles this with nvcc.
#include <mma.h>
using namespace nvcuda;

template <class Layout> struct is_row { static const bool value = false; };
template <> struct is_row<wmma::row_major> { static const bool value = true; };

// D = A B + C with A 16 x K, B K x N, C and D 16 x N (N = 16 * warps); warp w computes column
// tile w. Row-major X[i][j] is x[i * cols + j]; column-major X[i][j] is x[j * rows + i].
template <class LayoutA, class LayoutB>
__device__ void tile_product(const half *a, const half *b, const float *c, float *d, int k_total, int n_total,
                             bool c_col, bool d_col) {
    const int w = threadIdx.x / 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (c_col) wmma::load_matrix_sync(acc, c + w * 16 * 16, 16, wmma::mem_col_major);
    else wmma::load_matrix_sync(acc, c + w * 16, n_total, wmma::mem_row_major);
    for (int k = 0; k < k_total; k += 16) {
        const bool a_row = is_row<LayoutA>::value, b_row = is_row<LayoutB>::value;
        const half *pa = a_row ? a + k : a + k * 16;
        const half *pb = b_row ? b + k * n_total + w * 16 : b + w * 16 * k_total + k;
        wmma::load_matrix_sync(fa, pa, a_row ? k_total : 16);  // @load-a
        wmma::load_matrix_sync(fb, pb, b_row ? n_total : k_total);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    if (d_col) wmma::store_matrix_sync(d + w * 16 * 16, acc, 16, wmma::mem_col_major);
    else wmma::store_matrix_sync(d + w * 16, acc, n_total, wmma::mem_row_major);
}

__global__ void mma_rr(const half *a, const half *b, const float *c, float *d, int k_total, int n_total) {
    tile_product<wmma::row_major, wmma::row_major>(a, b, c, d, k_total, n_total, false, false);
}

__global__ void mma_rc(const half *a, const half *b, const float *c, float *d, int k_total, int n_total) {
    tile_product<wmma::row_major, wmma::col_major>(a, b, c, d, k_total, n_total, true, true);
}

__global__ void mma_cr(const half *a, const half *b, const float *c, float *d, int k_total, int n_total) {
    tile_product<wmma::col_major, wmma::row_major>(a, b, c, d, k_total, n_total, false, true);
}

// A half accumulator: H = (A B) * scale, rounded to half; then F = A B + H in float (a float D
// with a half C). A row-major and B column-major, both 16 x 16.
__global__ void mma_half(const half *a, const half *b, half *h, float *f, float scale) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, half> acc;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> out;
    wmma::fill_fragment(acc, __float2half(0.0f));
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = __hmul(acc.x[e], __float2half(scale));
    wmma::store_matrix_sync(h, acc, 16, wmma::mem_row_major);
    wmma::mma_sync(out, fa, fb, acc);
    wmma::store_matrix_sync(f, out, 16, wmma::mem_row_major);
}

// Loads A (16 x 16) from a + a_off with leading dimension lda: misaligned or bad ldm on request.
__global__ void mma_load_at(const half *a, float *d, int a_off, int lda) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::fill_fragment(fb, __float2half(1.0f));
    wmma::load_matrix_sync(fa, a + a_off, lda);  // @load-at
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// Stores a filled accumulator at d + d_off.
__global__ void store_at(float *d, int d_off) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 2.5f);
    wmma::store_matrix_sync(d + d_off, acc, 16, wmma::mem_row_major);  // @store-at
}

// Half of the warp returns before the warp's wmma calls.
__global__ void wmma_after_exit(float *d) {
    if (threadIdx.x >= 16) return;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);  // @store-exited
}

// Every warp stores its own number into the same tile: warps write the same addresses unordered.
__global__ void store_same_tile(float *d) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, static_cast<float>(threadIdx.x / 32));
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);  // @store-same
}
