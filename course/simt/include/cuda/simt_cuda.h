// CUDA C on the CPU: what a .cu file may use in device code, built on the SIMT core (simt_core.h).
//
// The compiler driver puts `#include "simt_cuda.h"` in front of the learner's file, so everything
// nvcc makes available without an include (cuda_runtime.h and what it pulls in) is here; __half and
// friends need <cuda_fp16.h>, nvcuda::wmma needs <mma.h> and CUDART_* constants <math_constants.h>,
// exactly as with nvcc (those shims sit next to this file).
//
// Rules a GPU enforces by faulting are enforced here by stopping the launch with a sentence, in
// every build: misaligned vector and atomic accesses, shuffles that read a lane not taking part,
// wmma pointers that are not 256-bit aligned. The keyword macros (__global__, __shared__, ...) and
// threadIdx & co. come last, so that no code in this header sees them.
#pragma once
#pragma GCC system_header

#include <assert.h>  // nvcc's cuda_runtime.h brings assert, printf, malloc and memcpy along too
#include <cfloat>
#include <climits>
#include <cmath>
#include <math.h>  // unqualified isnan/isinf/signbit, as in device code
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>

#include "simt_core.h"
#include "simt_half.h"
#include "simt_invoke.h"

// Inline helpers of runtime functions: no instrumentation (they report their accesses themselves),
// and always inlined so that SIMT_PC() in the SIMT_RUNTIME_FN around them still names the kernel.
#define SIMT_CUDA_UNINSTRUMENTED __attribute__((always_inline, SIMT_NO_SANITIZE)) inline
// Functions handed to simt::warp_collective: they read other lanes' values on other fibers' stacks.
#define SIMT_CUDA_COMPUTE __attribute__((noinline, SIMT_NO_SANITIZE))
// Inlined into the kernel, so that the accesses they make are reported at the kernel's line.
#define SIMT_CUDA_ACCESS __attribute__((always_inline)) inline
// Runtime entry points (SIMT_RUNTIME_FN) take SIMT_PC() as the kernel's line. Called in tail position,
// one would return straight to the kernel's caller (g++ -O2 turns such calls into jumps), so the
// public functions are inline wrappers that call the entry point and then do something (nothing,
// in an asm statement the compiler must keep after the call).
#define SIMT_CUDA_WRAPPER __attribute__((always_inline)) inline
#define SIMT_CUDA_AFTER_CALL() __asm__ __volatile__("")

namespace simt {
namespace cuda {
namespace detail {

// A vector type's element in a braced initializer. Converting to it is a user-defined conversion,
// which C++ does not chain into another one: `float4 v = {1, 2, 3, 4}` and `{0}` work as for
// CUDA's aggregates, while `float4 v = 1.0f` (which nvcc rejects) does not compile either.
template <class T> struct Elem {
    T v;
    template <class U, class = std::enable_if_t<std::is_convertible<U, T>::value>>
    Elem(const U &u) : v(static_cast<T>(u)) {}
};

// Out of line and never inlined: its return address lies in the kernel's code (where the checking
// copy was inlined), so the report names the kernel's line.
[[noreturn]] SIMT_RUNTIME_FN __attribute__((cold)) inline void misaligned_vector(const void *dst, const void *src,
                                                                                 unsigned align, const char *type) {
    const bool load = reinterpret_cast<uintptr_t>(src) % align != 0;
    const void *addr = load ? src : dst;
    fail(SIMT_PC(),
         "misaligned %s %s at address %p (%u bytes past a %u-byte boundary): a GPU faults unless a %s is %s "
         "an address that is a multiple of %u. Check the offset of the pointer you cast to %s*.",
         type, load ? "load" : "store", addr, unsigned(reinterpret_cast<uintptr_t>(addr) % align), align, type,
         load ? "read from" : "written to", align, type);
}

// Every copy of a vector type is a vector load or store on a GPU, and must be aligned to its size.
__attribute__((always_inline, artificial)) inline void check_vector(const void *dst, const void *src,
                                                                     unsigned align, const char *type) {
    if (__builtin_expect(((SIMT_ADDRESS_BITS(dst) | SIMT_ADDRESS_BITS(src)) & (align - 1)) != 0, 0))
        misaligned_vector(dst, src, align, type);
#if SIMT_CHECKED
    note_vector(dst, src, align);  // counters mode: one vector access (the size of these types is their alignment)
#endif
}

}  // namespace detail
}  // namespace cuda
}  // namespace simt

// ------------------------------------------------------------------------------------------------
// Vector types. Those aligned beyond their element (float2, float4, int2, ...) are copied through a
// constructor that checks alignment, so `*(float4 *)(p + 1)` stops the launch as it faults on a GPU.
// CUDA gives them no arithmetic operators, and neither does this header.

#define SIMT_CUDA_VEC2(NAME, T, ALIGN)                                                                    \
    struct alignas(ALIGN) NAME {                                                                          \
        T x, y;                                                                                           \
        /* constexpr and zeroing: a __shared__ array of them is then constant-initialised, with no */    \
        /* hidden "initialised yet?" guard that every thread would touch (racecheck would see it)   */    \
        constexpr NAME() : x(), y() {}                                                                    \
        NAME(::simt::cuda::detail::Elem<T> a, ::simt::cuda::detail::Elem<T> b = 0) : x(a.v), y(b.v) {} \
        __attribute__((always_inline, artificial)) NAME(const NAME &o) {                                  \
            ::simt::cuda::detail::check_vector(this, &o, ALIGN, #NAME);                                   \
            x = o.x;                                                                                      \
            y = o.y;                                                                                      \
        }                                                                                                 \
        __attribute__((always_inline, artificial)) NAME &operator=(const NAME &o) {                       \
            ::simt::cuda::detail::check_vector(this, &o, ALIGN, #NAME);                                   \
            x = o.x;                                                                                      \
            y = o.y;                                                                                      \
            return *this;                                                                                 \
        }                                                                                                 \
    };                                                                                                    \
    inline NAME make_##NAME(T x, T y) {                                                                   \
        NAME r;                                                                                           \
        r.x = x;                                                                                          \
        r.y = y;                                                                                          \
        return r;                                                                                         \
    }

#define SIMT_CUDA_VEC4(NAME, T, ALIGN)                                                                    \
    struct alignas(ALIGN) NAME {                                                                          \
        T x, y, z, w;                                                                                     \
        constexpr NAME() : x(), y(), z(), w() {} /* see the two-element version */                        \
        NAME(::simt::cuda::detail::Elem<T> a, ::simt::cuda::detail::Elem<T> b = 0,                     \
             ::simt::cuda::detail::Elem<T> c = 0, ::simt::cuda::detail::Elem<T> d = 0)                \
            : x(a.v), y(b.v), z(c.v), w(d.v) {}                                                           \
        __attribute__((always_inline, artificial)) NAME(const NAME &o) {                                  \
            ::simt::cuda::detail::check_vector(this, &o, ALIGN, #NAME);                                   \
            x = o.x;                                                                                      \
            y = o.y;                                                                                      \
            z = o.z;                                                                                      \
            w = o.w;                                                                                      \
        }                                                                                                 \
        __attribute__((always_inline, artificial)) NAME &operator=(const NAME &o) {                       \
            ::simt::cuda::detail::check_vector(this, &o, ALIGN, #NAME);                                   \
            x = o.x;                                                                                      \
            y = o.y;                                                                                      \
            z = o.z;                                                                                      \
            w = o.w;                                                                                      \
            return *this;                                                                                 \
        }                                                                                                 \
    };                                                                                                    \
    inline NAME make_##NAME(T x, T y, T z, T w) {                                                         \
        NAME r;                                                                                           \
        r.x = x;                                                                                          \
        r.y = y;                                                                                          \
        r.z = z;                                                                                          \
        r.w = w;                                                                                          \
        return r;                                                                                         \
    }

// Three-element types have their element's alignment: plain aggregates, as in CUDA.
#define SIMT_CUDA_VEC3(NAME, T)                                                                           \
    struct NAME {                                                                                         \
        T x, y, z;                                                                                        \
    };                                                                                                    \
    inline NAME make_##NAME(T x, T y, T z) { return NAME{x, y, z}; }

SIMT_CUDA_VEC2(float2, float, 8)
SIMT_CUDA_VEC4(float4, float, 16)
SIMT_CUDA_VEC2(int2, int, 8)
SIMT_CUDA_VEC4(int4, int, 16)
SIMT_CUDA_VEC2(uint2, unsigned int, 8)
SIMT_CUDA_VEC4(uint4, unsigned int, 16)
SIMT_CUDA_VEC2(double2, double, 16)
SIMT_CUDA_VEC2(longlong2, long long, 16)
SIMT_CUDA_VEC2(ulonglong2, unsigned long long, 16)
SIMT_CUDA_VEC3(float3, float)
SIMT_CUDA_VEC3(int3, int)
SIMT_CUDA_VEC3(uint3, unsigned int)
SIMT_CUDA_VEC3(double3, double)

#undef SIMT_CUDA_VEC3

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ------------------------------------------------------------------------------------------------
// The running thread: threadIdx & co. are macros (at the end) calling these.

namespace simt {
namespace cuda {
namespace detail {
inline uint3 to_uint3(const Dim3 &d) { return uint3{d.x, d.y, d.z}; }
inline uint3 thread_idx() { return to_uint3(current().thread_idx); }
inline uint3 block_idx() { return to_uint3(current().block_idx); }
inline dim3 block_dim() { return dim3(to_uint3(current().block_dim)); }
inline dim3 grid_dim() { return dim3(to_uint3(current().grid_dim)); }
}  // namespace detail
}  // namespace cuda
}  // namespace simt

constexpr int warpSize = 32;

// ------------------------------------------------------------------------------------------------
// Synchronisation.

inline void __syncthreads(SIMT_HERE) { ::simt::block_barrier("__syncthreads()", simt_file, simt_line); }

// Memory fences: blocks may run on several OS threads, and a fence orders their accesses as on a GPU.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

namespace simt {
namespace cuda {
namespace detail {

// Lanes of `bits` as text, e.g. "5, 8-11".
inline void lane_list(uint32_t bits, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < kWarpSize && n < size;) {
        if (!(bits >> i & 1u)) { ++i; continue; }
        unsigned j = i;
        while (j + 1 < kWarpSize && (bits >> (j + 1) & 1u)) ++j;
        n += size_t(snprintf(buf + n, size - n, j > i ? "%s%u-%u" : "%s%u", n ? ", " : "", i, j));
        i = j + 1;
    }
}

inline void warp_sync_compute(const void *const *, void *const *, uint32_t, uint32_t) {}

}  // namespace detail
}  // namespace cuda
}  // namespace simt

// Waits for the lanes in `mask` (each must name itself, the runtime checks it).
inline void __syncwarp(unsigned mask = 0xffffffffu, SIMT_HERE) {
    ::simt::warp_collective("__syncwarp()", mask, nullptr, nullptr, &::simt::cuda::detail::warp_sync_compute,
                            simt_file, simt_line);
}

// ------------------------------------------------------------------------------------------------
// Atomics: real ones (blocks may run on several OS threads at once), relaxed as CUDA's are, on a
// naturally aligned address as the GPU requires; reported as atomic accesses in checked builds.

namespace simt {
namespace cuda {
namespace detail {

enum class AtomicOp { kAdd, kSub, kExch, kMin, kMax, kAnd, kOr, kXor, kInc, kDec };

template <class T> SIMT_CUDA_UNINSTRUMENTED void atomic_prologue(const char *what, T *addr, const void *pc) {
    if (SIMT_ADDRESS_BITS(addr) % sizeof(T) != 0)
        fail(pc, "misaligned %s at address %p: an atomic on a %u-byte value needs an address that is a multiple of %u",
             what, static_cast<void *>(addr), unsigned(sizeof(T)), unsigned(sizeof(T)));
#if SIMT_CHECKED
    note_access(addr, sizeof(T), kAtomic, pc);
#endif
}

template <AtomicOp op, class T> SIMT_CUDA_UNINSTRUMENTED T atomic_apply(T old, T val) {
    if constexpr (op == AtomicOp::kAdd) return T(old + val);
    else if constexpr (op == AtomicOp::kSub) return T(old - val);
    else if constexpr (op == AtomicOp::kExch) return val;
    else if constexpr (op == AtomicOp::kMin) return val < old ? val : old;
    else if constexpr (op == AtomicOp::kMax) return val > old ? val : old;
    else if constexpr (op == AtomicOp::kAnd) return T(old & val);
    else if constexpr (op == AtomicOp::kOr) return T(old | val);
    else if constexpr (op == AtomicOp::kXor) return T(old ^ val);
    else if constexpr (op == AtomicOp::kInc) return old >= val ? T(0) : T(old + 1);
    else return (old == 0 || old > val) ? val : T(old - 1);  // kDec
}

// Read-modify-write; the old value is returned, as CUDA's atomics do.
template <AtomicOp op, class T>
SIMT_CUDA_UNINSTRUMENTED T atomic_rmw(const char *what, T *addr, T val, const void *pc) {
    atomic_prologue(what, addr, pc);
    if constexpr (std::is_integral<T>::value && op == AtomicOp::kAdd) {
        return __atomic_fetch_add(addr, val, __ATOMIC_RELAXED);
    } else if constexpr (std::is_integral<T>::value && op == AtomicOp::kSub) {
        return __atomic_fetch_sub(addr, val, __ATOMIC_RELAXED);
    } else if constexpr (std::is_integral<T>::value && op == AtomicOp::kAnd) {
        return __atomic_fetch_and(addr, val, __ATOMIC_RELAXED);
    } else if constexpr (std::is_integral<T>::value && op == AtomicOp::kOr) {
        return __atomic_fetch_or(addr, val, __ATOMIC_RELAXED);
    } else if constexpr (std::is_integral<T>::value && op == AtomicOp::kXor) {
        return __atomic_fetch_xor(addr, val, __ATOMIC_RELAXED);
    } else if constexpr (op == AtomicOp::kExch) {
        T old;
        __atomic_exchange(addr, &val, &old, __ATOMIC_RELAXED);
        return old;
    } else {
        // No single instruction on a CPU (float add, min, max, inc, dec): compare-and-swap loop on
        // the value's bytes.
        T old, desired;
        __atomic_load(addr, &old, __ATOMIC_RELAXED);
        do {
            desired = atomic_apply<op, T>(old, val);
        } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        return old;
    }
}

template <class T> SIMT_CUDA_UNINSTRUMENTED T atomic_cas(T *addr, T compare, T val, const void *pc) {
    atomic_prologue("atomicCAS", addr, pc);
    __atomic_compare_exchange(addr, &compare, &val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value, whether or not the swap happened
}

template <AtomicOp op, class T> SIMT_RUNTIME_FN T atomic_entry(const char *what, T *addr, T val) {
    return atomic_rmw<op, T>(what, addr, val, SIMT_PC());
}
template <class T> SIMT_RUNTIME_FN T atomic_cas_entry(T *addr, T compare, T val) {
    return atomic_cas<T>(addr, compare, val, SIMT_PC());
}

}  // namespace detail
}  // namespace cuda
}  // namespace simt

#define SIMT_CUDA_ATOMIC(NAME, OP, T)                                                                     \
    SIMT_CUDA_WRAPPER T NAME(T *address, T val) {                                                         \
        const T old = ::simt::cuda::detail::atomic_entry<::simt::cuda::detail::AtomicOp::OP, T>(#NAME,   \
                                                                                               address, val); \
        SIMT_CUDA_AFTER_CALL();                                                                           \
        return old;                                                                                       \
    }
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, int)
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, unsigned int)
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, unsigned long long)
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, float)
SIMT_CUDA_ATOMIC(atomicAdd, kAdd, double)
SIMT_CUDA_ATOMIC(atomicSub, kSub, int)
SIMT_CUDA_ATOMIC(atomicSub, kSub, unsigned int)
SIMT_CUDA_ATOMIC(atomicExch, kExch, int)
SIMT_CUDA_ATOMIC(atomicExch, kExch, unsigned int)
SIMT_CUDA_ATOMIC(atomicExch, kExch, unsigned long long)
SIMT_CUDA_ATOMIC(atomicExch, kExch, float)
SIMT_CUDA_ATOMIC(atomicMin, kMin, int)
SIMT_CUDA_ATOMIC(atomicMin, kMin, unsigned int)
SIMT_CUDA_ATOMIC(atomicMin, kMin, long long)
SIMT_CUDA_ATOMIC(atomicMin, kMin, unsigned long long)
SIMT_CUDA_ATOMIC(atomicMax, kMax, int)
SIMT_CUDA_ATOMIC(atomicMax, kMax, unsigned int)
SIMT_CUDA_ATOMIC(atomicMax, kMax, long long)
SIMT_CUDA_ATOMIC(atomicMax, kMax, unsigned long long)
SIMT_CUDA_ATOMIC(atomicAnd, kAnd, int)
SIMT_CUDA_ATOMIC(atomicAnd, kAnd, unsigned int)
SIMT_CUDA_ATOMIC(atomicAnd, kAnd, unsigned long long)
SIMT_CUDA_ATOMIC(atomicOr, kOr, int)
SIMT_CUDA_ATOMIC(atomicOr, kOr, unsigned int)
SIMT_CUDA_ATOMIC(atomicOr, kOr, unsigned long long)
SIMT_CUDA_ATOMIC(atomicXor, kXor, int)
SIMT_CUDA_ATOMIC(atomicXor, kXor, unsigned int)
SIMT_CUDA_ATOMIC(atomicXor, kXor, unsigned long long)
SIMT_CUDA_ATOMIC(atomicInc, kInc, unsigned int)
SIMT_CUDA_ATOMIC(atomicDec, kDec, unsigned int)

#define SIMT_CUDA_ATOMIC_CAS(T)                                                                           \
    SIMT_CUDA_WRAPPER T atomicCAS(T *address, T compare, T val) {                                         \
        const T old = ::simt::cuda::detail::atomic_cas_entry<T>(address, compare, val);                   \
        SIMT_CUDA_AFTER_CALL();                                                                           \
        return old;                                                                                       \
    }
SIMT_CUDA_ATOMIC_CAS(int)
SIMT_CUDA_ATOMIC_CAS(unsigned int)
SIMT_CUDA_ATOMIC_CAS(unsigned long long)
SIMT_CUDA_ATOMIC_CAS(unsigned short)
#undef SIMT_CUDA_ATOMIC_CAS

// ------------------------------------------------------------------------------------------------
// Warp shuffles and votes, with PTX's exact rules (shfl.sync): only the low 5 bits of the lane or
// offset count; `width` splits the warp into segments; a source outside the caller's segment gives
// the caller its own value (up, down, and xor toward a later segment; idx wraps within the
// segment). Reading a lane that does not take part is undefined on a GPU: here it stops the launch.

namespace simt {
namespace cuda {
namespace detail {

enum class Shfl { kIdx, kUp, kDown, kXor };

struct ShflLane {
    const void *value;
    unsigned src;  // the lane whose value this lane receives (its own when out of segment)
    uint32_t mask;
    const void *pc;
    const char *what;
};

[[noreturn]] inline void fail_unreadable(const ShflLane &me, unsigned lane, uint32_t part, uint32_t lanes_in_warp) {
    const unsigned src = me.src;
    char why[160];
    if (src >= lanes_in_warp)
        snprintf(why, sizeof why, "which does not exist: this warp has only %u lanes (the block's size is not a "
                 "multiple of 32)", lanes_in_warp);
    else if (!(me.mask >> src & 1u))
        snprintf(why, sizeof why, "which is not in the mask 0x%08x", me.mask);
    else
        snprintf(why, sizeof why, "which has already returned from the kernel");
    char taking[128];
    lane_list(part, taking, sizeof taking);
    fail(me.pc, "%s in warp %u of block (%u,%u,%u): lane %u reads lane %u, %s. A shuffle may only read lanes "
         "that take part in it (here lanes %s); on a GPU this value would be undefined.",
         me.what, current().warp, current().block_idx.x, current().block_idx.y, current().block_idx.z, lane, src,
         why, taking);
}

template <class T>
SIMT_CUDA_COMPUTE void shfl_compute(const void *const *in, void *const *out, uint32_t part, uint32_t lanes_in_warp) {
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        if (!(part >> lane & 1u)) continue;
        const auto &me = *static_cast<const ShflLane *>(in[lane]);
        if (!(part >> me.src & 1u)) fail_unreadable(me, lane, part, lanes_in_warp);
    }
    // Every lane's value is read before any result is written: a lane's `out` may be its `in`.
    // Raw bytes: these are values on the lanes' stacks, not vector loads of the kernel.
    unsigned char values[kWarpSize][sizeof(T)];
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (part >> lane & 1u) __builtin_memcpy(values[lane], static_cast<const ShflLane *>(in[lane])->value, sizeof(T));
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (part >> lane & 1u)
            __builtin_memcpy(out[lane], values[static_cast<const ShflLane *>(in[lane])->src], sizeof(T));
}

// The source lane for PTX's shfl.sync with b = `b` and c = ((32 - width) << 8) | (up ? 0 : 31).
inline unsigned shfl_source(Shfl mode, unsigned lane, int b, int width) {
    const unsigned seg_start = lane & ~unsigned(width - 1), seg_end = seg_start + unsigned(width) - 1;
    const int bval = b & 31;
    int j = 0;
    switch (mode) {
        case Shfl::kIdx: return seg_start + (unsigned(bval) & unsigned(width - 1));
        case Shfl::kUp: j = int(lane) - bval; return j >= int(seg_start) ? unsigned(j) : lane;
        case Shfl::kDown: j = int(lane) + bval; return j <= int(seg_end) ? unsigned(j) : lane;
        case Shfl::kXor: j = int(lane ^ unsigned(bval)); return j <= int(seg_end) ? unsigned(j) : lane;
    }
    return lane;
}

template <class T>
SIMT_RUNTIME_FN T shuffle(Shfl mode, const char *what, unsigned mask, T var, int b, int width, const char *file,
                          int line) {
    const void *pc = SIMT_PC();
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        fail(pc, "%s: width %d is not a power of 2 from 1 to 32", what, width);
    const ShflLane me{&var, shfl_source(mode, current().lane, b, width), mask, pc, what};
    T result;
    warp_collective(what, mask, &me, &result, &shfl_compute<T>, file, line);
    return result;
}

// Votes: every lane taking part receives the ballot of the predicates (bit i: lane i) and the set
// of lanes taking part.
struct Vote {
    uint32_t ballot, part;
};
template <int kind>  // one instance per vote function, so that a mix-up is a divergence
SIMT_CUDA_COMPUTE void vote_compute(const void *const *in, void *const *out, uint32_t part, uint32_t) {
    uint32_t ballot = 0;
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if ((part >> lane & 1u) && *static_cast<const int *>(in[lane])) ballot |= 1u << lane;
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (part >> lane & 1u) *static_cast<Vote *>(out[lane]) = Vote{ballot, part};
}

template <int kind>
SIMT_CUDA_UNINSTRUMENTED Vote vote(const char *what, unsigned mask, int predicate, const char *file, int line) {
    const int pred = predicate != 0;
    Vote v;
    warp_collective(what, mask, &pred, &v, &vote_compute<kind>, file, line);
    return v;
}

}  // namespace detail
}  // namespace cuda
}  // namespace simt

// The four shuffles for one type, as CUDA declares them (one overload per type, no templates).
#define SIMT_CUDA_SHUFFLE(NAME, MODE, B)                                                                  \
    {                                                                                                     \
        const auto r = ::simt::cuda::detail::shuffle(::simt::cuda::detail::Shfl::MODE, #NAME "()", mask,  \
                                                     var, int(B), width, simt_file, simt_line);           \
        SIMT_CUDA_AFTER_CALL();                                                                           \
        return r;                                                                                         \
    }
#define SIMT_CUDA_SHUFFLES(T)                                                                             \
    SIMT_CUDA_WRAPPER T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, SIMT_HERE)   \
        SIMT_CUDA_SHUFFLE(__shfl_sync, kIdx, srcLane)                                                     \
    SIMT_CUDA_WRAPPER T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,    \
                                       SIMT_HERE)                                                         \
        SIMT_CUDA_SHUFFLE(__shfl_up_sync, kUp, delta)                                                     \
    SIMT_CUDA_WRAPPER T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,  \
                                         SIMT_HERE)                                                       \
        SIMT_CUDA_SHUFFLE(__shfl_down_sync, kDown, delta)                                                 \
    SIMT_CUDA_WRAPPER T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,         \
                                        SIMT_HERE)                                                        \
        SIMT_CUDA_SHUFFLE(__shfl_xor_sync, kXor, laneMask)
SIMT_CUDA_SHUFFLES(int)
SIMT_CUDA_SHUFFLES(unsigned int)
SIMT_CUDA_SHUFFLES(long)
SIMT_CUDA_SHUFFLES(unsigned long)
SIMT_CUDA_SHUFFLES(long long)
SIMT_CUDA_SHUFFLES(unsigned long long)
SIMT_CUDA_SHUFFLES(float)
SIMT_CUDA_SHUFFLES(double)

inline unsigned __ballot_sync(unsigned mask, int predicate, SIMT_HERE) {
    return ::simt::cuda::detail::vote<0>("__ballot_sync()", mask, predicate, simt_file, simt_line).ballot;
}
inline int __any_sync(unsigned mask, int predicate, SIMT_HERE) {
    return ::simt::cuda::detail::vote<1>("__any_sync()", mask, predicate, simt_file, simt_line).ballot != 0;
}
inline int __all_sync(unsigned mask, int predicate, SIMT_HERE) {
    const auto v = ::simt::cuda::detail::vote<2>("__all_sync()", mask, predicate, simt_file, simt_line);
    return v.ballot == v.part;
}

// ------------------------------------------------------------------------------------------------
// Math. The C library's expf, logf, sqrtf, fmaxf, ... serve as they are; the GPU's fast
// approximations (__expf, ...) are given their accurate counterparts here.

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> 0

inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline unsigned int __float_as_uint(float x) { unsigned int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }

inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(floorf(x)); }
inline int __float2int_ru(float x) { return int(ceilf(x)); }
inline unsigned int __float2uint_rn(float x) { return static_cast<unsigned int>(nearbyintf(x)); }
inline float __int2float_rn(int i) { return float(i); }
inline float __uint2float_rn(unsigned int i) { return float(i); }

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}

// min and max: the overloads CUDA declares (so that a mixed call is ambiguous here exactly when
// it is for nvcc); the float ones follow fminf/fmaxf (a NaN argument loses).
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int min(int a, unsigned int b) { return min(static_cast<unsigned int>(a), b); }
inline unsigned int min(unsigned int a, int b) { return min(a, static_cast<unsigned int>(b)); }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long min(long a, unsigned long b) { return min(static_cast<unsigned long>(a), b); }
inline unsigned long min(unsigned long a, long b) { return min(a, static_cast<unsigned long>(b)); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long min(long long a, unsigned long long b) { return min(static_cast<unsigned long long>(a), b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, static_cast<unsigned long long>(b)); }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double min(float a, double b) { return fmin(double(a), b); }
inline double min(double a, float b) { return fmin(a, double(b)); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline unsigned int max(int a, unsigned int b) { return max(static_cast<unsigned int>(a), b); }
inline unsigned int max(unsigned int a, int b) { return max(a, static_cast<unsigned int>(b)); }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long max(long a, unsigned long b) { return max(static_cast<unsigned long>(a), b); }
inline unsigned long max(unsigned long a, long b) { return max(a, static_cast<unsigned long>(b)); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long max(long long a, unsigned long long b) { return max(static_cast<unsigned long long>(a), b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, static_cast<unsigned long long>(b)); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double max(float a, double b) { return fmax(double(a), b); }
inline double max(double a, float b) { return fmax(a, double(b)); }

// Read-only cache loads: a plain load here (checked like any other access).
template <class T> SIMT_CUDA_ACCESS T __ldg(const T *p) { return *p; }

// ------------------------------------------------------------------------------------------------
// The CUDA keywords, last: none of the code above may see them.

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __noinline__
#define __launch_bounds__(...)
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
// One copy per OS thread, and a block's threads are fibers of one OS thread: one copy per running
// block. Valid for static arrays at block scope and for `extern __shared__ T name[];`, whose storage
// the compiler driver defines after the learner's file.
#define __shared__ thread_local
// (__restrict__ is a g++ keyword already.)

#define threadIdx (::simt::cuda::detail::thread_idx())
#define blockIdx (::simt::cuda::detail::block_idx())
#define blockDim (::simt::cuda::detail::block_dim())
#define gridDim (::simt::cuda::detail::grid_dim())

// Function-like, so that `format(printf, ...)` attributes in headers included later stay intact.
#define printf(...) ::simt::device_printf(__VA_ARGS__)
