# Lesson 07 · the backward pass: gradients from the saved log-sum-exp.
#
# The forward pass never stored the Nq×Nk probability matrix P, only O and one number per query row,
# LSE_i = log Σ_j exp(S_ij). That number is enough to rebuild any tile of P exactly when it is needed
# again: P_ij = exp(scale · q_i·k_j - LSE_i), with no running max and no rescaling, because LSE already
# is the final normaliser. So the backward pass walks over the same tiles as the forward pass,
# recomputes P tile by tile, and turns it into gradients with four more matrix products:
#
#   dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP - Δ)        dK = scale · dSᵀ Q     dQ = scale · dS K
#
# Δ_i is the one non-obvious term. The softmax Jacobian subtracts Σ_j P_ij dP_ij from every entry of
# row i, and that sum would need a whole row of P. But Σ_j P_ij dP_ij = Σ_j P_ij (dO_i · v_j)
# = dO_i · (Σ_j P_ij v_j) = dO_i · O_i, so a tiny pre-pass computes Δ = rowsum(dO ∘ O) from O, which the
# forward pass returned anyway.
#
# How to split the work (FlashAttention-2): dK and dV for key j sum over *all queries*, dQ for query i
# sums over *all keys*. One program per block of keys keeps its K and V tiles and its dK, dV
# accumulators on chip and loops over query blocks; no other program touches those rows of dK and dV,
# so they are written once, without conflicts. dQ is the awkward one: every key-block program adds a
# piece to every dQ row. This file does it both ways: (a) each program adds its piece to a float32 dQ
# in global memory with atomic additions (fast, nondeterministic), or (b) a second kernel, one program
# per query block, recomputes P and dS and sums dQ in registers (deterministic, more arithmetic).
#
# Causal masking is bottom-right aligned as everywhere in the course: query i sees key j iff
# j <= i + (Nk - Nq). Tiles that lie entirely above that diagonal are skipped, not just masked.
#
# Your part: the marked lines of preprocess_delta_kernel, dkdv_kernel and dq_kernel, the first three
# functions below. The launch configurations, the autotuned copies and the wrappers are given, under
# the "given code" line.
#
# Validate this file against the float64 oracle on this machine (and time it on a GPU):
#     python -m course run 07 --track triton
import math

import torch
import triton
import triton.language as tl

from course.tracks.triton import autotuning, table_config  # importing course first also selects the interpreter on CPU


@triton.jit
def preprocess_delta_kernel(
    o_ptr, do_ptr, delta_ptr,         # O and dO (Z, Nq, D); Δ (Z, Nq) float32
    n_q, head_dim,
    stride_oz, stride_on, stride_doz, stride_don,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    z = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < n_q)[:, None] & (offs_d < head_dim)[None, :]
    # region: preprocess_delta
    o = tl.load(o_ptr + z * stride_oz + offs_m[:, None] * stride_on + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(do_ptr + z * stride_doz + offs_m[:, None] * stride_don + offs_d[None, :], mask=mask, other=0.0)
    # BEGIN SOLUTION
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)  # Δ_i = dO_i · O_i, summed in float32
    # END SOLUTION
    tl.store(delta_ptr + z * n_q + offs_m, delta, mask=offs_m < n_q)
    # endregion: preprocess_delta


@triton.jit
def dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr,      # Q, dO (Z·group, Nq, D); K, V (Z, Nk, D)
    lse_ptr, delta_ptr,               # LSE and Δ (Z·group, Nq), float32, contiguous
    dk_ptr, dv_ptr, dq_ptr,           # dK, dV (Z, Nk, D) in the input dtype; dQ (Z·group, Nq, D) fp32, atomic mode only
    n_q, n_k, head_dim, scale,
    group,                            # query heads per K/V head: 1, except for lesson 08's grouped-query attention
    stride_qz, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_doz, stride_don,
    stride_dkz, stride_dkn, stride_dvz, stride_dvn, stride_dqz, stride_dqn,
    CAUSAL: tl.constexpr,             # bottom-right aligned causal mask
    ATOMIC_DQ: tl.constexpr,          # also add this block's share of dQ into dq_ptr with atomics
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    start_n = tl.program_id(0) * BLOCK_N  # this program owns keys start_n .. start_n + BLOCK_N - 1
    z_kv = tl.program_id(1)               # of batch (or batch×head) entry z_kv of K and V
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    key_ok = offs_n < n_k
    d_ok = offs_d < head_dim
    kv_mask = key_ok[:, None] & d_ok[None, :]
    # K and V stay in registers for the whole loop: each is read from global memory exactly once.
    k = tl.load(k_ptr + z_kv * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + z_kv * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    diag = n_k - n_q                      # query i sees key j iff j <= i + diag
    start_m = 0                           # the first query block the loop visits
    if CAUSAL:
        # Query blocks whose rows see none of this program's keys are never loaded: start at the
        # first block that sees key start_n, a multiple of BLOCK_M.
        # BEGIN SOLUTION
        # Key start_n is first seen by query start_n - diag; every query block before the one holding
        # that row sees none of this program's keys, so the loop starts there (rounded down to a block).
        start_m = tl.maximum(start_n - diag, 0) // BLOCK_M * BLOCK_M
        # END SOLUTION
    # The queries whose rows read these keys: those of entry z = z_kv, or, when `group` query heads share
    # one K/V head (grouped-query attention, lesson 08), those of all `group` of them, each adding its share
    # to the same dk and dv. With group = 1 the loop runs once and z is z_kv.
    for g in range(group):
        z = z_kv * group + g              # the query head (batch×head entry of Q, dO, LSE, Δ, dQ)
        # region: dkdv_inner_loop
        # BEGIN SOLUTION
        for m0 in range(start_m, n_q, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            row_ok = offs_m < n_q
            q_mask = row_ok[:, None] & d_ok[None, :]
            q = tl.load(q_ptr + z * stride_qz + offs_m[:, None] * stride_qn + offs_d[None, :], mask=q_mask, other=0.0)
            do = tl.load(do_ptr + z * stride_doz + offs_m[:, None] * stride_don + offs_d[None, :], mask=q_mask,
                         other=0.0)
            lse = tl.load(lse_ptr + z * n_q + offs_m, mask=row_ok, other=float("inf"))
            # A row that sees no key has LSE = -inf, and exp(S + inf) = inf would poison every sum (0·inf = NaN).
            # The causal mask below already hides all of such a row's keys; flipping its LSE to +inf also
            # makes exp(S - LSE) = 0 on its own, for any LSE = -inf handed in: no key, no probability.
            lse = tl.where(lse == float("-inf"), float("inf"), lse)
            delta = tl.load(delta_ptr + z * n_q + offs_m, mask=row_ok, other=0.0)

            # Rebuild this (BLOCK_M × BLOCK_N) tile of P from the saved LSE: no max, no sum, no rescale.
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            visible = row_ok[:, None] & key_ok[None, :]  # padded rows and columns are not part of P
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag)
            # Masked entries become exp(-inf) = 0 *before* the exp, so no inf is ever produced (a masked
            # score may be far above the row's LSE: exp of it would overflow even though it is thrown away).
            p = tl.exp(tl.where(visible, s - lse[:, None], float("-inf")))

            # dV_j += Σ_i P_ij dO_i. P goes into tl.dot in the input dtype (fp16 tensor cores, fp32 sums).
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
            # dP_ij = dO_i · v_j, then the softmax backward: dS = P ∘ (dP - Δ).
            dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            ds = p * (dp - delta[:, None])
            # dK_j += Σ_i dS_ij q_i (the factor scale is applied once, after the loop).
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")

            if ATOMIC_DQ:
                # region: dq_atomic_add
                # This program's share of dQ for these query rows: scale · dS K (BLOCK_M × D). All
                # cdiv(Nk, BLOCK_N) key-block programs add a share to the same rows, so the addition must be
                # atomic (a plain load-add-store from two programs at once would lose one of the updates).
                #
                # Why the result is NOT deterministic on a GPU: the programs run concurrently and the order in
                # which their atomics reach a given address depends on scheduling, which changes from run to
                # run. Float addition is not associative ((a + b) + c != a + (b + c) after rounding), so a
                # different order gives different low bits in dQ. Two identical calls can disagree by a few
                # ulps; the answer is equally accurate each time, just not bitwise reproducible. (Triton's CPU
                # interpreter runs the programs one after another in a fixed order, so there it happens to repeat.)
                #
                # What it costs: every program performs BLOCK_M·D float32 read-modify-writes per query block
                # (done in L2, not in registers), so dQ traffic is cdiv(Nk, BLOCK_N) times the size of dQ, and
                # programs that hit the same rows at the same time serialise on those addresses. Long key
                # sequences (more programs per dQ row) make it worse; the buffer must be float32 and zeroed first.
                dq_part = tl.dot(ds.to(k.dtype), k, input_precision="ieee") * scale
                dq_ptrs = dq_ptr + z * stride_dqz + offs_m[:, None] * stride_dqn + offs_d[None, :]
                # masked: padded rows and columns do not exist. "relaxed": no program reads dQ during this
                # launch, so the additions need no ordering with other memory operations, only atomicity.
                tl.atomic_add(dq_ptrs, dq_part, mask=q_mask, sem="relaxed")
                # endregion: dq_atomic_add
        # END SOLUTION
        # endregion: dkdv_inner_loop
    dk = dk * scale
    tl.store(dk_ptr + z_kv * stride_dkz + offs_n[:, None] * stride_dkn + offs_d[None, :],
             dk.to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + z_kv * stride_dvz + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    n_q, n_k, head_dim, scale,
    group,                            # query heads per K/V head (see dkdv_kernel)
    stride_qz, stride_qn, stride_kz, stride_kn, stride_vz, stride_vn, stride_doz, stride_don,
    stride_dqz, stride_dqn,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # region: dq_split_kernel
    # The atomic-free dQ: one program per query block owns its dQ rows and sums over key blocks in
    # registers, always in the same order, so two runs give identical bits.
    #
    # The price is recomputation. Per (query block, key block) pair the dK/dV kernel does 4 matmuls
    # (S = Q Kᵀ, dV += Pᵀ dO, dP = dO Vᵀ, dK += dSᵀ Q), plus 1 (dQ += dS K) in atomic mode: 5 in all.
    # This kernel must rebuild P and dS for itself, S = Q Kᵀ and dP = dO Vᵀ again, before its own
    # dQ += dS K: 3 matmuls. Separate mode therefore costs 4 + 3 = 7 matmuls per pair instead of 5,
    # i.e. 2 extra (+40% matmul work), plus a second exp() of every tile and a second read of K and V.
    start_m = tl.program_id(0) * BLOCK_M
    z = tl.program_id(1)                  # the query head: its Q, dO, LSE, Δ and dQ rows
    z_kv = z // group                     # the K/V head it reads (z itself unless heads are grouped)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < n_q
    d_ok = offs_d < head_dim
    q_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + z * stride_qz + offs_m[:, None] * stride_qn + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(do_ptr + z * stride_doz + offs_m[:, None] * stride_don + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(lse_ptr + z * n_q + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)  # rows with no visible key: P = 0, not NaN
    delta = tl.load(delta_ptr + z * n_q + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    diag = n_k - n_q
    end_n = n_k                           # the key loop visits keys 0 .. end_n - 1
    if CAUSAL:
        # Key blocks no row of this block sees are never loaded: end after the last key its last row sees.
        # BEGIN SOLUTION
        # The last row of this block, start_m + BLOCK_M - 1, sees keys up to start_m + BLOCK_M - 1 + diag;
        # key blocks past that are entirely masked. (end_n <= 0: the block sees no key, dQ stays 0.)
        end_n = tl.minimum(start_m + BLOCK_M + diag, n_k)
        # END SOLUTION
    # For every key block: rebuild P and dS for these rows, and add this block's dS K to dq, in registers.
    # BEGIN SOLUTION
    for n0 in range(0, end_n, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        key_ok = offs_n < n_k
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + z_kv * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + z_kv * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale          # recomputed (extra matmul 1)
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag)
        p = tl.exp(tl.where(visible, s - lse[:, None], float("-inf")))
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")                # recomputed (extra matmul 2)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    # END SOLUTION
    dq = dq * scale
    tl.store(dq_ptr + z * stride_dqz + offs_m[:, None] * stride_dqn + offs_d[None, :],
             dq.to(dq_ptr.dtype.element_ty), mask=q_mask)
    # endregion: dq_split_kernel


# ---- given code below this line: you do not edit it ----


_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_config(head_dim: int, dtype: torch.dtype) -> dict[str, triton.Config]:
    """Block sizes and launch options of the three kernels: fixed, the same on the CPU tier and on a GPU (the
    compile gate compiles them). Checks run these; only a benchmark autotunes (see tuning_configs).

    The dK/dV kernel holds K, V, dK and dV
    (4 × BLOCK_N × D) in registers, so the blocks shrink as D grows; fp32 tiles are twice the bytes, so
    they get half the block. Past D = 64 the dK/dV kernel keeps to 4 warps with 32 keys (16-bit tiles do not
    spill on sm_80 or sm_90): with 8 warps and 64 keys, an H100 (Triton 3.6) gave a wrong dK in scattered rows at
    D = 128, fp16, causal, and different bits from run to run at D = 96 and 128.
    """
    half = 2 if dtype == torch.float32 else 1
    q_m, q_n = 64 // half, 32
    if head_dim <= 64:
        kv_m, kv_n, kv_warps, warps, stages = 32, 64 // half, 4, 4, 3
    elif head_dim <= 128:
        kv_m, kv_n, kv_warps, warps, stages = 32, 32 // half, 4, 8, 2
    else:
        kv_m, kv_n, kv_warps, warps, stages = 16, 32 // half, 8, 8, 1
        q_m, q_n = 32 // half, 16
    return {"preprocess_delta_kernel": triton.Config({"BLOCK_M": 64}, num_warps=4, num_stages=stages),
            "dkdv_kernel": triton.Config({"BLOCK_M": kv_m, "BLOCK_N": kv_n}, num_warps=kv_warps, num_stages=stages),
            "dq_kernel": triton.Config({"BLOCK_M": q_m, "BLOCK_N": q_n}, num_warps=warps, num_stages=stages)}


def _validate(q, k, v, o, lse, do, dq_mode: str, four_d: bool) -> None:
    names = ("q", "k", "v", "o", "lse", "do")
    for name, t in zip(names, (q, k, v, o, lse, do)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if dq_mode not in ("atomic", "split"):
        raise ValueError(f"dq_mode must be 'atomic' or 'split'; got {dq_mode!r}")
    if four_d and q.dim() != 4:
        raise ValueError(f"attention_backward_bhnd takes (B, H, N, D) tensors; got q of shape {tuple(q.shape)}")
    if q.dim() < 2 or any(t.dim() != q.dim() for t in (k, v, o, do)):
        raise ValueError("q, k, v, o, do must all be (N, D) or (..., N, D) with the same rank; got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, {tuple(o.shape)}, {tuple(do.shape)}")
    # (B, H, N, D): K and V may have fewer heads than Q (grouped-query attention); otherwise all lead dims agree.
    lead = 1 if four_d else q.dim() - 2
    if q.shape[:lead] != k.shape[:lead] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"batch dimensions differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if four_d and (k.shape[1] == 0 or q.shape[1] % k.shape[1]):
        raise ValueError(f"k and v must have a head count dividing q's (grouped-query attention); got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (Nk, D); got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim; got {q.shape[-1]} and {k.shape[-1]}")
    if o.shape != q.shape or do.shape != q.shape:
        raise ValueError(f"o and do must have the shape of q {tuple(q.shape)}; got {tuple(o.shape)} and {tuple(do.shape)}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(q.shape[:-1])} (one value per query row); got {tuple(lse.shape)}")
    if k.shape[-2] == 0:
        raise ValueError("attention over zero keys is undefined")
    if not 1 <= q.shape[-1] <= 256:
        raise ValueError(f"head dim must be between 1 and 256; got {q.shape[-1]}")
    for name, t in zip(names, (q, k, v, o, lse, do)):
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor; got {t.dtype}")
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype among float16, bfloat16, float32; got {q.dtype}, {k.dtype}, {v.dtype}")
    if len({t.device for t in (q, k, v, o, lse, do)}) != 1:
        raise ValueError("q, k, v, o, lse, do must all be on the same device")


def _cfg(m: int, n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=warps, num_stages=stages)


def tuning_configs(head_dim: int, dtype: torch.dtype) -> dict[str, list[triton.Config]]:
    """What a benchmark's autotuner times for the dK/dV and dQ kernels (inside course.tracks.triton.autotune()):
    the check config first, then the fastest configs of the H200 sweep (docs/benchmarks.md; ``python -m
    course.tools.sweep_backward`` repeats it on any GPU). Never run by a check.

    The 16-bit lists hold the sweep's fastest dK/dV config, its fastest one that does not spill, and its fastest
    dQ configs at D = 64 and 128, causal: at D = 64 the dK/dV kernel gains most from 128 × 128 tiles with 8 warps
    (1.89× the check config), at D = 128 from 32 queries × 64 keys with 4 warps (1.42×). Every one of them gave
    the check config's dK and dV bits on the H200 (the atomic dQ differs in its low bits, as it does run to run).
    Those two winners spill registers in the compile gate's sm_90 build (76 to 308 bytes with Triton 3.6 and
    3.9), and were the fastest on the H200 all the same: a timed run, not the register count, decides.
    256-wide heads keep the check config alone. fp32 tiles (exact "ieee" dots on the FMA units) tune only the
    dQ kernel: every fp32 dK/dV config spills registers on sm_90, the check config too, and a larger tile
    spills several times more. Block sizes are what the interpreter can prove (tests/tracks/test_triton_backward_autotune.py runs every
    one of them), and every config compiles for sm_90, the check configs without spills (``python -m
    course.tools.triton_gate --lessons 07 --tuned --all-configs --gqa`` shows registers and spills).
    Non-causal attention and other lengths were not swept: there the autotuner decides among these.
    """
    check = check_config(head_dim, dtype)
    cfg = _cfg
    wide = dtype == torch.float32
    if head_dim > 128:
        more = {"dkdv_kernel": [], "dq_kernel": []}
    elif head_dim > 64:
        # H200 sweep, B4 H32 N4k D128 causal fp16 (backward ms; check config 9.39 atomic, 9.74 split): dK/dV
        # 32×64 4 warps 2 stages 6.63 (spills: see the docstring), 16×64 4/2 7.45; dQ 64×32 4/2 7.67,
        # 128×64 8/3 7.71, 64×64 4/2 7.72. 32×32 4/3: the autotuner's choice without the mask (N 1k, 4k).
        more = ({"dkdv_kernel": [], "dq_kernel": [cfg(32, 32, 4, 2)]} if wide else
                {"dkdv_kernel": [cfg(32, 64, 4, 2), cfg(16, 64, 4, 2), cfg(32, 32, 4, 3)],
                 "dq_kernel": [cfg(64, 32, 4, 2), cfg(128, 64, 8, 3), cfg(64, 64, 4, 2)]})
    else:
        # H200 sweep, B1 H16 N16k D64 causal bf16 (check config 9.77 atomic, 8.03 split): dK/dV 128×128 8 warps
        # 2 stages 5.17 (spills), 64×64 4/2 5.65; dQ: no config more than 1% faster than the check config's 8.03,
        # so the dQ list stays small.
        more = ({"dkdv_kernel": [], "dq_kernel": [cfg(32, 64, 4, 2)]} if wide else
                {"dkdv_kernel": [cfg(128, 128, 8, 2), cfg(64, 64, 4, 2)],
                 "dq_kernel": [cfg(128, 64, 8, 4), cfg(64, 64, 4, 2)]})
    return {name: [check[name]] + [c for c in more[name] if c != check[name]] for name in more}


# The launch table: what a direct call (outside a check, outside autotune()) launches on a GPU family whose
# measurements are recorded, instead of the check configs; nothing is timed at call time (course.tracks.triton's
# table_config reads it). Rows: (largest head dim, causal, shortest Nq, {dq mode: {kernel: config}}), first match
# wins, 16-bit tiles; a kernel a row does not name runs its check config.
# sm_90, an H200 with Triton 3.6 (docs/benchmarks.md): the sweep's fastest dK/dV configs for causal attention
# at the lengths it ran (N 16k at D 64, N 4k at D 128) and its fastest split dQ at D 128; elsewhere the configs
# the autotuner kept at N 1k and 4k. At D = 64 no dQ config beat the check config by more than 1%.
LAUNCH_TABLE = {
    (9, 0): [(64, True, 8192, {"atomic": {"dkdv_kernel": _cfg(128, 128, 8, 2)}, "split": {}}),
             (64, None, 0, {"atomic": {"dkdv_kernel": _cfg(64, 64, 4, 2)}, "split": {}}),
             (128, True, 4096, {"atomic": {"dkdv_kernel": _cfg(32, 64, 4, 2)},
                                "split": {"dq_kernel": _cfg(64, 32, 4, 2)}}),
             (128, False, 0, {"atomic": {"dkdv_kernel": _cfg(32, 32, 4, 3)}, "split": {}})],
}


_TUNING_REGIMES = [(d, dtype) for d in (64, 128, 256) for dtype in (torch.float16, torch.float32)]


def _every_tuning_config(kernel: str) -> list[triton.Config]:
    found: list[triton.Config] = []
    for d, dtype in _TUNING_REGIMES:
        found += [c for c in tuning_configs(d, dtype)[kernel] if c not in found]
    return found


def _prune_to(kernel: str):
    def prune(configs, named_args, **kwargs):
        """The tuning list of this launch's head dim and dtype (an autotuner holds one list for all)."""
        return tuning_configs(named_args["head_dim"], named_args["q_ptr"].dtype)[kernel]
    return prune


# The benchmarks' autotuned launches. Timing a config runs the kernel, and in atomic mode every run adds its
# dQ into the float32 buffer: reset_to_zero zeroes dQ before every trial and again before the launch that
# counts, so no trial's dQ is left in the result. (dK, dV and the split dQ are plain stores: a re-run writes
# the same values again.)
dkdv_tuned = triton.autotune(configs=_every_tuning_config("dkdv_kernel"),
                             key=["n_q", "n_k", "head_dim", "group", "CAUSAL", "ATOMIC_DQ"],
                             prune_configs_by={"early_config_prune": _prune_to("dkdv_kernel")},
                             reset_to_zero=["dq_ptr"])(dkdv_kernel)
dq_tuned = triton.autotune(configs=_every_tuning_config("dq_kernel"), key=["n_q", "n_k", "head_dim", "group", "CAUSAL"],
                           prune_configs_by={"early_config_prune": _prune_to("dq_kernel")})(dq_kernel)


def _backward_zbnd(q, k, v, o, lse, do, causal, scale, dq_mode, configs=None):
    """The launches, on (Z, N, D) tensors (Z = every leading dim flattened) and lse (Z, Nq).

    K and V may have fewer entries than Q (grouped-query attention): Z_q = Z_kv · group, and query entry z
    reads K/V entry z // group. dK and dV have K's and V's own entries, each the sum over its group, summed
    inside the dK/dV kernel: K and V are never copied per query head. ``configs`` ({kernel name:
    triton.Config}) replaces the check configs (tests and experiments); inside course.tracks.triton.autotune()
    the dK/dV and dQ kernels are autotuned over tuning_configs instead, and a direct call (outside a check) on a
    GPU that LAUNCH_TABLE names runs its row.
    """
    z, n_q, d = q.shape
    z_kv, n_k = k.shape[0], k.shape[1]
    group = z // z_kv if z_kv else 1
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, do = o.to(q.dtype).contiguous(), do.to(q.dtype).contiguous()  # tl.dot needs one operand dtype
    lse = lse.to(torch.float32).contiguous()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if z == 0 or n_q == 0:
        return torch.zeros_like(q), dk.zero_(), dv.zero_()
    # The check configs, or in a direct call on a GPU the launch table names its row (and ``configs`` over both).
    row = table_config(LAUNCH_TABLE, q.device, d, q.dtype, causal, n_q) if configs is None else None
    chosen = dict(check_config(d, q.dtype), **(row or {}).get(dq_mode, {}), **(configs or {}))
    cfg = {name: config.all_kwargs() for name, config in chosen.items()}
    tuned = configs is None and autotuning()  # a benchmark: time the tuning lists, keep the fastest
    block_d = max(16, triton.next_power_of_2(d))

    delta = torch.empty((z, n_q), device=q.device, dtype=torch.float32)
    pre = cfg["preprocess_delta_kernel"]
    preprocess_delta_kernel[(triton.cdiv(n_q, pre["BLOCK_M"]), z)](
        o, do, delta, n_q, d, o.stride(0), o.stride(1), do.stride(0), do.stride(1), BLOCK_D=block_d, **pre)

    atomic = dq_mode == "atomic"
    # Atomic mode accumulates into float32 (fp16 atomics would round at every addition) starting from 0.
    dq = torch.zeros((z, n_q, d), device=q.device, dtype=torch.float32) if atomic else torch.empty_like(q)
    dkdv_args = (q, k, v, do, lse, delta, dk, dv, dq,
                 n_q, n_k, d, scale, group,
                 q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0),
                 do.stride(1), dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), dq.stride(0), dq.stride(1))
    dkdv_meta = dict(CAUSAL=causal, ATOMIC_DQ=atomic, BLOCK_D=block_d)
    if tuned:
        dkdv_tuned[lambda meta: (triton.cdiv(n_k, meta["BLOCK_N"]), z_kv)](*dkdv_args, **dkdv_meta)
    else:
        dkdv_kernel[(triton.cdiv(n_k, cfg["dkdv_kernel"]["BLOCK_N"]), z_kv)](*dkdv_args, **dkdv_meta,
                                                                             **cfg["dkdv_kernel"])
    if atomic:
        return dq.to(q.dtype), dk, dv
    dq_args = (q, k, v, do, lse, delta, dq,
               n_q, n_k, d, scale, group,
               q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), do.stride(0), do.stride(1),
               dq.stride(0), dq.stride(1))
    if tuned:
        dq_tuned[lambda meta: (triton.cdiv(n_q, meta["BLOCK_M"]), z)](*dq_args, CAUSAL=causal, BLOCK_D=block_d)
    else:
        dq_kernel[(triton.cdiv(n_q, cfg["dq_kernel"]["BLOCK_M"]), z)](*dq_args, CAUSAL=causal, BLOCK_D=block_d,
                                                                       **cfg["dq_kernel"])
    return dq, dk, dv


def _mode(dq_mode: str, deterministic: bool) -> str:
    return "split" if deterministic else dq_mode


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                       do: torch.Tensor, causal: bool = False, scale: float | None = None, dq_mode: str = "atomic",
                       deterministic: bool = False, *, configs: dict | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) of attention for Q (..., Nq, D), K, V (..., Nk, D), given the forward's O and LSE and dO.

    o is the forward output, lse the forward's float32 natural-log LSE of shape (..., Nq). dq_mode is
    "atomic" (dK/dV kernel adds dQ with atomics; fast, not bitwise reproducible on a GPU) or "split"
    (a second, atomic-free kernel; deterministic). deterministic=True forces "split".
    The gradients have the dtypes of q, k and v. ``configs`` ({kernel name: triton.Config}) chooses launches
    by hand instead of check_config (for tests and experiments).
    """
    _validate(q, k, v, o, lse, do, dq_mode, four_d=False)
    dq_mode = _mode(dq_mode, deterministic)
    n_q, d = q.shape[-2:]
    n_k = k.shape[-2]
    scale = d ** -0.5 if scale is None else float(scale)
    lead = q.shape[:-2]
    z = math.prod(lead)  # every leading dim flattened into one (an explicit size: -1 fails on empty tensors)
    dq, dk, dv = _backward_zbnd(q.reshape(z, n_q, d), k.reshape(z, n_k, d), v.reshape(z, n_k, d),
                                o.reshape(z, n_q, d), lse.reshape(z, n_q), do.reshape(z, n_q, d),
                                bool(causal), scale, dq_mode, configs)
    return dq.reshape(*lead, n_q, d), dk.reshape(*lead, n_k, d), dv.reshape(*lead, n_k, d)


def attention_backward_bhnd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                            do: torch.Tensor, causal: bool = False, scale: float | None = None,
                            dq_mode: str = "atomic", deterministic: bool = False, *, configs: dict | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """attention_backward for (B, H, N, D) tensors and lse (B, H, Nq): the entry an autograd.Function reuses.

    K and V may have fewer heads than Q, H_kv dividing H (grouped-query attention): query head h reads K/V
    head h // (H / H_kv), as lesson 06's forward does, and dK, dV come back with H_kv heads, each the sum over
    the query heads that read it. The kernels map the heads themselves: nothing is expanded or copied."""
    _validate(q, k, v, o, lse, do, dq_mode, four_d=True)
    dq_mode = _mode(dq_mode, deterministic)
    b, h, n_q, d = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else float(scale)
    dq, dk, dv = _backward_zbnd(q.reshape(b * h, n_q, d), k.reshape(b * h_kv, n_k, d), v.reshape(b * h_kv, n_k, d),
                                o.reshape(b * h, n_q, d), lse.reshape(b * h, n_q), do.reshape(b * h, n_q, d),
                                bool(causal), scale, dq_mode, configs)
    return dq.view(b, h, n_q, d), dk.view(b, h_kv, n_k, d), dv.view(b, h_kv, n_k, d)
