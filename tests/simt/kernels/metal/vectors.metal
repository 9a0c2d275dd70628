// Conformance kernels: vector types, half, math functions, alignment of vector accesses.
#include <metal_stdlib>
using namespace metal;

// 12 float4 results per thread from float4 inputs a, b.
kernel void float4_ops(device const float4 *a [[buffer(0)]], device const float4 *b [[buffer(1)]],
                       device float4 *out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const float4 x = a[i], y = b[i];
    device float4 *o = out + i * 12;
    o[0] = x + y;
    o[1] = x * y - y / 2.0f;
    o[2] = 3.0f * x - 1.0f;
    o[3] = -x;
    o[4] = float4(x.zw, y.xy);                 // swizzles into a constructor
    o[5] = float4(x.xyz, 7.0f);
    float4 v = x;
    v.xy = y.zw;                               // swizzle assignment
    v.w += 1.0f;                               // element compound assignment
    v *= 2.0f;
    o[6] = v;
    float4 u = float4(0.0f);
    for (int k = 0; k < 4; ++k) u[k] = x[3 - k];  // indexing
    o[7] = u;
    o[8] = float4(float2(x.x, y.y), float2(1.5f));  // from float2 pairs; splat float2
    o[9] = float4(int4(x * 10.0f));            // conversions truncate toward zero
    o[10] = float4(dot(x, y), dot(x.xy, y.xy), length(float2(3.0f, 4.0f)), x.y + y.z);
    float4 w = x;
    w.zw *= float2(10.0f, 100.0f);
    o[11] = w;
}

// Integer vectors and comparisons/select.
kernel void int_ops(device const int4 *a [[buffer(0)]], device const int4 *b [[buffer(1)]],
                    device int4 *out [[buffer(2)]], device uint2 *uout [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
    const int4 x = a[i], y = b[i];
    device int4 *o = out + i * 6;
    o[0] = x % y;
    o[1] = (x & y) | (x ^ 3);
    o[2] = x << 2;
    o[3] = max(x, y) - min(x, y) + abs(x - y);
    o[4] = select(x, y, x < y);                // the larger, componentwise
    o[5] = clamp(x, int4(-5), int4(5));
    const uint2 u = uint2(x.xy) * 3u + uint2(1u, 2u);
    uout[i] = u >> 1;
}

// half and half4: every operation rounds to half; half with float gives float.
kernel void half_ops(device const half *h [[buffer(0)]], device const float *f [[buffer(1)]],
                     device half *hout [[buffer(2)]], device float *fout [[buffer(3)]],
                     device half4 *h4out [[buffer(4)]], device float4 *f4out [[buffer(5)]],
                     uint i [[thread_position_in_grid]]) {
    const half x = h[i];
    const float y = f[i];
    hout[i * 4 + 0] = x * x + 1.0h;
    hout[i * 4 + 1] = x / 3.0h;
    hout[i * 4 + 2] = half(y);                 // float -> half rounds to nearest even
    hout[i * 4 + 3] = x * 2 - 1;               // half op int stays half
    fout[i * 4 + 0] = x * y;                   // half op float is float
    fout[i * 4 + 1] = y + x;
    fout[i * 4 + 2] = (x < y) ? 1.0f : 0.0f;
    fout[i * 4 + 3] = 1.0h / 3.0h;             // a half literal: the quotient is rounded to half
    const half4 v = half4(x, x + 1.0h, half(y), 2.0h);
    h4out[i] = v * 2.0h + half4(1.0h) - half4(float4(y));
    f4out[i] = float4(v) + float4(0.25f);
}

// Math functions, scalar and componentwise; 16 results per thread.
kernel void math_ops(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                     device float4 *vout [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const float v = x[i];
    device float *o = out + i * 16;
    o[0] = exp(v);
    o[1] = exp2(v);
    o[2] = log(fabs(v) + 1.0f);
    o[3] = fast::exp(v) + fast::exp2(v) + precise::exp(v);
    o[4] = max(v, 0.5f) + min(v, -0.5f);
    o[5] = fmax(v, 0.25f) - fmin(v, 0.25f);
    o[6] = abs(v) + sqrt(fabs(v));
    o[7] = rsqrt(fabs(v) + 1.0f);
    o[8] = fma(v, 3.0f, 0.5f);
    o[9] = clamp(v, -1.0f, 1.0f);
    o[10] = select(1.0f, 2.0f, v > 0.0f);
    o[11] = isinf(v / 0.0f) ? 1.0f : 0.0f;     // v / 0 is +-inf, or nan for v == 0
    o[12] = isnan(v / 0.0f) ? 1.0f : 0.0f;
    o[13] = (INFINITY == HUGE_VALF && FLT_MAX < INFINITY) ? FLT_MAX : 0.0f;
    o[14] = as_type<float>(as_type<uint>(v) ^ 0x80000000u);   // bit cast: flip the sign
    o[15] = metal::max(v, 1.0f) + metal::exp(0.0f);
    const float4 w = float4(v, -v, 2.0f * v, 0.5f);
    vout[i * 3 + 0] = exp(w) + max(w, float4(0.0f));
    vout[i * 3 + 1] = clamp(w, -1.0f, 1.0f) + abs(w) + sqrt(abs(w));
    vout[i * 3 + 2] = fma(w, float4(2.0f), float4(1.0f)) + select(float4(0.0f), float4(1.0f), isnan(w / 0.0f));
}

// Vector accesses at a given element offset: float4 (16-byte aligned) and half4 (8-byte aligned).
kernel void float4_at(device const float *x [[buffer(0)]], device float4 *out [[buffer(1)]],
                      constant uint &offset [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    device const float4 *p = (device const float4 *)(x + offset);
    out[i] = p[i];
}

kernel void float4_store_at(device const float4 *in [[buffer(0)]], device float *y [[buffer(1)]],
                            constant uint &offset [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    device float4 *p = (device float4 *)(y + offset);
    p[i] = in[i];
}

kernel void half4_at(device const half *x [[buffer(0)]], device half4 *out [[buffer(1)]],
                     constant uint &offset [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    device const half4 *p = (device const half4 *)(x + offset);
    out[i] = p[i] * 2.0h;
}

// Element k of each vector, k chosen at run time.
kernel void vector_index(device const float4 *x [[buffer(0)]], device float *out [[buffer(1)]],
                         constant uint &k [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const float4 v = x[i];
    out[i] = v[k];
}
