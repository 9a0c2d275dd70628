// Conformance kernels for the memory flags of Metal's barriers: threadgroup_barrier(mem_flags::mem_none)
// makes the threads of a threadgroup wait for each other, but orders none of their memory accesses;
// mem_threadgroup orders threadgroup memory, mem_device device memory (within the threadgroup), and
// mem_texture textures (which the runtime does not have). Racecheck must report a kernel that relies on a
// barrier for memory its flags do not name, and accept one that does not rely on it.
#include <metal_stdlib>
using namespace metal;

// Each thread writes its own slot of threadgroup memory and, after the barrier, reads another thread's.
static void reverse_through(threadgroup float *tile, device const float *in, device float *out, uint t,
                            mem_flags flags) {
    tile[t] = in[t];
    threadgroup_barrier(flags);  // reverse-barrier
    out[t] = tile[63 - t];
}

kernel void reverse_threadgroup(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                                uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    reverse_through(tile, in, out, t, mem_flags::mem_threadgroup);
}

kernel void reverse_none(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                         uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    reverse_through(tile, in, out, t, mem_flags::mem_none);
}

kernel void reverse_device(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                           uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    reverse_through(tile, in, out, t, mem_flags::mem_device);
}

kernel void reverse_texture(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                            uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    reverse_through(tile, in, out, t, mem_flags::mem_texture);
}

kernel void reverse_threadgroup_texture(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                                        uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    reverse_through(tile, in, out, t, mem_flags::mem_threadgroup | mem_flags::mem_texture);
}

// The same through a [[threadgroup(0)]] argument, with the barrier written in the kernel itself.
kernel void reverse_argument_none(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                                  threadgroup float *tile [[threadgroup(0)]],
                                  uint t [[thread_position_in_threadgroup]]) {
    tile[t] = in[t];
    threadgroup_barrier(mem_flags::mem_none);  // argument-barrier
    out[t] = tile[63 - t];
}

// A barrier that needs no memory ordering: every thread reads back only what it wrote itself, so
// mem_none, which only keeps the threads in step, is enough.
kernel void own_slot_none(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                          uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[64];
    tile[t] = in[t] * 2.0f;
    threadgroup_barrier(mem_flags::mem_none);
    out[t] = tile[t] + 1.0f;
}

// Device memory: each thread writes its element of `out`, then after the barrier reads another
// thread's. Only a barrier naming mem_device orders it.
kernel void exchange_device(device float *out [[buffer(0)]], uint t [[thread_position_in_threadgroup]]) {
    out[t] = float(t);
    threadgroup_barrier(mem_flags::mem_device);
    out[64 + t] = out[63 - t];
}

kernel void exchange_device_threadgroup_only(device float *out [[buffer(0)]],
                                             uint t [[thread_position_in_threadgroup]]) {
    out[t] = float(t);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // exchange-barrier
    out[64 + t] = out[63 - t];
}

// Lanes of one simdgroup exchange through threadgroup memory: simdgroup_barrier orders it only with
// mem_threadgroup.
kernel void lanes_threadgroup(device float *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float slots[32];
    slots[lane] = float(lane);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    out[lane] = slots[31 - lane];
}

kernel void lanes_none(device float *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float slots[32];
    slots[lane] = float(lane);
    simdgroup_barrier(mem_flags::mem_none);  // lanes-barrier
    out[lane] = slots[31 - lane];
}
