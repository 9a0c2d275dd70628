// Conformance kernels: SIMD-group functions and 8x8 SIMD-group matrices.
#include <metal_stdlib>
using namespace metal;

// 12 float results per thread, 4 int results, a half and a float4 sum.
kernel void simd_ops(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                     device const int *xi [[buffer(2)]], device int *iout [[buffer(3)]],
                     device half *hout [[buffer(4)]], device float4 *vout [[buffer(5)]],
                     uint i [[thread_position_in_grid]], ushort lane [[thread_index_in_simdgroup]]) {
    const float v = x[i];
    device float *o = out + i * 12;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_shuffle(v, (lane * 7 + 3) % 32);
    o[4] = simd_shuffle_xor(v, 5);
    o[5] = simd_shuffle_down(v, 3);
    o[6] = simd_shuffle_up(v, 4);
    o[7] = simd_broadcast(v, 9);
    o[8] = simd_prefix_exclusive_sum(v);
    o[9] = simd_prefix_inclusive_sum(v);
    o[10] = simd_broadcast_first(v);
    o[11] = float(simd_all(v > -1000.0f)) + 2.0f * float(simd_any(v > 15.5f));
    const int k = xi[i];
    iout[i * 4 + 0] = simd_sum(k);
    iout[i * 4 + 1] = simd_max(k);
    iout[i * 4 + 2] = int(simd_min(uint(k + 100)));
    iout[i * 4 + 3] = simd_shuffle_xor(k, 16) + simd_shuffle_down(k, 1) * 1000;
    hout[i] = simd_sum(half(v));
    vout[i] = simd_sum(float4(v, 1.0f, -v, float(lane)));
}

// Lanes that return early do not take part: the sum covers the others.
kernel void simd_sum_after_return(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                                  uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    if (lane % 3 == 0) return;
    out[i] = simd_sum(x[i]) + simd_prefix_exclusive_sum(1.0f) * 1000.0f;
}

// Reading a lane that returned: undefined on a GPU, an error here.
kernel void simd_read_returned_lane(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]],
                                    uint lane [[thread_index_in_simdgroup]]) {
    if (lane >= 16) return;
    out[i] = simd_shuffle(float(lane), lane + 16);
}

// In a threadgroup of 48 threads the second simdgroup has 16 lanes; shuffle_down by 3 reads past them.
kernel void simd_shuffle_partial(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i] = simd_shuffle_down(float(i), 3);
}

// Lanes at two different simd_sum calls: divergence.
kernel void simd_divergent(device float *out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    if (lane < 8) {
        out[lane] = simd_sum(1.0f);
    } else {
        out[lane] = simd_sum(2.0f);
    }
}

// One 8x8 product per simdgroup: C = A B, then D = A B + C.
kernel void matmul8(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],
                    device float *c [[buffer(2)]], device float *d [[buffer(3)]],
                    uint sg [[simdgroup_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                    uint sgs [[simdgroups_per_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
    const uint m = (g * sgs + sg) * 64;
    threadgroup float staged[2 * 64];  // B goes through threadgroup memory
    for (uint j = sg * 32 + lane; j < sgs * 64; j += sgs * 32) staged[j] = b[g * sgs * 64 + j];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 A, B, C;
    simdgroup_load(A, a + m);
    simdgroup_barrier(mem_flags::mem_none);
    simdgroup_load(B, staged + sg * 64, 8);
    simdgroup_multiply(C, A, B);
    simdgroup_store(C, c + m);
    simdgroup_multiply_accumulate(C, A, B, C);
    simdgroup_store(C, d + m, 8, ulong2(0, 0), false);
}

// Blocks of a 16x24 row-major matrix M: X = M[8:16, 16:24] loaded with an origin, and its transpose.
// out is 8 x 48: [X | X^T (transposed load) | X (transposed store of X^T) | X X^T | 2I | 3 | X * 2I]
kernel void matrix_blocks(device const float *m [[buffer(0)]], device float *out [[buffer(1)]]) {
    simdgroup_float8x8 X, XT, P;
    simdgroup_load(X, m, 24, ulong2(16, 8));
    simdgroup_load(XT, m, 24, ulong2(16, 8), true);
    simdgroup_store(X, out, 56);
    simdgroup_store(XT, out, 56, ulong2(8, 0));
    simdgroup_store(XT, out, 56, ulong2(16, 0), true);
    simdgroup_multiply(P, X, XT);
    simdgroup_store(P, out, 56, ulong2(24, 0));
    const simdgroup_float8x8 two = simdgroup_float8x8(2.0f);
    simdgroup_store(two, out, 56, ulong2(32, 0));
    simdgroup_store(make_filled_simdgroup_matrix<float, 8, 8>(3.0f), out, 56, ulong2(40, 0));
    simdgroup_multiply(P, X, two);
    simdgroup_store(P, out + 48, 56);
}

// half matrices: D(half) = A B; E(float) = A B + C(float); products of small integers are exact.
kernel void matmul8_half(device const half *a [[buffer(0)]], device const half *b [[buffer(1)]],
                         device const float *c [[buffer(2)]], device half *d [[buffer(3)]],
                         device float *e [[buffer(4)]]) {
    simdgroup_half8x8 A, B, D;
    simdgroup_float8x8 C, E;
    simdgroup_load(A, a);
    simdgroup_load(B, b, 8, ulong2(0, 0), true);   // B^T
    simdgroup_load(C, c);
    simdgroup_multiply(D, A, B);
    simdgroup_store(D, d);
    simdgroup_multiply_accumulate(E, A, B, C);
    simdgroup_store(E, e);
}

// Which elements each lane holds: the value of each of its two elements, then the matrix after every
// lane added 1000 * (lane + 1) to its first element.
kernel void matrix_elements(device const float *m [[buffer(0)]], device float *held [[buffer(1)]],
                            device float *changed [[buffer(2)]], uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 M;
    simdgroup_load(M, m);
    thread float2 &e = M.thread_elements();
    held[lane * 2] = e.x;
    held[lane * 2 + 1] = e[1];
    e.x += 1000.0f * float(lane + 1);
    simdgroup_store(M, changed);
}

// A simdgroup matrix needs all 32 lanes: a threadgroup of 16 threads has a simdgroup of 16.
kernel void matrix_short_simdgroup(device const float *m [[buffer(0)]], device float *out [[buffer(1)]]) {
    simdgroup_float8x8 M;
    simdgroup_load(M, m);
    simdgroup_store(M, out);
}

// Half of the lanes leave before the load.
kernel void matrix_after_return(device const float *m [[buffer(0)]], device float *out [[buffer(1)]],
                                uint lane [[thread_index_in_simdgroup]]) {
    if (lane >= 16) return;
    simdgroup_float8x8 M;
    simdgroup_load(M, m);
    simdgroup_store(M, out);
}

// Two simdgroups store to the same 8x8 block with no barrier: a race.
kernel void matrix_store_race(device const float *m [[buffer(0)]], device float *out [[buffer(1)]]) {
    simdgroup_float8x8 M;
    simdgroup_load(M, m);
    simdgroup_store(M, out);
}

// A load whose rows run past the end of the buffer.
kernel void matrix_load_out_of_bounds(device const float *m [[buffer(0)]], device float *out [[buffer(1)]],
                                      constant uint &stride [[buffer(2)]]) {
    simdgroup_float8x8 M;
    simdgroup_load(M, m, stride);
    simdgroup_store(M, out);
}
