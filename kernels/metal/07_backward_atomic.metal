// Lesson 07 (Metal) · the backward pass, dQ accumulated with compare-and-swap float atomics.
//
// The forward pass kept O and one number per query row, LSE_i = log sum_j exp(S_ij) with
// S = scale · Q Kᵀ. That is the softmax's final normaliser, so any tile of P can be rebuilt exactly,
// with no running max and no rescaling: P_ij = exp(S_ij - LSE_i). From P and dO = dL/dO:
//
//   dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP - Δ)      dK = scale · dSᵀ Q      dQ = scale · dS K
//
// Δ_i = sum_j P_ij dP_ij, the term the softmax Jacobian subtracts from row i, equals dO_i · O_i
// (because sum_j P_ij v_j = O_i), so a first small kernel, backward_delta, computes Δ from O.
//
// Who owns what (FlashAttention-2): a threadgroup owns BLOCK_N keys and walks over every query tile.
// dK_j and dV_j are sums over queries, so they stay in that threadgroup's registers and are written
// once at the end: no other threadgroup touches them. dQ_i is a sum over keys, so every threadgroup
// holds a share of every dQ row, and the shares meet in device memory through atomic adds.
//
// Float atomics on Apple GPUs. MSL before 3.0 (macOS 13) has no atomic float type at all. MSL 3.0
// added atomic_float (add, sub, exchange, load, store), but the hardware has no float atomic add to
// back it, as far as public sources tell: reverse engineering of the M1 GPU (the applegpu project)
// reports that add compiling to a compare-and-swap loop, and metal-flash-attention's README calls
// metal::atomic<float> emulated. This file writes that loop itself (atomic_add_float below), which
// works with any MSL version: view the float as an atomic_uint, read its bits, compute old + value in
// float, and store the new bits only if nobody changed the word in between
// (atomic_compare_exchange_weak_explicit); if somebody did, the call hands back the current bits and
// we try again. Nothing is locked: a thread that loses the race simply retries. The price is
// contention, so each threadgroup first sums its BLOCK_N keys' share of a dQ element in a register
// (dS in threadgroup memory, one dot product over the block's keys) and then issues one atomic per dQ
// element per query tile, instead of one per (key, element).
// The order in which threadgroups' adds land changes from run to run, and float addition is not
// associative, so dQ is not bitwise reproducible; 07_backward_split.metal avoids atomics altogether.
//
// Thread layout: THREADS threads per threadgroup. For dK and dV, COLS_PER_KEY threads share one key
// and split its d columns (column c belongs to thread c % COLS_PER_KEY of the key's group), so each
// keeps at most MAX_COLS of each in thread arrays: d is a runtime value up to MAX_HEAD_DIM, nothing
// is sized for one particular head dimension. P and dS tiles: thread t computes entries t, t + THREADS,
// ... of the BLOCK_M x BLOCK_N tile. dQ: thread t sums elements t, t + THREADS, ... of BLOCK_M x d.
//
// Threadgroup memory, sized at launch (course/tracks/metal.py, checked against 32 KiB):
//   k_tile (0), v_tile (1): BLOCK_N x d;  q_tile (2), do_tile (3): BLOCK_M x d;
//   p_tile (4), ds_tile (5): BLOCK_M x BLOCK_N;  row_stats (6): LSE and Δ of the query tile.
// At d = 128 that is 8 + 8 + 4 + 4 KiB, 2 x 512 bytes and 64 bytes: 25,088 bytes.
//
// Causal masking is bottom-right aligned as everywhere in the course: query i sees key j iff
// j <= i + (n_k - n_q). Query tiles entirely above the diagonal for this block's keys are skipped.
//
// Layout: Q, dO, O (n_q, d); K, V (n_k, d); LSE, Δ (n_q); row-major float32. dQ must be zero before
// the launch (threadgroups only add to it).
//
// Your part: the `preprocess_delta` region of backward_delta and the recompute_p, dkdv_accumulate and
// dq_atomic_add regions of backward_dkdv_dq_atomic, just below. The atomic_add_float and load_rows
// helpers they call are given, under the "given code" line at the end of the file.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 07 --track metal --variant atomic
#include <metal_stdlib>
#include <metal_atomic>
using namespace metal;

#define BLOCK_M 8                               // query rows per tile
#define BLOCK_N 16                              // keys per threadgroup
#define THREADS 64                              // threads per threadgroup, every kernel in this file
#define MAX_HEAD_DIM 128
#define COLS_PER_KEY (THREADS / BLOCK_N)        // threads sharing one key's dK and dV rows
#define MAX_COLS (MAX_HEAD_DIM / COLS_PER_KEY)  // dK, dV columns per thread

static_assert(THREADS % BLOCK_N == 0 && MAX_HEAD_DIM % COLS_PER_KEY == 0, "threads must tile the dK/dV rows");

// Given below: a float atomicAdd made of a 32-bit compare-and-swap, and a copy of matrix rows into
// threadgroup memory.
static void atomic_add_float(device float* addr, float value);
static void load_rows(threadgroup float* dst, device const float* src, uint row0, uint rows, uint n, uint d,
                      uint tid);

// Δ_i = dO_i · O_i, one thread per query row.
kernel void backward_delta(device const float* o [[buffer(0)]],
                           device const float* dout [[buffer(1)]],
                           device float* delta [[buffer(2)]],
                           constant uint& n_q [[buffer(3)]],
                           constant uint& d [[buffer(4)]],
                           uint row [[thread_position_in_grid]]) {
    if (row >= n_q) return;
    // region: preprocess_delta
    float sum = 0.0f;
    // BEGIN SOLUTION
    for (uint c = 0; c < d; ++c) sum += dout[ulong(row) * d + c] * o[ulong(row) * d + c];
    // END SOLUTION
    delta[row] = sum;
    // endregion: preprocess_delta
}

kernel void backward_dkdv_dq_atomic(device const float* q [[buffer(0)]],
                                    device const float* k [[buffer(1)]],
                                    device const float* v [[buffer(2)]],
                                    device const float* dout [[buffer(3)]],
                                    device const float* lse [[buffer(4)]],
                                    device const float* delta [[buffer(5)]],
                                    device float* dq [[buffer(6)]],
                                    device float* dk [[buffer(7)]],
                                    device float* dv [[buffer(8)]],
                                    constant uint& n_q [[buffer(9)]],
                                    constant uint& n_k [[buffer(10)]],
                                    constant uint& d [[buffer(11)]],
                                    constant float& scale [[buffer(12)]],
                                    constant uint& causal [[buffer(13)]],
                                    threadgroup float* k_tile [[threadgroup(0)]],
                                    threadgroup float* v_tile [[threadgroup(1)]],
                                    threadgroup float* q_tile [[threadgroup(2)]],
                                    threadgroup float* do_tile [[threadgroup(3)]],
                                    threadgroup float* p_tile [[threadgroup(4)]],
                                    threadgroup float* ds_tile [[threadgroup(5)]],
                                    threadgroup float* row_stats [[threadgroup(6)]],
                                    uint group [[threadgroup_position_in_grid]],
                                    uint tid [[thread_index_in_threadgroup]]) {
    const uint j0 = group * BLOCK_N;  // this threadgroup's keys: j0 .. j0 + BLOCK_N - 1
    threadgroup float* lse_s = row_stats;
    threadgroup float* delta_s = row_stats + BLOCK_M;
    load_rows(k_tile, k, j0, BLOCK_N, n_k, d, tid);
    load_rows(v_tile, v, j0, BLOCK_N, n_k, d, tid);

    const uint jj = tid / COLS_PER_KEY, part = tid % COLS_PER_KEY;  // this thread's key and column phase
    float dk_acc[MAX_COLS], dv_acc[MAX_COLS];
    for (uint s = 0; s < MAX_COLS; ++s) dk_acc[s] = dv_acc[s] = 0.0f;

    const int offset = int(n_k) - int(n_q);  // causal: query i sees keys j <= i + offset
    // Rows i < j0 - offset see none of these keys: start at the query tile holding the first row that does.
    const uint i_start = causal ? uint(max(int(j0) - offset, 0)) / BLOCK_M * BLOCK_M : 0;

    for (uint i0 = i_start; i0 < n_q; i0 += BLOCK_M) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous query tile is no longer read
        load_rows(q_tile, q, i0, BLOCK_M, n_q, d, tid);
        load_rows(do_tile, dout, i0, BLOCK_M, n_q, d, tid);
        if (tid < BLOCK_M) {
            const bool in = i0 + tid < n_q;
            lse_s[tid] = in ? lse[i0 + tid] : 0.0f;
            delta_s[tid] = in ? delta[i0 + tid] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // the query tile is complete

        // region: recompute_p
        // BEGIN SOLUTION
        for (uint e = tid; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const uint i = e / BLOCK_N, j = e % BLOCK_N, row = i0 + i, key = j0 + j;
            bool visible = row < n_q && key < n_k;
            if (causal) visible = visible && int(key) <= int(row) + offset;
            float p = 0.0f, ds = 0.0f;
            if (visible) {  // a row with LSE = -inf sees no key, so it never gets here
                float s = 0.0f, dp = 0.0f;
                for (uint c = 0; c < d; ++c) {
                    s += q_tile[i * d + c] * k_tile[j * d + c];
                    dp += do_tile[i * d + c] * v_tile[j * d + c];
                }
                p = exp(s * scale - lse_s[i]);  // P rebuilt from the saved LSE
                ds = p * (dp - delta_s[i]);     // the softmax backward
            }
            p_tile[e] = p;
            ds_tile[e] = ds;
        }
        // END SOLUTION
        // endregion: recompute_p
        threadgroup_barrier(mem_flags::mem_threadgroup);  // every P and dS entry of the tile is written

        // region: dkdv_accumulate
        // BEGIN SOLUTION
        for (uint i = 0; i < BLOCK_M; ++i) {
            const float p = p_tile[i * BLOCK_N + jj], ds = ds_tile[i * BLOCK_N + jj];
            for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_KEY) {
                dv_acc[s] += p * do_tile[i * d + c];
                dk_acc[s] += ds * q_tile[i * d + c];
            }
        }
        // END SOLUTION
        // endregion: dkdv_accumulate

        // region: dq_atomic_add
        // BEGIN SOLUTION
        for (uint e = tid; e < BLOCK_M * d; e += THREADS) {
            const uint i = e / d, c = e % d;
            if (i0 + i >= n_q) continue;
            float share = 0.0f;  // this threadgroup's BLOCK_N keys, summed here: one atomic instead of BLOCK_N
            for (uint j = 0; j < BLOCK_N; ++j) share += ds_tile[i * BLOCK_N + j] * k_tile[j * d + c];
            atomic_add_float(dq + ulong(i0 + i) * d + c, share * scale);
        }
        // END SOLUTION
        // endregion: dq_atomic_add
    }

    if (j0 + jj < n_k) {
        for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_KEY) {
            dk[ulong(j0 + jj) * d + c] = dk_acc[s] * scale;
            dv[ulong(j0 + jj) * d + c] = dv_acc[s];
        }
    }
}

// ---- given code below this line: you do not edit it ----

// region: float_atomic_add
// *addr += value, atomically, with nothing but a 32-bit compare-and-swap.
static void atomic_add_float(device float* addr, float value) {
    device atomic_uint* word = (device atomic_uint*)addr;
    uint expected = atomic_load_explicit(word, memory_order_relaxed);
    // On failure, `expected` receives the bits another thread stored meanwhile: add to those instead.
    while (!atomic_compare_exchange_weak_explicit(word, &expected, as_type<uint>(as_type<float>(expected) + value),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}
// endregion: float_atomic_add

// Rows row0 .. row0 + rows - 1 of an (n, d) matrix into threadgroup memory; rows past n are zeros.
static void load_rows(threadgroup float* dst, device const float* src, uint row0, uint rows, uint n, uint d,
                      uint tid) {
    for (uint i = tid; i < rows * d; i += THREADS) {
        const uint r = row0 + i / d;
        dst[i] = r < n ? src[ulong(r) * d + i % d] : 0.0f;
    }
}
