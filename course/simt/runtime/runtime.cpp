// The course's SIMT runtime: runs a CUDA or Metal kernel's threads as fibers on a CPU.
//
// Life of a launch (driven by course/simt/kernel.py through the C functions at the end):
//   simt_prepare  copies every buffer argument into runtime-owned memory: each buffer sits in its own
//                 1 GiB reservation with no-access pages around it (like cudaMalloc'd memory, 256-byte
//                 aligned), so a wild index faults instead of corrupting a neighbour;
//   simt_start    forks. The child runs the grid and writes a report into shared memory; a crash,
//                 a hang or an error costs the child only, never the notebook;
//   simt_collect  after the child ends: copies buffers back (only if the launch succeeded).
//
// Inside the child, each block's threads are fibers. A fiber runs until it reaches a barrier, a warp
// collective or its end, and the scheduler picks the next one (in order, or at random with a seed).
// Barriers check that every thread arrives at the same one, and that no thread left the kernel past it
// (synccheck). Builds with -fsanitize=thread call the __tsan_* hooks below on every memory access of
// the kernel: those implement memcheck (bounds, alignment, const) and racecheck (two threads touching
// one address with no barrier between, or two blocks with no atomic), and let random schedules switch
// threads at memory accesses. With check="counters" the same hooks also feed the counters: each
// access is grouped with the accesses of the other lanes of its warp at the same instruction, and the
// warp accesses are tallied as patterns, which course/grading/counters.py costs with course/models/memory_model.py
// (docs/counters.md).
#include <csetjmp>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__linux__)
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#endif

#if !defined(__x86_64__) || defined(SIMT_USE_UCONTEXT)
#define SIMT_UCONTEXT 1
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif
#include <ucontext.h>
#endif

#include "simt_core.h"

namespace simt {

thread_local ThreadCtx *current_thread = nullptr;

namespace {

// Each buffer gets its own reservation: kGuard no-access bytes, the data, then kTail no-access bytes,
// so an index up to 64 MiB past either end faults (and memcheck names the buffer) instead of landing
// in a neighbour. Reserved address space still counts against a process's limit (the grading
// sandbox sets one), which is why the guards are not larger.
constexpr size_t kGuard = size_t(1) << 20;
constexpr size_t kTail = size_t(64) << 20;
constexpr size_t kStackBytes = 256 * 1024;        // per fiber; touched pages only
constexpr size_t kErrorBytes = 16 * 1024;
constexpr int kMaxArenas = 8;

size_t page_size() { static size_t p = size_t(sysconf(_SC_PAGESIZE)); return p; }
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ------------------------------------------------------------------------------------------------
// Fibers. On x86-64 a fiber switch saves the callee-saved registers on the old stack and swaps stack
// pointers (a few nanoseconds); elsewhere ucontext does it (slower: a system call per switch).

#ifndef SIMT_UCONTEXT
extern "C" void simt_switch_stack(void **save_sp, void *new_sp);
asm(R"(
.text
.globl simt_switch_stack
.type simt_switch_stack,@function
simt_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size simt_switch_stack, .-simt_switch_stack
.section .note.GNU-stack,"",@progbits
.text
)");

struct Context {
    void *sp = nullptr;
};
inline void switch_context(Context &from, Context &to) { simt_switch_stack(&from.sp, to.sp); }
void init_context(Context &c, char *stack_lo, size_t bytes, void (*entry)()) {
    // Frame popped by simt_switch_stack: [mxcsr|fcw][r15 r14 r13 r12 rbx rbp][return address].
    auto top = reinterpret_cast<uintptr_t>(stack_lo + bytes) & ~uintptr_t(15);
    auto *ret_slot = reinterpret_cast<void **>(top - 16);  // 16-aligned: entry sees rsp % 16 == 8
    *ret_slot = reinterpret_cast<void *>(entry);
    auto *regs = reinterpret_cast<uint64_t *>(ret_slot) - 6;
    std::memset(regs, 0, 6 * sizeof(uint64_t));
    auto *ctl = reinterpret_cast<uint32_t *>(regs - 1);
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    ctl[0] = mxcsr;
    ctl[1] = fcw;
    c.sp = ctl;
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_context(Context &from, Context &to) { swapcontext(&from.uc, &to.uc); }
void init_context(Context &c, char *stack_lo, size_t bytes, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack_lo;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

// ------------------------------------------------------------------------------------------------
// What Python hands over, and what the child reports back (in memory shared across the fork).

}  // namespace
}  // namespace simt

extern "C" {
struct SimtBufferSpec {
    void *host;           // the caller's array
    uint64_t bytes;
    uint32_t elem_bytes;  // for messages: element index = offset / elem_bytes
    int32_t readonly;     // declared const: mapped read-only, never copied back
    const char *name;     // the parameter's name
};
struct SimtLaunchSpec {
    void (*entry)(void **);
    const char *kernel_name;
    uint32_t grid[3], block[3];
    uint32_t n_params;
    int32_t *param_buffer;        // per parameter: buffer index, or -1 for a scalar / non-argument
    void **param_scalar;          // per parameter: pointer to the scalar's bytes (when param_buffer < 0)
    uint32_t n_buffers;
    SimtBufferSpec *buffers;
    uint64_t dynamic_shared;      // CUDA: bytes of `extern __shared__` the launch provides
    uint32_t n_arenas;            // Metal: [[threadgroup(n)]] lengths
    uint64_t arena_bytes[8];
    int32_t memcheck, racecheck, random_schedule, workers;
    uint64_t seed;
    uint32_t preempt_one_in;      // random schedule in checked builds: switch thread at ~1 in N accesses
    uint64_t printf_limit;
    int32_t is_metal;
    int32_t counters;             // check="counters": tally warp accesses (checked builds)
    uint64_t counters_capacity;   // distinct access patterns the report can hold
    int32_t boundary;             // 1: run the grid behind the system-call filter (0 only in the runtime's tests)
};
// What counters mode reports (in memory shared with the child). Every access of the kernel is grouped
// with the accesses of the other lanes of its warp at the same instruction (the k-th time each lane
// executes it since the warp last met); each such warp access is reduced to a pattern (its lanes'
// byte offsets from a 128-byte boundary, its width, kind and buffer), and equal patterns are counted
// once with a multiplicity. Python (course/grading/counters.py) turns patterns into sectors and banks.
// One kind of warp-level matrix operation (course/simt/launch_counters.py reads it): D (m x n) = A (m x k) B (k x n) + C
// at one call site, with the element type of each operand (simt::MatrixElement; c is kMatrixNone when no C is
// added).
struct SimtMatrixOp {
    uint64_t pc;               // the call's return address in the module, as an offset (for addr2line)
    uint16_t m, n, k;
    uint8_t a, b, c, d;
    uint8_t reserved[6];
    uint64_t count;            // operations of this kind completed, one per warp
};
static_assert(sizeof(SimtMatrixOp) == 32, "SimtMatrixOp is read by course/simt/launch_counters.py");
enum { kSimtMatrixKinds = 16 };
struct SimtCounterHeader {
    uint64_t capacity;         // patterns the report holds
    uint64_t patterns;         // patterns written
    uint64_t dropped;          // warp accesses not recorded because the report was full
    uint64_t barriers;         // block-wide barriers completed, summed over blocks
    uint64_t barrier_warps;    // the same, counting each warp that took part (warp-level instructions)
    uint64_t warp_collectives; // shuffles, votes, __syncwarp and matrix operations completed, per warp
    uint64_t matrix_ops;       // warp-level matrix multiply-accumulates completed (wmma::mma_sync, simdgroup_multiply...)
    uint64_t matrix_kinds;     // entries of matrix_op in use; kinds past the last entry count in matrix_ops only
    SimtMatrixOp matrix_op[kSimtMatrixKinds];  // per kind (shape and element types): how many completed
};
struct SimtPattern {
    uint64_t pc;               // the access's return address in the module, as an offset (for addr2line)
    uint64_t count;            // warp accesses with exactly this pattern
    uint32_t mask;             // lanes taking part
    int32_t buffer;            // index of the buffer (global memory); -1 shared memory, -2 module variables
    uint8_t kind;              // 0 read, 1 write, 2 atomic
    uint8_t width;             // bytes per lane
    uint16_t piece;            // which aligned piece of a wider access (0 for most)
    uint32_t reserved;
    uint64_t offsets[32];      // lane l's byte address minus the 128-byte boundary at or below the lowest
};
// Generated per module when the source declares `extern __shared__` arrays: their addresses in the
// calling OS thread (each is thread_local, so one copy per worker).
int __simt_extern_shared(const void **addrs, const char **names, int max) __attribute__((weak));
}

namespace simt {
namespace {

enum Status : int32_t { kRunning = 0, kOk = 1, kFailed = 2 };

struct Report {
    std::atomic<int32_t> status;
    std::atomic<uint32_t> blocks_done;
    std::atomic<uint32_t> block_running[3];
    uint64_t elapsed_ns;
    uint64_t printf_len;
    int32_t printf_truncated;
    int32_t boundary;          // the child's system-call filter: 1 on, 0 not asked for, -errno could not be put up
    char error[kErrorBytes];
    // printf bytes follow
};

struct DeviceBuffer {
    char *reservation = nullptr;
    size_t reserved = 0;          // kGuard + mapped + kTail
    char *data = nullptr;
    size_t bytes = 0, mapped = 0;
    SimtBufferSpec spec{};
};

struct Launch {
    SimtLaunchSpec spec{};
    std::vector<DeviceBuffer> buffers;
    std::vector<void *> args;               // what __simt_entry_* receives
    std::vector<void *> pointer_values;     // storage for device pointers
    Report *report = nullptr;
    size_t report_bytes = 0;
    std::string kernel_name;
    std::vector<std::string> buffer_names;
    Dl_info module{};                       // for turning addresses into module offsets
    int stdout_fd = -1;                     // the child's stdout/stderr, for crash reports
    SimtCounterHeader *counters = nullptr;  // counters mode: header, then capacity SimtPatterns
    size_t counters_bytes = 0;
};

Launch *g_launch = nullptr;  // the launch this child process runs

// ------------------------------------------------------------------------------------------------
// Fibers, blocks and the scheduler.

enum class Wait : uint8_t { kNone, kBarrier, kWarp, kExited };

struct Fiber {
    Context ctx;
    char *stack_lo = nullptr;  // usable stack [stack_lo, stack_lo + kStackBytes)
    ThreadCtx t{};
    Wait wait = Wait::kNone;
    const char *what = nullptr, *file = nullptr;
    int line = 0;
    uint32_t mask = 0;
    const void *in = nullptr;
    void *out = nullptr;
    WarpCompute compute = nullptr;
    unsigned fences = kFenceAll;  // the memory the barrier or collective it waits at orders (Metal's mem_flags)
    uint32_t warp_epoch = 0;
    int exit_line = 0;         // where the thread left the kernel (once it has)
    bool returned = false;     // by a `return` in the kernel's body (not by running off its end)
    // Counters: the source and destination of the vector copy just counted as one access; the scalar
    // accesses the copy is made of (inside these ranges) are not counted again.
    uintptr_t vec_lo[2] = {0, 0};
    size_t vec_len[2] = {0, 0}, vec_left[2] = {0, 0};
    // Counters: the sites of this thread's recent accesses (a loop's body cycles through a few), valid
    // while their epoch is the warp's.
    struct SiteCache {
        struct Site *site = nullptr;
        uintptr_t pc = 0;
        uint32_t tag = 0, epoch = 0;
    } recent[8];
};

// Counters: one access site (instruction) of one warp, and what each lane accessed there since the warp
// last met (a barrier or a collective of the whole warp). Lane l's k-th access is lane[l][k - base].
struct SiteKey {
    uintptr_t pc;
    uint32_t tag;  // kind << 24 | width << 16 | piece
    bool operator==(const SiteKey &o) const { return pc == o.pc && tag == o.tag; }
};
struct SiteKeyHash {
    size_t operator()(const SiteKey &k) const { return std::hash<uintptr_t>()(k.pc * 31 + k.tag); }
};
struct Site {
    std::vector<uintptr_t> lane[32];
    uint32_t base = 0;      // accesses already flushed and dropped from the lanes' lists
    uint32_t flushed = 0;   // warp accesses flushed (k < flushed)
    uint32_t longest = 0;   // the longest lane list
};

// Race-detection shadow of one 2-byte cell: the last write and the last read (or "several readers").
// A second reader is kept too: when several threads read a cell and one of them then writes it,
// the report must name a reader other than the writer.
struct Shadow {
    const void *w_pc = nullptr, *r_pc = nullptr, *r2_pc = nullptr;
    uint64_t w_thread = 0, r_thread = 0, r2_thread = 0;  // global thread id + 1 (0: none)
    uint32_t w_epoch = 0, r_epoch = 0, r2_epoch = 0;     // block barrier epoch at the access
    uint32_t w_wepoch = 0, r_wepoch = 0, r2_wepoch = 0;  // warp epoch at the access
    bool w_atomic = false, r_many = false;               // r_many: r2 is an unordered other reader
};

struct Worker {
    Context scheduler;
    std::vector<Fiber> fibers;
    Fiber *running = nullptr;
    std::mt19937_64 rng;
    std::vector<int> ready;
    uint32_t alive = 0, at_barrier = 0;
    uint32_t barrier_epoch = 0;            // barriers passed in this block
    // Racecheck: a barrier orders execution; it orders a kind of memory (kDeviceMemory, kSharedMemoryKind)
    // only when it names it (Metal's mem_flags; CUDA's barriers order both). fenced_at[k]: barrier_epoch
    // after the last barrier that ordered kind k, so an access made at epoch e is ordered before everything
    // after that barrier when fenced_at[k] > e. The same per warp, counting its collectives.
    uint32_t fenced_at[2] = {0, 0};
    std::vector<uint32_t> warp_fenced_at[2];
    struct Unfenced { const char *what = nullptr, *file = nullptr; int line = 0; };
    Unfenced unfenced[2];                  // the last barrier that did not order kind k (for the report)
    std::vector<Unfenced> warp_unfenced[2];
    std::vector<uint32_t> warp_alive;      // per warp: lanes that exist and have not exited
    std::vector<uint32_t> warp_epoch;      // per warp: collectives completed
    std::vector<uint32_t> warp_waiting;    // per warp: lanes waiting at a collective
    std::vector<char *> arenas;            // [[threadgroup(n)]] memory of this worker
    std::vector<const void *> extern_shared;
    std::vector<const char *> extern_shared_names;
    uint64_t block_linear = 0;
    const char *kernel_file = nullptr;     // the running kernel's file, first line and closing brace
    int kernel_first = 0, kernel_last = 0;
    bool in_collective = false;            // running a WarpCompute: its accesses are the runtime's
    bool failed = false;
    std::unordered_map<uintptr_t, Shadow> shared_shadow;  // static shared memory, per block
    std::vector<std::vector<Shadow>> region_shadow;       // extern shared arrays, then arenas
    std::vector<char> sigstack;
    std::vector<std::unordered_map<SiteKey, Site, SiteKeyHash>> sites;  // counters: per warp
    std::vector<uint32_t> sites_epoch;     // counters: per warp, bumped when its sites are flushed
    uintptr_t tls_lo = 0, tls_hi = 0;      // counters: the module's thread_local block in this OS thread
    uintptr_t tls_own = 0;                 // counters: the runtime's current_thread in it
};
thread_local Worker *tl_worker = nullptr;

std::vector<std::vector<Shadow>> g_buffer_shadow;  // racecheck of buffers, whole launch (one worker)
std::mutex g_printf_mutex;

// Describe a set of thread ids compactly: "threads 0-31, 40".
std::string describe_threads(const std::vector<unsigned> &ids, const char *noun = "threads") {
    std::string s = ids.size() == 1 ? std::string(noun, strlen(noun) - 1) + " " : std::string(noun) + " ";
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (i) s += ", ";
        s += std::to_string(ids[i]);
        if (j > i) s += "-" + std::to_string(ids[j]);
        i = j + 1;
    }
    return s;
}

std::string dim_text(const Dim3 &d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// A launch's unit of threads in its language's word: Metal says threadgroup where CUDA says block.
const char *group_word() { return g_launch && g_launch->spec.is_metal ? " of threadgroup " : " of block "; }

std::string thread_text(const ThreadCtx &t) {
    return "thread " + dim_text(t.thread_idx) + group_word() + dim_text(t.block_idx);
}

// "{pc:OFFSET}" placeholders become "line N" in Python (addr2line on the module).
std::string pc_text(const void *pc) {
    if (!pc || !g_launch || !g_launch->module.dli_fbase) return "an unknown line";
    char buf[64];
    auto off = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(g_launch->module.dli_fbase);
    snprintf(buf, sizeof buf, "{pc:%lx}", static_cast<unsigned long>(off ? off - 1 : 0));
    return buf;
}

std::string where_text(const char *file, int line) {
    const char *base = file ? strrchr(file, '/') : nullptr;
    return "line " + std::to_string(line) + " of " + (base ? base + 1 : (file ? file : "?"));
}

void record_error(const std::string &msg) {
    Report *r = g_launch->report;
    int32_t expected = kRunning;
    if (r->status.compare_exchange_strong(expected, kFailed)) {
        snprintf(r->error, kErrorBytes, "%s", msg.c_str());
    }
}

struct AbortBlock {};  // thrown in the scheduler's own context (never across a fiber)

[[noreturn]] void abort_launch(const std::string &msg) {
    record_error(msg);
    Worker *w = tl_worker;
    w->failed = true;
    if (w->running && !w->in_collective) {
        Fiber *f = w->running;
        switch_context(f->ctx, w->scheduler);  // never resumed
        __builtin_unreachable();
    }
    throw AbortBlock{};
}

void fiber_main();

void run_ready(Worker &w);

// Counters mode (defined with the memory checks below).
void counters_flush_warp(Worker &w, unsigned warp);
void counters_flush_block(Worker &w);
void counters_barrier(Worker &w);

uint32_t lane_bit(unsigned lane) { return uint32_t(1) << lane; }

// Release every lane of a completed warp collective, which ordered the memory in `fences` (at `at`).
void release_warp_group(Worker &w, unsigned warp, uint32_t group, unsigned fences, const Fiber &at) {
    ++w.warp_epoch[warp];
    for (int k = 0; k < 2; ++k) {
        if (fences & (1u << k)) w.warp_fenced_at[k][warp] = w.warp_epoch[warp];
        else w.warp_unfenced[k][warp] = {at.what, at.file, at.line};
    }
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        if (!(group & lane_bit(lane))) continue;
        Fiber &f = w.fibers[warp * kWarpSize + lane];
        f.wait = Wait::kNone;
        f.warp_epoch = w.warp_epoch[warp];
        w.ready.push_back(int(&f - w.fibers.data()));
    }
}

// Complete the warp collective that lane `lane` of `warp` waits at, if all its lanes have arrived.
void try_complete_group(Worker &w, unsigned warp, unsigned lane) {
    Fiber &f = w.fibers[warp * kWarpSize + lane];
    const uint32_t group = f.mask & w.warp_alive[warp];
    if (group & ~w.warp_waiting[warp]) return;  // someone named in the mask has not arrived yet
    for (unsigned other = 0; other < kWarpSize; ++other) {
        if (!(group & lane_bit(other))) continue;
        Fiber &g = w.fibers[warp * kWarpSize + other];
        if (g.compute != f.compute || g.line != f.line || g.file != f.file) {
            abort_launch(std::string("warp divergence in block ") + dim_text(f.t.block_idx) + ": lane " +
                         std::to_string(lane) + " of warp " + std::to_string(warp) + " waits at " + f.what +
                         " (" + where_text(f.file, f.line) + ") but lane " + std::to_string(other) +
                         " waits at " + g.what + " (" + where_text(g.file, g.line) +
                         "); every lane named in the mask must reach the same warp operation.");
        }
        if (g.mask != f.mask) {
            char buf[64];
            snprintf(buf, sizeof buf, "0x%08x and 0x%08x", f.mask, g.mask);
            abort_launch(std::string(f.what) + " at " + where_text(f.file, f.line) + " in block " +
                         dim_text(f.t.block_idx) + ": lanes " + std::to_string(lane) + " and " +
                         std::to_string(other) + " of warp " + std::to_string(warp) +
                         " pass different masks (" + buf + "); lanes working together must pass the same mask.");
        }
    }
    const void *in[kWarpSize] = {};
    void *out[kWarpSize] = {};
    unsigned fences = kFenceAll;  // what every lane's call orders
    for (unsigned other = 0; other < kWarpSize; ++other) {
        if (!(group & lane_bit(other))) continue;
        Fiber &g = w.fibers[warp * kWarpSize + other];
        in[other] = g.in;
        out[other] = g.out;
        fences &= g.fences;
    }
    const unsigned first = warp * kWarpSize;
    const unsigned lanes_in_warp = unsigned(std::min<size_t>(kWarpSize, w.fibers.size() - first));
    w.in_collective = true;
    try {
        f.compute(in, out, group, lanes_in_warp);
    } catch (...) {
        w.in_collective = false;
        throw;
    }
    w.in_collective = false;
    if (g_launch->spec.counters) {
        ++g_launch->counters->warp_collectives;
        // The whole warp met here: what its lanes accessed before belongs to warp accesses already complete.
        if (group == w.warp_alive[warp]) counters_flush_warp(w, warp);
    }
    w.warp_waiting[warp] &= ~group;
    release_warp_group(w, warp, group, fences, f);
}

// After a lane of `warp` exited: a collective may now be complete without it.
void try_complete_warp(Worker &w, unsigned warp) {
    for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (w.warp_waiting[warp] & lane_bit(lane)) try_complete_group(w, warp, lane);
}

// Whether a thread that has left the kernel is excused from the barrier `at` that the others wait at.
// Leaving by a `return` above the barrier's line is the early-exit guard (`if (row >= n) return;`),
// done before reaching it. Running off the kernel's end, or returning at or below the barrier's line,
// means the thread went past the barrier without waiting there: it sat in a branch the thread did not
// take (or a loop that ran fewer times for it). A barrier in a function the kernel calls has no line
// in the kernel's body to compare with; there only running off the end counts.
bool excused(const Worker &w, const Fiber &gone, const Fiber &at) {
    if (!gone.returned) return false;
    const bool in_body = at.file && w.kernel_file && strcmp(at.file, w.kernel_file) == 0 &&
                         at.line >= w.kernel_first && at.line <= w.kernel_last;
    return !in_body || gone.exit_line < at.line;
}

// synccheck: threads that left the kernel past the barrier the others now complete (divergent barrier).
void check_divergence(Worker &w, const Fiber &at) {
    if (w.alive == w.fibers.size()) return;
    std::vector<int> lines;  // exit lines of the threads not excused, in order of first appearance
    for (const Fiber &g : w.fibers)
        if (g.wait == Wait::kExited && !excused(w, g, at) &&
            std::find(lines.begin(), lines.end(), g.exit_line) == lines.end())
            lines.push_back(g.exit_line);
    if (lines.empty()) return;
    std::vector<unsigned> waiting;
    for (const Fiber &g : w.fibers)
        if (g.wait == Wait::kBarrier) waiting.push_back(g.t.linear);
    std::string gone;
    for (size_t i = 0; i < lines.size(); ++i) {
        std::vector<unsigned> ids;
        bool returned = false;
        for (const Fiber &g : w.fibers)
            if (g.wait == Wait::kExited && !excused(w, g, at) && g.exit_line == lines[i]) {
                ids.push_back(g.t.linear);
                returned = g.returned;
            }
        gone += (i == 0 ? "" : ", ") + describe_threads(ids) +
                (i == 0 ? " passed it without waiting and left the kernel at " : " at ") +
                where_text(w.kernel_file, lines[i]) + (returned ? " (a `return`)" : " (its closing brace)");
    }
    abort_launch(std::string("divergent barrier in block ") + dim_text(at.t.block_idx) + " of " +
                 g_launch->kernel_name + ": " + describe_threads(waiting) + (waiting.size() == 1 ? " waits" : " wait") +
                 " at " + at.what + " (" + where_text(at.file, at.line) + "), but " + gone +
                 ". Every thread of a block must reach each barrier that the others reach: is the barrier "
                 "inside a branch, or a loop, that depends on the thread? An early `return` above the first "
                 "barrier is fine.");
}

void try_complete_barrier(Worker &w) {
    if (w.alive == 0 || w.at_barrier < w.alive) return;
    // Everyone alive is at a barrier: it must be the same one.
    const Fiber *first = nullptr;
    for (Fiber &f : w.fibers) {
        if (f.wait != Wait::kBarrier) continue;
        if (!first) { first = &f; continue; }
        if (f.line != first->line || f.file != first->file || f.what != first->what) {
            std::vector<unsigned> a, b;
            for (Fiber &g : w.fibers) {
                if (g.wait != Wait::kBarrier) continue;
                if (g.line == first->line && g.file == first->file) a.push_back(g.t.linear);
                else if (g.line == f.line && g.file == f.file) b.push_back(g.t.linear);
            }
            abort_launch(std::string("barrier mismatch in block ") + dim_text(first->t.block_idx) + " of " +
                         g_launch->kernel_name + ": " + describe_threads(a) + " wait at " + first->what + " (" +
                         where_text(first->file, first->line) + "), " + describe_threads(b) + " at " + f.what +
                         " (" + where_text(f.file, f.line) +
                         "). Every thread of a block must reach the same barriers in the same order; "
                         "is a barrier inside a branch that depends on the thread?");
        }
    }
    check_divergence(w, *first);
    if (g_launch->spec.counters) counters_barrier(w);
    ++w.barrier_epoch;
    unsigned fences = kFenceAll;  // what every thread's barrier orders
    for (const Fiber &f : w.fibers)
        if (f.wait == Wait::kBarrier) fences &= f.fences;
    for (int k = 0; k < 2; ++k) {
        if (fences & (1u << k)) w.fenced_at[k] = w.barrier_epoch;
        else w.unfenced[k] = {first->what, first->file, first->line};
    }
    w.at_barrier = 0;
    std::vector<int> released;
    for (Fiber &f : w.fibers) {
        if (f.wait == Wait::kBarrier) {
            f.wait = Wait::kNone;
            released.push_back(int(&f - w.fibers.data()));
        }
    }
    w.ready.insert(w.ready.end(), released.begin(), released.end());
}

void report_deadlock(Worker &w) {
    std::string msg = "the threads of block " + dim_text(w.fibers[0].t.block_idx) + " of " +
                      g_launch->kernel_name + " can never continue: ";
    // Group waiting threads by where they wait.
    std::vector<const Fiber *> seen;
    bool firstgroup = true;
    for (const Fiber &f : w.fibers) {
        if (f.wait != Wait::kBarrier && f.wait != Wait::kWarp) continue;
        bool dup = false;
        for (const Fiber *s : seen) dup |= (s->line == f.line && s->file == f.file && s->wait == f.wait);
        if (dup) continue;
        seen.push_back(&f);
        std::vector<unsigned> ids;
        for (const Fiber &g : w.fibers)
            if (g.wait == f.wait && g.line == f.line && g.file == f.file) ids.push_back(g.t.linear);
        msg += std::string(firstgroup ? "" : "; ") + describe_threads(ids) + " wait at " + f.what + " (" +
               where_text(f.file, f.line) + ")";
        firstgroup = false;
    }
    std::vector<unsigned> gone;
    for (const Fiber &f : w.fibers)
        if (f.wait == Wait::kExited) gone.push_back(f.t.linear);
    if (!gone.empty()) msg += "; " + describe_threads(gone) + " have already returned";
    msg += ". A warp operation waits for every lane in its mask; a barrier for every thread of the block.";
    abort_launch(msg);
}

void fiber_main() {
    Worker *w = tl_worker;
    Fiber *f = w->running;
    g_launch->spec.entry(g_launch->args.data());
    if (!f->returned) f->exit_line = w->kernel_last;
    f->wait = Wait::kExited;
    switch_context(f->ctx, w->scheduler);
    __builtin_unreachable();
}

// After a fiber switched back: account for what it is waiting on.
void after_switch(Worker &w, Fiber &f) {
    switch (f.wait) {
        case Wait::kNone:  // preempted: runnable again
            w.ready.push_back(int(&f - w.fibers.data()));
            break;
        case Wait::kExited:
            --w.alive;
            w.warp_alive[f.t.warp] &= ~lane_bit(f.t.lane);
            try_complete_warp(w, f.t.warp);
            try_complete_barrier(w);
            break;
        case Wait::kBarrier:
            ++w.at_barrier;
            try_complete_barrier(w);
            break;
        case Wait::kWarp:
            if (!(f.mask & lane_bit(f.t.lane))) {
                char buf[32];
                snprintf(buf, sizeof buf, "0x%08x", f.mask);
                abort_launch(std::string(f.what) + " at " + where_text(f.file, f.line) + ": " + thread_text(f.t) +
                             " (lane " + std::to_string(f.t.lane) + ") calls it with mask " + buf +
                             ", which does not include its own lane.");
            }
            w.warp_waiting[f.t.warp] |= lane_bit(f.t.lane);
            try_complete_group(w, f.t.warp, f.t.lane);
            break;
    }
}

void run_ready(Worker &w) {
    const bool random = g_launch->spec.random_schedule;
    size_t head = 0;  // sequential: first in, first out
    while (head < w.ready.size()) {
        int idx;
        if (random) {
            const size_t pick = head + size_t(w.rng() % (w.ready.size() - head));
            idx = w.ready[pick];
            w.ready[pick] = w.ready.back();
            w.ready.pop_back();
        } else {
            idx = w.ready[head++];
            if (head == w.ready.size()) { w.ready.clear(); head = 0; }
        }
        Fiber &f = w.fibers[size_t(idx)];
        w.running = &f;
        current_thread = &f.t;
        switch_context(w.scheduler, f.ctx);
        w.running = nullptr;
        if (w.failed) throw AbortBlock{};
        after_switch(w, f);
    }
}

void init_worker(Worker &w, uint32_t threads) {
    const auto &s = g_launch->spec;
    w.fibers.resize(threads);
    for (Fiber &f : w.fibers) {
        // A no-access page below each stack turns a stack overflow into a clear crash report.
        char *mem = static_cast<char *>(mmap(nullptr, kStackBytes + page_size(), PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (mem == MAP_FAILED) { perror("mmap"); _exit(4); }
        mprotect(mem, page_size(), PROT_NONE);
        f.stack_lo = mem + page_size();
    }
    for (uint32_t i = 0; i < s.n_arenas; ++i) {
        // Threadgroup memory of [[threadgroup(i)]]: 16-aligned, a no-access page right after.
        const size_t bytes = round_up(std::max<uint64_t>(s.arena_bytes[i], 1), page_size());
        char *mem = static_cast<char *>(mmap(nullptr, bytes + page_size(), PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        mprotect(mem + bytes, page_size(), PROT_NONE);
        w.arenas.push_back(mem + bytes - round_up(s.arena_bytes[i], 16));
    }
    if (__simt_extern_shared) {
        const void *addrs[16];
        const char *names[16];
        const int n = __simt_extern_shared(addrs, names, 16);
        w.extern_shared.assign(addrs, addrs + n);
        w.extern_shared_names.assign(names, names + n);
    }
    if (s.racecheck) {  // one cell per 2 bytes, from an even address at or below the region's start
        for (size_t i = 0; i < w.extern_shared.size(); ++i) w.region_shadow.emplace_back(s.dynamic_shared / 2 + 2);
        for (uint32_t i = 0; i < s.n_arenas; ++i) w.region_shadow.emplace_back(s.arena_bytes[i] / 2 + 2);
    }
    w.rng.seed(s.seed * 0x9E3779B97F4A7C15ull + 1);
    const uint32_t warps = (threads + kWarpSize - 1) / kWarpSize;
    w.warp_alive.assign(warps, 0);
    w.warp_epoch.assign(warps, 0);
    w.warp_waiting.assign(warps, 0);
    for (int k = 0; k < 2; ++k) {
        w.warp_fenced_at[k].assign(warps, 0);
        w.warp_unfenced[k].assign(warps, Worker::Unfenced{});
    }
    if (s.counters) {
        w.sites.resize(warps);
        w.sites_epoch.assign(warps, 1);
    }
}

void run_block(Worker &w, uint64_t linear_block) {
    const auto &s = g_launch->spec;
    const uint32_t threads = s.block[0] * s.block[1] * s.block[2];
    const Dim3 grid{s.grid[0], s.grid[1], s.grid[2]}, block{s.block[0], s.block[1], s.block[2]};
    const Dim3 bidx{uint32_t(linear_block % grid.x), uint32_t(linear_block / grid.x % grid.y),
                    uint32_t(linear_block / (uint64_t(grid.x) * grid.y))};
    g_launch->report->block_running[0] = bidx.x;
    g_launch->report->block_running[1] = bidx.y;
    g_launch->report->block_running[2] = bidx.z;
    w.block_linear = linear_block;
    w.alive = threads;
    w.at_barrier = 0;
    w.barrier_epoch = 0;
    for (int k = 0; k < 2; ++k) {
        w.fenced_at[k] = 0;
        w.unfenced[k] = {};
    }
    w.ready.clear();
    w.shared_shadow.clear();
    for (auto &region : w.region_shadow) std::fill(region.begin(), region.end(), Shadow{});
    const uint32_t warps = (threads + kWarpSize - 1) / kWarpSize;
    for (uint32_t wi = 0; wi < warps; ++wi) {
        const uint32_t lanes = std::min(kWarpSize, threads - wi * kWarpSize);
        w.warp_alive[wi] = lanes == 32 ? 0xffffffffu : (lane_bit(lanes) - 1);
        w.warp_epoch[wi] = 0;
        w.warp_waiting[wi] = 0;
        for (int k = 0; k < 2; ++k) {
            w.warp_fenced_at[k][wi] = 0;
            w.warp_unfenced[k][wi] = {};
        }
    }
    if (s.memcheck || s.racecheck) {
        // Shared memory starts with garbage on a GPU; here with NaN bytes, so reading a slot nobody
        // wrote shows up in the result instead of passing by luck.
        for (size_t i = 0; i < w.arenas.size(); ++i) memset(w.arenas[i], 0xff, s.arena_bytes[i]);
        for (const void *p : w.extern_shared) memset(const_cast<void *>(p), 0xff, s.dynamic_shared);
    }
    for (uint32_t i = 0; i < threads; ++i) {
        Fiber &f = w.fibers[i];
        f.t.thread_idx = Dim3{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
        f.t.block_idx = bidx;
        f.t.block_dim = block;
        f.t.grid_dim = grid;
        f.t.linear = i;
        f.t.lane = i % kWarpSize;
        f.t.warp = i / kWarpSize;
        f.t.warps = warps;
        f.wait = Wait::kNone;
        f.fences = kFenceAll;
        f.warp_epoch = 0;
        f.exit_line = 0;
        f.returned = false;
        init_context(f.ctx, f.stack_lo, kStackBytes, fiber_main);
        w.ready.push_back(int(i));
    }
    run_ready(w);
    if (w.alive > 0) report_deadlock(w);
    if (s.counters) counters_flush_block(w);
}

// ------------------------------------------------------------------------------------------------
// Checks on memory accesses (checked builds).

const DeviceBuffer *find_buffer(uintptr_t a, size_t *index) {
    for (size_t i = 0; i < g_launch->buffers.size(); ++i) {
        const DeviceBuffer &b = g_launch->buffers[i];
        const auto lo = reinterpret_cast<uintptr_t>(b.reservation);
        if (a - lo < b.reserved) { *index = i; return &b; }
    }
    return nullptr;
}

const char *access_word(int access) { return access == kWrite ? "write" : access == kRead ? "read" : "atomic"; }

std::string global_thread_text(uint64_t id) {
    const auto &s = g_launch->spec;
    const uint64_t per_block = uint64_t(s.block[0]) * s.block[1] * s.block[2];
    const uint64_t b = id / per_block, t = id % per_block;
    const Dim3 bi{uint32_t(b % s.grid[0]), uint32_t(b / s.grid[0] % s.grid[1]), uint32_t(b / (uint64_t(s.grid[0]) * s.grid[1]))};
    const Dim3 ti{uint32_t(t % s.block[0]), uint32_t(t / s.block[0] % s.block[1]), uint32_t(t / (uint64_t(s.block[0]) * s.block[1]))};
    return "thread " + dim_text(ti) + group_word() + dim_text(bi);
}

// The kind of memory a shadow cell belongs to, for what a barrier orders (Fence's bits).
enum MemoryKind : int { kDeviceMemory = 0, kSharedMemoryKind = 1 };

// Whether an earlier access (by thread `then`, at epochs e/we) to memory of `kind` is ordered before the
// current one: a barrier that orders that memory, or a warp collective that does, came between.
bool ordered(const Worker &w, const Fiber &f, uint64_t me, uint64_t then, uint32_t e, uint32_t we, int kind) {
    if (then == me) return true;
    const auto &s = g_launch->spec;
    const uint64_t per_block = uint64_t(s.block[0]) * s.block[1] * s.block[2];
    if ((then - 1) / per_block != (me - 1) / per_block) return false;  // different blocks: never
    if (w.fenced_at[kind] > e) return true;                           // a barrier in between
    const uint64_t other_linear = (then - 1) % per_block;
    return other_linear / kWarpSize == f.t.warp && w.warp_fenced_at[kind][f.t.warp] > we;  // a warp sync between
}

uint64_t per_block_threads() {
    const auto &s = g_launch->spec;
    return uint64_t(s.block[0]) * s.block[1] * s.block[2];
}

// What a shadow cell belongs to, for a race report: an element of a buffer, or shared memory.
struct Place {
    const DeviceBuffer *buffer;  // null: shared memory
    size_t element;
    int kind() const { return buffer ? kDeviceMemory : kSharedMemoryKind; }
    std::string text() const {
        if (!buffer) return g_launch->spec.is_metal ? "threadgroup memory" : "shared memory";
        return "`" + std::string(buffer->spec.name) + "` element " + std::to_string(element);
    }
};

// The earlier access of a race: by which thread, how, where, and at which epochs.
struct Then {
    const char *what;
    uint64_t thread;
    const void *pc;
    uint32_t epoch, wepoch;
};

void race(const Worker &w, const Place &place, const Then &then, int access, const Fiber &f, const void *pc_now,
          bool across_blocks) {
    const bool metal = g_launch->spec.is_metal;
    const int kind = place.kind();
    std::string msg = "data race on " + place.text() + ": " + global_thread_text(then.thread - 1) + " " + then.what +
                      " it at " + pc_text(then.pc) + ", then " + thread_text(f.t) + " " +
                      (access == kWrite ? "wrote" : access == kRead ? "read" : "updated") + " it at " + pc_text(pc_now);
    const bool same_warp = (then.thread - 1) % per_block_threads() / kWarpSize == f.t.warp;
    // Metal: the barriers between them made the threads wait, but did not name this memory's mem_flags.
    const char *flag = kind == kDeviceMemory ? "mem_flags::mem_device" : "mem_flags::mem_threadgroup";
    const char *memory = kind == kDeviceMemory ? "device memory" : "threadgroup memory";
    const Worker::Unfenced *unfenced = nullptr;
    if (!across_blocks && w.barrier_epoch != then.epoch) unfenced = &w.unfenced[kind];
    else if (!across_blocks && same_warp && w.warp_epoch[f.t.warp] != then.wepoch)
        unfenced = &w.warp_unfenced[kind][f.t.warp];
    if (across_blocks)
        msg += metal ? ". Threadgroups run in no fixed order and nothing orders them within a dispatch: make the "
                       "update atomic (atomic_fetch_add_explicit), or give each threadgroup its own addresses."
                     : ". Blocks run in no fixed order and nothing orders them within a launch: make the update "
                       "atomic (atomicAdd), or give each block its own addresses.";
    else if (unfenced && unfenced->what)
        msg += std::string(", with only ") + unfenced->what + " at " + where_text(unfenced->file, unfenced->line) +
               " between them, which does not name " + flag + ": it makes the threads wait, but does not order " +
               "their " + memory + ". Use " + unfenced->what + "(" + flag + ") there.";
    else if (same_warp && per_block_threads() <= uint64_t(kWarpSize))
        // The whole threadgroup is one simdgroup in this launch, so a simdgroup barrier would hide the race here and
        // show it again with more rows per threadgroup: the advice is the barrier that holds for any size.
        msg += metal ? std::string(", with no barrier between. Put a threadgroup_barrier(") + flag +
                           ") between the write and the other thread's access (in this launch a threadgroup is one "
                           "simdgroup, so a simdgroup_barrier would hide the race, but with more rows per "
                           "threadgroup it makes only one simdgroup meet)."
                     : ", with no barrier between. Put a __syncthreads() between the write and the other thread's "
                       "access (in this launch a block is one warp, so a __syncwarp() would hide the race, but with "
                       "more threads per block it makes only one warp meet).";
    else if (same_warp)
        msg += ", with nothing ordering them. Both are in " + std::string(metal ? "simdgroup " : "warp ") +
               std::to_string(f.t.warp) +
               (metal ? std::string(": a simdgroup_barrier(") + flag + ") between the write and the other lane's "
                            "access is enough (a threadgroup_barrier works too)."
                      : ": a __syncwarp() between the write and the other lane's access is enough (a "
                        "__syncthreads() works too).");
    else {
        // Threads of two simdgroups (warps): a simdgroup_barrier or __syncwarp() between them orders neither.
        const std::string groups = std::to_string((then.thread - 1) % per_block_threads() / kWarpSize) + " and " +
                                   std::to_string(f.t.warp);
        msg += metal ? std::string(", with no barrier between. Put a threadgroup_barrier(") + flag +
                           ") between the write and the other thread's access (the two threads are in simdgroups " +
                           groups + ": a simdgroup_barrier makes only the lanes of one simdgroup meet)."
                     : ", with no barrier between. Put a __syncthreads() between the write and the other thread's "
                       "access (the two threads are in warps " + groups + ": a __syncwarp() makes only the lanes of "
                       "one warp meet).";
    }
    abort_launch(msg);
}

void check_shadow(Worker &w, Shadow &sh, int access, const void *pc, const Place &where) {
    Fiber &f = *w.running;
    const auto &s = g_launch->spec;
    const uint64_t per_block = uint64_t(s.block[0]) * s.block[1] * s.block[2];
    const uint64_t me = w.block_linear * per_block + f.t.linear + 1;
    const uint32_t e = w.barrier_epoch, we = w.warp_epoch[f.t.warp];
    const int kind = where.kind();
    auto other_block = [&](uint64_t then) { return (then - 1) / per_block != (me - 1) / per_block; };
    // An atomic update conflicts only with plain writes, and a read only with plain writes too: a read
    // racing an atomic update is the first step of every compare-and-swap loop, which re-checks it.
    if (sh.w_thread && !(sh.w_atomic && access != kWrite) &&
        !ordered(w, f, me, sh.w_thread, sh.w_epoch, sh.w_wepoch, kind))
        race(w, where, {sh.w_atomic ? "updated atomically" : "wrote", sh.w_thread, sh.w_pc, sh.w_epoch, sh.w_wepoch},
             access, f, pc, other_block(sh.w_thread));
    if (access == kRead) {
        if (sh.r_thread && sh.r_thread != me && !ordered(w, f, me, sh.r_thread, sh.r_epoch, sh.r_wepoch, kind)) {
            sh.r_many = true;
            sh.r2_thread = sh.r_thread; sh.r2_pc = sh.r_pc; sh.r2_epoch = sh.r_epoch; sh.r2_wepoch = sh.r_wepoch;
        } else if (!sh.r_thread || sh.r_thread != me) {
            sh.r_many = false;
        }
        sh.r_thread = me; sh.r_pc = pc; sh.r_epoch = e; sh.r_wepoch = we;
        return;
    }
    if (access == kWrite && sh.r_thread && !ordered(w, f, me, sh.r_thread, sh.r_epoch, sh.r_wepoch, kind))
        race(w, where, {"read", sh.r_thread, sh.r_pc, sh.r_epoch, sh.r_wepoch}, access, f, pc, other_block(sh.r_thread));
    if (access == kWrite && sh.r_many && !ordered(w, f, me, sh.r2_thread, sh.r2_epoch, sh.r2_wepoch, kind))
        race(w, where, {"read", sh.r2_thread, sh.r2_pc, sh.r2_epoch, sh.r2_wepoch}, access, f, pc,
             other_block(sh.r2_thread));
    sh.w_thread = me; sh.w_pc = pc; sh.w_epoch = e; sh.w_wepoch = we; sh.w_atomic = access == kAtomic;
    sh.r_thread = 0; sh.r_many = false;
}

void fail_bounds(const DeviceBuffer &b, uintptr_t a, size_t bytes, int access, const void *pc) {
    const Fiber &f = *tl_worker->running;
    const auto data = reinterpret_cast<uintptr_t>(b.data);
    const long long off = static_cast<long long>(a) - static_cast<long long>(data);
    const unsigned eb = std::max<uint32_t>(b.spec.elem_bytes, 1);
    const long long n = static_cast<long long>(b.bytes / eb);
    std::string msg = "out-of-bounds " + std::string(access_word(access)) + " of `" + b.spec.name + "` at " +
                      pc_text(pc) + " by " + thread_text(f.t) + ": element " +
                      std::to_string(off >= 0 ? off / eb : -((-off + eb - 1) / eb)) + " (byte offset " +
                      std::to_string(off) + ", " + std::to_string(bytes) + " bytes), but `" + b.spec.name + "` has " +
                      std::to_string(n) + " elements (valid: 0 to " + std::to_string(n - 1) + ").";
    abort_launch(msg);
}

void count_access(Worker &w, Fiber &f, uintptr_t a, size_t bytes, int access, const void *pc);

void check_access(uintptr_t a, size_t bytes, int access, const void *pc, bool aligned_claim) {
    Worker *w = tl_worker;
    if (!w || !w->running || w->in_collective || w->failed) return;
    Fiber &f = *w->running;
    if (a - reinterpret_cast<uintptr_t>(f.stack_lo) < kStackBytes) return;  // the thread's own locals
    const auto &s = g_launch->spec;
    if (aligned_claim && bytes > 1 && (a % bytes) != 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(a));
        abort_launch("misaligned " + std::to_string(bytes) + "-byte " + access_word(access) + " at address " + buf +
                     " (" + pc_text(pc) + ") by " + thread_text(f.t) + ": a GPU faults unless a " +
                     std::to_string(bytes) + "-byte access starts at a multiple of " + std::to_string(bytes) + ".");
    }
    size_t bi;
    if (const DeviceBuffer *b = find_buffer(a, &bi)) {
        const auto data = reinterpret_cast<uintptr_t>(b->data);
        if (a < data || a + bytes > data + b->bytes) fail_bounds(*b, a, bytes, access, pc);
        if (access != kRead && b->spec.readonly)
            abort_launch("the kernel writes to `" + std::string(b->spec.name) + "` at " + pc_text(pc) + " (" +
                         thread_text(f.t) + "), a parameter it declares const.");
        if (s.racecheck) {
            auto &shadow = g_buffer_shadow[bi];
            const unsigned eb = std::max<uint32_t>(b->spec.elem_bytes, 1);
            for (uintptr_t c = (a - data) / 2; c <= (a + bytes - 1 - data) / 2; ++c)
                check_shadow(*w, shadow[c], access, pc, Place{b, c * 2 / eb});
        }
    } else {
        // Shared memory. Regions sized by the launch (extern __shared__, [[threadgroup(n)]]) are
        // bounds-checked and have a flat shadow; static arrays are race-checked through a hash map
        // (their bounds are checked at compile time, by -fsanitize=bounds).
        std::vector<Shadow> *flat = nullptr;
        uintptr_t flat_lo = 0;
        auto in_region = [&](uintptr_t lo, size_t limit, size_t size, int kind, size_t i) -> bool {
            if (a - lo >= limit) return false;
            if (a + bytes > lo + size) {
                const std::string name = kind == 0 ? std::string(w->extern_shared_names[i])
                                                   : "[[threadgroup(" + std::to_string(i) + ")]]";
                const char *memory = g_launch->spec.is_metal ? " of threadgroup memory `" : " of shared memory `";
                abort_launch("out-of-bounds " + std::string(access_word(access)) + memory + name +
                             "` at " + pc_text(pc) + " by " + thread_text(f.t) + ": byte " + std::to_string(a - lo) +
                             ", but the launch gave it " + std::to_string(size) + " bytes.");
            }
            flat = &w->region_shadow[kind == 0 ? i : w->extern_shared.size() + i];
            flat_lo = lo;
            return true;
        };
        bool found = false;
        for (size_t i = 0; i < w->extern_shared.size() && !found; ++i)
            found = in_region(reinterpret_cast<uintptr_t>(w->extern_shared[i]), SIMT_MAX_DYNAMIC_SHARED,
                              s.dynamic_shared, 0, i);
        for (size_t i = 0; i < w->arenas.size() && !found; ++i)
            found = in_region(reinterpret_cast<uintptr_t>(w->arenas[i]), round_up(s.arena_bytes[i], 16) + page_size(),
                              s.arena_bytes[i], 1, i);
        if (s.racecheck) {
            for (uintptr_t c = a / 2; c <= (a + bytes - 1) / 2; ++c)
                check_shadow(*w, flat ? (*flat)[c - flat_lo / 2] : w->shared_shadow[c], access, pc,
                             Place{nullptr, 0});
        }
    }
    if (s.counters) count_access(*w, f, a, bytes, access, pc);
    // Random schedules in checked builds also switch threads between memory accesses.
    if (s.random_schedule && s.preempt_one_in && w->ready.size() > 0 && w->rng() % s.preempt_one_in == 0) {
        f.wait = Wait::kNone;
        switch_context(f.ctx, w->scheduler);
        current_thread = &f.t;
    }
}


// ------------------------------------------------------------------------------------------------
// Counters (check="counters"). Threads run one after another, so a warp's access is put back together:
// lane l's k-th access at a site (return address, kind, width) since the warp last met belongs with the
// other lanes' k-th accesses there. A warp access is complete, and is tallied, when every lane still
// running has made its k-th access; what remains is tallied when the warp meets (a barrier, or a
// collective of all its lanes) and when the block ends.

// Where a kernel's memory lies. Global memory: the buffers. Shared memory: the module's thread_local
// block (static __shared__ arrays, `extern __shared__` storage, Metal's kernel-scope threadgroup arrays)
// and the [[threadgroup(n)]] arenas. Module variables (`__device__`, `__constant__`): its loaded segments.
// Anything else the kernel's code reads is the runtime's own (the thread's position, the arguments'
// slots) and is not counted.
enum : int { kSharedMemory = -1, kModuleVariable = -2, kRuntimeMemory = -3 };

std::vector<std::pair<uintptr_t, uintptr_t>> g_module_segments;

void find_module_segments() {
    g_module_segments.clear();
    dl_iterate_phdr([](dl_phdr_info *info, size_t, void *) -> int {
        if (reinterpret_cast<const void *>(info->dlpi_addr) != g_launch->module.dli_fbase) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
            if (info->dlpi_phdr[i].p_type == PT_LOAD) {
                const uintptr_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
                g_module_segments.emplace_back(lo, lo + info->dlpi_phdr[i].p_memsz);
            }
        return 1;
    }, nullptr);
}

// The calling OS thread's copy of the module's thread_local block (allocated by now: the runtime, linked
// into the module, has set its own thread_locals).
void find_thread_block(Worker &w) {
    dl_iterate_phdr([](dl_phdr_info *info, size_t, void *data) -> int {
        if (reinterpret_cast<const void *>(info->dlpi_addr) != g_launch->module.dli_fbase) return 0;
        auto &me = *static_cast<Worker *>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i)
            if (info->dlpi_phdr[i].p_type == PT_TLS && info->dlpi_tls_data) {
                me.tls_lo = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
                me.tls_hi = me.tls_lo + info->dlpi_phdr[i].p_memsz;
            }
        return 1;
    }, &w);
    w.tls_own = reinterpret_cast<uintptr_t>(&current_thread);
}

int memory_of(const Worker &w, uintptr_t a) {
    size_t bi;
    if (find_buffer(a, &bi)) return int(bi);
    if (a >= w.tls_lo && a < w.tls_hi)  // the runtime's current_thread (read by threadIdx & co.) is not the kernel's
        return a - w.tls_own < sizeof current_thread ? kRuntimeMemory : kSharedMemory;
    for (size_t i = 0; i < w.arenas.size(); ++i)
        if (a - reinterpret_cast<uintptr_t>(w.arenas[i]) < g_launch->spec.arena_bytes[i]) return kSharedMemory;
    for (const auto &seg : g_module_segments)
        if (a >= seg.first && a < seg.second) return kModuleVariable;
    return kRuntimeMemory;
}

struct PatternKeyHash {
    size_t operator()(const SimtPattern &p) const {
        uint64_t h = p.pc * 0x9E3779B97F4A7C15ull ^ (uint64_t(p.mask) << 20) ^ uint64_t(uint32_t(p.buffer)) ^
                     (uint64_t(p.kind) << 56) ^ (uint64_t(p.width) << 48) ^ (uint64_t(p.piece) << 36);
        for (unsigned l = 0; l < kWarpSize; ++l)
            if (p.mask >> l & 1u) h = (h ^ p.offsets[l]) * 0x100000001B3ull;
        return size_t(h);
    }
};
struct PatternKeyEq {
    bool operator()(const SimtPattern &a, const SimtPattern &b) const {
        return a.pc == b.pc && a.mask == b.mask && a.buffer == b.buffer && a.kind == b.kind && a.width == b.width &&
               a.piece == b.piece && std::memcmp(a.offsets, b.offsets, sizeof a.offsets) == 0;
    }
};
std::unordered_map<SimtPattern, uint64_t, PatternKeyHash, PatternKeyEq> g_patterns;  // pattern -> its index

void tally(SimtPattern &p, const uintptr_t *addr) {
    uintptr_t low = UINTPTR_MAX;
    for (unsigned l = 0; l < kWarpSize; ++l)
        if (p.mask >> l & 1u) low = std::min(low, addr[l]);
    low &= ~uintptr_t(127);  // sectors (32 B) and banks (32 x 4 B) repeat every 128 bytes
    for (unsigned l = 0; l < kWarpSize; ++l) p.offsets[l] = (p.mask >> l & 1u) ? uint64_t(addr[l] - low) : 0;
    SimtCounterHeader *h = g_launch->counters;
    auto *records = reinterpret_cast<SimtPattern *>(h + 1);
    auto found = g_patterns.find(p);
    if (found != g_patterns.end()) {
        ++records[found->second].count;
        return;
    }
    if (h->patterns >= h->capacity) {
        ++h->dropped;
        return;
    }
    p.count = 1;
    records[h->patterns] = p;
    g_patterns.emplace(p, h->patterns++);
}

// A lane's entry in a Site: the address, with where it lies (memory_of + 4) in the top byte.
constexpr uintptr_t kAddressBits = (uintptr_t(1) << 56) - 1;

// Tally warp access k of a site: the lanes that made a k-th access there, one pattern per memory they reach.
void flush_group(const SiteKey &key, Site &site, uint32_t k) {
    uintptr_t addr[kWarpSize];
    int where[kWarpSize];
    uint32_t mask = 0;
    for (unsigned l = 0; l < kWarpSize; ++l) {
        const auto &list = site.lane[l];
        if (list.size() > k - site.base) {
            addr[l] = list[k - site.base] & kAddressBits;
            where[l] = int(list[k - site.base] >> 56) - 4;
            mask |= 1u << l;
        }
    }
    while (mask) {
        // Lanes reaching different buffers (or shared and global memory) are tallied as one access per memory.
        const int first = where[__builtin_ctz(mask)];
        uint32_t part = 0;
        for (unsigned l = 0; l < kWarpSize; ++l)
            if ((mask >> l & 1u) && where[l] == first) part |= 1u << l;
        SimtPattern p{};
        p.pc = uint64_t(key.pc - reinterpret_cast<uintptr_t>(g_launch->module.dli_fbase));
        p.mask = part;
        p.buffer = first;
        p.kind = uint8_t(key.tag >> 24);
        p.width = uint8_t(key.tag >> 16);
        p.piece = uint16_t(key.tag);
        tally(p, addr);
        mask &= ~part;
    }
}

void flush_site(const SiteKey &key, Site &site) {
    for (uint32_t k = site.flushed; k < site.base + site.longest; ++k) flush_group(key, site, k);
}

void counters_flush_warp(Worker &w, unsigned warp) {
    if (warp >= w.sites.size()) return;
    for (auto &entry : w.sites[warp]) flush_site(entry.first, entry.second);
    w.sites[warp].clear();
    ++w.sites_epoch[warp];  // the threads' cached sites are gone
}

void counters_flush_block(Worker &w) {
    for (unsigned warp = 0; warp < w.sites.size(); ++warp) counters_flush_warp(w, warp);
}

void counters_barrier(Worker &w) {
    SimtCounterHeader *h = g_launch->counters;
    ++h->barriers;
    uint64_t warps = 0;
    for (size_t first = 0; first < w.fibers.size(); first += kWarpSize) {
        bool waiting = false;
        for (size_t i = first; i < std::min(first + kWarpSize, w.fibers.size()); ++i)
            waiting |= w.fibers[i].wait == Wait::kBarrier;
        warps += waiting;
    }
    h->barrier_warps += warps;
    counters_flush_block(w);
}

// One naturally aligned access of `width` bytes (1, 2, 4, 8 or 16) by the running lane.
void count_piece(Worker &w, Fiber &f, uintptr_t a, int where, unsigned width, int access, const void *pc,
                 unsigned piece) {
    const unsigned warp = f.t.warp, me = f.t.lane;
    const SiteKey key{reinterpret_cast<uintptr_t>(pc), uint32_t(access) << 24 | width << 16 | (piece & 0xffffu)};
    auto &cached = f.recent[(key.pc ^ (key.pc >> 4) ^ key.tag) & 7];
    if (!(cached.site && cached.pc == key.pc && cached.tag == key.tag && cached.epoch == w.sites_epoch[warp]))
        cached = {&w.sites[warp][key], key.pc, key.tag, w.sites_epoch[warp]};
    Site &site = *cached.site;
    auto &list = site.lane[me];
    list.push_back((uintptr_t(where + 4) << 56) | a);
    const uint32_t k = site.base + uint32_t(list.size()) - 1;
    site.longest = std::max<uint32_t>(site.longest, uint32_t(list.size()));
    if (k != site.flushed) return;  // an earlier warp access at this site is still waiting for a lane
    const uint32_t alive = w.warp_alive[warp];
    for (unsigned l = 0; l < kWarpSize; ++l)
        if ((alive >> l & 1u) && site.base + site.lane[l].size() <= k) return;  // a running lane has not been here
    flush_group(key, site, k);
    ++site.flushed;
    if (site.flushed - site.base == site.longest) {  // every list is used up: start them afresh
        for (auto &l : site.lane) l.clear();
        site.base = site.flushed;
        site.longest = 0;
    }
}

// Split an access into naturally aligned pieces of at most 16 bytes (a wide or misaligned copy).
void count_split(Worker &w, Fiber &f, uintptr_t a, size_t bytes, int access, const void *pc) {
    const int where = memory_of(w, a);
    if (where == kRuntimeMemory) return;
    unsigned piece = 0;
    while (bytes) {
        unsigned width = 16;
        while (width > 1 && ((a & (width - 1)) || width > bytes)) width >>= 1;
        count_piece(w, f, a, where, width, access, pc, piece++);
        a += width;
        bytes -= width;
    }
}

void count_access(Worker &w, Fiber &f, uintptr_t a, size_t bytes, int access, const void *pc) {
    for (int i = 0; i < 2; ++i)
        if (f.vec_left[i] && a - f.vec_lo[i] < f.vec_len[i] && a + bytes <= f.vec_lo[i] + f.vec_len[i] &&
            bytes <= f.vec_left[i]) {
            f.vec_left[i] -= bytes;  // part of the vector copy counted whole
            return;
        }
    f.vec_left[0] = f.vec_left[1] = 0;
    count_split(w, f, a, bytes, access, pc);
}

// ------------------------------------------------------------------------------------------------
// Crashes in the child: turn the fault address into a sentence.

std::string refused_syscall_text(const std::string &who, long nr);

void crash_handler(int sig, siginfo_t *info, void *uctx) {
    const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
    const void *pc = nullptr;
    int write = -1;  // 1: the faulting access was a write, 0: a read, -1: unknown
#if defined(__x86_64__) && defined(__linux__)
    pc = reinterpret_cast<const void *>(static_cast<ucontext_t *>(uctx)->uc_mcontext.gregs[REG_RIP] + 1);
    write = (static_cast<ucontext_t *>(uctx)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__aarch64__) && defined(__linux__)
    pc = reinterpret_cast<const void *>(static_cast<ucontext_t *>(uctx)->uc_mcontext.pc + 1);
#else
    (void)uctx;
#endif
    std::string who = "the kernel";
    if (tl_worker && tl_worker->running) who = thread_text(tl_worker->running->t);
    const char *verb = write == 1 ? " wrote " : write == 0 ? " read " : " accessed ";
    std::string msg;
    size_t bi;
    if (sig == SIGSEGV || sig == SIGBUS) {
        if (const DeviceBuffer *b = g_launch ? find_buffer(a, &bi) : nullptr) {
            const auto data = reinterpret_cast<uintptr_t>(b->data);
            if (a >= data && a < data + b->bytes && b->spec.readonly)
                msg = who + " wrote to `" + b->spec.name + "` at " + pc_text(pc) + ", a parameter it declares const.";
            else
                msg = who + verb + "`" + b->spec.name + "` out of bounds at " + pc_text(pc) + " (byte offset " +
                      std::to_string(static_cast<long long>(a) - static_cast<long long>(data)) + "; it has " +
                      std::to_string(b->bytes) + " bytes). Run with check=\"memcheck\" for the exact element.";
        } else if (tl_worker && tl_worker->running &&
                   a - reinterpret_cast<uintptr_t>(tl_worker->running->stack_lo) + page_size() < page_size() * 2) {
            msg = who + " overflowed its stack (" + std::to_string(kStackBytes / 1024) +
                  " KiB) at " + pc_text(pc) + ": is a local array too large, or a function recursing?";
        } else {
            char buf[32];
            snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(a));
            msg = who + verb + "address " + buf + " at " + pc_text(pc) +
                  ", which belongs to no buffer (a null or uninitialised pointer, or an index far out of range).";
        }
    } else if (sig == SIGFPE) {
        msg = who + " divided an integer by zero at " + pc_text(pc) + ".";
    } else if (sig == SIGABRT) {
        msg = who + " aborted (an assert failed?).";
#if defined(__linux__)
    } else if (sig == SIGSYS && info->si_code == 1) {  // SYS_SECCOMP: the filter refused a system call
        msg = refused_syscall_text(who, long(info->si_syscall));
#endif
    } else {
        msg = who + " stopped with signal " + std::to_string(sig) + " at " + pc_text(pc) + ".";
    }
    if (g_launch) record_error(msg);
    _exit(3);
}

void install_crash_handlers() {
    Worker *w = tl_worker;
    w->sigstack.resize(64 * 1024);
    stack_t ss{};
    ss.ss_sp = w->sigstack.data();
    ss.ss_size = w->sigstack.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

// ------------------------------------------------------------------------------------------------
// The boundary around learner code. A kernel is native code: whatever the compiler driver refuses by
// name (device_code.py), it can reach any function of the process through a pointer, or make a system
// call itself. So the child, before any of the kernel's code runs, puts up a seccomp filter that lets
// through only the system calls the runtime makes: memory (fiber stacks, malloc), the threads of fast
// mode's workers, signals (the crash reports, abort), the clock, writes to its own stdout and stderr, and
// leaving. Nothing else reaches the operating system: no process is started, no file opened, renamed or
// removed, no socket made, no other process signalled or read. A refused call raises SIGSYS, whose
// handler reports it by name and ends the child; the parent's timeout and the child's parent-death
// signal make sure nothing outlives the launch. Where seccomp is missing (not Linux, an architecture the
// filter does not know, a kernel or sandbox that refuses it) the launch runs without it and
// Report::boundary says why (course doctor says so too).

#if defined(__linux__) && defined(__x86_64__) && defined(AUDIT_ARCH_X86_64)
#define SIMT_BOUNDARY AUDIT_ARCH_X86_64
#elif defined(__linux__) && defined(__aarch64__) && defined(AUDIT_ARCH_AARCH64)
#define SIMT_BOUNDARY AUDIT_ARCH_AARCH64
#elif defined(__linux__) && defined(__riscv) && __riscv_xlen == 64 && defined(AUDIT_ARCH_RISCV64)
#define SIMT_BOUNDARY AUDIT_ARCH_RISCV64
#endif

#ifdef SIMT_BOUNDARY

// The system calls a refusal names, and what each would have done (the rest are named by number).
struct SyscallName {
    long nr;
    const char *name, *what;
};
#define SIMT_SYSCALL(n, what) {SYS_##n, #n, what},
const SyscallName kSyscallNames[] = {
    SIMT_SYSCALL(execve, "which starts a program") SIMT_SYSCALL(execveat, "which starts a program")
    SIMT_SYSCALL(clone, "which starts a process") SIMT_SYSCALL(openat, "which opens a file")
    SIMT_SYSCALL(socket, "which makes a network socket") SIMT_SYSCALL(socketpair, "which makes a socket")
    SIMT_SYSCALL(connect, "which connects a socket") SIMT_SYSCALL(bind, "which binds a socket")
    SIMT_SYSCALL(listen, "which listens on a socket") SIMT_SYSCALL(accept, "which accepts a connection")
    SIMT_SYSCALL(accept4, "which accepts a connection") SIMT_SYSCALL(sendto, "which sends on a socket")
    SIMT_SYSCALL(sendmsg, "which sends on a socket") SIMT_SYSCALL(recvfrom, "which reads a socket")
    SIMT_SYSCALL(recvmsg, "which reads a socket") SIMT_SYSCALL(kill, "which signals another process")
    SIMT_SYSCALL(tkill, "which signals a thread") SIMT_SYSCALL(tgkill, "which signals another process")
    SIMT_SYSCALL(ptrace, "which controls another process")
    SIMT_SYSCALL(process_vm_readv, "which reads another process's memory")
    SIMT_SYSCALL(process_vm_writev, "which writes another process's memory")
    SIMT_SYSCALL(memfd_create, "which makes a file in memory") SIMT_SYSCALL(linkat, "which links a file")
    SIMT_SYSCALL(unlinkat, "which removes a file") SIMT_SYSCALL(renameat, "which renames a file")
    SIMT_SYSCALL(fchmod, "which changes a file's permissions")
    SIMT_SYSCALL(fchmodat, "which changes a file's permissions") SIMT_SYSCALL(mkdirat, "which makes a folder")
    SIMT_SYSCALL(symlinkat, "which makes a link") SIMT_SYSCALL(truncate, "which truncates a file")
    SIMT_SYSCALL(ftruncate, "which truncates a file") SIMT_SYSCALL(mount, "which mounts a file system")
    SIMT_SYSCALL(read, "which reads a file") SIMT_SYSCALL(pread64, "which reads a file")
    SIMT_SYSCALL(readv, "which reads a file") SIMT_SYSCALL(write, "which writes to a file")
    SIMT_SYSCALL(writev, "which writes to a file") SIMT_SYSCALL(pwrite64, "which writes to a file")
    SIMT_SYSCALL(mmap, "which maps a file into memory") SIMT_SYSCALL(ioctl, "which controls a device")
    SIMT_SYSCALL(prctl, "which changes the process's settings") SIMT_SYSCALL(seccomp, "which changes the filter")
    SIMT_SYSCALL(rt_sigaction, "which takes over the signal that reports a refused system call")
    SIMT_SYSCALL(unshare, "which leaves the process's namespaces") SIMT_SYSCALL(setns, "which enters a namespace")
    SIMT_SYSCALL(dup, "which copies a file descriptor") SIMT_SYSCALL(dup3, "which copies a file descriptor")
    SIMT_SYSCALL(close, "which closes a file descriptor") SIMT_SYSCALL(fcntl, "which changes a file descriptor")
    SIMT_SYSCALL(lseek, "which moves in a file") SIMT_SYSCALL(getdents64, "which lists a folder")
    SIMT_SYSCALL(newfstatat, "which reads a file's status") SIMT_SYSCALL(fstat, "which reads a file's status")
    SIMT_SYSCALL(faccessat, "which checks a file") SIMT_SYSCALL(chdir, "which changes folder")
    SIMT_SYSCALL(pipe2, "which makes a pipe") SIMT_SYSCALL(wait4, "which waits for a process")
    SIMT_SYSCALL(setsid, "which leaves the process's session") SIMT_SYSCALL(setpgid, "which leaves the process group")
    SIMT_SYSCALL(shmat, "which attaches shared memory") SIMT_SYSCALL(shmget, "which makes shared memory")
    SIMT_SYSCALL(bpf, "which loads a BPF program") SIMT_SYSCALL(io_uring_setup, "which sets up io_uring")
#ifdef SYS_openat2
    SIMT_SYSCALL(openat2, "which opens a file")
#endif
#ifdef SYS_clone3
    SIMT_SYSCALL(clone3, "which starts a process")
#endif
#ifdef SYS_renameat2
    SIMT_SYSCALL(renameat2, "which renames a file")
#endif
#ifdef SYS_pidfd_open
    SIMT_SYSCALL(pidfd_open, "which reaches another process")
#endif
#ifdef SYS_open  // the older calls that newer architectures (aarch64, riscv64) leave out
    SIMT_SYSCALL(open, "which opens a file") SIMT_SYSCALL(creat, "which creates a file")
    SIMT_SYSCALL(fork, "which starts a process") SIMT_SYSCALL(vfork, "which starts a process")
    SIMT_SYSCALL(link, "which links a file") SIMT_SYSCALL(unlink, "which removes a file")
    SIMT_SYSCALL(rename, "which renames a file") SIMT_SYSCALL(chmod, "which changes a file's permissions")
    SIMT_SYSCALL(mkdir, "which makes a folder") SIMT_SYSCALL(rmdir, "which removes a folder")
    SIMT_SYSCALL(symlink, "which makes a link") SIMT_SYSCALL(stat, "which reads a file's status")
    SIMT_SYSCALL(lstat, "which reads a file's status") SIMT_SYSCALL(access, "which checks a file")
    SIMT_SYSCALL(pipe, "which makes a pipe") SIMT_SYSCALL(dup2, "which copies a file descriptor")
    SIMT_SYSCALL(chown, "which changes a file's owner") SIMT_SYSCALL(readlink, "which reads a link")
    SIMT_SYSCALL(getdents, "which lists a folder")
#endif
};
#undef SIMT_SYSCALL

// A refused system call, as the sentence the learner reads. No source line: the call is made inside the C
// library function the kernel reached (inline assembly, which would put it in the kernel, is refused).
std::string refused_syscall_text(const std::string &who, long nr) {
    std::string call = "system call number " + std::to_string(nr);
    for (const SyscallName &s : kSyscallNames)
        if (s.nr == nr) call = std::string("`") + s.name + "`, " + s.what;
    return who + " tried to make a system call (" + call +
           ") that device code cannot make: a GPU kernel cannot start processes, open files or use the network, "
           "and neither can a kernel on the CPU runtime, which stopped it there.";
}

// The only memory this child shares with other processes is its launch's own (buffers, report, counters).
// A mapping the parent shares with someone else (another launch's buffers, a file a library mapped
// MAP_SHARED) is unmapped here, so that the kernel cannot write a file, or another process's memory,
// through it. Done before the filter is up: the list is read from /proc/self/maps, by the PROCMAP_QUERY
// ioctl (Linux 6.11 on), which steps from one shared mapping to the next, else from its text (about half a
// millisecond in a process the size of a notebook's).
struct ProcmapQuery {  // struct procmap_query (linux/fs.h)
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
constexpr unsigned long kProcmapQuery = 0xC0686611ul;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kQueryShared = 0x08, kQueryCoveringOrNext = 0x10;

bool own_mapping(const Launch &L, uintptr_t lo, uintptr_t hi) {
    auto inside = [&](const void *start, size_t bytes) {
        return lo >= uintptr_t(start) && hi <= uintptr_t(start) + bytes;
    };
    for (const DeviceBuffer &b : L.buffers)
        if (inside(b.reservation, b.reserved)) return true;
    return inside(L.report, L.report_bytes) || (L.counters && inside(L.counters, L.counters_bytes));
}

void drop_shared_mappings(const Launch &L) {
    const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_flags = kQueryShared | kQueryCoveringOrNext;
    int rc;
    while ((rc = ioctl(fd, kProcmapQuery, &q)) == 0) {
        if (!own_mapping(L, q.vma_start, q.vma_end)) munmap(reinterpret_cast<void *>(q.vma_start), q.vma_end - q.vma_start);
        q.query_addr = q.vma_end;
    }
    if (rc != 0 && errno != ENOENT) {  // no PROCMAP_QUERY: read the text
        std::string text;
        char buf[16384];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, size_t(n));
        for (size_t at = 0; at < text.size();) {
            size_t end = text.find('\n', at);
            if (end == std::string::npos) end = text.size();
            char *p = nullptr;
            const unsigned long lo = strtoul(text.c_str() + at, &p, 16);
            const unsigned long hi = *p == '-' ? strtoul(p + 1, &p, 16) : 0;
            if (p && p[0] == ' ' && p[1] && p[2] && p[3] && p[4] == 's' && !own_mapping(L, lo, hi))
                munmap(reinterpret_cast<void *>(lo), hi - lo);
            at = end + 1;
        }
    }
    close(fd);
}

// A seccomp filter, written as classic BPF: the program sees the architecture, the system call's
// number and its six arguments (struct seccomp_data), and returns what the kernel should do.
class Filter {
  public:
    std::vector<sock_filter> prog;

    void load(uint32_t offset) { prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offset)); }
    void ret(uint32_t action) { prog.push_back(BPF_STMT(BPF_RET | BPF_K, action)); }
    void jump(uint16_t op, uint32_t k, uint8_t jt, uint8_t jf) { prog.push_back(BPF_JUMP(BPF_JMP | op | BPF_K, k, jt, jf)); }
    // The low 32 bits of argument i: every argument the filter looks at is an int or a flag word, which
    // the kernel truncates to 32 bits itself.
    static uint32_t arg_low(int i) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        return uint32_t(offsetof(seccomp_data, args) + 8 * i);
#else
        return uint32_t(offsetof(seccomp_data, args) + 8 * i + 4);
#endif
    }
    // With the system call's number in A: `action` when it is `nr`.
    void on(long nr, uint32_t action) {
        jump(BPF_JEQ, uint32_t(nr), 0, 1);
        ret(action);
    }
    // Allowed when argument `arg` is one of `values`, refused otherwise.
    void allow_if_arg_in(long nr, int arg, std::initializer_list<uint32_t> values, uint32_t refuse) {
        const auto m = uint8_t(values.size());
        jump(BPF_JEQ, uint32_t(nr), 0, uint8_t(m + 3));
        load(arg_low(arg));
        uint8_t i = 0;
        for (uint32_t v : values) jump(BPF_JEQ, v, uint8_t(m - i++), 0);
        ret(refuse);
        ret(SECCOMP_RET_ALLOW);
    }
};

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS SECCOMP_RET_KILL
#endif

// Put the filter up in this (single-threaded) child; threads started later inherit it. 1 when it is up,
// else -errno. `self`: this process's id, the only one it may signal (abort() signals itself).
int put_up_boundary(pid_t self) {
    constexpr uint32_t kRefuse = SECCOMP_RET_TRAP;     // SIGSYS, which the crash handler reports
    constexpr uint32_t kKill = SECCOMP_RET_KILL_PROCESS;
    Filter f;
    f.load(offsetof(seccomp_data, arch));
    f.jump(BPF_JEQ, SIMT_BOUNDARY, 1, 0);
    f.ret(kKill);  // another architecture's system calls (a 32-bit int 0x80 on x86-64): different numbers
    f.load(offsetof(seccomp_data, nr));
#if defined(__x86_64__)
    f.jump(BPF_JGE, 0x40000000u, 0, 1);  // x32 system calls: same architecture, numbers with bit 30 set
    f.ret(kKill);
#endif
    // Most frequent first: every fiber stack is an mmap and an mprotect.
    f.allow_if_arg_in(SYS_mmap, 4, {0xffffffffu}, kRefuse);  // anonymous memory only (fd -1), never a file
    for (long nr : {long(SYS_mprotect), long(SYS_munmap), long(SYS_madvise), long(SYS_brk), long(SYS_mremap),
                    long(SYS_futex), long(SYS_sched_yield), long(SYS_rt_sigprocmask), long(SYS_rt_sigreturn),
                    long(SYS_sigaltstack), long(SYS_getpid), long(SYS_gettid), long(SYS_clock_gettime),
                    long(SYS_clock_getres), long(SYS_clock_nanosleep), long(SYS_nanosleep),
                    long(SYS_gettimeofday), long(SYS_restart_syscall), long(SYS_set_robust_list),
                    long(SYS_exit), long(SYS_exit_group)})
        f.on(nr, SECCOMP_RET_ALLOW);
#ifdef SYS_rseq
    f.on(SYS_rseq, SECCOMP_RET_ALLOW);
#endif
    // Output: the child's stdout and stderr only (the launch's output file), never a descriptor it
    // inherited from the notebook or the grader.
    f.allow_if_arg_in(SYS_write, 0, {1, 2}, kRefuse);
    f.allow_if_arg_in(SYS_writev, 0, {1, 2}, kRefuse);
    // Signals: to itself only (abort, raise); and SIGSYS stays the runtime's, so that a refusal is reported.
    f.allow_if_arg_in(SYS_kill, 0, {uint32_t(self)}, kRefuse);
    f.allow_if_arg_in(SYS_tgkill, 0, {uint32_t(self)}, kRefuse);
    f.jump(BPF_JEQ, uint32_t(SYS_rt_sigaction), 0, 4);
    f.load(Filter::arg_low(0));
    f.jump(BPF_JEQ, SIGSYS, 0, 1);
    f.ret(kRefuse);
    f.ret(SECCOMP_RET_ALLOW);
    // Threads (fast mode's workers): clone with CLONE_THREAD and no new namespace; a clone that would
    // start a process is refused. clone3 passes its flags in memory the filter cannot read: "not
    // implemented" sends the C library back to clone.
#ifdef SYS_clone3
    f.on(SYS_clone3, SECCOMP_RET_ERRNO | ENOSYS);
#endif
    constexpr uint32_t kNamespaces = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                     CLONE_NEWPID | CLONE_NEWNET;
    f.jump(BPF_JEQ, uint32_t(SYS_clone), 0, 5);
    f.load(Filter::arg_low(0));
    f.jump(BPF_JSET, kNamespaces, 1, 0);
    f.jump(BPF_JSET, CLONE_THREAD, 1, 0);
    f.ret(kRefuse);
    f.ret(SECCOMP_RET_ALLOW);
    f.ret(kRefuse);  // everything else
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(f.prog.size());
    prog.filter = f.prog.data();
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return -errno;
    return 1;
}

#else

std::string refused_syscall_text(const std::string &who, long nr) {
    return who + " tried to make a system call (number " + std::to_string(nr) +
           ") that device code cannot make: a GPU kernel cannot start processes, open files or use the network.";
}

#endif  // SIMT_BOUNDARY

// In the child, before the kernel's code runs: the child dies with the process that launched it, drops
// the memory it shares with other processes (all but this launch's own), and puts up the filter.
int enclose_child(Launch &L, pid_t parent) {
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(5);  // the parent is already gone
#else
    (void)parent;
#endif
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSYS, &sa, nullptr);
    if (!L.spec.boundary) return 0;
#ifdef SIMT_BOUNDARY
    drop_shared_mappings(L);
    return put_up_boundary(getpid());
#else
    return -ENOSYS;
#endif
}

// ------------------------------------------------------------------------------------------------
// The child: run every block.

void run_worker(std::atomic<uint64_t> *next, const std::vector<uint64_t> *order, uint32_t threads) {
    Worker w;
    tl_worker = &w;
    install_crash_handlers();
    init_worker(w, threads);
    if (g_launch->spec.counters) find_thread_block(w);
    for (;;) {
        const uint64_t i = next->fetch_add(1);
        if (i >= order->size() || g_launch->report->status.load() != kRunning) break;
        try {
            run_block(w, (*order)[i]);
        } catch (AbortBlock &) {
            break;
        }
        g_launch->report->blocks_done.fetch_add(1);
    }
    tl_worker = nullptr;
}

void child_main() {
    Launch &L = *g_launch;
    const auto &s = L.spec;
    const uint64_t blocks = uint64_t(s.grid[0]) * s.grid[1] * s.grid[2];
    const uint32_t threads = s.block[0] * s.block[1] * s.block[2];
    std::vector<uint64_t> order(blocks);
    for (uint64_t i = 0; i < blocks; ++i) order[i] = i;
    if (s.random_schedule) {
        std::mt19937_64 rng(s.seed);
        std::shuffle(order.begin(), order.end(), rng);
    }
    if (s.racecheck) {
        g_buffer_shadow.resize(L.buffers.size());
        for (size_t i = 0; i < L.buffers.size(); ++i) g_buffer_shadow[i].resize(L.buffers[i].bytes / 2 + 1);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<uint64_t> next{0};
    const int workers = (s.memcheck || s.racecheck || s.random_schedule || s.counters) ? 1 : std::max(1, s.workers);
    if (s.counters) find_module_segments();
    if (workers == 1) {
        run_worker(&next, &order, threads);
    } else {
        std::vector<std::thread> pool;
        for (int i = 0; i < workers; ++i) pool.emplace_back(run_worker, &next, &order, threads);
        for (auto &t : pool) t.join();
    }
    L.report->elapsed_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - t0).count());
    int32_t expected = kRunning;
    L.report->status.compare_exchange_strong(expected, kOk);
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// The core API (simt_core.h), called from kernel code.

void block_barrier(const char *what, const char *file, int line, unsigned fences) {
    Worker *w = tl_worker;
    Fiber &f = *w->running;
    f.returned = false;  // a `return` it passed was a lambda's, not the kernel's
    f.wait = Wait::kBarrier;
    f.fences = fences;
    f.what = what;
    f.file = file;
    f.line = line;
    switch_context(f.ctx, w->scheduler);
    current_thread = &f.t;
}

void warp_collective(const char *what, uint32_t mask, const void *in, void *out, WarpCompute compute,
                     const char *file, int line, unsigned fences) {
    Worker *w = tl_worker;
    Fiber &f = *w->running;
    f.wait = Wait::kWarp;
    f.fences = fences;
    f.what = what;
    f.file = file;
    f.line = line;
    f.mask = mask;
    f.in = in;
    f.out = out;
    f.compute = compute;
    switch_context(f.ctx, w->scheduler);
    current_thread = &f.t;
}

void kernel_lines(const char *file, int first, int last) {
    Worker *w = tl_worker;
    w->kernel_file = file;
    w->kernel_first = first;
    w->kernel_last = last;
}

void kernel_return(int line) {
    Fiber &f = *tl_worker->running;
    f.exit_line = line;
    f.returned = true;
}

void count_matrix_op(unsigned m, unsigned n, unsigned k, MatrixElement a, MatrixElement b, MatrixElement c,
                     MatrixElement d, const void *pc) {
    if (!g_launch || !g_launch->spec.counters) return;
    SimtCounterHeader *h = g_launch->counters;
    ++h->matrix_ops;
    const uintptr_t base = reinterpret_cast<uintptr_t>(g_launch->module.dli_fbase);
    const uint64_t offset = pc && base ? uint64_t(reinterpret_cast<uintptr_t>(pc) - base) : 0;
    const SimtMatrixOp op{offset, uint16_t(m), uint16_t(n), uint16_t(k), uint8_t(a), uint8_t(b), uint8_t(c),
                          uint8_t(d), {}, 1};
    for (uint64_t i = 0; i < h->matrix_kinds && i < kSimtMatrixKinds; ++i) {
        SimtMatrixOp &e = h->matrix_op[i];
        if (e.pc == op.pc && e.m == op.m && e.n == op.n && e.k == op.k && e.a == op.a && e.b == op.b &&
            e.c == op.c && e.d == op.d) {
            ++e.count;
            return;
        }
    }
    if (h->matrix_kinds < kSimtMatrixKinds) {
        h->matrix_op[h->matrix_kinds++] = op;
        return;
    }
    // Every entry is taken (more call sites than entries: an unrolled loop's copies, say): the operation counts
    // with one of the same shape and types made elsewhere, so the counts per kind stay whole.
    for (uint64_t i = 0; i < kSimtMatrixKinds; ++i) {
        SimtMatrixOp &e = h->matrix_op[i];
        if (e.m == op.m && e.n == op.n && e.k == op.k && e.a == op.a && e.b == op.b && e.c == op.c && e.d == op.d) {
            ++e.count;
            return;
        }
    }
}

void note_access(const void *addr, size_t bytes, int access, const void *pc) {
    if (g_launch && (g_launch->spec.memcheck || g_launch->spec.racecheck || g_launch->spec.counters))
        check_access(reinterpret_cast<uintptr_t>(addr), bytes, access, pc, false);
}

// Counters: a vector copy (float4 and the like) is one access of `bytes` bytes at each end that is not
// the thread's own stack; the scalar accesses g++ makes of it follow and are not counted again.
void note_vector(const void *dst, const void *src, size_t bytes) {
    if (!g_launch || !g_launch->spec.counters) return;
    Worker *w = tl_worker;
    if (!w || !w->running || w->in_collective || w->failed) return;
    Fiber &f = *w->running;
    const void *pc = __builtin_extract_return_addr(__builtin_return_address(0));
    const auto stack = reinterpret_cast<uintptr_t>(f.stack_lo);
    const uintptr_t ends[2] = {reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst)};
    f.vec_left[0] = f.vec_left[1] = 0;
    for (int i = 0; i < 2; ++i) {
        const uintptr_t a = ends[i];
        if (!a || a - stack < kStackBytes) continue;
        count_split(*w, f, a, bytes, i == 0 ? kRead : kWrite, pc);
        f.vec_lo[i] = a;
        f.vec_len[i] = f.vec_left[i] = bytes;
    }
}

void fail(const void *pc, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::string msg = buf;
    if (tl_worker && tl_worker->running && !tl_worker->in_collective)
        msg = thread_text(tl_worker->running->t) + ": " + msg;
    if (pc) msg += " (at " + pc_text(pc) + ")";
    abort_launch(msg);
}

int device_printf(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n <= 0) return n;
    std::lock_guard<std::mutex> lock(g_printf_mutex);
    Report *r = g_launch->report;
    char *dst = reinterpret_cast<char *>(r + 1);
    const size_t len = std::min<size_t>(size_t(n), sizeof buf - 1);
    if (r->printf_len + len > g_launch->spec.printf_limit) {
        r->printf_truncated = 1;
        return n;
    }
    memcpy(dst + r->printf_len, buf, len);
    r->printf_len += len;
    return n;
}

void *threadgroup_arena(int index) {
    Worker *w = tl_worker;
    if (index < 0 || size_t(index) >= w->arenas.size())
        fail(SIMT_PC(), "[[threadgroup(%d)]] was given no memory: pass its size in threadgroup_memory", index);
    return w->arenas[size_t(index)];
}

}  // namespace simt

// ------------------------------------------------------------------------------------------------
// ThreadSanitizer's instrumentation calls, implemented by the course: in checked builds (compiled
// with -fsanitize=thread, linked without its runtime) every memory access of the kernel lands here.

extern "C" {
using simt::check_access;
#define SIMT_PC_HERE __builtin_extract_return_addr(__builtin_return_address(0))
#define SIMT_TSAN_ACCESS(n)                                                                                   \
    void __tsan_read##n(void *p) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kRead, SIMT_PC_HERE, true); } \
    void __tsan_write##n(void *p) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kWrite, SIMT_PC_HERE, true); } \
    void __tsan_unaligned_read##n(void *p) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kRead, SIMT_PC_HERE, false); } \
    void __tsan_unaligned_write##n(void *p) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kWrite, SIMT_PC_HERE, false); }
SIMT_TSAN_ACCESS(1)
SIMT_TSAN_ACCESS(2)
SIMT_TSAN_ACCESS(4)
SIMT_TSAN_ACCESS(8)
SIMT_TSAN_ACCESS(16)
void __tsan_read_range(void *p, unsigned long n) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kRead, SIMT_PC_HERE, false); }
void __tsan_write_range(void *p, unsigned long n) { check_access(reinterpret_cast<uintptr_t>(p), n, simt::kWrite, SIMT_PC_HERE, false); }
void __tsan_init() {}
void __tsan_func_entry(void *) {}
void __tsan_volatile_read4(void *p) { check_access(reinterpret_cast<uintptr_t>(p), 4, simt::kRead, SIMT_PC_HERE, false); }
void __tsan_volatile_write4(void *p) { check_access(reinterpret_cast<uintptr_t>(p), 4, simt::kWrite, SIMT_PC_HERE, false); }
void __tsan_func_exit(void *) {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}

// Copies and fills of the kernel's memory: clang's -fsanitize=thread (LLVM 16 on) calls these for memcpy,
// memmove and memset, and for the copies and fills it makes of loops and of large assignments. A read
// of the source and a write of the destination, then the copy itself.
void *__tsan_memcpy(void *d, const void *s, unsigned long n) {
    if (n) {
        check_access(reinterpret_cast<uintptr_t>(s), n, simt::kRead, SIMT_PC_HERE, false);
        check_access(reinterpret_cast<uintptr_t>(d), n, simt::kWrite, SIMT_PC_HERE, false);
    }
    return memcpy(d, s, n);
}
void *__tsan_memmove(void *d, const void *s, unsigned long n) {
    if (n) {
        check_access(reinterpret_cast<uintptr_t>(s), n, simt::kRead, SIMT_PC_HERE, false);
        check_access(reinterpret_cast<uintptr_t>(d), n, simt::kWrite, SIMT_PC_HERE, false);
    }
    return memmove(d, s, n);
}
void *__tsan_memset(void *d, int c, unsigned long n) {
    if (n) check_access(reinterpret_cast<uintptr_t>(d), n, simt::kWrite, SIMT_PC_HERE, false);
    return memset(d, c, n);
}

// Atomic operations in checked builds (a static local's guard, std::atomic in a kernel): done for
// real, and reported as atomic accesses.
#define SIMT_TSAN_ATOMICS(bits, T)                                                                          \
    T __tsan_atomic##bits##_load(const volatile T *a, int) {                                               \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kRead, SIMT_PC_HERE, false);         \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                       \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int) {                                            \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kAtomic, SIMT_PC_HERE, false);       \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                           \
    }                                                                                                       \
    SIMT_TSAN_RMW(bits, T, exchange, __atomic_exchange_n)                                                   \
    SIMT_TSAN_RMW(bits, T, fetch_add, __atomic_fetch_add)                                                   \
    SIMT_TSAN_RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                                   \
    SIMT_TSAN_RMW(bits, T, fetch_and, __atomic_fetch_and)                                                   \
    SIMT_TSAN_RMW(bits, T, fetch_or, __atomic_fetch_or)                                                     \
    SIMT_TSAN_RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                                   \
    SIMT_TSAN_RMW(bits, T, fetch_nand, __atomic_fetch_nand)                                                 \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {                \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kAtomic, SIMT_PC_HERE, false);       \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
    }                                                                                                       \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {                  \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kAtomic, SIMT_PC_HERE, false);       \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);             \
    }                                                                                                       \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                      \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kAtomic, SIMT_PC_HERE, false);       \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                  \
        return c;                                                                                           \
    }
#define SIMT_TSAN_RMW(bits, T, op, builtin)                                                                 \
    T __tsan_atomic##bits##_##op(volatile T *a, T v, int) {                                                \
        check_access(reinterpret_cast<uintptr_t>(a), sizeof(T), simt::kAtomic, SIMT_PC_HERE, false);       \
        return builtin(a, v, __ATOMIC_SEQ_CST);                                                             \
    }
SIMT_TSAN_ATOMICS(8, uint8_t)
SIMT_TSAN_ATOMICS(16, uint16_t)
SIMT_TSAN_ATOMICS(32, uint32_t)
SIMT_TSAN_ATOMICS(64, uint64_t)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}

// Array bounds in checked builds (-fsanitize=bounds): an index past the end of an array whose size
// the compiler knows (a thread's local array, a static __shared__ / threadgroup tile).
struct SimtUbsanLocation { const char *file; uint32_t line, column; };
struct SimtUbsanType { uint16_t kind, info; char name[1]; };
struct SimtUbsanOutOfBounds { SimtUbsanLocation loc; const SimtUbsanType *array; const SimtUbsanType *index; };

void __ubsan_handle_out_of_bounds(SimtUbsanOutOfBounds *d, uintptr_t raw) {
    long long index = static_cast<long long>(raw);
    const unsigned bits = 1u << (d->index->info >> 1);
    if ((d->index->info & 1) && bits < 64) {  // a signed index narrower than 64 bits: sign-extend
        const uint64_t m = uint64_t(1) << (bits - 1);
        index = static_cast<long long>(((raw & ((m << 1) - 1)) ^ m) - m);
    }
    const char *base = d->loc.file ? strrchr(d->loc.file, '/') : nullptr;
    std::string who = (simt::tl_worker && simt::tl_worker->running) ? simt::thread_text(simt::tl_worker->running->t)
                                                                      : std::string("the kernel");
    // The type as the compiler spells it ('float [32]' from g++, 'float[32]' from clang): written as C++ does.
    std::string type;
    for (const char *c = d->array->name; *c; ++c)
        if (!(*c == ' ' && c[1] == '[')) type += *c;
    simt::abort_launch("index " + std::to_string(index) + " is outside an array of type " + type +
                       " at line " + std::to_string(d->loc.line) + " of " + (base ? base + 1 : d->loc.file) +
                       " (" + who + ").");
}
void __ubsan_handle_out_of_bounds_abort(SimtUbsanOutOfBounds *d, uintptr_t raw) { __ubsan_handle_out_of_bounds(d, raw); }

// --- the launch protocol, called from Python through ctypes ---

void *simt_prepare(const SimtLaunchSpec *spec) {
    using namespace simt;
    auto *L = new Launch();
    L->spec = *spec;
    L->kernel_name = spec->kernel_name ? spec->kernel_name : "the kernel";
    L->spec.kernel_name = L->kernel_name.c_str();
    dladdr(reinterpret_cast<void *>(spec->entry), &L->module);
    for (uint32_t i = 0; i < spec->n_buffers; ++i) {
        DeviceBuffer b;
        b.spec = spec->buffers[i];
        L->buffer_names.push_back(b.spec.name ? b.spec.name : "?");
        b.bytes = b.spec.bytes;
        b.mapped = round_up(std::max<size_t>(b.bytes, 1), page_size());
        b.reserved = kGuard + b.mapped + kTail;
        b.reservation = static_cast<char *>(mmap(nullptr, b.reserved, PROT_NONE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (b.reservation == MAP_FAILED) return nullptr;
        // Shared with the child; the end sits on the no-access rest of the reservation, and the
        // start is 256-byte aligned as cudaMalloc's is.
        char *pages = b.reservation + kGuard;
        if (mmap(pages, b.mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            return nullptr;
        b.data = pages + b.mapped - round_up(std::max<size_t>(b.bytes, 1), 256);
        if (b.bytes) memcpy(b.data, b.spec.host, b.bytes);
        L->buffers.push_back(b);
    }
    for (size_t i = 0; i < L->buffers.size(); ++i) L->buffers[i].spec.name = L->buffer_names[i].c_str();
    L->pointer_values.resize(spec->n_params);
    L->args.resize(spec->n_params);
    for (uint32_t i = 0; i < spec->n_params; ++i) {
        const int bi = spec->param_buffer[i];
        if (bi >= 0) {
            L->pointer_values[i] = L->buffers[size_t(bi)].data;
            L->args[i] = &L->pointer_values[i];
        } else {
            L->args[i] = spec->param_scalar[i];
        }
    }
    L->report_bytes = round_up(sizeof(Report) + spec->printf_limit + 1, page_size());
    L->report = static_cast<Report *>(mmap(nullptr, L->report_bytes, PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (L->report == MAP_FAILED) return nullptr;
    new (L->report) Report();
    L->report->status = kRunning;
    if (spec->counters) {
        L->counters_bytes = round_up(sizeof(SimtCounterHeader) + spec->counters_capacity * sizeof(SimtPattern),
                                     page_size());
        void *mem = mmap(nullptr, L->counters_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
        if (mem == MAP_FAILED) return nullptr;
        L->counters = static_cast<SimtCounterHeader *>(mem);
        L->counters->capacity = spec->counters_capacity;
    }
    return L;
}

// Fork and run the grid in the child. Returns the child's pid (or -1). `output_fd` receives the
// child's stdout and stderr (so nothing the kernel's libraries print reaches the notebook's stderr).
long simt_start(void *handle, int output_fd) {
    using namespace simt;
    auto *L = static_cast<Launch *>(handle);
    // No fflush before the fork: it would wait for every stdio stream's lock, and another thread of this
    // process (a library logging to a full pipe, say) may hold one for as long as it likes. Nothing
    // buffered here can come out twice: the child leaves by _exit, which flushes nothing.
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid != 0) return pid;
    if (output_fd >= 0) {
        dup2(output_fd, 1);
        dup2(output_fd, 2);
    }
    g_launch = L;
    for (auto &b : L->buffers)
        if (b.spec.readonly) mprotect(b.reservation + kGuard, b.mapped, PROT_READ);
    L->report->boundary = enclose_child(*L, parent);  // before any of the kernel's code runs
    child_main();
    _exit(0);
}

// After the child has ended: copy buffers back if it succeeded. Returns the report's status
// (0: never finished, 1: ok, 2: failed).
int simt_collect(void *handle) {
    using namespace simt;
    auto *L = static_cast<Launch *>(handle);
    const int status = L->report->status.load();
    if (status == kOk)
        for (auto &b : L->buffers)
            if (!b.spec.readonly && b.bytes) memcpy(b.spec.host, b.data, b.bytes);
    return status;
}

// The report is memory the kernel's code could write: what Python reads of it is kept within it.
const char *simt_error(void *handle) {
    auto *r = static_cast<simt::Launch *>(handle)->report;
    r->error[simt::kErrorBytes - 1] = 0;
    return r->error;
}
const char *simt_printf(void *handle, uint64_t *len, int *truncated) {
    auto *L = static_cast<simt::Launch *>(handle);
    auto *r = L->report;
    *len = std::min<uint64_t>(r->printf_len, L->spec.printf_limit);
    *truncated = r->printf_truncated;
    return reinterpret_cast<const char *>(r + 1);
}
// Whether the child ran behind the system-call filter: 1, 0 (not asked for), or -errno (not possible here).
int simt_boundary(void *handle) { return static_cast<simt::Launch *>(handle)->report->boundary; }
// Counters mode: the header, followed by header->patterns SimtPattern records (null without counters).
const SimtCounterHeader *simt_counters(void *handle) {
    auto *L = static_cast<simt::Launch *>(handle);
    if (L->counters) {
        L->counters->capacity = L->spec.counters_capacity;
        L->counters->patterns = std::min(L->counters->patterns, L->counters->capacity);
        L->counters->matrix_kinds = std::min<uint64_t>(L->counters->matrix_kinds, kSimtMatrixKinds);
    }
    return L->counters;
}
uint64_t simt_elapsed_ns(void *handle) { return static_cast<simt::Launch *>(handle)->report->elapsed_ns; }
uint32_t simt_blocks_done(void *handle, uint32_t *running) {
    auto *r = static_cast<simt::Launch *>(handle)->report;
    for (int i = 0; i < 3; ++i) running[i] = r->block_running[i];
    return r->blocks_done;
}

void simt_release(void *handle) {
    using namespace simt;
    auto *L = static_cast<Launch *>(handle);
    for (auto &b : L->buffers) munmap(b.reservation, b.reserved);
    munmap(L->report, L->report_bytes);
    if (L->counters) munmap(L->counters, L->counters_bytes);
    delete L;
}
}
