"""Lessons 05 and 06 in Triton: the tensor-core forward and the causal (stage-split) forward.

Every case is compared with the float64 oracle under the error budget, O and LSE both (LSE must be
exactly -inf on a row that sees no key). When the course registers the exercise ids, the same case
also goes through ``course.check``. The causal schedule is checked twice: a Python mirror of the
kernel's loop bounds counts tiles, and a poisoned-K/V run proves the kernel never reads a future tile.
The mirror lives here, not in the kernel file: the learner's cell shows that file's given code, and bounds
computed "exactly as the kernel does" there would hand out the exercise's answer.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

import course
from course import Case
from course.grading.budget import attention_budget, plain_attention
from course.errors import root_cause
from course.kernels import kernel_path, load_triton_module, read_region
from course.reference import causal_mask
from track_support import device, qkv

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]

F16 = torch.float16


@pytest.fixture(scope="module")
def tc_module():
    return load_triton_module("triton/05_mma")


@pytest.fixture(scope="module")
def causal_module():
    return load_triton_module("triton/06_causal")


def _plain_lse(q, k, causal: bool, scale: float) -> torch.Tensor:
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], s.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def assert_matches_oracle(o, lse, q, k, v, causal: bool = False, scale: float | None = None) -> None:
    """O within the error budget; LSE float32, -inf exactly where the oracle's is, budgeted elsewhere.

    The oracle and the plain attention of the budget run on the CPU, as in course.check. On a GPU, cuBLAS sums
    the 64 products of a float32 score in blocks, where the kernel's FMA dot (and the CPU's BLAS) sums them in
    order; on peaky scores (|S| in the hundreds) that order alone moves one element of O by 1e-5, so a budget
    from cuBLAS's plain attention would measure its luck, not the kernel (an H100 failed Nq=129, Nk=17, D=64,
    peaky, float32 by 1.15e-5 against 5.4e-6: the CPU's sequential sum gives 1.14e-5, a pairwise one 9.5e-7)."""
    q, k, v, o, lse = (t.detach().cpu() for t in (q, k, v, o, lse))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    ref = course.attention(q, k, v, causal, scale=scale)
    assert o.shape == ref.o.shape and o.dtype == q.dtype
    assert lse.shape == ref.lse.shape and lse.dtype == torch.float32
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()
    budget = attention_budget(ref.o, plain_attention(q, k, v, causal, scale=scale), q.dtype)
    err = float((o.double() - ref.o).abs().max()) if o.numel() else 0.0
    assert err <= budget.allowed, f"O error {err:.3g} > budget {budget.allowed:.3g}"
    empty = torch.isinf(ref.lse)
    assert torch.equal(torch.isinf(lse), empty) and bool((lse[empty] == float("-inf")).all())
    assert bool((o.double()[empty] == 0).all()), "a row that sees no key must have O = 0"
    if (~empty).any():
        plain = _plain_lse(q, k, causal, scale).double()
        lse_budget = attention_budget(ref.lse[~empty], plain[~empty], q.dtype)
        lerr = float((lse.double()[~empty] - ref.lse[~empty]).abs().max())
        assert lerr <= lse_budget.allowed, f"LSE error {lerr:.3g} > budget {lse_budget.allowed:.3g}"


def _graded(exercise: str) -> bool:
    return exercise in course.EXERCISES


# ----------------------------------------------------------------------------------------------
# Lesson 05: tensor cores. Together the cases cover N in {1, 17, 129, 300}, D in {16, 32, 64, 128},
# Nq != Nk both ways, every kind, fp32 and fp16, leading batch dims and a D that is not a power of 2.
# ----------------------------------------------------------------------------------------------

TC_CASES = [
    Case(1, 1, 16),
    Case(17, 17, 32, kind="peaky", seed=1),
    Case(129, 129, 64, kind="constant_rows", seed=2),
    Case(300, 300, 128, seed=3),
    Case(17, 129, 32, seed=4),
    Case(129, 17, 64, kind="peaky", seed=5),
    Case(300, 1, 16, kind="constant_rows", seed=6),
    Case(1, 300, 128, kind="peaky", seed=7),
    Case(17, 17, 16, kind="peaky", dtype=F16, seed=8),
    Case(129, 300, 64, dtype=F16, seed=9),
    Case(300, 129, 128, kind="constant_rows", dtype=F16, seed=10),
    Case(300, 1, 32, dtype=F16, seed=11),
    Case(17, 33, 40, batch=(2, 3), seed=12),
]


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: c.describe())
def test_tensor_core_kernel_matches_oracle(tc_module, case):
    q, k, v = case.tensors(device())
    o, lse = tc_module.tensor_core_attention(q, k, v)
    assert_matches_oracle(o, lse, q, k, v)
    if _graded("05.mma_triton"):
        course.check("05.mma_triton", tc_module.tensor_core_attention, cases=[case])


def test_tensor_core_kernel_explicit_scale_and_no_batch(tc_module):
    q, k, v = qkv(20, 24, n_k=45, seed=3)
    o, lse = tc_module.tensor_core_attention(q, k, v, scale=0.3)
    assert_matches_oracle(o, lse, q, k, v, scale=0.3)


# ----------------------------------------------------------------------------------------------
# Lesson 06: causal. Nq > Nk leaves the first Nq - Nk rows with no visible key (O = 0, LSE = -inf).
# ----------------------------------------------------------------------------------------------

CAUSAL_CASES = [
    Case(1, 1, 16, causal=True),
    Case(17, 17, 32, kind="peaky", causal=True, seed=1),
    Case(129, 129, 64, kind="constant_rows", causal=True, seed=2),
    Case(300, 300, 128, causal=True, seed=3),
    Case(17, 129, 32, causal=True, seed=4),
    Case(129, 17, 64, kind="peaky", causal=True, seed=5),
    Case(300, 1, 16, kind="constant_rows", causal=True, seed=6),
    Case(1, 300, 128, causal=True, seed=7),
    Case(300, 300, 64, kind="peaky", seed=8),
    Case(129, 17, 32, seed=9),
    Case(300, 300, 64, kind="peaky", causal=True, dtype=F16, seed=10),
    Case(129, 17, 128, causal=True, dtype=F16, seed=11),
    Case(17, 129, 16, kind="constant_rows", causal=True, dtype=F16, seed=12),
    Case(300, 1, 32, causal=True, dtype=F16, seed=13),
    Case(129, 300, 64, dtype=F16, seed=14),
    Case(40, 70, 40, batch=(2, 3), causal=True, seed=15),
]


@pytest.mark.parametrize("case", CAUSAL_CASES, ids=lambda c: c.describe())
def test_causal_kernel_matches_oracle(causal_module, case):
    q, k, v = case.tensors(device())
    o, lse = causal_module.causal_attention(q, k, v, causal=case.causal)
    assert_matches_oracle(o, lse, q, k, v, causal=case.causal)
    if _graded("06.causal_triton"):
        course.check("06.causal_triton", causal_module.causal_attention, cases=[case])


@pytest.mark.parametrize("block_m,block_n", [(16, 16), (32, 64), (64, 16), (128, 32)])
@pytest.mark.parametrize("n_q,n_k", [(100, 37), (37, 100)])
def test_causal_bounds_for_other_block_shapes(causal_module, block_m, block_n, n_q, n_k):
    q, k, v = qkv(n_q, 16, n_k=n_k, batch=(1, 2), seed=block_m + block_n)
    for causal in (True, False):
        o, lse = causal_module.causal_attention_forward(q, k, v, causal, block_m=block_m, block_n=block_n)
        assert_matches_oracle(o, lse, q, k, v, causal=causal)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_attention(causal_module, n_kv_heads):
    """K/V with fewer heads: query head h reads KV head h // (H / H_kv)."""
    q, _, _ = qkv(33, 32, batch=(2, 4), seed=20)
    _, k, v = qkv(33, 32, n_k=50, batch=(2, n_kv_heads), seed=21)
    k_full, v_full = (t.repeat_interleave(4 // n_kv_heads, dim=1) for t in (k, v))
    for causal in (True, False):
        o, lse = causal_module.causal_attention_forward(q, k, v, causal, None)
        assert o.shape == (2, 4, 33, 32) and lse.shape == (2, 4, 33)
        assert_matches_oracle(o, lse, q, k_full, v_full, causal=causal)


# ----------------------------------------------------------------------------------------------
# The schedule: what is skipped, what is masked, and that the kernel obeys it.
# ----------------------------------------------------------------------------------------------

def key_block_schedule(n_q: int, n_k: int, block_m: int, block_n: int, causal: bool) -> list[tuple[int, int]]:
    """(lo, hi) of every query block, as the solution of kernels/triton/06_causal.py computes them: blocks [0, lo)
    run unmasked, [lo, hi) masked, [hi, Nk) are never loaded. A plain-Python mirror for counting tiles."""
    schedule = []
    for start_m in range(0, n_q, block_m):
        if causal:
            diagonal = n_k - n_q
            hi = max(min(start_m + block_m, n_q) + diagonal, 0)
            lo = max(start_m + diagonal + 1, 0) // block_n * block_n
        else:
            hi, lo = n_k, n_k // block_n * block_n
        schedule.append((lo, hi))
    return schedule


def test_the_kernel_file_hands_out_no_mirror_of_its_bounds():
    """What the learner's cell shows of the file (the given code included) computes no lo or hi."""
    from course.solution_regions import SOLUTION_REGION
    given = SOLUTION_REGION.sub("", kernel_path("triton/06_causal").read_text())
    assert "key_block_schedule" not in given
    assert not re.search(r"start_m \+ diagonal \+ 1|\+ diagonal, 0\)", given), "the bounds of the stage split"


def _tiles(schedule, block_n: int) -> int:
    return sum(math.ceil(hi / block_n) for _, hi in schedule)


@pytest.mark.parametrize("n,block_m,block_n", [(4096, 128, 64), (4096, 128, 128), (1024, 64, 32), (2048, 64, 64)])
def test_causal_visits_about_half_the_tiles(causal_module, n, block_m, block_n):
    full = _tiles(key_block_schedule(n, n, block_m, block_n, causal=False), block_n)
    causal = _tiles(key_block_schedule(n, n, block_m, block_n, causal=True), block_n)
    assert full == (n // block_m) * (n // block_n)
    # T(T+1)/2 of T² for square tiles; a little more than half in general (the diagonal tiles).
    assert 0.5 < causal / full <= 0.5 + block_m / n, (causal, full)


@pytest.mark.parametrize("n_q,n_k", [(17, 17), (129, 129), (17, 129), (129, 17), (300, 1), (1, 300), (100, 64)])
@pytest.mark.parametrize("block_m,block_n", [(64, 32), (32, 64), (16, 16), (128, 64)])
def test_schedule_skips_future_and_masks_only_the_diagonal(causal_module, n_q, n_k, block_m, block_n):
    visible = causal_mask(n_q, n_k)
    for causal in (True, False):
        vis = visible if causal else torch.ones_like(visible)
        for qb, (lo, hi) in enumerate(key_block_schedule(n_q, n_k, block_m, block_n, causal)):
            rows = vis[qb * block_m:(qb + 1) * block_m]          # real rows only
            assert lo % block_n == 0 and 0 <= lo <= hi <= n_k
            assert bool(rows[:, :lo].all()), "stage (a) must hold only keys every row sees"
            for start in range(lo, hi, block_n):                 # stage (b): needs the mask, not skippable
                tile = rows[:, start:start + block_n]
                assert bool(tile.any()) and (not bool(tile.all()) or start + block_n > n_k)
            assert not bool(rows[:, hi:].any()), "a skipped key must be invisible to every row"
            assert hi == 0 or bool(rows[:, hi - 1].any()), "hi is as small as it can be"


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # the poisoned rows themselves, as expected
@pytest.mark.parametrize("n_q,n_k,block_m,block_n", [(200, 200, 32, 32), (130, 200, 32, 32), (150, 70, 64, 16)])
def test_kernel_never_reads_a_future_tile(causal_module, n_q, n_k, block_m, block_n):
    """Fill K and V with NaN from key c on. A query block whose schedule ends at or before c must come
    out finite and bit-identical to the clean run: one stray load of a future tile would spread NaN."""
    q, k, v = qkv(n_q, 16, n_k=n_k, batch=(1, 1), seed=30)
    run = lambda kk, vv: causal_module.causal_attention_forward(q, kk, vv, True, block_m=block_m, block_n=block_n)  # noqa: E731
    clean_o, clean_lse = run(k, v)
    schedule = key_block_schedule(n_q, n_k, block_m, block_n, True)
    checked = 0
    for c in range(block_n, n_k, block_n):
        k_bad, v_bad = k.clone(), v.clone()
        k_bad[..., c:, :] = float("nan")
        v_bad[..., c:, :] = float("nan")
        o, lse = run(k_bad, v_bad)
        for qb, (_, hi) in enumerate(schedule):
            if hi <= c:
                r = slice(qb * block_m, (qb + 1) * block_m)
                assert torch.equal(o[..., r, :], clean_o[..., r, :]) and torch.equal(lse[..., r], clean_lse[..., r])
                checked += 1
    assert checked > 0


# ----------------------------------------------------------------------------------------------
# Input checks, regions, stubs.
# ----------------------------------------------------------------------------------------------

def test_wrappers_reject_bad_inputs_clearly(tc_module, causal_module):
    q, k, v = qkv(4, 16, n_k=6, seed=0)
    for fn in (tc_module.tensor_core_attention, causal_module.causal_attention):
        with pytest.raises(ValueError, match=r"\(\.\.\., N, D\)"):
            fn(q[0], k, v)
        with pytest.raises(ValueError, match="zero keys"):
            fn(q, k[:0], v[:0])
        with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
            fn(q.to(torch.int32), k.to(torch.int32), v.to(torch.int32))
        with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
            fn(q, k.half(), v)
        with pytest.raises(ValueError):
            fn(q, k, v[:, :8])                     # V's head dim differs from K's
        with pytest.raises(ValueError, match="batch"):
            fn(q[None].expand(2, 4, 16), k[None], v[None])
        with pytest.raises(ValueError, match="1..256"):
            fn(*(torch.zeros(2, 300, device=device()) for _ in range(3)))
    q4, k4, v4 = qkv(4, 16, batch=(1, 3), seed=0)
    with pytest.raises(ValueError, match="4-D"):
        causal_module.causal_attention_forward(q4[0], k4[0], v4[0], True)
    with pytest.raises(ValueError, match="dividing"):
        causal_module.causal_attention_forward(q4, k4[:, :2], v4[:, :2], True)


def test_empty_query_and_regions(tc_module, causal_module):
    q, k, v = qkv(1, 16, n_k=5, seed=0)
    o, lse = causal_module.causal_attention(q[:0], k, v, causal=True)
    assert o.shape == (0, 16) and lse.shape == (0,)
    o, lse = tc_module.tensor_core_attention(q[:0], k, v)
    assert o.shape == (0, 16) and lse.shape == (0,)
    for ref, names in [("triton/05_mma", ["qk_on_tensor_cores", "pv_on_tensor_cores"]),
                       ("triton/06_causal", ["causal_stage_split"])]:
        for name in names:
            assert "tl." in read_region(ref, name)


@pytest.mark.cpu_tier("the interpreter runs a kernel's body as Python, so the stub's NotImplementedError surfaces; "
                     "a GPU compiler refuses the body instead (the compile gate's tests)")
@pytest.mark.parametrize("ref,call", [
    ("triton/05_mma", lambda m, q, k, v: m.tensor_core_attention(q, k, v)),
    ("triton/06_causal", lambda m, q, k, v: m.causal_attention(q, k, v, causal=True)),
])
def test_stub_without_solution_still_loads(tmp_path, ref, call):
    source = kernel_path(ref).read_text()
    stub, count = re.subn(r"( *)# BEGIN SOLUTION\n.*?# END SOLUTION\n", r"\1raise NotImplementedError()\n", source, flags=re.S)
    assert count >= 1  # 06: the masked stage's mask and the two bounds
    path = tmp_path / "stub.py"
    path.write_text(stub)
    module = load_triton_module(str(path))
    with pytest.raises(Exception) as info:  # the interpreter wraps it in an InterpreterError
        call(module, *qkv(8, 16, seed=0))
    assert isinstance(root_cause(info.value), NotImplementedError)


def test_default_exercise_cases_pass(tc_module, causal_module):
    assert course.check("05.mma_triton", tc_module.tensor_core_attention)
    assert course.check("06.causal_triton", causal_module.causal_attention)
