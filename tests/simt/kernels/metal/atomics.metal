// Conformance kernels: atomics on device and threadgroup memory.
#include <metal_stdlib>
using namespace metal;

// Sums of x by a compare-and-exchange loop on the float's bits, by atomic_float, and counters.
kernel void atomic_sums(device const float *x [[buffer(0)]], device atomic_uint *bits [[buffer(1)]],
                        device atomic_float *fsum [[buffer(2)]], device atomic_uint *count [[buffer(3)]],
                        device const int *k [[buffer(4)]], device atomic_int *ext [[buffer(5)]],
                        device atomic_uint *ubits [[buffer(6)]], uint i [[thread_position_in_grid]]) {
    const float v = x[i];
    uint expected = atomic_load_explicit(bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(bits, &expected, as_type<uint>(as_type<float>(expected) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
    atomic_fetch_add_explicit(&fsum[0], v, memory_order_relaxed);
    atomic_fetch_sub_explicit(&fsum[1], v, memory_order_relaxed);
    atomic_fetch_add_explicit(&count[0], 1u, memory_order_relaxed);
    atomic_fetch_sub_explicit(&count[1], 2u, memory_order_relaxed);
    atomic_fetch_max_explicit(&ext[0], k[i], memory_order_relaxed);
    atomic_fetch_min_explicit(&ext[1], k[i], memory_order_relaxed);
    atomic_fetch_or_explicit(&ubits[0], 1u << (i % 32), memory_order_relaxed);
    atomic_fetch_xor_explicit(&ubits[1], 1u << (i % 32), memory_order_relaxed);
    atomic_fetch_max_explicit(&ubits[2], uint(k[i] + 6000), memory_order_relaxed);
}

// Tickets from a threadgroup counter, and a chain of exchanges: each thread swaps in its own id + 1.
kernel void atomic_threadgroup(device uint *tickets [[buffer(0)]], device uint *swapped [[buffer(1)]],
                               device uint *final_values [[buffer(2)]],
                               uint t [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                               uint size [[threads_per_threadgroup]]) {
    threadgroup atomic_uint counter;
    threadgroup atomic_uint slot;
    if (t == 0) {
        atomic_store_explicit(&counter, 0u, memory_order_relaxed);
        atomic_store_explicit(&slot, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    tickets[g * size + t] = atomic_fetch_add_explicit(&counter, 1u, memory_order_relaxed);
    swapped[g * size + t] = atomic_exchange_explicit(&slot, t + 1, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
        final_values[g * 2] = atomic_load_explicit(&counter, memory_order_relaxed);
        final_values[g * 2 + 1] = atomic_load_explicit(&slot, memory_order_relaxed);
    }
}

// A plain (non-atomic) += from every thread: racecheck reports it; the atomic version above passes.
kernel void plain_sum(device const float *x [[buffer(0)]], device float *sum [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) {
    sum[0] += x[i];
}
