// Conformance kernels for the CUDA front end of the CPU runtime: indexing, shared memory, atomics,
// vector types, printf and math. Valid CUDA: tests/simt/test_simt_cuda.py also compiles this with nvcc.
// Lines marked `// @name` are the ones error messages must point at.
#include <cuda_runtime.h>
#include <math_constants.h>
#include <cfloat>
// (printf needs no #include: cuda_runtime.h brings it, with nvcc as here)

__constant__ int kGridCode[3] = {100, 10, 1};

__host__ __device__ __forceinline__ int linear(int x, int y, int z, int width, int height) {
    return (z * height + y) * width + x;
}

__device__ __noinline__ int grid_code() {
    return gridDim.x * kGridCode[0] + gridDim.y * kGridCode[1] + gridDim.z * kGridCode[2];
}

// Each thread of a 3-D grid of 3-D blocks records its global position and the launch shape.
__global__ void __launch_bounds__(256, 2) indexing(int *__restrict__ out) {
    const uint3 t = threadIdx;
    const dim3 b = blockDim;
    const int x = blockIdx.x * b.x + t.x;
    const int y = blockIdx.y * b.y + t.y;
    const int z = blockIdx.z * b.z + t.z;
    const int width = gridDim.x * blockDim.x, height = gridDim.y * blockDim.y;
    int *o = out + 8 * linear(x, y, z, width, height);
    o[0] = x;
    o[1] = y;
    o[2] = z;
    o[3] = blockDim.x;
    o[4] = blockDim.y;
    o[5] = blockDim.z;
    o[6] = grid_code();
    o[7] = warpSize;
}

// Each block reverses its slice of `in` through static shared memory.
__global__ void reverse_static(const float *in, float *out) {
    __shared__ float tile[256];
    const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    tile[t] = in[base + t];
    __syncthreads();
    out[base + t] = tile[blockDim.x - 1 - t];
}

// The same through dynamic shared memory (the launch's shared_mem bytes), twice: the second pass
// reverses back and adds, so a missing barrier between the passes shows too.
__global__ void reverse_dynamic(const float *in, float *out) {
    extern __shared__ float buf[];
    const int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
    buf[t] = in[base + t];
    __syncthreads();
    const float r = buf[n - 1 - t];
    __syncthreads();
    buf[t] = r;
    __syncthreads();
    out[base + t] = r + 1000.0f * buf[n - 1 - t];
}

// Histogram (atomicAdd int), sum (atomicAdd float), maximum by atomicCAS on a float's bits,
// atomicMax / atomicMin, a 64-bit counter, atomicExch, atomicSub and the value atomicAdd returns.
__global__ void atomics(const int *vals, const float *x, int n, int *hist, float *sum, float *fmax_out,
                        int *imax, unsigned int *umin, unsigned long long *count, int *claimed, int *down,
                        int *tickets) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&hist[vals[i]], 1);
    atomicAdd(sum, x[i]);
    int *bits = reinterpret_cast<int *>(fmax_out);
    int old = __float_as_int(x[i]), assumed;
    do {
        assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(fmaxf(__int_as_float(assumed), x[i])));
    } while (old != assumed);
    atomicMax(imax, vals[i] * 7 - 20);
    atomicMin(umin, static_cast<unsigned int>(vals[i] + 5));
    atomicAdd(count, 3ull);
    if (vals[i] == 2) atomicExch(claimed, i + 1);
    atomicSub(down, 2);
    tickets[atomicAdd(&hist[16], 1)] = i;  // every thread gets its own slot: the returned old values
}

// Thread 0 writes `*p` plainly while every other thread adds to it atomically: a data race.
__global__ void atomic_race(int *p) {
    if (threadIdx.x == 0) *p = 5;
    else atomicAdd(p, 1);  // @atomic-race
}

// One atomic at an index the caller picks (out of bounds for memcheck to find).
__global__ void atomic_at(int *hist, int idx) {
    atomicAdd(hist + idx, 1);  // @atomic-oob
}

// An atomic on an int `off` bytes into `bytes`: misaligned unless off is a multiple of 4.
__global__ void atomic_misaligned(char *bytes, int off) {
    atomicAdd(reinterpret_cast<int *>(bytes + off), 1);  // @atomic-misaligned
}

// float4 loads and stores from `in + off_in` to `out + off_out` (in floats): they need 16-byte
// alignment. The copy doubles x and keeps y, z, w.
__global__ void copy_float4(const float *in, float *out, int off_in, int off_out, int n4) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 *src = reinterpret_cast<const float4 *>(in + off_in);
    float4 *dst = reinterpret_cast<float4 *>(out + off_out);
    float4 v = src[i];  // @float4-load
    v.x *= 2.0f;
    dst[i] = v;  // @float4-store
}

// float2 and int4 likewise, and the make_ functions and braced initialisers.
__global__ void copy_vectors(const float *in, float *out, const int *iin, int *iout, int off) {
    const int i = threadIdx.x;
    const float2 a = reinterpret_cast<const float2 *>(in + off)[i];  // @float2-load
    float4 c = {a.x, a.y};
    c.z = 7.0f;
    reinterpret_cast<float4 *>(out)[i] = make_float4(c.x, c.y, c.z, c.w + 1.0f);
    const int4 q = reinterpret_cast<const int4 *>(iin)[i];
    reinterpret_cast<int4 *>(iout)[i] = make_int4(q.w, q.z, q.y, q.x);
    const int2 p = make_int2(q.x + q.y, q.z - q.w);
    reinterpret_cast<int2 *>(iout)[blockDim.x * 2 + i] = p;
}

// Device printf, and assert.
__global__ void hello(int n) {
    assert(n >= 0);
    if (static_cast<int>(threadIdx.x) < n)
        printf("block %d thread %d of %d says %.2f\n", blockIdx.x, threadIdx.x, blockDim.x, 0.5f * threadIdx.x);
}

// Math functions and constants, 32 results per input.
__global__ void math(const float *x, float *out, int *iout, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = __ldg(x + i), a = fabsf(v);
    float *o = out + 32 * i;
    o[0] = expf(v);
    o[1] = __expf(v);
    o[2] = exp2f(v);
    o[3] = logf(a + 1.0f);
    o[4] = __logf(a + 1.0f);
    o[5] = log2f(a + 1.0f);
    o[6] = fmaxf(v, 0.25f);
    o[7] = fminf(v, 0.25f);
    o[8] = a;
    o[9] = sqrtf(a);
    o[10] = rsqrtf(a + 1.0f);
    o[11] = __fdividef(v, 3.0f);
    o[12] = fmaf(v, 3.0f, 1.0f);
    o[13] = ceilf(v);
    o[14] = floorf(v);
    o[15] = ceil(v);
    o[16] = floor(v);
    o[17] = max(v, 0.5f);
    o[18] = min(v, 0.5f);
    o[19] = tanhf(v);
    o[20] = __int_as_float(__float_as_int(v) ^ 0x80000000);
    o[21] = __uint_as_float(__float_as_uint(v) & 0x7fffffffu);
    o[22] = -INFINITY < v ? 1.0f : 0.0f;
    o[23] = CUDART_INF_F;
    o[24] = -FLT_MAX;
    o[25] = __frcp_rn(v);
    o[26] = __powf(a, 1.5f);
    o[27] = isnan(sqrtf(v)) ? 1.0f : 0.0f;
    o[28] = __saturatef(v);
    o[29] = static_cast<float>(__float2int_rn(v * 10.0f));
    o[30] = CUDART_PI_F;
    o[31] = __sinf(v);
    int *q = iout + 4 * i;
    const int k = __float2int_rz(v * 100.0f);
    q[0] = max(k, -50);
    q[1] = min(k, 30);
    q[2] = static_cast<int>(max(static_cast<unsigned int>(k + 1000), 1000u));
    q[3] = __float_as_int(v);
}
