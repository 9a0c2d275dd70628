// Conformance kernels: position attributes, threadgroup memory, scalar and struct buffer arguments.
#include <metal_stdlib>
using namespace metal;

constant uint kMarker = 7;  // program-scope constant

// Every position attribute, 24 values per thread, stored at the thread's linear index in the grid.
kernel void positions(device uint *out [[buffer(0)]],
                      uint3 gpos [[thread_position_in_grid]],
                      uint3 tgpos [[threadgroup_position_in_grid]],
                      uint3 tpos [[thread_position_in_threadgroup]],
                      uint tindex [[thread_index_in_threadgroup]],
                      uint3 tpt [[threads_per_threadgroup]],
                      uint3 tgpg [[threadgroups_per_grid]],
                      uint3 tpg [[threads_per_grid]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint sgs [[simdgroups_per_threadgroup]],
                      uint width [[threads_per_simdgroup]]) {
    const uint id = (gpos.z * tpg.y + gpos.y) * tpg.x + gpos.x;
    device uint *o = out + id * 24;
    o[0] = gpos.x; o[1] = gpos.y; o[2] = gpos.z;
    o[3] = tgpos.x; o[4] = tgpos.y; o[5] = tgpos.z;
    o[6] = tpos.x; o[7] = tpos.y; o[8] = tpos.z;
    o[9] = tindex;
    o[10] = tpt.x; o[11] = tpt.y; o[12] = tpt.z;
    o[13] = tgpg.x; o[14] = tgpg.y; o[15] = tgpg.z;
    o[16] = tpg.x; o[17] = tpg.y; o[18] = tpg.z;
    o[19] = lane; o[20] = sg; o[21] = sgs; o[22] = width;
    o[23] = kMarker;
}

// The narrower parameter types: ushort, ushort2, ushort3, uint2 (fewer components take x, then y).
kernel void positions_narrow(device uint *out [[buffer(0)]],
                             ushort2 g2 [[thread_position_in_grid]],
                             ushort3 t3 [[thread_position_in_threadgroup]],
                             uint2 tg2 [[threadgroup_position_in_grid]],
                             ushort gx [[threads_per_grid]],
                             ushort lane [[thread_index_in_simdgroup]],
                             uint2 size [[threads_per_threadgroup]]) {
    device uint *o = out + (uint(g2.y) * gx + g2.x) * 8;
    o[0] = g2.x; o[1] = g2.y;
    o[2] = t3.x; o[3] = t3.y; o[4] = t3.z;
    o[5] = tg2.x * 100 + tg2.y;
    o[6] = lane;
    o[7] = size.x * 100 + size.y;
}

// Reverse each threadgroup's 64 elements through kernel-scope threadgroup memory.
kernel void reverse_static(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                           uint t [[thread_position_in_threadgroup]],
                           uint g [[threadgroup_position_in_grid]]) {
    threadgroup float tile[64];
    tile[t] = in[g * 64 + t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[g * 64 + t] = tile[63 - t];
}

// Kernel-scope threadgroup memory of vectors: reverse 16 float4s and swap each one's halves.
kernel void reverse_float4(device const float4 *in [[buffer(0)]], device float4 *out [[buffer(1)]],
                           uint t [[thread_position_in_threadgroup]]) {
    threadgroup float4 tile[16];
    tile[t] = in[t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float4 v = tile[15 - t];
    out[t] = float4(v.zw, v.xy);
}

// The same without the barrier: a race (racecheck must say so).
kernel void reverse_no_barrier(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],
                               uint t [[thread_position_in_threadgroup]],
                               uint g [[threadgroup_position_in_grid]]) {
    threadgroup float tile[64];
    tile[t] = in[g * 64 + t];
    out[g * 64 + t] = tile[63 - t];
}

struct Params {
    uint n;
    float scale;
    float bias;
    uint stride;
};

// A struct in constant memory, and a scalar passed by value.
kernel void affine(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],
                   constant Params &p [[buffer(2)]], constant float &extra [[buffer(3)]],
                   uint i [[thread_position_in_grid]]) {
    if (i < p.n) y[i * p.stride] = p.scale * x[i] + p.bias + extra;
}
