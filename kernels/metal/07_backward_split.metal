// Lesson 07 (Metal) · the backward pass without atomics: one kernel for dK and dV, one for dQ.
//
// The math is 07_backward_atomic.metal's (P rebuilt from the saved LSE, Δ = rowsum(dO ∘ O) first):
//
//   dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP - Δ)      dK = scale · dSᵀ Q      dQ = scale · dS K
//
// What changes is who owns what. The atomic version let a threadgroup that owns keys also add its share
// of every dQ row into device memory, which needs float atomics (a compare-and-swap loop on Apple GPUs)
// and gives a dQ whose last bits depend on the order the adds land in. Here every output element has
// exactly one owner:
//   backward_dkdv: a threadgroup owns BLOCK_N keys and walks over the query tiles (dK, dV as before);
//   backward_dq:   a threadgroup owns BLOCK_M query rows and walks over the key tiles, keeping its dQ
//                  rows in registers and writing them once.
// No atomics, no zeroing of dQ beforehand, and the same bits on every run.
//
// What it costs: backward_dq needs dS, and dS needs P and dP, so it recomputes both.
// Counting matrix products over one head (every one is n_q x n_k x d multiply-adds, 2 n_q n_k d FLOPs):
//   atomic version, one kernel:  S = Q Kᵀ, dP = dO Vᵀ, dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K    = 5
//   split version:  backward_dkdv: S, dP, dV, dK (4);   backward_dq: S again, dP again, dQ (3) = 7
// So the split backward does 14 n_q n_k d FLOPs instead of 10 (1.4 x), and evaluates exp() for P twice
// (n_q n_k more exponentials); causal masking skips about half of each. In exchange every threadgroup
// works alone, which on a GPU without fast float atomics can be the better trade.
//
// Thread layout (THREADS threads per threadgroup):
//   backward_dkdv: COLS_PER_KEY threads per key, each keeping at most MAX_KV_COLS dK and dV columns;
//   backward_dq:   COLS_PER_ROW threads per query row, each keeping at most MAX_Q_COLS dQ columns;
//   P and dS tiles: thread t computes entries t, t + THREADS, ... of the BLOCK_M x BLOCK_N tile
//   (p_and_ds, shared by both kernels).
// d is a runtime value up to MAX_HEAD_DIM.
//
// Threadgroup memory, sized at launch (course/tracks/metal.py, checked against 32 KiB):
//   k_tile (0), v_tile (1): BLOCK_N x d;  q_tile (2), do_tile (3): BLOCK_M x d;
//   backward_dkdv: p_tile (4), ds_tile (5): BLOCK_M x BLOCK_N, row_stats (6): LSE and Δ of the query tile;
//   backward_dq:   ds_tile (4), row_stats (5).
//
// Causal masking is bottom-right aligned (query i sees key j iff j <= i + n_k - n_q): backward_dkdv
// skips query tiles above the diagonal, backward_dq stops after the last key its last row sees.
// Layout: Q, dO, O (n_q, d); K, V (n_k, d); LSE, Δ (n_q); row-major float32.
//
// Your part: the `dkdv_tile` region of backward_dkdv and the `dq_split_kernel` region of backward_dq,
// the first two kernels below. backward_delta and the helpers both kernels call are given, under the
// "given code" line.
//
// Validate this file against the float64 oracle on this machine (and time it on a GPU):
//     python -m course run 07 --track metal --variant split
#include <metal_stdlib>
using namespace metal;

#define BLOCK_M 8                                   // query rows per tile
#define BLOCK_N 16                                  // keys per tile
#define THREADS 64                                  // threads per threadgroup, every kernel in this file
#define MAX_HEAD_DIM 128
#define COLS_PER_KEY (THREADS / BLOCK_N)            // backward_dkdv: threads sharing one key
#define MAX_KV_COLS (MAX_HEAD_DIM / COLS_PER_KEY)
#define COLS_PER_ROW (THREADS / BLOCK_M)            // backward_dq: threads sharing one query row
#define MAX_Q_COLS (MAX_HEAD_DIM / COLS_PER_ROW)

static_assert(THREADS % BLOCK_N == 0 && THREADS % BLOCK_M == 0, "threads must tile the owned rows");
static_assert(MAX_HEAD_DIM % COLS_PER_KEY == 0 && MAX_HEAD_DIM % COLS_PER_ROW == 0, "columns must split evenly");

// Given below: copies of matrix rows and of a tile's LSE and Δ into threadgroup memory, and the
// (P, dS) of one tile entry, which both kernels compute the same way.
static void load_rows(threadgroup float* dst, device const float* src, uint row0, uint rows, uint n, uint d,
                      uint tid);
static void load_row_stats(threadgroup float* lse_s, threadgroup float* delta_s, device const float* lse,
                           device const float* delta, uint i0, uint n_q, uint tid);
static float2 p_and_ds(threadgroup const float* q_tile, threadgroup const float* do_tile,
                       threadgroup const float* k_tile, threadgroup const float* v_tile,
                       threadgroup const float* lse_s, threadgroup const float* delta_s, uint i, uint j, uint i0,
                       uint j0, uint n_q, uint n_k, uint d, float scale, uint causal);

kernel void backward_dkdv(device const float* q [[buffer(0)]],
                          device const float* k [[buffer(1)]],
                          device const float* v [[buffer(2)]],
                          device const float* dout [[buffer(3)]],
                          device const float* lse [[buffer(4)]],
                          device const float* delta [[buffer(5)]],
                          device float* dk [[buffer(6)]],
                          device float* dv [[buffer(7)]],
                          constant uint& n_q [[buffer(8)]],
                          constant uint& n_k [[buffer(9)]],
                          constant uint& d [[buffer(10)]],
                          constant float& scale [[buffer(11)]],
                          constant uint& causal [[buffer(12)]],
                          threadgroup float* k_tile [[threadgroup(0)]],
                          threadgroup float* v_tile [[threadgroup(1)]],
                          threadgroup float* q_tile [[threadgroup(2)]],
                          threadgroup float* do_tile [[threadgroup(3)]],
                          threadgroup float* p_tile [[threadgroup(4)]],
                          threadgroup float* ds_tile [[threadgroup(5)]],
                          threadgroup float* row_stats [[threadgroup(6)]],
                          uint group [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]]) {
    const uint j0 = group * BLOCK_N;
    load_rows(k_tile, k, j0, BLOCK_N, n_k, d, tid);
    load_rows(v_tile, v, j0, BLOCK_N, n_k, d, tid);
    const uint jj = tid / COLS_PER_KEY, part = tid % COLS_PER_KEY;
    float dk_acc[MAX_KV_COLS], dv_acc[MAX_KV_COLS];
    for (uint s = 0; s < MAX_KV_COLS; ++s) dk_acc[s] = dv_acc[s] = 0.0f;
    const int offset = int(n_k) - int(n_q);
    const uint i_start = causal ? uint(max(int(j0) - offset, 0)) / BLOCK_M * BLOCK_M : 0;

    // region: dkdv_tile
    // BEGIN SOLUTION
    for (uint i0 = i_start; i0 < n_q; i0 += BLOCK_M) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dkdv: the previous query tile is no longer read
        load_rows(q_tile, q, i0, BLOCK_M, n_q, d, tid);
        load_rows(do_tile, dout, i0, BLOCK_M, n_q, d, tid);
        load_row_stats(row_stats, row_stats + BLOCK_M, lse, delta, i0, n_q, tid);
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dkdv: the query tile is complete
        for (uint e = tid; e < BLOCK_M * BLOCK_N; e += THREADS) {
            const float2 pd = p_and_ds(q_tile, do_tile, k_tile, v_tile, row_stats, row_stats + BLOCK_M,
                                       e / BLOCK_N, e % BLOCK_N, i0, j0, n_q, n_k, d, scale, causal);
            p_tile[e] = pd.x;
            ds_tile[e] = pd.y;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dkdv: P and dS are complete
        for (uint i = 0; i < BLOCK_M; ++i) {
            const float p = p_tile[i * BLOCK_N + jj], ds = ds_tile[i * BLOCK_N + jj];
            for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_KEY) {
                dv_acc[s] += p * do_tile[i * d + c];
                dk_acc[s] += ds * q_tile[i * d + c];
            }
        }
    }
    // END SOLUTION
    // endregion: dkdv_tile

    if (j0 + jj < n_k) {
        for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_KEY) {
            dk[ulong(j0 + jj) * d + c] = dk_acc[s] * scale;
            dv[ulong(j0 + jj) * d + c] = dv_acc[s];
        }
    }
}

kernel void backward_dq(device const float* q [[buffer(0)]],
                        device const float* k [[buffer(1)]],
                        device const float* v [[buffer(2)]],
                        device const float* dout [[buffer(3)]],
                        device const float* lse [[buffer(4)]],
                        device const float* delta [[buffer(5)]],
                        device float* dq [[buffer(6)]],
                        constant uint& n_q [[buffer(7)]],
                        constant uint& n_k [[buffer(8)]],
                        constant uint& d [[buffer(9)]],
                        constant float& scale [[buffer(10)]],
                        constant uint& causal [[buffer(11)]],
                        threadgroup float* k_tile [[threadgroup(0)]],
                        threadgroup float* v_tile [[threadgroup(1)]],
                        threadgroup float* q_tile [[threadgroup(2)]],
                        threadgroup float* do_tile [[threadgroup(3)]],
                        threadgroup float* ds_tile [[threadgroup(4)]],
                        threadgroup float* row_stats [[threadgroup(5)]],
                        uint group [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]]) {
    const uint i0 = group * BLOCK_M;  // this threadgroup's query rows: i0 .. i0 + BLOCK_M - 1
    load_rows(q_tile, q, i0, BLOCK_M, n_q, d, tid);
    load_rows(do_tile, dout, i0, BLOCK_M, n_q, d, tid);
    load_row_stats(row_stats, row_stats + BLOCK_M, lse, delta, i0, n_q, tid);
    const uint i = tid / COLS_PER_ROW, part = tid % COLS_PER_ROW;  // this thread's row and column phase
    float dq_acc[MAX_Q_COLS];
    for (uint s = 0; s < MAX_Q_COLS; ++s) dq_acc[s] = 0.0f;

    // region: dq_split_kernel
    // BEGIN SOLUTION
    const int offset = int(n_k) - int(n_q);
    // Keys past the last one this threadgroup's last row sees are never visited.
    const uint kv_end = causal ? uint(clamp(int(i0 + BLOCK_M) + offset, 0, int(n_k))) : n_k;
    for (uint j0 = 0; j0 < kv_end; j0 += BLOCK_N) {
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the previous key tile is no longer read
        load_rows(k_tile, k, j0, BLOCK_N, n_k, d, tid);
        load_rows(v_tile, v, j0, BLOCK_N, n_k, d, tid);
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the key tile is complete
        for (uint e = tid; e < BLOCK_M * BLOCK_N; e += THREADS) {
            ds_tile[e] = p_and_ds(q_tile, do_tile, k_tile, v_tile, row_stats, row_stats + BLOCK_M, e / BLOCK_N,
                                  e % BLOCK_N, i0, j0, n_q, n_k, d, scale, causal).y;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // backward_dq: the dS tile is complete
        for (uint j = 0; j < BLOCK_N; ++j) {
            const float ds = ds_tile[i * BLOCK_N + j];
            for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_ROW) dq_acc[s] += ds * k_tile[j * d + c];
        }
    }
    // END SOLUTION
    // endregion: dq_split_kernel

    if (i0 + i < n_q) {
        for (uint s = 0, c = part; c < d; ++s, c += COLS_PER_ROW) dq[ulong(i0 + i) * d + c] = dq_acc[s] * scale;
    }
}

// ---- given code below this line: you do not edit it ----

// Δ_i = dO_i · O_i, one thread per query row.
kernel void backward_delta(device const float* o [[buffer(0)]],
                           device const float* dout [[buffer(1)]],
                           device float* delta [[buffer(2)]],
                           constant uint& n_q [[buffer(3)]],
                           constant uint& d [[buffer(4)]],
                           uint row [[thread_position_in_grid]]) {
    if (row >= n_q) return;
    float sum = 0.0f;
    for (uint c = 0; c < d; ++c) sum += dout[ulong(row) * d + c] * o[ulong(row) * d + c];
    delta[row] = sum;
}

// Rows row0 .. row0 + rows - 1 of an (n, d) matrix into threadgroup memory; rows past n are zeros.
static void load_rows(threadgroup float* dst, device const float* src, uint row0, uint rows, uint n, uint d,
                      uint tid) {
    for (uint i = tid; i < rows * d; i += THREADS) {
        const uint r = row0 + i / d;
        dst[i] = r < n ? src[ulong(r) * d + i % d] : 0.0f;
    }
}

// LSE and Δ of query rows i0 .. i0 + BLOCK_M - 1 (zeros past n_q: those rows see no key anyway).
static void load_row_stats(threadgroup float* lse_s, threadgroup float* delta_s, device const float* lse,
                           device const float* delta, uint i0, uint n_q, uint tid) {
    if (tid < BLOCK_M) {
        const bool in = i0 + tid < n_q;
        lse_s[tid] = in ? lse[i0 + tid] : 0.0f;
        delta_s[tid] = in ? delta[i0 + tid] : 0.0f;
    }
}

// (P, dS) of entry (i, j) of the tile whose queries start at i0 and keys at j0; (0, 0) where the key is
// masked or out of range. Both kernels call it, so both see exactly the same P and dS.
static float2 p_and_ds(threadgroup const float* q_tile, threadgroup const float* do_tile,
                       threadgroup const float* k_tile, threadgroup const float* v_tile,
                       threadgroup const float* lse_s, threadgroup const float* delta_s, uint i, uint j, uint i0,
                       uint j0, uint n_q, uint n_k, uint d, float scale, uint causal) {
    const uint row = i0 + i, key = j0 + j;
    bool visible = row < n_q && key < n_k;
    if (causal) visible = visible && int(key) <= int(row) + int(n_k) - int(n_q);
    if (!visible) return float2(0.0f);
    float s = 0.0f, dp = 0.0f;
    for (uint c = 0; c < d; ++c) {
        s += q_tile[i * d + c] * k_tile[j * d + c];
        dp += do_tile[i * d + c] * v_tile[j * d + c];
    }
    const float p = exp(s * scale - lse_s[i]);
    return float2(p, p * (dp - delta_s[i]));
}
