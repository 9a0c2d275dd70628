// One warp, one shared-memory load per kernel: the access patterns whose wavefronts and bank conflicts Nsight
// Compute measured on Hopper (tests/simt/test_counters.py holds the numbers, docs/counters.md the command).
// Each kernel fills 8 KiB of shared memory, then every lane t for which the condition holds loads one float4
// (v4_*), float2 (v2_*) or float (v1_*) at the index shown, and writes what it read, so that the load stays.

__global__ void v4_same(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[0];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_lane(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_lane_first8(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    if (t < 8) {
        const float4 x = s[t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_half_bcast(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t / 16];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_quarter_bcast(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t / 8];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_mod8(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t % 8];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_mod16(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t % 16];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_stride2(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[2 * t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_row36(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t * 9];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_pairs(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[t / 2];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_q0q2_same(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[(t / 8) % 2];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_stride8(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float4 x = s[8 * t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_first16(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    if (t < 16) {
        const float4 x = s[t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v4_odd_quarters(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    if ((t / 8) % 2 == 1) {
        const float4 x = s[t];
        r = x.x + x.y + x.z + x.w;
    }
    out[t] = r;
}

__global__ void v2_same(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[0];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_lane(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[t];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_half_bcast(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[t / 16];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_mod16(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[t % 16];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_first16(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    if (t < 16) {
        const float2 x = reinterpret_cast<const float2 *>(s)[t];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_stride2(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[2 * t];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_pairs(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[t / 2];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v2_stride16(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        const float2 x = reinterpret_cast<const float2 *>(s)[16 * t];
        r = x.x + x.y;
    }
    out[t] = r;
}

__global__ void v1_same(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        r = reinterpret_cast<const float *>(s)[0];
    }
    out[t] = r;
}

__global__ void v1_stride32(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        r = reinterpret_cast<const float *>(s)[32 * t];
    }
    out[t] = r;
}

__global__ void v1_lane(float *out) {
    __shared__ float4 s[512];
    const int t = threadIdx.x;
    for (int i = t; i < 512; i += 32) s[i] = make_float4(4.0f * i, 4.0f * i + 1, 4.0f * i + 2, 4.0f * i + 3);
    __syncthreads();
    float r = 0.0f;
    {
        r = reinterpret_cast<const float *>(s)[t];
    }
    out[t] = r;
}
