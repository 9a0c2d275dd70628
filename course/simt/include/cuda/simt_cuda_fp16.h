// CUDA's half precision (<cuda_fp16.h>): __half is simt::half (binary16, every operation done in
// float and rounded once to nearest-even, which is what a GPU's fp16 unit returns for + - * /).
//
// Included from <cuda_fp16.h> and <mma.h>, usually after simt_cuda.h has defined the CUDA keyword
// macros: nothing here may use threadIdx, printf or the like.
#pragma once
#pragma GCC system_header

#include "simt_cuda.h"

using __half = ::simt::half;
using half = ::simt::half;

// Two halves, 4-byte aligned: copies are checked like float2's.
struct alignas(4) __half2 {
    __half x, y;
    constexpr __half2() : x(), y() {}  // constant-initialised as a __shared__ array (no guard)
    __half2(const __half &a, const __half &b) : x(a), y(b) {}
    __attribute__((always_inline, artificial)) __half2(const __half2 &o) {
        ::simt::cuda::detail::check_vector(this, &o, 4, "__half2");
        x = o.x;
        y = o.y;
    }
    __attribute__((always_inline, artificial)) __half2 &operator=(const __half2 &o) {
        ::simt::cuda::detail::check_vector(this, &o, 4, "__half2");
        x = o.x;
        y = o.y;
        return *this;
    }
};
using half2 = __half2;

namespace simt {
namespace cuda {
namespace detail {

inline bool half_is_nan(__half h) { return (h.bits & 0x7fffu) > 0x7c00u; }
constexpr uint16_t kCanonicalHalfNaN = 0x7fffu;

// binary16 nearest to `d`, rounded once. Rounding to float first can land exactly between two
// halves and then round the wrong way; rounding to float toward odd keeps the information needed
// (float has more than 11 + 2 bits), so the second rounding is exact.
inline __half double_to_half(double d) {
    float f = static_cast<float>(d);
    if (std::isfinite(f) && static_cast<double>(f) != d) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (!(bits & 1u)) {  // even: step to the odd neighbour on d's side
            const bool away = std::fabs(d) > std::fabs(static_cast<double>(f));
            bits = away ? bits + 1 : bits - 1;
            std::memcpy(&f, &bits, 4);
        }
    }
    return __half::from_bits(float_to_half_bits(f));
}

// a*b + c rounded once, as the GPU's fused fp16 multiply-add: the product of two halves is exact in
// double, the sum's rounding error is recovered exactly (TwoSum) and decides a tie.
inline __half half_fma(__half a, __half b, __half c) {
    const double p = double(float(a)) * double(float(b)), q = double(float(c));
    const double s = p + q, bp = s - p, err = (p - (s - bp)) + (q - bp);
    if (err == 0.0 || !std::isfinite(s)) return double_to_half(s);
    // s is rounded; step it one double ulp toward the exact value unless that changes nothing the
    // half rounding can see: the result is then s rounded toward odd, and the half rounding exact.
    uint64_t bits;
    std::memcpy(&bits, &s, 8);
    if (!(bits & 1u)) {
        const bool away = (err > 0) == (s > 0);
        bits = away ? bits + 1 : bits - 1;
        double t;
        std::memcpy(&t, &bits, 8);
        return double_to_half(t);
    }
    return double_to_half(s);
}

}  // namespace detail
}  // namespace cuda
}  // namespace simt

// Conversions.
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return ::simt::cuda::detail::double_to_half(d); }
inline float __half2float(__half h) { return float(h); }
inline __half __int2half_rn(int i) { return ::simt::cuda::detail::double_to_half(double(i)); }
inline __half __uint2half_rn(unsigned int i) { return ::simt::cuda::detail::double_to_half(double(i)); }
inline int __half2int_rn(__half h) { return int(nearbyintf(float(h))); }
inline int __half2int_rz(__half h) { return int(float(h)); }
inline __half __ushort_as_half(unsigned short b) { return __half::from_bits(b); }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __short_as_half(short b) { return __half::from_bits(static_cast<uint16_t>(b)); }
inline short __half_as_short(__half h) { return static_cast<short>(h.bits); }

// Arithmetic: one rounding each, as on a GPU.
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hdiv(__half a, __half b) { return a / b; }
inline __half __hneg(__half a) { return -a; }
inline __half __habs(__half a) { return __half::from_bits(a.bits & 0x7fffu); }
inline __half __hfma(__half a, __half b, __half c) { return ::simt::cuda::detail::half_fma(a, b, c); }
// CUDA's max/min: a NaN argument loses (both NaN: the canonical NaN); +0 counts as above -0.
inline __half __hmax(__half a, __half b) {
    using namespace ::simt::cuda::detail;
    if (half_is_nan(a) && half_is_nan(b)) return __half::from_bits(kCanonicalHalfNaN);
    if (half_is_nan(a)) return b;
    if (half_is_nan(b)) return a;
    if (float(a) == 0.0f && float(b) == 0.0f) return __half::from_bits(a.bits & b.bits);  // +0 unless both -0
    return float(a) > float(b) ? a : b;
}
inline __half __hmin(__half a, __half b) {
    using namespace ::simt::cuda::detail;
    if (half_is_nan(a) && half_is_nan(b)) return __half::from_bits(kCanonicalHalfNaN);
    if (half_is_nan(a)) return b;
    if (half_is_nan(b)) return a;
    if (float(a) == 0.0f && float(b) == 0.0f) return __half::from_bits(a.bits | b.bits);  // -0 if either is
    return float(a) < float(b) ? a : b;
}
inline bool __heq(__half a, __half b) { return float(a) == float(b); }
inline bool __hne(__half a, __half b) { return !__heq(a, b) && !(::simt::cuda::detail::half_is_nan(a) || ::simt::cuda::detail::half_is_nan(b)); }
inline bool __hlt(__half a, __half b) { return float(a) < float(b); }
inline bool __hle(__half a, __half b) { return float(a) <= float(b); }
inline bool __hgt(__half a, __half b) { return float(a) > float(b); }
inline bool __hge(__half a, __half b) { return float(a) >= float(b); }
inline bool __hisnan(__half a) { return ::simt::cuda::detail::half_is_nan(a); }
inline int __hisinf(__half a) { return (a.bits & 0x7fffu) == 0x7c00u ? ((a.bits & 0x8000u) ? -1 : 1) : 0; }

// Functions: computed in float and rounded to half (a GPU's are approximations of the same).
inline __half hexp(__half a) { return __half(expf(float(a))); }
inline __half hexp2(__half a) { return __half(exp2f(float(a))); }
inline __half hlog(__half a) { return __half(logf(float(a))); }
inline __half hlog2(__half a) { return __half(log2f(float(a))); }
inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }
inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
inline __half hrcp(__half a) { return __half(1.0f / float(a)); }
inline __half hfloor(__half a) { return __half(floorf(float(a))); }
inline __half hceil(__half a) { return __half(ceilf(float(a))); }
inline __half htrunc(__half a) { return __half(truncf(float(a))); }

// half2.
inline __half2 __halves2half2(__half lo, __half hi) { return __half2(lo, hi); }
inline __half2 __floats2half2_rn(float lo, float hi) { return __half2(__half(lo), __half(hi)); }
inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
inline __half2 __half2half2(__half h) { return __half2(h, h); }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float2 __half22float2(__half2 h) { return make_float2(float(h.x), float(h.y)); }
inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
inline __half2 __hadd2(__half2 a, __half2 b) { return __half2(a.x + b.x, a.y + b.y); }
inline __half2 __hsub2(__half2 a, __half2 b) { return __half2(a.x - b.x, a.y - b.y); }
inline __half2 __hmul2(__half2 a, __half2 b) { return __half2(a.x * b.x, a.y * b.y); }
inline __half2 __h2div(__half2 a, __half2 b) { return __half2(a.x / b.x, a.y / b.y); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
inline __half2 __hneg2(__half2 a) { return __half2(-a.x, -a.y); }
inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
inline __half2 __hmax2(__half2 a, __half2 b) { return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
inline __half2 __hmin2(__half2 a, __half2 b) { return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
inline __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }
inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }
inline __half2 operator/(__half2 a, __half2 b) { return __h2div(a, b); }
inline __half2 operator-(__half2 a) { return __hneg2(a); }
inline __half2 &operator+=(__half2 &a, __half2 b) { return a = a + b; }
inline __half2 &operator-=(__half2 &a, __half2 b) { return a = a - b; }
inline __half2 &operator*=(__half2 &a, __half2 b) { return a = a * b; }
inline __half2 &operator/=(__half2 &a, __half2 b) { return a = a / b; }

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)

// Shuffles and atomics for the half types.
SIMT_CUDA_SHUFFLES(__half)
SIMT_CUDA_SHUFFLES(__half2)
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, __half)

namespace simt {
namespace cuda {
namespace detail {
// CUDA adds the two halves atomically each, not the pair as one: one 4-byte CAS does both.
SIMT_RUNTIME_FN inline __half2 half2_atomic_add(__half2 *address, __half2 val) {
    uint32_t *word = reinterpret_cast<uint32_t *>(address);
    atomic_prologue("atomicAdd", word, SIMT_PC());
    uint32_t old, desired;
    __atomic_load(word, &old, __ATOMIC_RELAXED);
    do {
        __half lo = __half::from_bits(uint16_t(old)), hi = __half::from_bits(uint16_t(old >> 16));
        lo += val.x;
        hi += val.y;
        desired = uint32_t(lo.bits) | (uint32_t(hi.bits) << 16);
    } while (!__atomic_compare_exchange(word, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return __half2(__half::from_bits(uint16_t(old)), __half::from_bits(uint16_t(old >> 16)));
}
}  // namespace detail
}  // namespace cuda
}  // namespace simt

SIMT_CUDA_WRAPPER __half2 atomicAdd(__half2 *address, __half2 val) {
    const __half2 old = ::simt::cuda::detail::half2_atomic_add(address, val);
    SIMT_CUDA_AFTER_CALL();
    return old;
}
