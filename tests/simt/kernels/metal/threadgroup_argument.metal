// Conformance kernel: a [[threadgroup(n)]] argument, sized by the launch.
#include <metal_stdlib>
using namespace metal;

// Reverse through [[threadgroup(0)]] memory sized by the launch; n elements in all (a constant uint&).
kernel void reverse_dynamic(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                            constant uint &n [[buffer(2)]],
                            threadgroup float *tile [[threadgroup(0)]],
                            uint t [[thread_position_in_threadgroup]],
                            uint g [[threadgroup_position_in_grid]],
                            uint size [[threads_per_threadgroup]]) {
    const uint i = g * size + t;
    tile[t] = i < n ? in[i] : -1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
    if (i < n) out[i] = tile[size - 1 - t];
}
