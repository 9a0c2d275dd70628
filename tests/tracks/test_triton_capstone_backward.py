"""The capstone's own backward (kernels/triton/08_backward.py) on Triton's interpreter.

One launch computes dK and dV (a program per key block, the causal diagonal's query blocks masked, the fully
visible ones unmasked, those before the diagonal never visited) and dQ (a program per query block, unmasked key
blocks first, then the diagonal), with exp2 and no atomics. Checked here against the float64 oracle within the
error budget of lesson 07's checks: causal and not, Nq != Nk both ways, rows that see no key, grouped query
heads, odd lengths and head dims, every config of the tuning lists, the autotuned launch, determinism, and the
capstone calling it. The gradient, tuning-config and determinism tests run in the GPU suite too (marked gpu), on
the GPU's compiled kernels. Mutants of the file (a stage boundary moved, the ragged tail dropped) lose, so the checks can
fail. Shapes stay small: the interpreter runs every program one after another.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from triton.runtime.autotuner import Autotuner

from course import tiers
from course.grading.budget import attention_budget
from course.kernels import kernel_path, load_triton_module
from course.reference import attention, attention_backward
from course.tracks import triton as triton_track
from track_support import device, grouped_backward_case as _case

F16, F32 = torch.float16, torch.float32


@pytest.fixture(scope="module")
def bwd():
    return load_triton_module("triton/08_backward")


def _ratios(got, oracle, plain, dtype) -> dict[str, float]:
    """error / budget of dQ, dK, dV (at most 1 passes: lesson 07's budget)."""
    assert all(torch.isfinite(g).all() for g in got), "a gradient is NaN or infinite"
    return {name: attention_budget(w, p, dtype).ratio(float((g.cpu().double() - w).abs().max()))
            for name, g, w, p in zip(("dq", "dk", "dv"), got, oracle, plain)}


# (Nq, Nk, D, dtype, query heads, K/V heads, causal): both masks, Nq < Nk and Nq > Nk (rows that see no key),
# grouped heads, lengths 1, 17 and 300, head dims from 16 to 256 (odd ones padded), fp16 and fp32.
CASES = [(37, 70, 40, F16, 2, 1, True), (70, 37, 40, F16, 2, 1, True), (17, 17, 16, F32, 1, 1, False),
         (1, 300, 64, F16, 4, 2, True), (300, 1, 24, F16, 1, 1, True), (65, 65, 72, F32, 2, 2, True),
         (33, 20, 256, F16, 2, 1, False), (40, 70, 136, F16, 2, 1, True), (20, 33, 96, F32, 4, 2, False)]


@pytest.mark.gpu
@pytest.mark.tier_devices
@pytest.mark.parametrize("n_q, n_k, d, dtype, heads, kv_heads, causal", CASES,
                         ids=[f"{c[0]}x{c[1]}-D{c[2]}-{str(c[3])[-7:]}-H{c[4]}/{c[5]}-{'causal' if c[6] else 'full'}"
                              for c in CASES])
def test_gradients_match_the_oracle(bwd, n_q, n_k, d, dtype, heads, kv_heads, causal):
    args, oracle, plain = _case(n_q, n_k, d, dtype, heads, kv_heads, causal, seed=n_q + d)
    got = bwd.attention_backward_bhnd(*args, causal=causal)
    assert [g.dtype for g in got] == [dtype] * 3
    assert tuple(got[1].shape) == (1, kv_heads, n_k, d)
    ratios = _ratios(got, oracle, plain, dtype)
    assert max(ratios.values()) <= 1, ratios


@pytest.mark.gpu
@pytest.mark.tier_devices
def test_rows_that_see_no_key_get_zero_gradients(bwd):
    """Nq = 50 > Nk = 20, causal: query rows 0..29 see no key (LSE = -inf); their dQ is exactly 0, never NaN."""
    args, oracle, plain = _case(50, 20, 32, F16, causal=True, seed=5)
    assert torch.isinf(args[4][0, 0, :30]).all()
    got = bwd.attention_backward_bhnd(*args, causal=True)
    assert torch.equal(got[0][:, :, :30].cpu(), torch.zeros_like(got[0][:, :, :30].cpu()))
    assert max(_ratios(got, oracle, plain, F16).values()) <= 1


@pytest.mark.gpu
@pytest.mark.tier_devices
def test_the_leading_dims_wrapper_and_an_explicit_scale(bwd):
    """attention_backward on (2, 3, N, D) tensors (every leading dim flattened), fp32, scale 0.3, causal."""
    gen = torch.Generator().manual_seed(7)
    q, do = (torch.randn(2, 3, 17, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(2, 3, 30, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    fwd = attention(q, k, v, True, scale=0.3)
    oracle = attention_backward(q, k, v, do, True, scale=0.3)
    got = bwd.attention_backward(*(t.float().to(device()) for t in (q, k, v, fwd.o, fwd.lse, do)), causal=True,
                                 scale=0.3)
    for g, w in zip(got, (oracle.dq, oracle.dk, oracle.dv)):
        assert g.shape == w.shape and float((g.cpu().double() - w).abs().max()) <= 1e-4 * max(1.0, float(w.abs().max()))


# Each regime of the tuning lists (head dims padded to 64, 128, 256; 16-bit and fp32 tiles), at a head dim that is
# not a power of two.
REGIMES = [(40, F16), (40, F32), (72, F16), (72, F32), (136, F16), (136, F32)]


@pytest.mark.gpu
@pytest.mark.tier_devices
@pytest.mark.parametrize("d, dtype", REGIMES, ids=[f"D{d}-{str(t).split('.')[1]}" for d, t in REGIMES])
def test_every_tuning_config_is_right(bwd, d, dtype):
    configs = bwd.tuning_configs(d, dtype)
    assert configs[0] == bwd.check_config(d, dtype)["bwd_kernel"]
    args, oracle, plain = _case(37, 70, d, dtype, seed=d)
    for config in configs:
        got = bwd.attention_backward_bhnd(*args, causal=True, configs={"bwd_kernel": config})
        ratios = _ratios(got, oracle, plain, dtype)
        assert max(ratios.values()) <= 1, (str(config), ratios)


def test_the_tutorial_tiles_are_a_candidate_at_d64(bwd):
    """32 query rows × 128 keys for dK/dV and 128 × 32 for dQ, 4 warps, 5 stages: Triton's tutorial's D 64 config."""
    labels = {(c.kwargs["BLOCK_M1"], c.kwargs["BLOCK_N1"], c.kwargs["BLOCK_M2"], c.kwargs["BLOCK_N2"], c.num_warps,
               c.num_stages) for c in bwd.tuning_configs(64, F16)}
    assert (32, 128, 128, 32, 4, 5) in labels


@pytest.fixture
def trials(monkeypatch):
    """Replace the autotuner's timing by one real run of each config; later configs "time" faster."""
    runs: list[int] = []

    def bench(kernel_call, quantiles):
        kernel_call()
        runs.append(1)
        return [100.0 - len(runs)] * 3
    monkeypatch.setattr(Autotuner, "do_bench", property(lambda self: bench))
    return runs


def test_a_benchmark_autotunes_and_a_check_does_not(trials):
    bwd = load_triton_module("triton/08_backward")  # a fresh module: an autotuner that remembers nothing
    args, oracle, plain = _case(40, 70, 16, F16, seed=8)
    bwd.attention_backward_bhnd(*args, causal=True)
    with triton_track.autotune(False):
        bwd.attention_backward_bhnd(*args, causal=True)
    assert not trials
    with triton_track.autotune():
        got = bwd.attention_backward_bhnd(*args, causal=True)
    assert len(trials) == len(bwd.tuning_configs(16, F16)) > 1
    assert bwd.bwd_tuned.best_config == bwd.tuning_configs(16, F16)[-1]
    assert max(_ratios(got, oracle, plain, F16).values()) <= 1


@pytest.mark.gpu
@pytest.mark.tier_devices
def test_deterministic_same_bits_and_no_atomics_in_the_kernels(bwd):
    """Two calls give the same bits (on a GPU too: nothing is added to memory twice, which the source shows)."""
    args, _, _ = _case(45, 70, 24, F16, heads=4, kv_heads=2, seed=9)
    first, second = (bwd.attention_backward_bhnd(*args, causal=True) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert "atomic" not in _kernels_source() and "tl.math.exp2" in _kernels_source()
    assert "tl.exp(" not in _kernels_source()


def _kernels_source() -> str:
    text = kernel_path("triton/08_backward").read_text()
    return text.split("# ---- given code below this line")[0].split("import triton.language as tl")[1]


def test_the_capstone_calls_this_backward():
    """flash_attention's gradients are this file's, bit for bit (deterministic=False too: no atomic design left)."""
    fa = load_triton_module("triton/08_flash_attention")
    (q, k, v, _, _, do), oracle, plain = _case(33, 50, 16, F16, heads=4, kv_heads=2, seed=10)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = fa.flash_attention(*leaves, causal=True)
    o.backward(do)
    _, lse = fa._forward.causal_attention_forward(q, k, v, True, 16 ** -0.5)
    own = load_triton_module("triton/08_backward").attention_backward_bhnd(q, k, v, o.detach(), lse, do, causal=True)
    assert all(torch.equal(leaf.grad, g) for leaf, g in zip(leaves, own))
    assert max(_ratios([t.grad for t in leaves], oracle, plain, F16).values()) <= 1


def test_a_bad_head_mapping_is_refused_with_lesson_07s_message(bwd):
    args, _, _ = _case(10, 12, 16, F32, heads=3, kv_heads=3, seed=11)
    q, k, v, o, lse, do = args
    with pytest.raises(ValueError, match="k and v must have a head count dividing q's"):
        bwd.attention_backward_bhnd(q, k[:, :2], v[:, :2], o, lse, do)


# -- the checks above can fail: mutants of the kernel file lose -------------------------------------------------------
MUTANTS = {
    # the diagonal's query blocks go through the unmasked stage: they see keys right of the diagonal
    "dkdv-diagonal-unmasked": ("mid = tl.maximum(tl.cdiv(tl.maximum(start_n + BLOCK_N1 - 1 - diag, 0), BLOCK_M1) "
                               "* BLOCK_M1, lo)", "mid = lo"),
    # the dQ programs' unmasked stage runs up to the last whole key block, past the diagonal
    "dq-diagonal-unmasked": ("lo = tl.minimum(tl.maximum(start_m + diag + 1, 0) // BLOCK_N2 * BLOCK_N2, full_k)",
                             "lo = full_k"),
    # the ragged last query block is never visited by the dK/dV programs
    "ragged-tail-dropped": ("offs_n, d_ok, n_q, diag, qk_scale, tail, n_q,", "offs_n, d_ok, n_q, diag, qk_scale, n_q, n_q,"),
    # the first query block visited starts one block late
    "dkdv-starts-late": ("lo = tl.maximum(start_n - diag, 0) // BLOCK_M1 * BLOCK_M1",
                         "lo = tl.maximum(start_n - diag, 0) // BLOCK_M1 * BLOCK_M1 + BLOCK_M1"),
}


@pytest.mark.parametrize("name", MUTANTS)
def test_a_moved_stage_boundary_loses(name, tmp_path: Path):
    old, new = MUTANTS[name]
    text = kernel_path("triton/08_backward").read_text()
    assert text.count(old) == 1, name
    mutant = tmp_path / ("mutant_" + name.replace("-", "_") + ".py")
    mutant.write_text(text.replace(old, new))
    module = load_triton_module(str(mutant))
    causal = name != "ragged-tail-dropped"
    args, oracle, plain = _case(45, 70, 16, F16, causal=causal, seed=12)
    ratios = _ratios(module.attention_backward_bhnd(*args, causal=causal), oracle, plain, F16)
    assert max(ratios.values()) > 1, (name, ratios)


def test_the_graders_provenance_check_takes_this_backward_first_and_names_it():
    """course.lessons.capstone.KernelAnswers recomputes the gradients with this backward (the solution's) first and
    still accepts lesson 07's designs; one unit in the last place off is refused, naming this file."""
    from course.errors import CheckFailed
    from course.lessons import lesson08
    from course.lessons.capstone import DQ_MODES, KernelAnswers
    assert DQ_MODES == ("capstone", "atomic", "split")
    (q, k, v, _, _, do), _, _ = _case(20, 33, 16, F32, heads=4, kv_heads=2, seed=13)
    own = KernelAnswers(q, k, v, True, None)
    ours = load_triton_module("triton/08_backward").attention_backward_bhnd(q, k, v, own.o, own.lse, do, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(ours, own.gradients(do, "capstone")))
    text = "q (1, 4, 20, 16), k (1, 2, 33, 16)"
    lesson08._from_the_kernels("08.flash_attention_triton", text, (own.o, *ours), own, do)
    lesson08._from_the_kernels("08.flash_attention_triton", text, (own.o, *own.gradients(do, "split")), own, do)
    if not tiers.triton_interpreted():
        return  # on a GPU a last bit of dK is within the comparison's few units in the last place
    nudged = (own.o, ours[0], torch.nextafter(ours[1], torch.full_like(ours[1], float("inf"))), ours[2])
    with pytest.raises(CheckFailed, match=r"the gradients dk are not what the capstone's backward "
                                          r"\(kernels/triton/08_backward\.py\) gives"):
        lesson08._from_the_kernels("08.flash_attention_triton", text, nudged, own, do)
