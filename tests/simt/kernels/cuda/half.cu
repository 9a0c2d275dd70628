// Conformance kernel for CUDA's half precision (<cuda_fp16.h>): conversions and arithmetic.
// Valid CUDA: tests/simt/test_simt_cuda.py also compiles this with nvcc.
#include <cuda_fp16.h>

// 24 results per element, each converted to float.
__global__ void half_ops(const float *a, const float *b, const float *c, const double *d, const int *k,
                         float *out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const half ha = __float2half(a[i]), hb = __float2half_rn(b[i]);
    const __half hc = __float2half(c[i]);
    float *o = out + 24 * i;
    o[0] = __half2float(ha);
    o[1] = __half2float(__hadd(ha, hb));
    o[2] = __half2float(__hsub(ha, hb));
    o[3] = __half2float(__hmul(ha, hb));
    o[4] = __half2float(__hdiv(ha, hb));
    o[5] = __half2float(__hfma(ha, hb, hc));
    o[6] = __half2float(__hmax(ha, hb));
    o[7] = __half2float(__hmin(ha, hb));
    o[8] = __half2float(__habs(ha));
    o[9] = __half2float(hexp(ha));
    o[10] = __half2float(__hneg(ha));
    o[11] = __half2float(ha * hb + hc);  // operators: two roundings
    o[12] = __half2float(__int2half_rn(k[i]));
    o[13] = __half2float(__double2half(d[i]));
    const half2 p = __floats2half2_rn(a[i], b[i]);
    o[14] = __low2float(p);
    o[15] = __high2float(p);
    const half2 q = __halves2half2(hb, hc);
    o[16] = __low2float(q);
    o[17] = __high2float(q);
    const half2 s = __hadd2(p, q);
    o[18] = __low2float(s);
    o[19] = __high2float(s);
    const half2 f = __hfma2(p, q, p);
    o[20] = __low2float(f);
    o[21] = __high2float(f);
    o[22] = __hlt(ha, hb) ? 1.0f : 0.0f;
    o[23] = __hisnan(ha) ? 1.0f : 0.0f;
}

// Shared memory arrays of class types (float4, half, half2): each block reverses its slice through them.
__global__ void shared_class_types(const float *in, float *out) {
    __shared__ float4 s4[64];
    __shared__ half sh[64];
    __shared__ half2 sh2[64];
    const int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    const float v = in[base + t];
    s4[t] = make_float4(v, 2.0f * v, 0.0f, 0.0f);
    sh[t] = __float2half(v);
    sh2[t] = __floats2half2_rn(v, -v);
    __syncthreads();
    const int r = n - 1 - t;
    out[base + t] = s4[r].x + s4[r].y + __half2float(sh[r]) + __high2float(sh2[r]);
}

// atomicAdd on __half and on both halves of a __half2.
__global__ void half_atomics(const float *x, half *sum, half2 *sums, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(sum, __float2half(x[i]));
    atomicAdd(sums, __floats2half2_rn(x[i], -2.0f * x[i]));
}
