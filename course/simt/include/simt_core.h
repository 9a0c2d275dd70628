// The SIMT core every front end (CUDA C, Metal) is built on: who the running thread is, the
// block barrier, warp collectives, and the hooks the checking modes use.
//
// A block's threads are fibers on one OS thread. A fiber runs until it reaches a barrier, a warp
// collective or its end; then the scheduler picks another. Everything here is called from kernel
// code running on a fiber; the scheduler itself lives in runtime/runtime.cpp.
#pragma once
#pragma GCC system_header
#include <cstddef>
#include <cstdint>
#include <type_traits>

// SIMT_CHECKED is defined (to 1) in builds for memcheck/racecheck, where every memory access of
// the kernel is reported to the runtime. Header code that touches user memory on the kernel's behalf
// (atomics, matrix loads) reports it with note_access().
#ifndef SIMT_CHECKED
#define SIMT_CHECKED 0
#endif

// Functions in front-end headers that access user memory on the kernel's behalf: kept out of the
// instrumentation (they report their accesses themselves) and out of line, so that
// __builtin_return_address(0) inside them is an address in the kernel, which names its source line.
#define SIMT_RUNTIME_FN __attribute__((noinline, SIMT_NO_SANITIZE))
// No instrumentation at all: clang's -fsanitize=thread reports the atomic instructions even of functions
// that opt out of it, unless they also carry disable_sanitizer_instrumentation (clang 14 on; g++ has no
// such attribute, and needs none).
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define SIMT_NO_SANITIZE no_sanitize_thread, no_sanitize_address, disable_sanitizer_instrumentation
#endif
#endif
#ifndef SIMT_NO_SANITIZE
#define SIMT_NO_SANITIZE no_sanitize_thread, no_sanitize_address
#endif
#define SIMT_HERE const char *simt_file = __builtin_FILE(), int simt_line = __builtin_LINE()
#define SIMT_PC() (__builtin_extract_return_addr(__builtin_return_address(0)))

// An address as a number the compiler knows nothing about, for checks of its alignment. Through a
// reference or `this`, clang assumes the alignment the type promises and would fold away the very check
// that catches a pointer cast breaking it (`*(float4 *)(p + 1)`); then the misaligned copy runs as an
// aligned SSE load and faults.
#define SIMT_ADDRESS_BITS(p) (::simt::address_bits(static_cast<const volatile void *>(p)))

// The most `extern __shared__` memory one launch may ask for (an H100 block's limit, 227 KiB).
#define SIMT_MAX_DYNAMIC_SHARED (227 * 1024)

namespace simt {

struct Dim3 { unsigned x, y, z; };

__attribute__((always_inline, artificial)) inline uintptr_t address_bits(const volatile void *p) {
    uintptr_t bits = reinterpret_cast<uintptr_t>(p);
    __asm__("" : "+r"(bits));
    return bits;
}

// The running thread. `current()` is valid only inside a kernel.
struct ThreadCtx {
    Dim3 thread_idx;        // position in the block
    Dim3 block_idx;         // position of the block in the grid
    Dim3 block_dim;         // threads per block
    Dim3 grid_dim;          // blocks per grid
    unsigned linear;        // thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z)
    unsigned lane;          // linear % 32
    unsigned warp;          // linear / 32
    unsigned warps;         // warps per block (the last may be partial)
};
extern thread_local ThreadCtx *current_thread;
inline const ThreadCtx &current() { return *current_thread; }

constexpr unsigned kWarpSize = 32;

// What a barrier orders besides execution, for racecheck: Metal's mem_flags::mem_device and
// mem_flags::mem_threadgroup have these values. CUDA's barriers order all memory; a Metal barrier with
// mem_flags::mem_none makes the threads wait but orders no memory, so accesses on either side of it
// may still race.
enum Fence : unsigned { kFenceNone = 0, kFenceDevice = 1, kFenceShared = 2, kFenceAll = 3 };

// Block-wide barrier (__syncthreads, threadgroup_barrier). `what` names it in messages. Returns
// once every live thread of the block has arrived at this same barrier; a thread waiting at a
// different barrier, or a deadlock, stops the launch (synccheck).
void block_barrier(const char *what, const char *file, int line, unsigned fences = kFenceAll);

// A warp collective (shuffles, reductions, __syncwarp, matrix ops). Every lane named in `mask`
// (bit i = lane i of this warp) that is still running must call it, at the same source line. When
// the last one arrives, `compute` runs once for the whole group:
//   in[l]  = the `in` pointer lane l passed (nullptr for lanes not taking part),
//   out[l] = the `out` pointer lane l passed,
//   taking_part = the lanes that arrived (mask minus lanes that exited or do not exist).
// Pointers stay valid during compute: every lane is suspended inside this call.
using WarpCompute = void (*)(const void *const *in, void *const *out, uint32_t taking_part,
                             uint32_t lanes_in_warp);
// `fences`: what it orders (simdgroup_barrier's mem_flags; every other collective orders all memory).
void warp_collective(const char *what, uint32_t mask, const void *in, void *out,
                     WarpCompute compute, const char *file, int line, unsigned fences = kFenceAll);

// Counters mode: the warp-level matrix products of a launch, by kind. A front end's matrix operation
// (wmma::mma_sync, simdgroup_multiply, simdgroup_multiply_accumulate) calls count_matrix_op once per
// warp, from its compute function: D (m x n) = A (m x k) B (k x n) + C, with each operand's element
// type (kMatrixNone for a C that is not added) and the call's return address in the kernel (its line).
// Outside counters mode it does nothing.
struct half;
enum MatrixElement : unsigned { kMatrixNone = 0, kMatrixF16 = 1, kMatrixF32 = 2, kMatrixOther = 3 };
template <class T> constexpr MatrixElement matrix_element() {
    return std::is_same<T, float>::value ? kMatrixF32 : std::is_same<T, ::simt::half>::value ? kMatrixF16
                                                                                  : kMatrixOther;
}
void count_matrix_op(unsigned m, unsigned n, unsigned k, MatrixElement a, MatrixElement b, MatrixElement c,
                     MatrixElement d, const void *pc);

// Where each thread leaves the kernel, for synccheck's divergent-barrier rule (runtime.cpp). The
// generated entry point calls kernel_lines() with the kernel's first line and the line of its closing
// brace, and the compiler driver turns each `return;` in a kernel's body into
// `return ::simt::kernel_return(__LINE__);` (same line), so a thread that returns names its line.
void kernel_lines(const char *file, int first, int last);
void kernel_return(int line);

// Memory accesses made by header code on the kernel's behalf (only needed when SIMT_CHECKED).
enum Access : int { kRead = 0, kWrite = 1, kAtomic = 2 };
void note_access(const void *addr, size_t bytes, int access, const void *pc);

// Counters mode (check="counters"): a copy of a vector type (float4, Metal's float4, ...) is one access
// of `bytes` bytes at `src` and at `dst`, as on a GPU, rather than the scalar accesses g++ makes of it.
// The front ends' vector types call it in checked builds; its return address names the kernel's line.
void note_vector(const void *dst, const void *src, size_t bytes);

// Stop the launch with a message. `pc` (may be null) is a return address in the kernel; the
// report names its source line. Usable from kernel code and from a WarpCompute.
[[noreturn]] void fail(const void *pc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Device printf: captured per launch and shown after it.
int device_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The pointer for [[threadgroup(n)]] argument n of a Metal kernel (the launch sizes each one).
void *threadgroup_arena(int index);

}  // namespace simt
