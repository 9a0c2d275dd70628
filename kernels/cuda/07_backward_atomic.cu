// Lesson 07 · the backward pass in CUDA C, dQ accumulated with atomicAdd.
//
// The forward pass kept O and one number per query row, LSE_i = log Σ_j exp(S_ij) with
// S = scale · Q Kᵀ. That number is the softmax's final normaliser, so any tile of P can be rebuilt
// exactly, with no running max and no rescaling: P_ij = exp(S_ij - LSE_i). From P and dO = ∂L/∂O:
//
//   dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP - Δ)      dK = scale · dSᵀ Q      dQ = scale · dS K
//
// Δ_i = Σ_j P_ij dP_ij is the term the softmax Jacobian subtracts from row i. Summed over j it
// collapses to dO_i · O_i (because Σ_j P_ij v_j = O_i), so a small first kernel computes
// Δ = rowsum(dO ∘ O) from O, which the forward pass returned anyway, instead of needing a full row of P.
//
// Who owns what (FlashAttention-2): a block owns BLOCK_N keys. dK_j and dV_j sum over every query,
// so the block walks over all query tiles and keeps its dK and dV rows in registers; no other block
// touches those rows, so they are written once, plainly, at the end. dQ_i sums over every key, so
// every block holds a piece of every dQ row: those pieces meet in global memory through atomicAdd.
//
// Thread layout: 128 threads per block. For dK and dV, 8 threads share one key and split its D
// columns (column c belongs to thread c % 8 of the key's group, up to 16 columns each), so the
// accumulators are fixed-size register arrays. For the tile of P and dS, thread t computes the
// entries t and t + 128 of the 16 × 16 tile. For dQ, thread t owns the elements t, t + 128, ... of
// the 16 × D tile.
//
// Shared memory (dynamic, sized by D at launch; the launcher computes it): the block's K and V
// tiles for the whole kernel, then per query tile Q, dO, LSE, Δ and the P and dS tiles.
// At D = 128 that is 2·16·128 + 2·16·128 + 2·16·16 + 2·16 floats ≈ 34 KB, under the 48 KB a
// block gets without opting in to more.
//
// Causal masking is bottom-right aligned as everywhere in the course: query i sees key j iff
// j <= i + (n_k - n_q). Query tiles that lie entirely above that diagonal are not visited.
//
// Layout: Q, dO, O (n_q, d); K, V (n_k, d); LSE, Δ (n_q); row-major float32. dQ must be zeroed
// before the launch (the blocks only ever add to it).
//
// Your part: the `preprocess_delta` region of backward_delta and the marked part of
// backward_dkdv_dq_atomic's loop (recompute_p, dkdv_accumulate, dq_atomic_add), just below.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 07 --track cuda --variant atomic

#define BLOCK_M 16                                    // query rows per tile
#define BLOCK_N 16                                    // keys per block
#define THREADS 128                                   // threads per block, every kernel in this file
#define MAX_HEAD_DIM 128
#define COLS_PER_KEY (THREADS / BLOCK_N)              // threads sharing one key's dK and dV rows
#define MAX_COLS (MAX_HEAD_DIM / COLS_PER_KEY)        // dK, dV columns per thread
#define WARPS (THREADS / 32)

static_assert(THREADS % BLOCK_N == 0 && MAX_HEAD_DIM % COLS_PER_KEY == 0, "threads must tile the dK/dV rows");
static_assert(THREADS % 32 == 0, "the Δ kernel gives each warp one row");

// Δ_i = dO_i · O_i, one warp per query row: the lanes stride over the columns (neighbouring lanes
// read neighbouring floats, one coalesced load per 32 columns), then a shuffle tree sums the 32
// partial sums. Every lane of a warp has the same row, so a warp past n_q leaves as a whole.
extern "C" __global__ void backward_delta(const float* __restrict__ o, const float* __restrict__ dout,
                                          float* __restrict__ delta, int n_q, int d) {
    const int row = blockIdx.x * WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_q) return;
    // region: preprocess_delta
    float sum = 0.0f;
    // BEGIN SOLUTION
    for (int c = lane; c < d; c += 32) sum += dout[(size_t)row * d + c] * o[(size_t)row * d + c];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    // END SOLUTION
    if (lane == 0) delta[row] = sum;
    // endregion: preprocess_delta
}

extern "C" __global__ void backward_dkdv_dq_atomic(
        const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
        const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
        float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
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
    const int n0 = blockIdx.x * BLOCK_N;        // this block owns keys n0 .. n0 + BLOCK_N - 1
    const int diag = n_k - n_q;                 // query i sees key j iff j <= i + diag

    // Keys past n_k are zeros: the P entries against them are masked to 0 below, and a zero (not
    // whatever shared memory held) keeps 0 · garbage = NaN out of the sums.
    for (int e = t; e < BLOCK_N * d; e += THREADS) {
        const int key = n0 + e / d;
        k_s[e] = key < n_k ? k[(size_t)n0 * d + e] : 0.0f;
        v_s[e] = key < n_k ? v[(size_t)n0 * d + e] : 0.0f;
    }

    const int my_key = t / COLS_PER_KEY;        // dK and dV: this thread's key within the block ...
    const int my_col = t % COLS_PER_KEY;        // ... and its columns my_col, my_col + COLS_PER_KEY, ...
    float dk_acc[MAX_COLS], dv_acc[MAX_COLS];
#pragma unroll
    for (int r = 0; r < MAX_COLS; ++r) dk_acc[r] = dv_acc[r] = 0.0f;

    // Causal: key n0 is first seen by query n0 - diag, so every tile before the one holding that
    // row sees none of this block's keys.
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
        __syncthreads();  // the Q, dO, LSE and Δ tiles (and, the first time, K and V) are in place

        // BEGIN SOLUTION
        // region: recompute_p
        for (int e = t; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const int i = e / BLOCK_N, j = e % BLOCK_N;
            const int row = m0 + i, key = n0 + j;
            bool visible = row < n_q && key < n_k;
            if (causal) visible = visible && key <= row + diag;
            float p = 0.0f, ds = 0.0f;
            // A masked entry is 0 without evaluating exp: its score may lie far above the row's LSE
            // (exp would overflow), and a row that sees no key at all has LSE = -inf.
            if (visible) {
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < d; ++c) {
                    s += q_s[i * d + c] * k_s[j * d + c];
                    dp += do_s[i * d + c] * v_s[j * d + c];
                }
                p = expf(s * scale - lse_s[i]);   // P rebuilt from the saved LSE: already normalised
                ds = p * (dp - delta_s[i]);       // the softmax backward
            }
            p_s[e] = p;
            ds_s[e] = ds;
        }
        // endregion: recompute_p
        __syncthreads();  // every P and dS entry of the tile is written before anyone reads one

        // region: dkdv_accumulate
        // dV_j += Σ_i P_ij dO_i and dK_j += Σ_i dS_ij Q_i (scale applied once, at the end).
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
        // endregion: dkdv_accumulate

        // region: dq_atomic_add
        // This block's share of dQ for rows m0 .. m0 + BLOCK_M - 1 is scale · dS K over its own
        // BLOCK_N keys. dS and K sit in shared memory, so the thread owning element (i, c) sums the
        // whole share on chip first and then makes ONE atomicAdd for it. The tempting alternative,
        // an atomicAdd of dS_ij · K_jc for every (i, j) pair, issues BLOCK_N times as many atomics:
        // each is a read-modify-write in L2, and blocks aiming at the same address queue behind
        // each other, so the atomic traffic, not the arithmetic, would set the pace.
        //
        // The add must be atomic because cdiv(n_k, BLOCK_N) blocks add to the same dQ rows and
        // blocks run concurrently: a plain load-add-store from two of them can interleave and lose
        // one of the two shares. atomicAdd makes each addition indivisible but says nothing about
        // the order they arrive in, and float addition is not associative ((a + b) + c and
        // (a + c) + b round differently). So dQ's low bits depend on which block got there first:
        // equally accurate each run, not bitwise reproducible (07_backward_split.cu is).
        for (int e = t; e < BLOCK_M * d; e += THREADS) {
            const int i = e / d, c = e % d;
            if (m0 + i < n_q) {
                float share = 0.0f;
                for (int j = 0; j < BLOCK_N; ++j) share += ds_s[i * BLOCK_N + j] * k_s[j * d + c];
                atomicAdd(&dq[(size_t)(m0 + i) * d + c], share * scale);
            }
        }
        // endregion: dq_atomic_add
        // END SOLUTION
        __syncthreads();  // nobody still reads this tile's Q, dO, P, dS when the next one is loaded
    }

    // The block's dK and dV rows are complete: every query tile has been added.
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
