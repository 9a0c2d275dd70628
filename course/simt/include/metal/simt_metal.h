// The Metal Shading Language (MSL) front end of the CPU SIMT runtime: a learner's `.metal` kernel is
// compiled by g++ against this header. Everything MSL puts in namespace `metal` lives in `::metal`
// (the vector types and `half` are also visible without `using namespace metal`, as in MSL).
//
// What maps to what:
//   threads of a threadgroup   -> fibers of one block (simt_core.h); a simdgroup is a 32-lane warp
//   kernel-scope `threadgroup T x[N];`  -> rewritten by the compiler driver to `thread_local` (one per block)
//   `[[thread_position_in_grid]]` & co -> filled in by simt::metal::invoke from simt::current()
//   threadgroup_barrier        -> simt::block_barrier;  simd_* / simdgroup matrices -> simt::warp_collective
//   atomics                    -> the compiler's __atomic builtins (real atomics: blocks may run in parallel)
// Address-space qualifiers (`device constant thread threadgroup`) and `kernel` are empty macros,
// defined at the very end so that this header's own code never sees them.
#pragma once
#pragma GCC system_header
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "simt_core.h"
#include "simt_half.h"
#include "simt_invoke.h"

namespace metal {
namespace simt_impl {
template <class T> constexpr bool is_scalar_v = std::is_arithmetic_v<T> || std::is_same_v<T, simt::half>;
template <class T> using if_floating = std::enable_if_t<std::is_floating_point_v<T>, int>;
template <class T> using if_integral = std::enable_if_t<std::is_integral_v<T>, int>;
template <class T> using if_arithmetic = std::enable_if_t<std::is_arithmetic_v<T>, int>;
}  // namespace simt_impl
}  // namespace metal

// Mixed half/float arithmetic, as MSL does it: half op float -> float, half op integer -> half.
// (simt_half.h alone leaves `h * 2.0f` ambiguous between float's and half's operator*.) These live in
// namespace simt so that argument-dependent lookup finds them for simt::half.
namespace simt {
#define SIMT_MSL_HALF_MIXED(op)                                                                              \
    template <class T, ::metal::simt_impl::if_floating<T> = 0>                                              \
    inline float operator op(half a, T b) { return float(a) op float(b); }                                 \
    template <class T, ::metal::simt_impl::if_floating<T> = 0>                                              \
    inline float operator op(T a, half b) { return float(a) op float(b); }                                 \
    template <class T, ::metal::simt_impl::if_integral<T> = 0>                                              \
    inline half operator op(half a, T b) { return a op half(float(b)); }                                   \
    template <class T, ::metal::simt_impl::if_integral<T> = 0>                                              \
    inline half operator op(T a, half b) { return half(float(a)) op b; }
SIMT_MSL_HALF_MIXED(+)
SIMT_MSL_HALF_MIXED(-)
SIMT_MSL_HALF_MIXED(*)
SIMT_MSL_HALF_MIXED(/)
#undef SIMT_MSL_HALF_MIXED
#define SIMT_MSL_HALF_COMPARE(op)                                                                            \
    template <class T, ::metal::simt_impl::if_arithmetic<T> = 0>                                            \
    inline bool operator op(half a, T b) { return float(a) op float(b); }                                  \
    template <class T, ::metal::simt_impl::if_arithmetic<T> = 0>                                            \
    inline bool operator op(T a, half b) { return float(a) op float(b); }
SIMT_MSL_HALF_COMPARE(<)
SIMT_MSL_HALF_COMPARE(>)
SIMT_MSL_HALF_COMPARE(<=)
SIMT_MSL_HALF_COMPARE(>=)
SIMT_MSL_HALF_COMPARE(==)
SIMT_MSL_HALF_COMPARE(!=)
#undef SIMT_MSL_HALF_COMPARE
}  // namespace simt

namespace metal {

using half = simt::half;
using uint = unsigned int;
using ushort = unsigned short;
using uchar = unsigned char;
using ulong = unsigned long;  // 64 bits, as in MSL (LP64)
using std::size_t;
using std::ptrdiff_t;

template <class T, int N> struct vec;

namespace simt_impl {

template <class To, class From> inline To convert(From x) {
    if constexpr (std::is_same_v<To, From>) return x;
    else if constexpr (std::is_same_v<To, half>) return half(static_cast<float>(x));
    else if constexpr (std::is_same_v<From, half>) return static_cast<To>(static_cast<float>(x));
    else return static_cast<To>(x);
}

template <class T> constexpr const char *scalar_name() {
    if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, half>) return "half";
    else if constexpr (std::is_same_v<T, bool>) return "bool";
    else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char>) return "char";
    else if constexpr (std::is_same_v<T, unsigned char>) return "uchar";
    else if constexpr (std::is_same_v<T, short>) return "short";
    else if constexpr (std::is_same_v<T, unsigned short>) return "ushort";
    else if constexpr (std::is_same_v<T, int>) return "int";
    else if constexpr (std::is_same_v<T, unsigned>) return "uint";
    else if constexpr (std::is_same_v<T, long>) return "long";
    else if constexpr (std::is_same_v<T, unsigned long>) return "ulong";
    else return "scalar";
}

// Slow paths, out of line so that the fast path stays a test and a branch, and so that SIMT_PC() is an
// address in the kernel (the vector copy that called them is always inlined there). They return
// normally (fail() never comes back) so that the return address stays inside the kernel's code.
__attribute__((noinline, cold)) inline void misaligned(const char *type, int n, const void *addr, unsigned align,
                                                       const char *how) {
    simt::fail(SIMT_PC(), "misaligned %s%d %s at address %p: a %s%d must start at a multiple of %u bytes "
               "(a pointer cast to %s%d * must point at such an address)",
               type, n, how, addr, type, n, align, type, n);
}

__attribute__((noinline, cold)) inline void bad_index(const char *type, int n, long index) {
    simt::fail(SIMT_PC(), "index %ld out of range for a %s%d (valid: 0 to %d)", index, type, n, n - 1);
}

// `v.xy`, `v.zw`, `v.xyz`...: a view of some of a vector's elements, readable (converts to the
// narrower vector) and assignable. V is that narrower vector type; naming it in the template
// arguments lets argument-dependent lookup find V's operators for a swizzle.
template <class V, int... I> struct swizzle {
    using T = typename V::value_type;
    static constexpr int extent = [] {
        int m = 0;
        ((m = I > m ? I : m), ...);
        return m + 1;
    }();
    T s[extent];
    operator V() const { return V(s[I]...); }
    swizzle &operator=(const V &v) {
        int k = 0;
        ((s[I] = v.s[k++]), ...);
        return *this;
    }
    swizzle &operator=(const swizzle &o) { return *this = V(o); }
    swizzle &operator+=(const V &v) { return *this = V(*this) + v; }
    swizzle &operator-=(const V &v) { return *this = V(*this) - v; }
    swizzle &operator*=(const V &v) { return *this = V(*this) * v; }
    swizzle &operator/=(const V &v) { return *this = V(*this) / v; }
};

// Element storage: one union per length, so that .x, .r, .xy etc. name the same elements.
// The elements start zeroed by a constexpr constructor: a kernel-scope `threadgroup float4 t[N];`
// becomes a block-scope thread_local, and only a constant-initialised one gets no guard variable
// (whose instrumented accesses would look like threads racing on threadgroup memory).
template <class T, int N> struct vec_base;
template <class T> struct vec_base<T, 2> {
    constexpr vec_base() : s{} {}
    union {
        T s[2];
        struct { T x, y; };
        struct { T r, g; };
    };
};
template <class T> struct vec_base<T, 3> {
    constexpr vec_base() : s{} {}
    union {
        T s[3];
        struct { T x, y, z; };
        struct { T r, g, b; };
        swizzle<vec<T, 2>, 0, 1> xy, rg;
        swizzle<vec<T, 2>, 1, 2> yz, gb;
    };
};
template <class T> struct vec_base<T, 4> {
    constexpr vec_base() : s{} {}
    union {
        T s[4];
        struct { T x, y, z, w; };
        struct { T r, g, b, a; };
        swizzle<vec<T, 2>, 0, 1> xy, rg;
        swizzle<vec<T, 2>, 1, 2> yz, gb;
        swizzle<vec<T, 2>, 2, 3> zw, ba;
        swizzle<vec<T, 3>, 0, 1, 2> xyz, rgb;
        swizzle<vec<T, 3>, 1, 2, 3> yzw, gba;
    };
};

}  // namespace simt_impl

// MSL's vector types: vec<T, N>, with N elements of T, aligned to their size (3-vectors to 4 elements).
// Copies check that alignment: Metal's vector loads and stores need it, and a pointer cast such as
// `(device float4 *)(x + 1)` breaks it; the CPU would not notice.
template <class T, int N>
struct alignas(sizeof(T) * (N == 3 ? 4 : N)) vec : simt_impl::vec_base<T, N> {
    static_assert(N >= 2 && N <= 4, "Metal vectors have 2, 3 or 4 elements");
    using value_type = T;
    static constexpr int elements = N;
    using simt_impl::vec_base<T, N>::s;

    __attribute__((always_inline)) static void check_aligned(const void *p, const char *how) {
        if (SIMT_ADDRESS_BITS(p) & (alignof(vec) - 1))
            simt_impl::misaligned(simt_impl::scalar_name<T>(), N, p, unsigned(alignof(vec)), how);
    }

    vec() = default;
    // A scalar fills every element (MSL allows `float4 v = 0;`).
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0> vec(U v) {
        const T c = simt_impl::convert<T>(v);
        for (int i = 0; i < N; ++i) s[i] = c;
    }
    template <int M = N, std::enable_if_t<M == 2, int> = 0> vec(T a, T b) { s[0] = a; s[1] = b; }
    template <int M = N, std::enable_if_t<M == 3, int> = 0> vec(T a, T b, T c) { s[0] = a; s[1] = b; s[2] = c; }
    template <int M = N, std::enable_if_t<M == 3, int> = 0> vec(vec<T, 2> ab, T c) { s[0] = ab.s[0]; s[1] = ab.s[1]; s[2] = c; }
    template <int M = N, std::enable_if_t<M == 3, int> = 0> vec(T a, vec<T, 2> bc) { s[0] = a; s[1] = bc.s[0]; s[2] = bc.s[1]; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0> vec(T a, T b, T c, T d) { s[0] = a; s[1] = b; s[2] = c; s[3] = d; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(vec<T, 2> ab, T c, T d) { s[0] = ab.s[0]; s[1] = ab.s[1]; s[2] = c; s[3] = d; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(T a, vec<T, 2> bc, T d) { s[0] = a; s[1] = bc.s[0]; s[2] = bc.s[1]; s[3] = d; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(T a, T b, vec<T, 2> cd) { s[0] = a; s[1] = b; s[2] = cd.s[0]; s[3] = cd.s[1]; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(vec<T, 2> ab, vec<T, 2> cd) { s[0] = ab.s[0]; s[1] = ab.s[1]; s[2] = cd.s[0]; s[3] = cd.s[1]; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(vec<T, 3> abc, T d) { s[0] = abc.s[0]; s[1] = abc.s[1]; s[2] = abc.s[2]; s[3] = d; }
    template <int M = N, std::enable_if_t<M == 4, int> = 0>
    vec(T a, vec<T, 3> bcd) { s[0] = a; s[1] = bcd.s[0]; s[2] = bcd.s[1]; s[3] = bcd.s[2]; }
    // float4(half4), int2(float2)...: explicit, as in MSL.
    template <class U, std::enable_if_t<!std::is_same_v<U, T>, int> = 0> explicit vec(const vec<U, N> &o) {
        vec<U, N>::check_aligned(&o, "read");
        count_copy(nullptr, &o, sizeof(U) * N);
        for (int i = 0; i < N; ++i) s[i] = simt_impl::convert<T>(o.s[i]);
    }

    // uint2(v.xy) with v an int4: a swizzle converted like the vector it reads.
    template <class V, int... I, std::enable_if_t<sizeof...(I) == N && !std::is_same_v<V, vec>, int> = 0>
    explicit vec(const simt_impl::swizzle<V, I...> &sw) : vec(sw.operator V()) {}

    // Counters mode: a copy is one vector access at each end (of the elements copied), not N scalar ones.
    __attribute__((always_inline)) static void count_copy(const void *dst, const void *src, std::size_t bytes) {
#if SIMT_CHECKED
        ::simt::note_vector(dst, src, bytes);
#else
        (void)dst, (void)src, (void)bytes;
#endif
    }

    // Element by element, written out: clang turns a loop of copies into a call of memcpy, whose accesses
    // its -fsanitize=thread (before LLVM 16) does not report, so racecheck would not see them.
    __attribute__((always_inline)) void copy_elements(const vec &o) {
        s[0] = o.s[0];
        s[1] = o.s[1];
        if constexpr (N > 2) s[2] = o.s[2];
        if constexpr (N > 3) s[3] = o.s[3];
    }
    __attribute__((always_inline)) vec(const vec &o) {
        check_aligned(&o, "read");
        count_copy(this, &o, sizeof(T) * N);
        copy_elements(o);
    }
    __attribute__((always_inline)) vec &operator=(const vec &o) {
        check_aligned(&o, "read");
        check_aligned(this, "write");
        count_copy(this, &o, sizeof(T) * N);
        copy_elements(o);
        return *this;
    }

    __attribute__((always_inline)) T &operator[](long i) {
        if (static_cast<unsigned long>(i) >= static_cast<unsigned long>(N)) simt_impl::bad_index(simt_impl::scalar_name<T>(), N, i);
        return s[i];
    }
    __attribute__((always_inline)) const T &operator[](long i) const {
        if (static_cast<unsigned long>(i) >= static_cast<unsigned long>(N)) simt_impl::bad_index(simt_impl::scalar_name<T>(), N, i);
        return s[i];
    }

    // Componentwise arithmetic. Operands are taken by value so that each goes through the aligned copy.
    // A scalar operand is converted to T first (MSL: `half4 * 2.0f` is a half4).
#define SIMT_MSL_VEC_ARITH(op)                                                                                \
    friend vec operator op(vec a, vec b) {                                                                   \
        for (int i = 0; i < N; ++i) a.s[i] = T(a.s[i] op b.s[i]);                                           \
        return a;                                                                                             \
    }                                                                                                         \
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0>                                  \
    friend vec operator op(vec a, U b) {                                                                     \
        const T c = simt_impl::convert<T>(b);                                                                 \
        for (int i = 0; i < N; ++i) a.s[i] = T(a.s[i] op c);                                                 \
        return a;                                                                                             \
    }                                                                                                         \
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0>                                  \
    friend vec operator op(U b, vec a) {                                                                     \
        const T c = simt_impl::convert<T>(b);                                                                 \
        for (int i = 0; i < N; ++i) a.s[i] = T(c op a.s[i]);                                                 \
        return a;                                                                                             \
    }                                                                                                         \
    __attribute__((always_inline)) vec &operator op##=(vec b) {                                               \
        check_aligned(this, "write");                                                                         \
        for (int i = 0; i < N; ++i) s[i] = T(s[i] op b.s[i]);                                                \
        return *this;                                                                                         \
    }                                                                                                         \
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0> vec &operator op##=(U b) {     \
        return *this op##= vec(b);                                                                            \
    }
    SIMT_MSL_VEC_ARITH(+)
    SIMT_MSL_VEC_ARITH(-)
    SIMT_MSL_VEC_ARITH(*)
    SIMT_MSL_VEC_ARITH(/)
    SIMT_MSL_VEC_ARITH(%)
    SIMT_MSL_VEC_ARITH(&)
    SIMT_MSL_VEC_ARITH(|)
    SIMT_MSL_VEC_ARITH(^)
    SIMT_MSL_VEC_ARITH(<<)
    SIMT_MSL_VEC_ARITH(>>)
#undef SIMT_MSL_VEC_ARITH
    friend vec operator-(vec a) {
        for (int i = 0; i < N; ++i) a.s[i] = T(-a.s[i]);
        return a;
    }
    friend vec operator+(vec a) { return a; }
    friend vec operator~(vec a) {
        for (int i = 0; i < N; ++i) a.s[i] = T(~a.s[i]);
        return a;
    }
    friend vec<bool, N> operator!(vec a) {
        vec<bool, N> r;
        for (int i = 0; i < N; ++i) r.s[i] = !a.s[i];
        return r;
    }
    // Comparisons give a bool vector (use all() / any() / select()).
#define SIMT_MSL_VEC_COMPARE(op)                                                                              \
    friend vec<bool, N> operator op(vec a, vec b) {                                                          \
        vec<bool, N> r;                                                                                       \
        for (int i = 0; i < N; ++i) r.s[i] = a.s[i] op b.s[i];                                               \
        return r;                                                                                             \
    }                                                                                                         \
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0>                                  \
    friend vec<bool, N> operator op(vec a, U b) { return a op vec(b); }                                       \
    template <class U, std::enable_if_t<simt_impl::is_scalar_v<U>, int> = 0>                                  \
    friend vec<bool, N> operator op(U b, vec a) { return vec(b) op a; }
    SIMT_MSL_VEC_COMPARE(==)
    SIMT_MSL_VEC_COMPARE(!=)
    SIMT_MSL_VEC_COMPARE(<)
    SIMT_MSL_VEC_COMPARE(<=)
    SIMT_MSL_VEC_COMPARE(>)
    SIMT_MSL_VEC_COMPARE(>=)
#undef SIMT_MSL_VEC_COMPARE
};

#define SIMT_MSL_VEC_NAMES(T, name) \
    using name##2 = vec<T, 2>;      \
    using name##3 = vec<T, 3>;      \
    using name##4 = vec<T, 4>;
SIMT_MSL_VEC_NAMES(bool, bool)
SIMT_MSL_VEC_NAMES(char, char)
SIMT_MSL_VEC_NAMES(unsigned char, uchar)
SIMT_MSL_VEC_NAMES(short, short)
SIMT_MSL_VEC_NAMES(unsigned short, ushort)
SIMT_MSL_VEC_NAMES(int, int)
SIMT_MSL_VEC_NAMES(unsigned int, uint)
SIMT_MSL_VEC_NAMES(long, long)
SIMT_MSL_VEC_NAMES(unsigned long, ulong)
SIMT_MSL_VEC_NAMES(half, half)
SIMT_MSL_VEC_NAMES(float, float)
#undef SIMT_MSL_VEC_NAMES

// ------------------------------------------------------------------------------------------------
// Constants and numeric limits.

#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif
#define HALF_MAX (::metal::half::from_bits(0x7bffu))
#define HALF_MIN (::metal::half::from_bits(0x0400u))
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f

template <class T> struct numeric_limits : std::numeric_limits<T> {};
template <> struct numeric_limits<half> {
    static constexpr bool is_specialized = true;
    static constexpr bool has_infinity = true;
    static constexpr bool has_quiet_NaN = true;
    static constexpr int digits = 11;
    static half min() { return half::from_bits(0x0400u); }
    static half max() { return half::from_bits(0x7bffu); }
    static half lowest() { return half::from_bits(0xfbffu); }
    static half epsilon() { return half::from_bits(0x1400u); }
    static half infinity() { return half::from_bits(0x7c00u); }
    static half quiet_NaN() { return half::from_bits(0x7e00u); }
    static half denorm_min() { return half::from_bits(0x0001u); }
};

// as_type<T>(x): the same bits seen as another type of the same size.
template <class To, class From> inline To as_type(From x) {
    static_assert(sizeof(To) == sizeof(From), "as_type: the two types must have the same size");
    To to;
    std::memcpy(static_cast<void *>(&to), static_cast<const void *>(&x), sizeof(To));
    return to;
}

// ------------------------------------------------------------------------------------------------
// Scalar math. float versions come from <cmath> (std::exp(float) etc.); half ones compute in float and
// round once, which is what a GPU's fp16 functions do to within their stated precision.

using std::abs;
using std::acos;
using std::asin;
using std::atan;
using std::atan2;
using std::ceil;
using std::copysign;
using std::cos;
using std::cosh;
using std::exp;
using std::exp2;
using std::fabs;
using std::floor;
using std::fma;
using std::fmax;
using std::fmin;
using std::fmod;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::log;
using std::log10;
using std::log2;
using std::pow;
using std::rint;
using std::round;
using std::signbit;
using std::sin;
using std::sinh;
using std::sqrt;
using std::tan;
using std::tanh;
using std::trunc;

inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float exp10(float x) { return std::pow(10.0f, x); }
inline float powr(float x, float y) { return std::pow(x, y); }
inline float fract(float x) { return std::fmin(x - std::floor(x), 0x1.fffffep-1f); }
inline float saturate(float x) { return std::fmin(std::fmax(x, 0.0f), 1.0f); }
inline float sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : (x == x ? x : 0.0f); }
inline float step(float edge, float x) { return x < edge ? 0.0f : 1.0f; }
inline float mix(float x, float y, float a) { return x + (y - x) * a; }
inline float divide(float x, float y) { return x / y; }

#define SIMT_MSL_HALF1(fn) inline half fn(half x) { return half(fn(float(x))); }
#define SIMT_MSL_HALF2(fn) inline half fn(half x, half y) { return half(fn(float(x), float(y))); }
#define SIMT_MSL_HALF3(fn) inline half fn(half x, half y, half z) { return half(fn(float(x), float(y), float(z))); }
SIMT_MSL_HALF1(acos) SIMT_MSL_HALF1(asin) SIMT_MSL_HALF1(atan) SIMT_MSL_HALF1(ceil) SIMT_MSL_HALF1(cos)
SIMT_MSL_HALF1(cosh) SIMT_MSL_HALF1(exp) SIMT_MSL_HALF1(exp2) SIMT_MSL_HALF1(exp10) SIMT_MSL_HALF1(fabs)
SIMT_MSL_HALF1(floor) SIMT_MSL_HALF1(fract) SIMT_MSL_HALF1(log) SIMT_MSL_HALF1(log10) SIMT_MSL_HALF1(log2)
SIMT_MSL_HALF1(rint) SIMT_MSL_HALF1(round) SIMT_MSL_HALF1(rsqrt) SIMT_MSL_HALF1(saturate) SIMT_MSL_HALF1(sign)
SIMT_MSL_HALF1(sin) SIMT_MSL_HALF1(sinh) SIMT_MSL_HALF1(sqrt) SIMT_MSL_HALF1(tan) SIMT_MSL_HALF1(tanh)
SIMT_MSL_HALF1(trunc) SIMT_MSL_HALF1(abs)
SIMT_MSL_HALF2(atan2) SIMT_MSL_HALF2(copysign) SIMT_MSL_HALF2(fmax) SIMT_MSL_HALF2(fmin) SIMT_MSL_HALF2(fmod)
SIMT_MSL_HALF2(pow) SIMT_MSL_HALF2(powr) SIMT_MSL_HALF2(step) SIMT_MSL_HALF2(divide)
SIMT_MSL_HALF3(fma) SIMT_MSL_HALF3(mix)
#undef SIMT_MSL_HALF1
#undef SIMT_MSL_HALF2
#undef SIMT_MSL_HALF3
inline bool isinf(half x) { return (x.bits & 0x7fffu) == 0x7c00u; }
inline bool isnan(half x) { return (x.bits & 0x7fffu) > 0x7c00u; }
inline bool isfinite(half x) { return (x.bits & 0x7c00u) != 0x7c00u; }
inline bool signbit(half x) { return (x.bits & 0x8000u) != 0; }

// max/min of floating types follow fmax/fmin (a NaN operand gives the other one).
inline float max(float x, float y) { return std::fmax(x, y); }
inline float min(float x, float y) { return std::fmin(x, y); }
inline half max(half x, half y) { return half(std::fmax(float(x), float(y))); }
inline half min(half x, half y) { return half(std::fmin(float(x), float(y))); }
inline float clamp(float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); }
inline half clamp(half x, half lo, half hi) { return half(clamp(float(x), float(lo), float(hi))); }
inline float smoothstep(float e0, float e1, float x) {
    const float t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
    return t * t * (3.0f - 2.0f * t);
}
inline half smoothstep(half e0, half e1, half x) { return half(smoothstep(float(e0), float(e1), float(x))); }

#define SIMT_MSL_INTEGER_SCALAR(T)                                                                 \
    inline T max(T x, T y) { return x < y ? y : x; }                                               \
    inline T min(T x, T y) { return y < x ? y : x; }                                               \
    inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
SIMT_MSL_INTEGER_SCALAR(char)
SIMT_MSL_INTEGER_SCALAR(unsigned char)
SIMT_MSL_INTEGER_SCALAR(short)
SIMT_MSL_INTEGER_SCALAR(unsigned short)
SIMT_MSL_INTEGER_SCALAR(int)
SIMT_MSL_INTEGER_SCALAR(unsigned int)
SIMT_MSL_INTEGER_SCALAR(long)
SIMT_MSL_INTEGER_SCALAR(unsigned long)
#undef SIMT_MSL_INTEGER_SCALAR
inline uint popcount(uint x) { return uint(__builtin_popcount(x)); }
inline int popcount(int x) { return __builtin_popcount(uint(x)); }
inline uint clz(uint x) { return x ? uint(__builtin_clz(x)) : 32u; }
inline int clz(int x) { return int(clz(uint(x))); }
inline uint ctz(uint x) { return x ? uint(__builtin_ctz(x)) : 32u; }
inline int ctz(int x) { return int(ctz(uint(x))); }

// select(a, b, c) = c ? b : a.
template <class T, std::enable_if_t<simt_impl::is_scalar_v<T>, int> = 0> inline T select(T a, T b, bool c) {
    return c ? b : a;
}

// ------------------------------------------------------------------------------------------------
// Componentwise math on vectors, one overload per concrete type (so that swizzles convert and
// `metal::exp(v)` finds them too).

template <int N> inline bool all(vec<bool, N> v) {
    for (int i = 0; i < N; ++i)
        if (!v.s[i]) return false;
    return true;
}
template <int N> inline bool any(vec<bool, N> v) {
    for (int i = 0; i < N; ++i)
        if (v.s[i]) return true;
    return false;
}

#define SIMT_MSL_V1(fn, V)                                               \
    inline V fn(V a) {                                                   \
        for (int i = 0; i < V::elements; ++i) a.s[i] = fn(a.s[i]);       \
        return a;                                                        \
    }
#define SIMT_MSL_V2(fn, V)                                               \
    inline V fn(V a, V b) {                                              \
        for (int i = 0; i < V::elements; ++i) a.s[i] = fn(a.s[i], b.s[i]); \
        return a;                                                        \
    }
#define SIMT_MSL_V3(fn, V)                                               \
    inline V fn(V a, V b, V c) {                                         \
        for (int i = 0; i < V::elements; ++i) a.s[i] = fn(a.s[i], b.s[i], c.s[i]); \
        return a;                                                        \
    }
#define SIMT_MSL_VBOOL(fn, V)                                            \
    inline vec<bool, V::elements> fn(V a) {                              \
        vec<bool, V::elements> r;                                        \
        for (int i = 0; i < V::elements; ++i) r.s[i] = fn(a.s[i]);       \
        return r;                                                        \
    }
#define SIMT_MSL_FLOAT_VEC_FNS(V)                                                                           \
    SIMT_MSL_V1(acos, V) SIMT_MSL_V1(asin, V) SIMT_MSL_V1(atan, V) SIMT_MSL_V1(ceil, V) SIMT_MSL_V1(cos, V)   \
    SIMT_MSL_V1(cosh, V) SIMT_MSL_V1(exp, V) SIMT_MSL_V1(exp2, V) SIMT_MSL_V1(exp10, V) SIMT_MSL_V1(fabs, V)  \
    SIMT_MSL_V1(abs, V) SIMT_MSL_V1(floor, V) SIMT_MSL_V1(fract, V) SIMT_MSL_V1(log, V) SIMT_MSL_V1(log10, V) \
    SIMT_MSL_V1(log2, V) SIMT_MSL_V1(rint, V) SIMT_MSL_V1(round, V) SIMT_MSL_V1(rsqrt, V)                    \
    SIMT_MSL_V1(saturate, V) SIMT_MSL_V1(sign, V) SIMT_MSL_V1(sin, V) SIMT_MSL_V1(sinh, V) SIMT_MSL_V1(sqrt, V) \
    SIMT_MSL_V1(tan, V) SIMT_MSL_V1(tanh, V) SIMT_MSL_V1(trunc, V)                                          \
    SIMT_MSL_V2(atan2, V) SIMT_MSL_V2(copysign, V) SIMT_MSL_V2(fmax, V) SIMT_MSL_V2(fmin, V)                \
    SIMT_MSL_V2(fmod, V) SIMT_MSL_V2(pow, V) SIMT_MSL_V2(powr, V) SIMT_MSL_V2(step, V) SIMT_MSL_V2(max, V)  \
    SIMT_MSL_V2(min, V) SIMT_MSL_V2(divide, V)                                                              \
    SIMT_MSL_V3(fma, V) SIMT_MSL_V3(mix, V) SIMT_MSL_V3(clamp, V) SIMT_MSL_V3(smoothstep, V)                \
    SIMT_MSL_VBOOL(isinf, V) SIMT_MSL_VBOOL(isnan, V) SIMT_MSL_VBOOL(isfinite, V) SIMT_MSL_VBOOL(signbit, V) \
    inline V select(V a, V b, vec<bool, V::elements> c) {                                                   \
        for (int i = 0; i < V::elements; ++i) if (c.s[i]) a.s[i] = b.s[i];                                \
        return a;                                                                                           \
    }                                                                                                       \
    inline V select(V a, V b, bool c) { return c ? b : a; }                                                 \
    inline V::value_type dot(V a, V b) {                                                                    \
        float acc = 0.0f;                                                                                   \
        for (int i = 0; i < V::elements; ++i) acc += float(a.s[i]) * float(b.s[i]);                        \
        return V::value_type(acc);                                                                          \
    }                                                                                                       \
    inline V::value_type length(V a) { return V::value_type(std::sqrt(float(dot(a, a)))); }               \
    inline V::value_type distance(V a, V b) { return length(a - b); }                                       \
    inline V normalize(V a) { return a * V::value_type(1.0f / std::sqrt(float(dot(a, a)))); }
#define SIMT_MSL_INT_VEC_FNS(V)                                                                             \
    SIMT_MSL_V2(max, V) SIMT_MSL_V2(min, V) SIMT_MSL_V3(clamp, V)                                           \
    inline V select(V a, V b, vec<bool, V::elements> c) {                                                   \
        for (int i = 0; i < V::elements; ++i) if (c.s[i]) a.s[i] = b.s[i];                                \
        return a;                                                                                           \
    }                                                                                                       \
    inline V select(V a, V b, bool c) { return c ? b : a; }
#define SIMT_MSL_SIGNED_VEC_FNS(V)                                                                          \
    inline V abs(V a) {                                                                                     \
        for (int i = 0; i < V::elements; ++i) a.s[i] = V::value_type(a.s[i] < 0 ? -a.s[i] : a.s[i]);     \
        return a;                                                                                           \
    }
SIMT_MSL_FLOAT_VEC_FNS(float2) SIMT_MSL_FLOAT_VEC_FNS(float3) SIMT_MSL_FLOAT_VEC_FNS(float4)
SIMT_MSL_FLOAT_VEC_FNS(half2) SIMT_MSL_FLOAT_VEC_FNS(half3) SIMT_MSL_FLOAT_VEC_FNS(half4)
SIMT_MSL_INT_VEC_FNS(char2) SIMT_MSL_INT_VEC_FNS(char3) SIMT_MSL_INT_VEC_FNS(char4)
SIMT_MSL_INT_VEC_FNS(uchar2) SIMT_MSL_INT_VEC_FNS(uchar3) SIMT_MSL_INT_VEC_FNS(uchar4)
SIMT_MSL_INT_VEC_FNS(short2) SIMT_MSL_INT_VEC_FNS(short3) SIMT_MSL_INT_VEC_FNS(short4)
SIMT_MSL_INT_VEC_FNS(ushort2) SIMT_MSL_INT_VEC_FNS(ushort3) SIMT_MSL_INT_VEC_FNS(ushort4)
SIMT_MSL_INT_VEC_FNS(int2) SIMT_MSL_INT_VEC_FNS(int3) SIMT_MSL_INT_VEC_FNS(int4)
SIMT_MSL_INT_VEC_FNS(uint2) SIMT_MSL_INT_VEC_FNS(uint3) SIMT_MSL_INT_VEC_FNS(uint4)
SIMT_MSL_INT_VEC_FNS(long2) SIMT_MSL_INT_VEC_FNS(long3) SIMT_MSL_INT_VEC_FNS(long4)
SIMT_MSL_INT_VEC_FNS(ulong2) SIMT_MSL_INT_VEC_FNS(ulong3) SIMT_MSL_INT_VEC_FNS(ulong4)
SIMT_MSL_SIGNED_VEC_FNS(char2) SIMT_MSL_SIGNED_VEC_FNS(char3) SIMT_MSL_SIGNED_VEC_FNS(char4)
SIMT_MSL_SIGNED_VEC_FNS(short2) SIMT_MSL_SIGNED_VEC_FNS(short3) SIMT_MSL_SIGNED_VEC_FNS(short4)
SIMT_MSL_SIGNED_VEC_FNS(int2) SIMT_MSL_SIGNED_VEC_FNS(int3) SIMT_MSL_SIGNED_VEC_FNS(int4)
SIMT_MSL_SIGNED_VEC_FNS(long2) SIMT_MSL_SIGNED_VEC_FNS(long3) SIMT_MSL_SIGNED_VEC_FNS(long4)
inline float3 cross(float3 a, float3 b) {
    return float3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
#undef SIMT_MSL_V1
#undef SIMT_MSL_V2
#undef SIMT_MSL_V3
#undef SIMT_MSL_VBOOL
#undef SIMT_MSL_FLOAT_VEC_FNS
#undef SIMT_MSL_INT_VEC_FNS
#undef SIMT_MSL_SIGNED_VEC_FNS

// fast:: and precise:: variants: the CPU computes every one of them at full float precision.
#define SIMT_MSL_MATH_NAMES                                                                                   \
    using ::metal::acos; using ::metal::asin; using ::metal::atan; using ::metal::atan2; using ::metal::ceil; \
    using ::metal::cos; using ::metal::cosh; using ::metal::divide; using ::metal::exp; using ::metal::exp10; \
    using ::metal::exp2; using ::metal::fabs; using ::metal::floor; using ::metal::fmax; using ::metal::fmin; \
    using ::metal::fmod; using ::metal::fract; using ::metal::log; using ::metal::log10; using ::metal::log2; \
    using ::metal::max; using ::metal::min; using ::metal::clamp; using ::metal::normalize;                 \
    using ::metal::length; using ::metal::distance; using ::metal::pow; using ::metal::powr;                 \
    using ::metal::rint; using ::metal::round; using ::metal::rsqrt; using ::metal::saturate;               \
    using ::metal::sign; using ::metal::sin; using ::metal::sinh; using ::metal::sqrt; using ::metal::tan;  \
    using ::metal::tanh; using ::metal::trunc;
namespace fast { SIMT_MSL_MATH_NAMES }
namespace precise { SIMT_MSL_MATH_NAMES }
#undef SIMT_MSL_MATH_NAMES

// ------------------------------------------------------------------------------------------------
// Barriers.

enum class mem_flags : unsigned {
    mem_none = 0,
    mem_device = 1,
    mem_threadgroup = 2,
    mem_texture = 4,
    mem_threadgroup_imageblock = 8,
    mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }
static_assert(unsigned(mem_flags::mem_device) == simt::kFenceDevice &&
              unsigned(mem_flags::mem_threadgroup) == simt::kFenceShared, "the runtime reads mem_flags' bits");

// Every thread of the threadgroup waits here. The flags say which memory it orders: writes before it to
// threadgroup memory (mem_threadgroup) or device memory (mem_device) are visible after it to the other
// threads of the threadgroup; with mem_none only execution is ordered, and racecheck reports threads that
// rely on it for memory. (A block's threads share one OS thread, so the CPU needs no fences itself.)
// mem_texture and the imageblock and object-data flags concern memory the runtime does not have.
inline void threadgroup_barrier(mem_flags flags, SIMT_HERE) {
    simt::block_barrier("threadgroup_barrier", simt_file, simt_line,
                        unsigned(flags) & (simt::kFenceDevice | simt::kFenceShared));
}

namespace simt_impl {

constexpr std::uint32_t kAllLanes = 0xffffffffu;

inline void no_compute(const void *const *, void *const *, std::uint32_t, std::uint32_t) {}

// What a lane hands to a SIMD-group operation besides its value: where it was called, for messages.
struct lane_call {
    const void *pc;
    const simt::ThreadCtx *thread;
    const char *what;
};

inline lane_call here(const void *pc, const char *what) { return lane_call{pc, &simt::current(), what}; }

#define SIMT_MSL_WHERE(c) (c).what, (c).thread->block_idx.x, (c).thread->block_idx.y, (c).thread->block_idx.z, (c).thread->warp
#define SIMT_MSL_WHERE_FMT "%s in threadgroup (%u,%u,%u), simdgroup %u: "

}  // namespace simt_impl

// Every live lane of the simdgroup waits here; the flags say which memory it orders, as for
// threadgroup_barrier.
inline void simdgroup_barrier(mem_flags flags, SIMT_HERE) {
    simt::warp_collective("simdgroup_barrier", simt_impl::kAllLanes, nullptr, nullptr, simt_impl::no_compute,
                          simt_file, simt_line, unsigned(flags) & (simt::kFenceDevice | simt::kFenceShared));
}

// ------------------------------------------------------------------------------------------------
// SIMD-group functions over the 32 lanes of a simdgroup. Lanes that have returned, or that the
// threadgroup does not have (a threadgroup of 48 threads has a simdgroup of 16), do not take part:
// reductions cover the lanes that do, and reading a lane that does not take part stops the launch
// (on a GPU the value would be undefined).

namespace simt_impl {

template <class T> constexpr bool is_simd_value_v = is_scalar_v<T>;
template <class T, int N> constexpr bool is_simd_value_v<vec<T, N>> = is_scalar_v<T>;

template <class T> struct shuffle_in {
    T value;
    int source;  // the lane to read; kFirstLane: the lowest lane taking part
    lane_call call;
};
constexpr int kFirstLane = -1;

template <class T> void shuffle_compute(const void *const *in, void *const *out, std::uint32_t taking, std::uint32_t) {
    int first = 0;
    while (!(taking >> first & 1u)) ++first;
    for (unsigned lane = 0; lane < 32; ++lane) {
        if (!(taking >> lane & 1u)) continue;
        const auto &me = *static_cast<const shuffle_in<T> *>(in[lane]);
        const int src = me.source == kFirstLane ? first : me.source;
        if (src < 0 || src >= 32)
            simt::fail(me.call.pc, SIMT_MSL_WHERE_FMT "lane %u asks for lane %d, but a simdgroup has lanes 0 to 31",
                       SIMT_MSL_WHERE(me.call), lane, src);
        if (!(taking >> src & 1u))
            simt::fail(me.call.pc, SIMT_MSL_WHERE_FMT "lane %u reads lane %d, which is not running (it has "
                       "returned, or the threadgroup has no thread there): on a GPU the value is undefined",
                       SIMT_MSL_WHERE(me.call), lane, src);
        *static_cast<T *>(out[lane]) = static_cast<const shuffle_in<T> *>(in[src])->value;
    }
}

template <class T> inline T shuffle(T value, int source, const void *pc, const char *what, const char *file, int line) {
    static_assert(is_simd_value_v<T>, "SIMD-group functions take a scalar or vector value");
    shuffle_in<T> me{value, source, here(pc, what)};
    T result;
    simt::warp_collective(what, kAllLanes, &me, &result, shuffle_compute<T>, file, line);
    return result;
}

struct op_sum {
    static constexpr int identity = 0;
    template <class T> static T apply(T a, T b) { return T(a + b); }
};
struct op_product {
    static constexpr int identity = 1;
    template <class T> static T apply(T a, T b) { return T(a * b); }
};
struct op_max { template <class T> static T apply(T a, T b) { return ::metal::max(a, b); } };
struct op_min { template <class T> static T apply(T a, T b) { return ::metal::min(a, b); } };
struct op_and { template <class T> static T apply(T a, T b) { return T(a & b); } };
struct op_or { template <class T> static T apply(T a, T b) { return T(a | b); } };
struct op_xor { template <class T> static T apply(T a, T b) { return T(a ^ b); } };

// Kind 0: reduction over the lanes taking part; 1: exclusive prefix; 2: inclusive prefix (in lane order).
template <class T, class Op, int Kind>
void scan_compute(const void *const *in, void *const *out, std::uint32_t taking, std::uint32_t) {
    T acc;
    bool any = false;
    if constexpr (Kind == 1) {
        acc = T(Op::identity);
        any = true;
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
        if (!(taking >> lane & 1u)) continue;
        const T x = *static_cast<const T *>(in[lane]);
        if (Kind == 1) *static_cast<T *>(out[lane]) = acc;
        if (any) acc = Op::apply(acc, x);
        else acc = x;
        any = true;
        if (Kind == 2) *static_cast<T *>(out[lane]) = acc;
    }
    if (Kind == 0)
        for (unsigned lane = 0; lane < 32; ++lane)
            if (taking >> lane & 1u) *static_cast<T *>(out[lane]) = acc;
}

template <class T, class Op, int Kind> inline T scan(T value, const char *what, const char *file, int line) {
    static_assert(is_simd_value_v<T>, "SIMD-group functions take a scalar or vector value");
    T result;
    simt::warp_collective(what, kAllLanes, &value, &result, scan_compute<T, Op, Kind>, file, line);
    return result;
}

inline void first_compute(const void *const *, void *const *out, std::uint32_t taking, std::uint32_t) {
    int first = 0;
    while (!(taking >> first & 1u)) ++first;
    for (int lane = 0; lane < 32; ++lane)
        if (taking >> lane & 1u) *static_cast<bool *>(out[lane]) = lane == first;
}

}  // namespace simt_impl

// Shuffles are out of line so that SIMT_PC() names the kernel's line in messages.
template <class T> __attribute__((noinline)) T simd_shuffle(T data, ushort simd_lane_id, SIMT_HERE) {
    return simt_impl::shuffle(data, int(simd_lane_id), SIMT_PC(), "simd_shuffle", simt_file, simt_line);
}
template <class T> __attribute__((noinline)) T simd_broadcast(T data, ushort broadcast_lane_id, SIMT_HERE) {
    return simt_impl::shuffle(data, int(broadcast_lane_id), SIMT_PC(), "simd_broadcast", simt_file, simt_line);
}
template <class T> __attribute__((noinline)) T simd_broadcast_first(T data, SIMT_HERE) {
    return simt_impl::shuffle(data, simt_impl::kFirstLane, SIMT_PC(), "simd_broadcast_first", simt_file, simt_line);
}
// The lanes whose source would fall outside the simdgroup keep their own value (no wrap-around).
template <class T> __attribute__((noinline)) T simd_shuffle_down(T data, ushort delta, SIMT_HERE) {
    const int lane = int(simt::current().lane), src = lane + int(delta);
    return simt_impl::shuffle(data, src < 32 ? src : lane, SIMT_PC(), "simd_shuffle_down", simt_file, simt_line);
}
template <class T> __attribute__((noinline)) T simd_shuffle_up(T data, ushort delta, SIMT_HERE) {
    const int lane = int(simt::current().lane), src = lane - int(delta);
    return simt_impl::shuffle(data, src >= 0 ? src : lane, SIMT_PC(), "simd_shuffle_up", simt_file, simt_line);
}
template <class T> __attribute__((noinline)) T simd_shuffle_xor(T data, ushort mask, SIMT_HERE) {
    const int src = int(simt::current().lane) ^ int(mask);
    return simt_impl::shuffle(data, src, SIMT_PC(), "simd_shuffle_xor", simt_file, simt_line);
}

#define SIMT_MSL_SIMD_SCAN(name, op, kind)                                                   \
    template <class T> inline T name(T data, SIMT_HERE) {                                    \
        return simt_impl::scan<T, simt_impl::op, kind>(data, #name, simt_file, simt_line);   \
    }
SIMT_MSL_SIMD_SCAN(simd_sum, op_sum, 0)
SIMT_MSL_SIMD_SCAN(simd_product, op_product, 0)
SIMT_MSL_SIMD_SCAN(simd_max, op_max, 0)
SIMT_MSL_SIMD_SCAN(simd_min, op_min, 0)
SIMT_MSL_SIMD_SCAN(simd_and, op_and, 0)
SIMT_MSL_SIMD_SCAN(simd_or, op_or, 0)
SIMT_MSL_SIMD_SCAN(simd_xor, op_xor, 0)
SIMT_MSL_SIMD_SCAN(simd_prefix_exclusive_sum, op_sum, 1)
SIMT_MSL_SIMD_SCAN(simd_prefix_inclusive_sum, op_sum, 2)
SIMT_MSL_SIMD_SCAN(simd_prefix_exclusive_product, op_product, 1)
SIMT_MSL_SIMD_SCAN(simd_prefix_inclusive_product, op_product, 2)
#undef SIMT_MSL_SIMD_SCAN
inline bool simd_all(bool value, SIMT_HERE) {
    return simt_impl::scan<bool, simt_impl::op_and, 0>(value, "simd_all", simt_file, simt_line);
}
inline bool simd_any(bool value, SIMT_HERE) {
    return simt_impl::scan<bool, simt_impl::op_or, 0>(value, "simd_any", simt_file, simt_line);
}
inline bool simd_is_first(SIMT_HERE) {
    bool result;
    simt::warp_collective("simd_is_first", simt_impl::kAllLanes, nullptr, &result, simt_impl::first_compute,
                          simt_file, simt_line);
    return result;
}

// ------------------------------------------------------------------------------------------------
// simdgroup_matrix<T, 8, 8>: an 8x8 matrix spread over the 32 lanes of a simdgroup, two elements per
// lane (thread_elements()). Which lane holds which elements is not part of MSL's specification; the
// emulation uses the layout that public Metal code (MLX's BaseMMAFrag::get_coord) relies on:
//   lane l holds row (q & 4) + (l / 2) % 4, columns c and c + 1 with c = (q & 2) * 2 + (l % 2) * 2,
//   where q = l / 4.
// Loads, stores and products are simdgroup-wide: every lane must call them at the same line, and the
// simdgroup must have all 32 lanes. Each lane loads and stores only its own two elements.

template <class T, int Cols, int Rows> struct simdgroup_matrix {
    static_assert(Cols == 8 && Rows == 8, "the CPU runtime supports 8x8 simdgroup matrices only");
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, half>,
                  "simdgroup matrices hold float or half");
    vec<T, 2> elements;

    simdgroup_matrix() = default;
    // A diagonal matrix with `diagonal` on the diagonal (MSL's constructor from a scalar).
    explicit simdgroup_matrix(T diagonal);
    vec<T, 2> &thread_elements() { return elements; }
    const vec<T, 2> &thread_elements() const { return elements; }
};
using simdgroup_float8x8 = simdgroup_matrix<float, 8, 8>;
using simdgroup_half8x8 = simdgroup_matrix<half, 8, 8>;

namespace simt_impl {

// The row and first column of the two elements lane `lane` holds.
inline void matrix_coord(unsigned lane, int &row, int &col) {
    const int q = int(lane / 4);
    row = (q & 4) + int(lane / 2) % 4;
    col = (q & 2) * 2 + int(lane % 2) * 2;
}

inline void require_whole_simdgroup(const lane_call &c, std::uint32_t taking, std::uint32_t lanes_in_warp) {
    if (lanes_in_warp < 32)
        simt::fail(c.pc, SIMT_MSL_WHERE_FMT "this simdgroup has only %u threads (the threadgroup's size is not "
                   "a multiple of 32 here); an 8x8 simdgroup matrix needs all 32 lanes",
                   SIMT_MSL_WHERE(c), lanes_in_warp);
    if (taking != kAllLanes) {
        unsigned gone = 0;
        while (taking >> gone & 1u) ++gone;
        simt::fail(c.pc, SIMT_MSL_WHERE_FMT "lane %u has already returned; an 8x8 simdgroup matrix operation "
                   "needs all 32 lanes", SIMT_MSL_WHERE(c), gone);
    }
}

inline void sync_compute(const void *const *in, void *const *, std::uint32_t taking, std::uint32_t lanes) {
    int first = 0;
    while (!(taking >> first & 1u)) ++first;
    require_whole_simdgroup(*static_cast<const lane_call *>(in[first]), taking, lanes);
}

// A collective with no data: every lane arrives (divergence is caught) before any lane goes on.
inline void matrix_sync(const void *pc, const char *what, const char *file, int line) {
    const lane_call me = here(pc, what);
    simt::warp_collective(what, kAllLanes, &me, nullptr, sync_compute, file, line);
}

template <class TA, class TB, class TC> struct mma_in {
    vec<TA, 2> a;
    vec<TB, 2> b;
    vec<TC, 2> c;
    bool accumulate;
    lane_call call;
};

// D = A * B (+ C), in float; a half result is rounded once at the end.
template <class TD, class TA, class TB, class TC>
void mma_compute(const void *const *in, void *const *out, std::uint32_t taking, std::uint32_t lanes) {
    using In = mma_in<TA, TB, TC>;
    int first = 0;
    while (!(taking >> first & 1u)) ++first;
    require_whole_simdgroup(static_cast<const In *>(in[first])->call, taking, lanes);
    float a[8][8], b[8][8], c[8][8];
    for (unsigned lane = 0; lane < 32; ++lane) {
        const In &p = *static_cast<const In *>(in[lane]);
        int row, col;
        matrix_coord(lane, row, col);
        for (int j = 0; j < 2; ++j) {
            a[row][col + j] = float(p.a.s[j]);
            b[row][col + j] = float(p.b.s[j]);
            c[row][col + j] = p.accumulate ? float(p.c.s[j]) : 0.0f;
        }
    }
    for (unsigned lane = 0; lane < 32; ++lane) {
        int row, col;
        matrix_coord(lane, row, col);
        vec<TD, 2> &d = *static_cast<vec<TD, 2> *>(out[lane]);
        for (int j = 0; j < 2; ++j) {
            float acc = c[row][col + j];
            for (int k = 0; k < 8; ++k) acc += a[row][k] * b[k][col + j];
            d.s[j] = convert<TD>(acc);
        }
    }
    const In &lead = *static_cast<const In *>(in[first]);
    simt::count_matrix_op(8, 8, 8, simt::matrix_element<TA>(), simt::matrix_element<TB>(),
                          lead.accumulate ? simt::matrix_element<TC>() : simt::kMatrixNone, simt::matrix_element<TD>(),
                          lead.call.pc);
}

template <class TD, class TA, class TB, class TC>
inline void mma(vec<TD, 2> &d, const vec<TA, 2> &a, const vec<TB, 2> &b, const vec<TC, 2> &c, bool accumulate,
                const void *pc, const char *what, const char *file, int line) {
    const mma_in<TA, TB, TC> me{a, b, c, accumulate, here(pc, what)};
    vec<TD, 2> result;
    simt::warp_collective(what, kAllLanes, &me, &result, mma_compute<TD, TA, TB, TC>, file, line);
    d = result;
}

// Where element (row, col) of the 8x8 matrix lives in memory.
inline std::size_t matrix_offset(int row, int col, ulong elements_per_row, ulong origin_col, ulong origin_row,
                                 bool transpose) {
    return transpose ? (origin_row + ulong(col)) * elements_per_row + origin_col + ulong(row)
                     : (origin_row + ulong(row)) * elements_per_row + origin_col + ulong(col);
}

}  // namespace simt_impl

template <class T, int Cols, int Rows> simdgroup_matrix<T, Cols, Rows>::simdgroup_matrix(T diagonal) {
    int row, col;
    simt_impl::matrix_coord(simt::current().lane, row, col);
    for (int j = 0; j < 2; ++j) elements.s[j] = row == col + j ? diagonal : T(0);
}

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
    simdgroup_matrix<T, Cols, Rows> m;
    m.elements = vec<T, 2>(value);
    return m;
}

// Loads the 8x8 block whose top-left element is src[origin.y * elements_per_row + origin.x] (origin is
// (column, row) in the source). transpose_matrix: the matrix gets the block's transpose.
template <class T, int Cols, int Rows>
SIMT_RUNTIME_FN void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src,
                                    ulong elements_per_row = Cols, ulong2 matrix_origin = ulong2(0),
                                    bool transpose_matrix = false, SIMT_HERE) {
    const void *pc = SIMT_PC();
    int row, col;
    simt_impl::matrix_coord(simt::current().lane, row, col);
    const T *p[2];
    for (int j = 0; j < 2; ++j)
        p[j] = src + simt_impl::matrix_offset(row, col + j, elements_per_row, matrix_origin.x, matrix_origin.y,
                                              transpose_matrix);
#if SIMT_CHECKED
    // For racecheck, a load reads when the lane reaches it, before the lanes meet: the meeting orders no
    // memory, so what other lanes wrote just before needs a simdgroup_barrier in between (as for CUDA's
    // wmma::load_matrix_sync). A store is recorded after the meeting (below).
    for (int j = 0; j < 2; ++j) simt::note_access(p[j], sizeof(T), simt::kRead, pc);
#endif
    simt_impl::matrix_sync(pc, "simdgroup_load", simt_file, simt_line);
    for (int j = 0; j < 2; ++j) d.elements.s[j] = *p[j];
}

template <class T, int Cols, int Rows>
SIMT_RUNTIME_FN void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &m, T *dst,
                                     ulong elements_per_row = Cols, ulong2 matrix_origin = ulong2(0),
                                     bool transpose_matrix = false, SIMT_HERE) {
    const void *pc = SIMT_PC();
    simt_impl::matrix_sync(pc, "simdgroup_store", simt_file, simt_line);
    int row, col;
    simt_impl::matrix_coord(simt::current().lane, row, col);
    for (int j = 0; j < 2; ++j) {
        T *p = dst + simt_impl::matrix_offset(row, col + j, elements_per_row, matrix_origin.x, matrix_origin.y,
                                              transpose_matrix);
#if SIMT_CHECKED
        simt::note_access(p, sizeof(T), simt::kWrite, pc);
#endif
        *p = m.elements.s[j];
    }
}

template <class TD, class TA, class TB, int C, int R>
__attribute__((noinline)) void simdgroup_multiply(simdgroup_matrix<TD, C, R> &d, const simdgroup_matrix<TA, C, R> &a,
                                                  const simdgroup_matrix<TB, C, R> &b, SIMT_HERE) {
    simt_impl::mma(d.elements, a.elements, b.elements, a.elements, false, SIMT_PC(), "simdgroup_multiply",
                   simt_file, simt_line);
}

template <class TD, class TA, class TB, class TC, int C, int R>
__attribute__((noinline)) void simdgroup_multiply_accumulate(simdgroup_matrix<TD, C, R> &d,
                                                             const simdgroup_matrix<TA, C, R> &a,
                                                             const simdgroup_matrix<TB, C, R> &b,
                                                             const simdgroup_matrix<TC, C, R> &c, SIMT_HERE) {
    simt_impl::mma(d.elements, a.elements, b.elements, c.elements, true, SIMT_PC(),
                   "simdgroup_multiply_accumulate", simt_file, simt_line);
}

// ------------------------------------------------------------------------------------------------
// Atomics (device or threadgroup memory). Real atomic instructions: in fast mode blocks run on several
// OS threads at once. Out of line and reported to the checkers as atomic accesses.

enum memory_order { memory_order_relaxed = 0 };

template <class T> struct atomic {
    static_assert(std::is_same_v<T, int> || std::is_same_v<T, uint> || std::is_same_v<T, float> ||
                      std::is_same_v<T, bool>,
                  "Metal has atomic_int, atomic_uint, atomic_bool and atomic_float");
    T value;
    constexpr atomic() : value() {}  // constant-initialised: see vec_base
    atomic(const atomic &) = delete;
    atomic &operator=(const atomic &) = delete;
};
using atomic_int = atomic<int>;
using atomic_uint = atomic<uint>;
using atomic_bool = atomic<bool>;
using atomic_float = atomic<float>;

namespace simt_impl {
template <class T> struct id { using type = T; };
template <class T> using id_t = typename id<T>::type;  // keeps an argument out of template deduction

// Helpers of the SIMT_RUNTIME_FN functions below. They carry the same no-sanitize attributes so that
// GCC inlines them there (it does not inline across differing sanitizer attributes), which keeps
// their atomic instructions out of the checked build's instrumentation: the accesses are reported
// once, as atomic, by note_atomic.
#define SIMT_MSL_UNCHECKED_INLINE __attribute__((always_inline, SIMT_NO_SANITIZE)) inline

template <class T> SIMT_MSL_UNCHECKED_INLINE T *atomic_address(const volatile atomic<T> *obj) {
    return const_cast<T *>(&obj->value);
}
SIMT_MSL_UNCHECKED_INLINE void note_atomic(const void *p, std::size_t bytes, const void *pc) {
#if SIMT_CHECKED
    simt::note_access(p, bytes, simt::kAtomic, pc);
#else
    (void)p, (void)bytes, (void)pc;
#endif
}

enum class rmw { add, sub, max, min };

// An update with no atomic instruction of its own (float add/sub, max, min): a compare-and-swap loop
// on the value's bits.
template <class T> SIMT_MSL_UNCHECKED_INLINE T cas_loop(T *p, T operand, rmw op) {
    static_assert(sizeof(T) == 4, "32-bit atomics only");
    std::uint32_t *bits = reinterpret_cast<std::uint32_t *>(p);
    std::uint32_t old = __atomic_load_n(bits, __ATOMIC_RELAXED);
    for (;;) {
        T value, next;
        __builtin_memcpy(&value, &old, 4);
        switch (op) {
        case rmw::add: next = value + operand; break;
        case rmw::sub: next = value - operand; break;
        case rmw::max: next = value < operand ? operand : value; break;
        default: next = operand < value ? operand : value; break;
        }
        std::uint32_t next_bits;
        __builtin_memcpy(&next_bits, &next, 4);
        if (__atomic_compare_exchange_n(bits, &old, next_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return value;
    }
}
}  // namespace simt_impl

template <class T>
SIMT_RUNTIME_FN void atomic_store_explicit(volatile atomic<T> *obj, simt_impl::id_t<T> desired, memory_order) {
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    __atomic_store(p, &desired, __ATOMIC_RELAXED);
}

template <class T> SIMT_RUNTIME_FN T atomic_load_explicit(const volatile atomic<T> *obj, memory_order) {
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    T v;
    __atomic_load(p, &v, __ATOMIC_RELAXED);
    return v;
}

template <class T>
SIMT_RUNTIME_FN T atomic_exchange_explicit(volatile atomic<T> *obj, simt_impl::id_t<T> desired, memory_order) {
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    T old;
    __atomic_exchange(p, &desired, &old, __ATOMIC_RELAXED);
    return old;
}

// Weak compare-and-exchange: on failure *expected receives the current value.
template <class T>
SIMT_RUNTIME_FN bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *obj, simt_impl::id_t<T> *expected,
                                                           simt_impl::id_t<T> desired, memory_order, memory_order) {
    static_assert(!std::is_same_v<T, float>,
                  "atomic_float supports add, sub, exchange, load and store only (as in Metal); use an "
                  "atomic_uint and as_type<uint>() for a compare-and-exchange loop");
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    return __atomic_compare_exchange(p, expected, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

template <class T>
SIMT_RUNTIME_FN T atomic_fetch_add_explicit(volatile atomic<T> *obj, simt_impl::id_t<T> operand, memory_order) {
    static_assert(!std::is_same_v<T, bool>, "atomic_bool has no fetch_add");
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    if constexpr (std::is_same_v<T, float>) return simt_impl::cas_loop(p, operand, simt_impl::rmw::add);
    else return __atomic_fetch_add(p, operand, __ATOMIC_RELAXED);
}

template <class T>
SIMT_RUNTIME_FN T atomic_fetch_sub_explicit(volatile atomic<T> *obj, simt_impl::id_t<T> operand, memory_order) {
    static_assert(!std::is_same_v<T, bool>, "atomic_bool has no fetch_sub");
    T *p = simt_impl::atomic_address(obj);
    simt_impl::note_atomic(p, sizeof(T), SIMT_PC());
    if constexpr (std::is_same_v<T, float>) return simt_impl::cas_loop(p, operand, simt_impl::rmw::sub);
    else return __atomic_fetch_sub(p, operand, __ATOMIC_RELAXED);
}

#define SIMT_MSL_ATOMIC_INT_OP(name, body)                                                                       \
    template <class T>                                                                                           \
    SIMT_RUNTIME_FN T name(volatile atomic<T> *obj, simt_impl::id_t<T> operand, memory_order) {                  \
        static_assert(std::is_same_v<T, int> || std::is_same_v<T, uint>,                                        \
                      #name " works on atomic_int and atomic_uint only (atomic_float supports add, sub, "        \
                      "exchange, load and store, as in Metal)");                                                  \
        T *p = simt_impl::atomic_address(obj);                                                                   \
        simt_impl::note_atomic(p, sizeof(T), SIMT_PC());                                                         \
        body;                                                                                                    \
    }
SIMT_MSL_ATOMIC_INT_OP(atomic_fetch_max_explicit, return simt_impl::cas_loop(p, operand, simt_impl::rmw::max))
SIMT_MSL_ATOMIC_INT_OP(atomic_fetch_min_explicit, return simt_impl::cas_loop(p, operand, simt_impl::rmw::min))
SIMT_MSL_ATOMIC_INT_OP(atomic_fetch_and_explicit, return __atomic_fetch_and(p, operand, __ATOMIC_RELAXED))
SIMT_MSL_ATOMIC_INT_OP(atomic_fetch_or_explicit, return __atomic_fetch_or(p, operand, __ATOMIC_RELAXED))
SIMT_MSL_ATOMIC_INT_OP(atomic_fetch_xor_explicit, return __atomic_fetch_xor(p, operand, __ATOMIC_RELAXED))
#undef SIMT_MSL_ATOMIC_INT_OP
#undef SIMT_MSL_UNCHECKED_INLINE

#undef SIMT_MSL_WHERE
#undef SIMT_MSL_WHERE_FMT

}  // namespace metal

// ------------------------------------------------------------------------------------------------
// Calling a kernel: the compiler driver emits, per kernel, `simt::metal::invoke<kinds...>(k, args)`
// with one simt::ParamKind per parameter (buffer, threadgroup memory, or a position attribute).

namespace simt {
namespace metal {

inline Dim3 position(int kind) {
    const ThreadCtx &t = current();
    switch (kind) {
    case kThreadPositionInGrid:
        return Dim3{t.block_idx.x * t.block_dim.x + t.thread_idx.x, t.block_idx.y * t.block_dim.y + t.thread_idx.y,
                    t.block_idx.z * t.block_dim.z + t.thread_idx.z};
    case kThreadgroupPositionInGrid: return t.block_idx;
    case kThreadPositionInThreadgroup: return t.thread_idx;
    case kThreadIndexInThreadgroup: return Dim3{t.linear, 0, 0};
    case kThreadsPerThreadgroup: return t.block_dim;
    case kThreadgroupsPerGrid: return t.grid_dim;
    case kThreadsPerGrid:
        return Dim3{t.grid_dim.x * t.block_dim.x, t.grid_dim.y * t.block_dim.y, t.grid_dim.z * t.block_dim.z};
    case kThreadIndexInSimdgroup: return Dim3{t.lane, 0, 0};
    case kSimdgroupIndexInThreadgroup: return Dim3{t.warp, 0, 0};
    case kSimdgroupsPerThreadgroup: return Dim3{t.warps, 0, 0};
    case kThreadsPerSimdgroup: return Dim3{kWarpSize, 0, 0};
    default: return Dim3{0, 0, 0};
    }
}

template <class T> struct is_index_vec : std::false_type {};
template <class T, int N> struct is_index_vec<::metal::vec<T, N>> : std::bool_constant<std::is_integral_v<T> && N <= 3> {};

// A position in the parameter's declared type: uint/ushort take x; 2- and 3-vectors x, y (, z).
template <int Kind, class P> P position_as() {
    const Dim3 d = position(Kind);
    constexpr bool scalar_only = Kind == kThreadIndexInThreadgroup || Kind >= kThreadIndexInSimdgroup;
    if constexpr (std::is_integral_v<P>) {
        return static_cast<P>(d.x);
    } else {
        static_assert(is_index_vec<P>::value && !scalar_only,
                      "a position attribute's parameter must be uint or ushort (grid and threadgroup "
                      "positions and sizes may also be uint2/uint3/ushort2/ushort3)");
        using E = typename P::value_type;
        P v;
        v.s[0] = static_cast<E>(d.x);
        v.s[1] = static_cast<E>(d.y);
        if constexpr (P::elements == 3) v.s[2] = static_cast<E>(d.z);
        return v;
    }
}

template <int Kind, class P> decltype(auto) argument(void *arg) {
    using D = std::remove_cv_t<std::remove_reference_t<P>>;
    if constexpr (Kind == kArgument) {
        return *static_cast<std::remove_reference_t<P> *>(arg);
    } else if constexpr (Kind == kThreadgroupMemory) {
        static_assert(std::is_pointer_v<D>, "a [[threadgroup(n)]] parameter must be a pointer");
        return static_cast<D>(threadgroup_arena(*static_cast<int *>(arg)));
    } else {
        static_assert(!std::is_reference_v<P>, "a position attribute's parameter must be a value, not a reference");
        return position_as<Kind, D>();
    }
}

template <int... Kinds, class... P, std::size_t... I>
void invoke_each(void (*kernel)(P...), void **args, std::index_sequence<I...>) {
    kernel(argument<Kinds, P>(args[I])...);
}

template <int... Kinds, class... P> void invoke(void (*kernel)(P...), void **args) {
    static_assert(sizeof...(Kinds) == sizeof...(P), "one ParamKind per kernel parameter");
    invoke_each<Kinds...>(kernel, args, std::index_sequence_for<P...>{});
}

}  // namespace metal
}  // namespace simt

// MSL's types are visible without `using namespace metal`.
using metal::half;
using metal::uchar;
using metal::uint;
using metal::ushort;
using metal::ulong;
#define SIMT_MSL_GLOBAL_VEC(name) using metal::name##2; using metal::name##3; using metal::name##4;
SIMT_MSL_GLOBAL_VEC(bool)
SIMT_MSL_GLOBAL_VEC(char)
SIMT_MSL_GLOBAL_VEC(uchar)
SIMT_MSL_GLOBAL_VEC(short)
SIMT_MSL_GLOBAL_VEC(ushort)
SIMT_MSL_GLOBAL_VEC(int)
SIMT_MSL_GLOBAL_VEC(uint)
SIMT_MSL_GLOBAL_VEC(long)
SIMT_MSL_GLOBAL_VEC(ulong)
SIMT_MSL_GLOBAL_VEC(half)
SIMT_MSL_GLOBAL_VEC(float)
#undef SIMT_MSL_GLOBAL_VEC

// Half literals: 1.0h, 0.5h.
inline metal::half operator"" h(long double v) { return metal::half(static_cast<double>(v)); }

// Metal has no device printf (MSL 3.2 logs with os_log instead): using it is a compile error here too,
// rather than text printed into nowhere.
#pragma GCC poison printf

// Address-space qualifiers and `kernel`: MSL keywords with no meaning on a CPU. Defined last, so that
// nothing above sees them.
#define kernel
#define device
#define constant
#define thread
#define threadgroup
