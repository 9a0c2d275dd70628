"""Lesson 07: the FlashAttention-2 backward (both dQ strategies) against the float64 oracle with the error budget.

O and LSE come from course.reference.attention (O rounded to the input dtype, LSE in float32), so only the
backward pass is under test. Budget per gradient: 2x the error of plain PyTorch autograd at the same dtype,
plus a few ulps.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch

import course
from course import Case
from course.grading.budget import attention_budget, plain_attention
from course.reference import attention, attention_backward
from track_support import device, qkv

pytestmark = [pytest.mark.gpu, pytest.mark.tier_devices]

F16 = torch.float16
EXERCISE = {"atomic": "07.backward_atomic_triton", "split": "07.backward_split_triton"}


@pytest.fixture(scope="module")
def bwd():
    from course.kernels import load_triton_module
    return load_triton_module("triton/07_backward")


def _inputs(case: Case, seed_salt: int = 1000):
    q, k, v = case.tensors()
    gen = torch.Generator().manual_seed(case.seed + seed_salt)
    do = torch.randn(q.shape, generator=gen, dtype=torch.float64).to(case.dtype)
    return q, k, v, do


def _direct_check(fn, case: Case, scale: float | None = None, yardstick: str = "autograd") -> None:
    """Compare fn's (dq, dk, dv) with the oracle; the yardstick is plain PyTorch at the case's dtype.

    yardstick="autograd": plain attention + .backward(do) (the budget's usual meaning).
    yardstick="saved_lse": plain PyTorch doing what any FlashAttention backward does, P = exp(S·scale - LSE)
    from the same float32 LSE, then the same four products (see test_fp32_peaky_...).
    """
    q, k, v, do = _inputs(case)
    s = case.d ** -0.5 if scale is None else scale
    fwd = attention(q, k, v, case.causal, scale=s)
    args = (t.to(device()) for t in (q, k, v, fwd.o.to(case.dtype), fwd.lse.float(), do))
    got = [g.cpu() for g in fn(*args, causal=case.causal, scale=s)]
    oracle = attention_backward(q, k, v, do, case.causal, scale=s)
    if yardstick == "autograd":
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        plain_attention(*leaves, causal=case.causal, scale=s).backward(do)
        plain = [t.grad for t in leaves]
    else:
        lse = fwd.lse.float()[..., None]
        sc = (q @ k.transpose(-1, -2)) * s
        if case.causal:
            sc = sc.masked_fill(~course.reference.causal_mask(case.n_q, case.n_k), float("-inf"))
        p = torch.exp(torch.where(torch.isinf(lse), float("-inf"), sc - lse))
        dp = do @ v.transpose(-1, -2)
        ds = p * (dp - (do * fwd.o.to(case.dtype)).sum(-1, keepdim=True))
        plain = [s * ds @ k, s * ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ do]
    for name, g, want, yard in zip(("dq", "dk", "dv"), got, oracle, plain):
        assert g.shape == want.shape and g.dtype == case.dtype, f"{name}: {g.shape} {g.dtype}"
        assert torch.isfinite(g).all(), f"{name} has NaN/inf on {case.describe()}"
        budget = attention_budget(want, yard, case.dtype)
        err = float((g.double() - want).abs().max()) if g.numel() else 0.0
        assert err <= budget.allowed, f"{name} on {case.describe()}: error {err:.3g} > budget {budget.allowed:.3g}"


def _check(bwd, case: Case, mode: str) -> None:
    fn = functools.partial(bwd.attention_backward, dq_mode=mode)
    if EXERCISE[mode] in course.EXERCISES:
        course.check(EXERCISE[mode], fn, cases=[case])
    else:  # the course's exercise is not registered yet: the same comparison, done here
        _direct_check(fn, case)


# Every N in {1, 17, 129, 300} and D in {16, 32, 64, 128}; causal and not; Nq < Nk and Nq > Nk with and
# without causal in both modes; fp32 and fp16; peaky (fp16: see the fp32 test below), batch dims.
CASES = [
    (Case(1, 1, 16), "atomic"),
    (Case(17, 17, 32, causal=True, batch=(2,), seed=1), "split"),
    (Case(129, 129, 64, kind="peaky", dtype=F16, seed=2), "atomic"),
    (Case(300, 300, 128, causal=True, dtype=F16, seed=3), "split"),
    (Case(17, 300, 64, causal=True, seed=4), "atomic"),
    (Case(300, 17, 16, causal=True, dtype=F16, seed=5), "atomic"),      # 283 rows see no key
    (Case(129, 300, 128, seed=6), "split"),
    (Case(300, 129, 32, kind="peaky", dtype=F16, seed=7), "split"),
    (Case(1, 129, 128, causal=True, dtype=F16, seed=8), "split"),
    (Case(129, 1, 32, causal=True, seed=9), "atomic"),                  # only the last row sees the key
    (Case(17, 129, 16, kind="peaky", dtype=F16, batch=(2, 3), seed=10), "atomic"),
    (Case(300, 300, 64, batch=(2,), seed=11), "split"),
    (Case(129, 17, 128, seed=12), "atomic"),
    (Case(17, 1, 64, causal=True, dtype=F16, seed=13), "split"),
    (Case(40, 40, 32, kind="constant_rows", causal=True, seed=14), "atomic"),
]


@pytest.mark.parametrize("case,mode", CASES, ids=[f"{m}-{c.describe()}" for c, m in CASES])
def test_backward_within_budget(bwd, case, mode):
    _check(bwd, case, mode)


@pytest.mark.parametrize("mode", ["atomic", "split"])
def test_custom_scale(bwd, mode):
    _direct_check(functools.partial(bwd.attention_backward, dq_mode=mode), Case(33, 70, 32, causal=True, seed=20),
                  scale=0.3)


@pytest.mark.parametrize("mode", ["atomic", "split"])
@pytest.mark.parametrize("causal", [False, True])
def test_fp32_peaky_against_saved_lse_yardstick(bwd, mode, causal):
    """fp32 with peaky scores (|S|, |LSE| ~ 500): judged against plain PyTorch *from the saved LSE*.

    Plain autograd renormalises each row itself, so the dominant probability is exp(S_max - S_max) = 1
    exactly. A backward that rebuilds P = exp(S - LSE) from a float32 LSE cannot: the LSE alone carries
    up to half an ulp of 500 (~3e-5) of rounding, and the recomputed S as much again, so P (and dV) has
    a relative error ~|LSE|·eps that autograd does not have. That is a property of the saved-LSE design
    (a self-consistent fp32 forward LSE has it too), not of this kernel, so here the yardstick is plain
    PyTorch doing the same recomputation at fp32.
    """
    case = Case(129, 65, 16, kind="peaky", causal=causal, seed=21)
    _direct_check(functools.partial(bwd.attention_backward, dq_mode=mode), case, yardstick="saved_lse")


def test_small_blocks_skip_and_mask_correctly(bwd, monkeypatch):
    """Uneven, small blocks: many causal tiles skipped on both sides of the diagonal, tails everywhere."""
    import triton
    small = {"preprocess_delta_kernel": triton.Config({"BLOCK_M": 16}, num_warps=4, num_stages=1),
             "dkdv_kernel": triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1),
             "dq_kernel": triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)}
    monkeypatch.setattr(bwd, "check_config", lambda d, dtype: small)
    # Nk - Nq = 17 and -15 put the first visible query of a key block one row past a query-block edge.
    for case in (Case(70, 87, 16, causal=True, seed=30), Case(129, 114, 32, causal=True, dtype=F16, seed=31),
                 Case(45, 70, 16, causal=False, seed=32)):
        for mode in ("atomic", "split"):
            _direct_check(functools.partial(bwd.attention_backward, dq_mode=mode), case)


def _run(bwd, case: Case, **kwargs):
    q, k, v, do = _inputs(case)
    fwd = attention(q, k, v, case.causal)
    args = (t.to(device()) for t in (q, k, v, fwd.o.to(case.dtype), fwd.lse.float(), do))
    return bwd.attention_backward(*args, causal=case.causal, **kwargs)


def test_the_two_dq_modes_agree(bwd):
    case = Case(129, 300, 64, causal=True, seed=40)
    atomic, split = _run(bwd, case, dq_mode="atomic"), _run(bwd, case, dq_mode="split")
    assert torch.equal(atomic[1], split[1]) and torch.equal(atomic[2], split[2])  # same dK/dV kernel
    tol = 16 * torch.finfo(torch.float32).eps * float(split[0].abs().max())  # dQ: another summation order
    assert float((atomic[0] - split[0]).abs().max()) <= tol


def test_split_mode_is_bitwise_deterministic(bwd):
    case = Case(129, 129, 32, causal=True, dtype=F16, seed=41)
    first, second = _run(bwd, case, dq_mode="split"), _run(bwd, case, dq_mode="split")
    alias = _run(bwd, case, deterministic=True)
    for a, b, c in zip(first, second, alias):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_rows_without_keys_get_zero_gradient_and_no_nan(bwd):
    case = Case(40, 9, 16, causal=True, kind="peaky", seed=42)  # rows 0..30 see no key (LSE = -inf)
    for mode in ("atomic", "split"):
        dq, dk, dv = _run(bwd, case, dq_mode=mode)
        assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
        assert torch.equal(dq[:31], torch.zeros_like(dq[:31]))


def test_bhnd_entry_matches_and_takes_strided_views(bwd):
    q, k, v = qkv(33, 32, n_k=50, batch=(2, 3), seed=43)
    do = torch.randn_like(q)
    fwd = attention(q, k, v, True)
    args = (q, k, v, fwd.o.float(), fwd.lse.float(), do)
    want = bwd.attention_backward(*args, causal=True)
    got = bwd.attention_backward_bhnd(*args, causal=True)
    # A (B, N, H, D) layout viewed as (B, H, N, D): not contiguous, must give the same answer.
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v, fwd.o.float(), do)]
    got_strided = bwd.attention_backward_bhnd(*strided[:4], fwd.lse.float(), strided[4], causal=True, dq_mode="split")
    for w, g, s in zip(want, got, got_strided):
        assert g.shape == w.shape and torch.equal(g, w)
        assert torch.allclose(s, w, atol=1e-5)
    with pytest.raises(ValueError, match=r"\(B, H, N, D\)"):
        bwd.attention_backward_bhnd(*(t[0] for t in args), causal=True)


def test_input_checks(bwd):
    q, k, v = qkv(8, 16, n_k=12, seed=44)
    o, lse = attention(q, k, v)
    o, lse, do = o.float(), lse.float(), torch.randn_like(q)
    f = bwd.attention_backward
    with pytest.raises(ValueError, match="dq_mode"):
        f(q, k, v, o, lse, do, dq_mode="fast")
    with pytest.raises(ValueError, match="zero keys"):
        f(q, k[:0], v[:0], o, lse, do)
    with pytest.raises(ValueError, match="head dim"):
        f(q, k[:, :8], v[:, :8], o, lse, do)
    with pytest.raises(ValueError, match="shape of q"):
        f(q, k, v, o, lse, do[:4])
    with pytest.raises(ValueError, match="lse"):
        f(q, k, v, o, lse[:4], do)
    with pytest.raises(ValueError, match="rank"):
        f(q[None], k, v, o, lse, do)
    with pytest.raises(ValueError, match="floating-point"):
        f(q.to(torch.int32), k, v, o, lse, do)
    with pytest.raises(ValueError, match="same shape"):
        f(q, k, v[:5], o, lse, do)


@pytest.mark.cpu_tier("the interpreter runs a kernel's body as Python, so the stub's NotImplementedError surfaces; "
                     "a GPU compiler refuses the body instead")
def test_stub_raises_not_implemented_and_regions_exist(tmp_path):
    from course.kernels import kernel_path, load_triton_module, read_region
    for name in ("preprocess_delta", "dkdv_inner_loop", "dq_atomic_add", "dq_split_kernel"):
        assert read_region("triton/07_backward", name).strip()
    source = kernel_path("triton/07_backward").read_text()
    stub = re.sub(r"^( *)# BEGIN SOLUTION\n.*?# END SOLUTION\n", r"\1# YOUR CODE HERE\n\1raise NotImplementedError()\n",
                  source, flags=re.S | re.M)
    # Δ; dK/dV's first query block and its loop; dQ's end and its loop
    assert stub.count("raise NotImplementedError()") == 5
    (tmp_path / "stub07.py").write_text(stub)
    module = load_triton_module(str(tmp_path / "stub07.py"))
    q, k, v = qkv(4, 16, seed=0)
    o, lse = attention(q, k, v)
    from course.errors import root_cause
    with pytest.raises(Exception) as info:  # the interpreter wraps it in an InterpreterError
        module.attention_backward(q, k, v, o.float(), lse.float(), torch.randn_like(q))
    assert isinstance(root_cause(info.value), NotImplementedError)
