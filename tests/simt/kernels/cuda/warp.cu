// Conformance kernels for warp-level functions: shuffles, votes, __syncwarp.
// Valid CUDA: tests/simt/test_simt_cuda.py also compiles this with nvcc.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

// Every thread shuffles its value with each variant and each type, with the same lane/offset
// `b` and `width`; out[12 * t + k] holds result k. Values are small integers, exact in every type.
__global__ void shuffles(const int *in, int *out, int b, int width) {
    const int t = threadIdx.x;
    const int v = in[t];
    int *o = out + 12 * t;
    o[0] = __shfl_sync(0xffffffff, v, b, width);
    o[1] = __shfl_up_sync(0xffffffff, v, b, width);
    o[2] = __shfl_down_sync(0xffffffff, v, b, width);
    o[3] = __shfl_xor_sync(0xffffffff, v, b, width);
    o[4] = static_cast<int>(__shfl_down_sync(0xffffffff, static_cast<unsigned int>(v), b, width));
    o[5] = static_cast<int>(__shfl_xor_sync(0xffffffff, 0.5f * v, b, width) * 2.0f);
    o[6] = static_cast<int>(__shfl_up_sync(0xffffffff, 0.25 * v, b, width) * 4.0);
    o[7] = static_cast<int>(__shfl_sync(0xffffffff, 1000000000000LL * v, b, width) / 1000000000000LL);
    o[8] = static_cast<int>(__half2float(__shfl_down_sync(0xffffffff, __int2half_rn(v), b, width)));
    const half2 h2 = __shfl_xor_sync(0xffffffff, __halves2half2(__int2half_rn(v), __int2half_rn(-v)), b, width);
    o[9] = static_cast<int>(__low2float(h2));
    o[10] = static_cast<int>(__high2float(h2));
    o[11] = static_cast<int>(__shfl_sync(0xffffffff, static_cast<unsigned long long>(v), b, width));
}

// The classic warp reduction: lane 0 of each warp writes its warp's sum.
__global__ void warp_sum(const float *in, float *out) {
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % warpSize == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / warpSize] = v;
}

// Votes over the whole warp and over its lower half.
__global__ void votes(const int *pred, unsigned int *ballot, int *any, int *all, unsigned int *half_ballot) {
    const int t = threadIdx.x, p = pred[t];
    ballot[t] = __ballot_sync(0xffffffff, p);
    any[t] = __any_sync(0xffffffff, p);
    all[t] = __all_sync(0xffffffff, p);
    if (t % 32 < 16) half_ballot[t] = __ballot_sync(0x0000ffff, p);
}

// Lanes at or past `active` return; the rest shuffle down by one within `mask`.
__global__ void shuffle_after_exit(int *out, int active, unsigned int mask) {
    const int t = threadIdx.x;
    if (t >= active) return;
    out[t] = __shfl_down_sync(mask, t * 10, 1);  // @shuffle-exited
}

// Lanes exchange values through shared memory, with or without __syncwarp between write and read.
__global__ void warp_exchange(int *out, int sync) {
    __shared__ int s[64];
    const int t = threadIdx.x, lane = t % 32, base = t - lane;
    s[t] = t * 3;
    if (sync) __syncwarp();
    out[t] = s[base + (lane + 1) % 32];  // @exchange-read
}
