// Lesson 07 · the backward pass in CUDA C, without atomics: dK/dV and dQ in separate kernels.
//
// Same math as 07_backward_atomic.cu (read that file's header first): P is rebuilt from the saved
// LSE, P_ij = exp(scale · q_i·k_j - LSE_i), and
//
//   dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP - Δ)      dK = scale · dSᵀ Q      dQ = scale · dS K
//
// with Δ = rowsum(dO ∘ O) from a first, tiny kernel.
//
// The difference is who computes dQ. There, each key block added its share of every dQ row with
// atomicAdd, so the order of the additions (and with it dQ's last bits) depended on which block
// finished first. Here every output element has exactly one owner that sums its terms in a fixed
// order, so two runs give the same bits, whatever order the GPU runs the blocks in:
//   backward_dkdv: one block per BLOCK_N keys, looping over query tiles: dK and dV, as before.
//   backward_dq:   one block per BLOCK_M queries, looping over key tiles: dQ in registers.
//
// The price is recomputation. Counting the matrix products per (query tile, key tile) pair, each
// 2 · BLOCK_M · BLOCK_N · D flops:
//   backward_dkdv: S = Q Kᵀ, dP = dO Vᵀ, dV += Pᵀ dO, dK += dSᵀ Q               4 products
//   backward_dq:   S = Q Kᵀ and dP = dO Vᵀ again (P and dS are needed again, and
//                  nothing of size BLOCK_M × N was kept), then dQ += dS K        3 products
// 7 in all against the atomic version's 5 (its dkdv loop does dQ += dS K as a fifth): 2 extra
// products, +40% matmul work, plus a second exp() of every P entry and another sweep over K and V
// (every dQ block reads all of them). That is the price of reproducible bits.
//
// Thread layout and shared memory as in 07_backward_atomic.cu; backward_dq needs no P tile
// (each thread turns its own P entries into dS at once). Causal masking is bottom-right aligned:
// query i sees key j iff j <= i + (n_k - n_q); tiles entirely above the diagonal are skipped.
//
// Layout: Q, dO, O (n_q, d); K, V (n_k, d); LSE, Δ (n_q); row-major float32.
//
// Your part: the `dq_split_kernel` region of backward_dq, the first kernel below. backward_delta and
// backward_dkdv are given, under the "given code" line.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 07 --track cuda --variant split

#define BLOCK_M 16                                    // query rows per tile
#define BLOCK_N 16                                    // keys per tile
#define THREADS 128                                   // threads per block, every kernel in this file
#define MAX_HEAD_DIM 128
#define COLS_PER_KEY (THREADS / BLOCK_N)              // threads sharing one key's dK and dV rows
#define MAX_COLS (MAX_HEAD_DIM / COLS_PER_KEY)        // dK, dV columns per thread
#define DQ_PER_THREAD (BLOCK_M * MAX_HEAD_DIM / THREADS)  // dQ elements per thread in backward_dq
#define WARPS (THREADS / 32)

static_assert(THREADS % BLOCK_N == 0 && MAX_HEAD_DIM % COLS_PER_KEY == 0, "threads must tile the dK/dV rows");
static_assert(BLOCK_M * MAX_HEAD_DIM % THREADS == 0, "threads must tile the dQ block");
static_assert(THREADS % 32 == 0, "the Δ kernel gives each warp one row");

// dQ: one block per BLOCK_M query rows. It is the only writer of those rows, and it adds the key
// tiles in one fixed order (0, BLOCK_N, 2·BLOCK_N, ...), so the result is the same bits every run.
extern "C" __global__ void backward_dq(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
        const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
        float* __restrict__ dq, int n_q, int n_k, int d, float scale, int causal) {
    extern __shared__ float smem[];
    float* k_s = smem;                          // [BLOCK_N][d]
    float* v_s = k_s + BLOCK_N * d;             // [BLOCK_N][d]
    float* q_s = v_s + BLOCK_N * d;             // [BLOCK_M][d]
    float* do_s = q_s + BLOCK_M * d;            // [BLOCK_M][d]
    float* ds_s = do_s + BLOCK_M * d;           // [BLOCK_M][BLOCK_N]
    float* lse_s = ds_s + BLOCK_M * BLOCK_N;    // [BLOCK_M]
    float* delta_s = lse_s + BLOCK_M;           // [BLOCK_M]

    const int t = threadIdx.x;
    const int m0 = blockIdx.x * BLOCK_M;        // this block owns dQ rows m0 .. m0 + BLOCK_M - 1
    const int diag = n_k - n_q;

    for (int e = t; e < BLOCK_M * d; e += THREADS) {
        const int row = m0 + e / d;
        q_s[e] = row < n_q ? q[(size_t)m0 * d + e] : 0.0f;
        do_s[e] = row < n_q ? dout[(size_t)m0 * d + e] : 0.0f;
    }
    for (int i = t; i < BLOCK_M; i += THREADS) {
        lse_s[i] = m0 + i < n_q ? lse[m0 + i] : 0.0f;
        delta_s[i] = m0 + i < n_q ? delta[m0 + i] : 0.0f;
    }
    // Thread t owns the dQ tile's elements t, t + THREADS, ... (row e / d, column e % d).
    float dq_acc[DQ_PER_THREAD];
#pragma unroll
    for (int r = 0; r < DQ_PER_THREAD; ++r) dq_acc[r] = 0.0f;

    // region: dq_split_kernel
    // BEGIN SOLUTION
    // Causal: the block's last row, m0 + BLOCK_M - 1, sees keys up to m0 + BLOCK_M - 1 + diag; key
    // tiles from m0 + BLOCK_M + diag on are entirely masked. (n_end <= 0: no key, dQ stays 0.)
    const int n_end = causal ? min(m0 + BLOCK_M + diag, n_k) : n_k;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        __syncthreads();  // the previous key tile is no longer read (the first time: Q, dO, LSE, Δ are in)
        for (int e = t; e < BLOCK_N * d; e += THREADS) {
            const int key = n0 + e / d;
            k_s[e] = key < n_k ? k[(size_t)n0 * d + e] : 0.0f;
            v_s[e] = key < n_k ? v[(size_t)n0 * d + e] : 0.0f;
        }
        __syncthreads();  // backward_dq: this key tile's K and V are in place

        // S and dP again, as backward_dkdv computed them (the two extra products of this design).
        for (int e = t; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const int i = e / BLOCK_N, j = e % BLOCK_N;
            const int row = m0 + i, key = n0 + j;
            bool visible = row < n_q && key < n_k;
            if (causal) visible = visible && key <= row + diag;   // mask of backward_dq
            float ds = 0.0f;
            if (visible) {
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < d; ++c) {
                    s += q_s[i * d + c] * k_s[j * d + c];
                    dp += do_s[i * d + c] * v_s[j * d + c];
                }
                const float p = expf(s * scale - lse_s[i]);   // P of backward_dq
                ds = p * (dp - delta_s[i]);                   // dS of backward_dq
            }
            ds_s[e] = ds;
        }
        __syncthreads();  // backward_dq: the dS tile is complete

        // dQ_i += Σ_j dS_ij K_j, in registers: no other block has these rows.
#pragma unroll
        for (int r = 0; r < DQ_PER_THREAD; ++r) {
            const int e = t + r * THREADS;
            if (e < BLOCK_M * d) {
                const int i = e / d, c = e % d;
                for (int j = 0; j < BLOCK_N; ++j) dq_acc[r] += ds_s[i * BLOCK_N + j] * k_s[j * d + c];
            }
        }
    }
    // END SOLUTION
#pragma unroll
    for (int r = 0; r < DQ_PER_THREAD; ++r) {
        const int e = t + r * THREADS;
        if (e < BLOCK_M * d && m0 + e / d < n_q) dq[(size_t)m0 * d + e] = dq_acc[r] * scale;
    }
    // endregion: dq_split_kernel
}

// ---- given code below this line: you do not edit it ----

// Δ_i = dO_i · O_i, one warp per query row (as in 07_backward_atomic.cu).
extern "C" __global__ void backward_delta(const float* __restrict__ o, const float* __restrict__ dout,
                                          float* __restrict__ delta, int n_q, int d) {
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_q) return;
    float sum = 0.0f;
    for (int c = lane; c < d; c += 32) sum += dout[(size_t)row * d + c] * o[(size_t)row * d + c];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) delta[row] = sum;
}

// dK and dV: 07_backward_atomic.cu's kernel without its dQ part.
extern "C" __global__ void backward_dkdv(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
        const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
        float* __restrict__ dk, float* __restrict__ dv,
        int n_q, int n_k, int d, float scale, int causal) {
    extern __shared__ float smem[];
    float* k_s = smem;                          // [BLOCK_N][d]
    float* v_s = k_s + BLOCK_N * d;             // [BLOCK_N][d]
    float* q_s = v_s + BLOCK_N * d;             // [BLOCK_M][d]
    float* do_s = q_s + BLOCK_M * d;            // [BLOCK_M][d]
    float* p_s = do_s + BLOCK_M * d;            // [BLOCK_M][BLOCK_N]
    float* ds_s = p_s + BLOCK_M * BLOCK_N;      // [BLOCK_M][BLOCK_N]
    float* lse_s = ds_s + BLOCK_M * BLOCK_N;    // [BLOCK_M]
    float* delta_s = lse_s + BLOCK_M;           // [BLOCK_M]

    const int t = threadIdx.x;
    const int n0 = blockIdx.x * BLOCK_N;
    const int diag = n_k - n_q;

    for (int e = t; e < BLOCK_N * d; e += THREADS) {
        const int key = n0 + e / d;
        k_s[e] = key < n_k ? k[(size_t)n0 * d + e] : 0.0f;
        v_s[e] = key < n_k ? v[(size_t)n0 * d + e] : 0.0f;
    }
    const int my_key = t / COLS_PER_KEY;
    const int my_col = t % COLS_PER_KEY;
    float dk_acc[MAX_COLS], dv_acc[MAX_COLS];
#pragma unroll
    for (int r = 0; r < MAX_COLS; ++r) dk_acc[r] = dv_acc[r] = 0.0f;

    const int m_start = causal ? max(n0 - diag, 0) / BLOCK_M * BLOCK_M : 0;
    for (int m0 = m_start; m0 < n_q; m0 += BLOCK_M) {
        for (int e = t; e < BLOCK_M * d; e += THREADS) {
            const int row = m0 + e / d;
            q_s[e] = row < n_q ? q[(size_t)m0 * d + e] : 0.0f;
            do_s[e] = row < n_q ? dout[(size_t)m0 * d + e] : 0.0f;
        }
        for (int i = t; i < BLOCK_M; i += THREADS) {
            lse_s[i] = m0 + i < n_q ? lse[m0 + i] : 0.0f;
            delta_s[i] = m0 + i < n_q ? delta[m0 + i] : 0.0f;
        }
        __syncthreads();

        // region: dkdv_tile
        for (int e = t; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const int i = e / BLOCK_N, j = e % BLOCK_N;
            const int row = m0 + i, key = n0 + j;
            bool visible = row < n_q && key < n_k;
            if (causal) visible = visible && key <= row + diag;   // mask of backward_dkdv
            float p = 0.0f, ds = 0.0f;
            if (visible) {
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < d; ++c) {
                    s += q_s[i * d + c] * k_s[j * d + c];
                    dp += do_s[i * d + c] * v_s[j * d + c];
                }
                p = expf(s * scale - lse_s[i]);       // P of backward_dkdv
                ds = p * (dp - delta_s[i]);           // dS of backward_dkdv
            }
            p_s[e] = p;
            ds_s[e] = ds;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < MAX_COLS; ++r) {
            const int c = my_col + r * COLS_PER_KEY;
            if (c < d) {
                for (int i = 0; i < BLOCK_M; ++i) {
                    dv_acc[r] += p_s[i * BLOCK_N + my_key] * do_s[i * d + c];
                    dk_acc[r] += ds_s[i * BLOCK_N + my_key] * q_s[i * d + c];
                }
            }
        }
        // endregion: dkdv_tile
        __syncthreads();
    }

    const int key = n0 + my_key;
    if (key < n_k) {
#pragma unroll
        for (int r = 0; r < MAX_COLS; ++r) {
            const int c = my_col + r * COLS_PER_KEY;
            if (c < d) {
                dk[(size_t)key * d + c] = dk_acc[r] * scale;
                dv[(size_t)key * d + c] = dv_acc[r];
            }
        }
    }
}
