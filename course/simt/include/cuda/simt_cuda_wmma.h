// nvcuda::wmma (<mma.h>): warp-wide matrix multiply-accumulate on fragments, for the half shapes
// 16x16x16, 32x8x16 and 8x32x16 with float or half accumulators.
//
// Which matrix elements a lane holds in `x[]` is unspecified on a GPU and differs between GPU
// generations; code may only do the same thing to every element (scale, convert, fill). Here element
// e of lane l is element number l * num_elements + e of the matrix in row-major order, whatever the
// fragment's layout (the layout says only how load_matrix_sync reads memory).
//
// As on a GPU, every wmma call is a warp operation: all 32 lanes of the warp must make it with the
// same arguments; the pointer must be 256-bit (32-byte) aligned and ldm a multiple of 16 bytes (8
// halves, 4 floats). Breaking a rule stops the launch with a sentence.
//
// Included from <mma.h>, usually after simt_cuda.h has defined the CUDA keyword macros: nothing
// here may use threadIdx, printf or the like.
#pragma once
#pragma GCC system_header

#include "simt_cuda.h"
#include "simt_cuda_fp16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

}  // namespace wmma
}  // namespace nvcuda

namespace simt {
namespace cuda {
namespace wmma_detail {

namespace w = ::nvcuda::wmma;

// Rows and columns of the matrix a fragment holds.
template <class Use, int M, int N, int K> struct Dims { static constexpr int rows = 0, cols = 0; };
template <int M, int N, int K> struct Dims<w::matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct Dims<w::matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct Dims<w::accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <class T> struct Same { using type = T; };  // keeps a parameter out of template deduction

// What each lane hands to the check that the warp agrees on a load's or store's arguments.
struct IoLane {
    const void *ptr;
    unsigned ldm;
    int layout;  // 0 row-major, 1 column-major
    const void *pc;
    const char *what;
};

[[noreturn]] inline void fail_not_whole_warp(const char *what, const void *pc, uint32_t part, uint32_t lanes_in_warp) {
    const ThreadCtx &t = current();
    if (lanes_in_warp < kWarpSize)
        fail(pc, "%s in warp %u of block (%u,%u,%u): wmma operations need all 32 lanes of a warp, but this warp "
             "has only %u (the block's thread count is not a multiple of 32).",
             what, t.warp, t.block_idx.x, t.block_idx.y, t.block_idx.z, lanes_in_warp);
    char gone[128];
    cuda::detail::lane_list(~part, gone, sizeof gone);
    fail(pc, "%s in warp %u of block (%u,%u,%u): wmma operations need all 32 lanes of the warp, but lanes %s "
         "have already returned.", what, t.warp, t.block_idx.x, t.block_idx.y, t.block_idx.z, gone);
}

inline unsigned first_lane(uint32_t part) { return unsigned(__builtin_ctz(part)); }

template <int kind>  // one instance per wmma function, so that a mix-up is a divergence
SIMT_CUDA_COMPUTE void io_compute(const void *const *in, void *const *, uint32_t part, uint32_t lanes_in_warp) {
    const unsigned first = first_lane(part);
    const auto &a = *static_cast<const IoLane *>(in[first]);
    if (part != 0xffffffffu) fail_not_whole_warp(a.what, a.pc, part, lanes_in_warp);
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        const auto &b = *static_cast<const IoLane *>(in[lane]);
        if (b.ptr != a.ptr || b.ldm != a.ldm || b.layout != a.layout)
            fail(b.pc, "%s in warp %u: lane %u passes (ptr %p, ldm %u%s) but lane %u passes (ptr %p, ldm %u%s); "
                 "every lane of the warp must pass the same arguments.",
                 a.what, current().warp, lane, b.ptr, b.ldm, b.layout ? ", col-major" : "", first, a.ptr, a.ldm,
                 a.layout ? ", col-major" : "");
    }
}

// Load (store = false) or store this lane's part of a rows x cols matrix at `base`.
template <int kind, bool store, class T>
SIMT_CUDA_UNINSTRUMENTED void matrix_io(const char *what, T *base, unsigned ldm, bool col_major, int rows, int cols,
                                        T *elems, const void *pc, const char *file, int line) {
    if (SIMT_ADDRESS_BITS(base) % 32 != 0)
        fail(pc, "%s: misaligned pointer %p (%u bytes past a 32-byte boundary): wmma loads and stores need a "
             "256-bit (32-byte) aligned address.",
             what, static_cast<const void *>(base), unsigned(reinterpret_cast<uintptr_t>(base) % 32));
    const unsigned step = 16 / sizeof(T);
    if (ldm % step != 0)
        fail(pc, "%s: ldm = %u is not a multiple of %u: the leading dimension must be a multiple of 16 bytes "
             "(%u %s elements).", what, ldm, step, step, sizeof(T) == 2 ? "__half" : "float");
    const int per = rows * cols / int(kWarpSize);
    const int first = int(current().lane) * per;  // this lane's first element, row-major
    // For racecheck, a load reads at the moment the lane reaches it, before the lanes meet: the
    // meeting (.sync) waits for the lanes but orders no memory, so data other lanes wrote just
    // before needs a __syncwarp() in between. A store is recorded after the meeting, so a lane
    // reading it without a __syncwarp() afterwards is caught too.
    auto note = [&]() {
#if SIMT_CHECKED
        const int access = store ? kWrite : kRead;
        if (!col_major)  // the lane's elements lie in one row (per divides cols for every shape)
            note_access(base + size_t(first / cols) * ldm + size_t(first % cols), per * sizeof(T), access, pc);
        else
            for (int e = 0; e < per; ++e)
                note_access(base + size_t((first + e) % cols) * ldm + size_t((first + e) / cols), sizeof(T), access,
                            pc);
#endif
    };
    if (!store) note();
    const IoLane me{base, ldm, col_major ? 1 : 0, pc, what};
    warp_collective(what, 0xffffffffu, &me, nullptr, &io_compute<kind>, file, line);
    if (store) note();
    for (int e = 0; e < per; ++e) {
        const int r = (first + e) / cols, c = (first + e) % cols;
        T *p = base + (col_major ? size_t(c) * ldm + size_t(r) : size_t(r) * ldm + size_t(c));
        if (store) *p = elems[e];
        else elems[e] = *p;
    }
}

// The entry points of the public functions (which call them in no tail position): SIMT_PC() here
// is the kernel's line.
template <int kind, bool store, class T>
SIMT_RUNTIME_FN void matrix_io_entry(const char *what, T *base, unsigned ldm, bool col_major, int rows, int cols,
                                     T *elems, const char *file, int line) {
    matrix_io<kind, store, T>(what, base, ldm, col_major, rows, cols, elems, SIMT_PC(), file, line);
}

template <class Tc> struct MmaLane {
    const __half *a;
    const __half *b;
    const Tc *c;
    const void *pc;
};

// D = A B + C for the whole warp: gather every lane's pieces, multiply in float (products of halves
// are exact in float), sum over k in order, add C, round to D's type, scatter.
template <int M, int N, int K, class Td, class Tc>
SIMT_CUDA_COMPUTE void mma_compute(const void *const *in, void *const *out, uint32_t part, uint32_t lanes_in_warp) {
    if (part != 0xffffffffu) {
        const unsigned first = first_lane(part);
        fail_not_whole_warp("wmma::mma_sync()", static_cast<const MmaLane<Tc> *>(in[first])->pc, part, lanes_in_warp);
    }
    constexpr int pa = M * K / 32, pb = K * N / 32, pc = M * N / 32;
    float A[M * K], B[K * N], C[M * N];
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        const auto &l = *static_cast<const MmaLane<Tc> *>(in[lane]);
        for (int e = 0; e < pa; ++e) A[lane * pa + e] = float(l.a[e]);
        for (int e = 0; e < pb; ++e) B[lane * pb + e] = float(l.b[e]);
        for (int e = 0; e < pc; ++e) C[lane * pc + e] = float(l.c[e]);
    }
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        Td *d = static_cast<Td *>(out[lane]);
        for (int e = 0; e < pc; ++e) {
            const int i = (int(lane) * pc + e) / N, j = (int(lane) * pc + e) % N;
            float sum = 0.0f;
            for (int k = 0; k < K; ++k) sum += A[i * K + k] * B[k * N + j];
            d[e] = Td(sum + C[i * N + j]);
        }
    }
    count_matrix_op(M, N, K, kMatrixF16, kMatrixF16, matrix_element<Tc>(), matrix_element<Td>(),
                    static_cast<const MmaLane<Tc> *>(in[first_lane(part)])->pc);
}

template <int M, int N, int K, class Td, class Tc>
SIMT_RUNTIME_FN void mma_entry(Td *d, const __half *a, const __half *b, const Tc *c, const char *file, int line) {
    const MmaLane<Tc> me{a, b, c, SIMT_PC()};
    warp_collective("wmma::mma_sync()", 0xffffffffu, &me, d, &mma_compute<M, N, K, Td, Tc>, file, line);
}

}  // namespace wmma_detail
}  // namespace cuda
}  // namespace simt

namespace nvcuda {
namespace wmma {

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
    static constexpr bool kAccumulator = std::is_same<Use, accumulator>::value;
    static_assert(std::is_same<Use, matrix_a>::value || std::is_same<Use, matrix_b>::value || kAccumulator,
                  "a wmma fragment is a matrix_a, a matrix_b or an accumulator");
    static_assert(K == 16 && ((M == 16 && N == 16) || (M == 32 && N == 8) || (M == 8 && N == 32)),
                  "wmma shapes for half inputs: 16x16x16, 32x8x16 or 8x32x16");
    static_assert(kAccumulator ? (std::is_same<T, float>::value || std::is_same<T, __half>::value)
                               : std::is_same<T, __half>::value,
                  "matrix_a and matrix_b fragments hold __half; accumulators hold float or __half");
    static_assert(kAccumulator ? std::is_same<Layout, void>::value
                               : (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value),
                  "matrix_a and matrix_b fragments need a layout (wmma::row_major or wmma::col_major); an "
                  "accumulator takes none (its layout is given to load_matrix_sync and store_matrix_sync)");
    using D = ::simt::cuda::wmma_detail::Dims<Use, M, N, K>;

public:
    enum { num_elements = D::rows * D::cols / 32 };
    using element_type = T;
    using storage_element_type = T;
    T x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f,
                          const typename ::simt::cuda::wmma_detail::Same<T>::type &value) {
    for (int e = 0; e < fragment<Use, M, N, K, T, Layout>::num_elements; ++e) f.x[e] = value;
}

template <class Use, int M, int N, int K, class T, class Layout>
SIMT_CUDA_WRAPPER void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f,
                                        const typename ::simt::cuda::wmma_detail::Same<T>::type *ptr, unsigned ldm,
                                        SIMT_HERE) {
    static_assert(!std::is_same<Use, accumulator>::value,
                  "an accumulator is loaded with a memory layout: load_matrix_sync(frag, ptr, ldm, wmma::mem_row_major)");
    using D = ::simt::cuda::wmma_detail::Dims<Use, M, N, K>;
    ::simt::cuda::wmma_detail::matrix_io_entry<0, false, T>("wmma::load_matrix_sync()", const_cast<T *>(ptr), ldm,
                                                            std::is_same<Layout, col_major>::value, D::rows, D::cols,
                                                            f.x, simt_file, simt_line);
    SIMT_CUDA_AFTER_CALL();
}

template <int M, int N, int K, class T>
SIMT_CUDA_WRAPPER void load_matrix_sync(fragment<accumulator, M, N, K, T> &f,
                                        const typename ::simt::cuda::wmma_detail::Same<T>::type *ptr, unsigned ldm,
                                        layout_t layout, SIMT_HERE) {
    ::simt::cuda::wmma_detail::matrix_io_entry<1, false, T>("wmma::load_matrix_sync()", const_cast<T *>(ptr), ldm,
                                                            layout == mem_col_major, M, N, f.x, simt_file,
                                                            simt_line);
    SIMT_CUDA_AFTER_CALL();
}

template <int M, int N, int K, class T>
SIMT_CUDA_WRAPPER void store_matrix_sync(typename ::simt::cuda::wmma_detail::Same<T>::type *ptr,
                                         const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t layout,
                                         SIMT_HERE) {
    ::simt::cuda::wmma_detail::matrix_io_entry<2, true, T>("wmma::store_matrix_sync()", ptr, ldm,
                                                           layout == mem_col_major, M, N, const_cast<T *>(f.x),
                                                           simt_file, simt_line);
    SIMT_CUDA_AFTER_CALL();
}

template <int M, int N, int K, class LayoutA, class LayoutB, class Td, class Tc>
SIMT_CUDA_WRAPPER void mma_sync(fragment<accumulator, M, N, K, Td> &d,
                                const fragment<matrix_a, M, N, K, __half, LayoutA> &a,
                                const fragment<matrix_b, M, N, K, __half, LayoutB> &b,
                                const fragment<accumulator, M, N, K, Tc> &c, SIMT_HERE) {
    ::simt::cuda::wmma_detail::mma_entry<M, N, K, Td, Tc>(d.x, a.x, b.x, c.x, simt_file, simt_line);
    SIMT_CUDA_AFTER_CALL();
}

}  // namespace wmma
}  // namespace nvcuda
