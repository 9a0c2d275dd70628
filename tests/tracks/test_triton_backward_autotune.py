"""Lesson 07's backward inside a benchmark: autotuned over its tuning configs, with the atomic dQ reset.

An autotuner times a launch by running it, once per config (and more on a GPU). In atomic mode the dK/dV
kernel *adds* its share of dQ into a float32 buffer, so unless that buffer is zeroed before every trial,
the dQ of the launch that counts carries the trials' dQ too. Triton's interpreter runs the autotuner for
real here; only its timing is replaced (there is nothing to time on a CPU), by one run of the kernel per
config and a made-up time that makes the last config the fastest.

Every config of every tuning list is also run on the interpreter against the float64 oracle, with grouped
heads (two query heads per K/V head) and the causal mask. The interpreter proves the block sizes; warps and
stages only matter to the compiler (tests/tools/test_triton_gate.py compiles them).
"""
from __future__ import annotations

import itertools

import pytest
import torch
import triton
from triton.runtime.autotuner import Autotuner

from course.grading.budget import attention_budget
from course.kernels import load_triton_module
from course.tracks import triton as triton_track
from track_support import grouped_backward_case as _case


@pytest.fixture
def bwd():
    return load_triton_module("triton/07_backward")  # a fresh module: autotuners that remember nothing


def _errors(got, oracle, plain, dtype) -> dict[str, float]:
    """error / budget of dQ, dK, dV (at most 1 passes)."""
    return {name: attention_budget(w, p, dtype).ratio(float((g.cpu().double() - w).abs().max()))
            for name, g, w, p in zip(("dq", "dk", "dv"), got, oracle, plain)}


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


def _tuned_backward(bwd, args, dq_mode="atomic"):
    with triton_track.autotune():
        return bwd.attention_backward_bhnd(*args, causal=True, dq_mode=dq_mode)


F16 = torch.float16  # the tensor-core dtype: fp32 tiles tune the dQ kernel only


def test_autotuned_atomic_dq_is_reset_between_trials(bwd, trials):
    args, oracle, plain = _case(40, 70, 16, F16, seed=1)
    n_configs = len(bwd.tuning_configs(16, F16)["dkdv_kernel"])
    assert n_configs > 1
    got = _tuned_backward(bwd, args)
    assert len(trials) == n_configs, "every config of the dK/dV list is tried once"
    assert bwd.dkdv_tuned.best_config == bwd.tuning_configs(16, F16)["dkdv_kernel"][-1]
    ratios = _errors(got, oracle, plain, F16)
    assert max(ratios.values()) <= 1, ratios


def test_without_the_reset_the_trials_dq_adds_up(bwd, trials, monkeypatch):
    """The control: the same autotuner without reset_to_zero leaves every trial's dQ in the buffer."""
    tuner = bwd.dkdv_tuned
    careless = triton.autotune(configs=tuner.configs, key=tuner.keys,
                               prune_configs_by={"early_config_prune": tuner.early_config_prune})(bwd.dkdv_kernel)
    monkeypatch.setattr(bwd, "dkdv_tuned", careless)
    args, oracle, plain = _case(40, 70, 16, F16, seed=1)
    got = _tuned_backward(bwd, args)
    n_runs = len(trials) + 1
    ratios = _errors(got, oracle, plain, F16)
    assert ratios["dq"] > 1 and ratios["dk"] <= 1 and ratios["dv"] <= 1, ratios
    off = float((got[0].cpu().double() - n_runs * oracle[0]).abs().max())
    assert off <= 1e-2 * n_runs * float(oracle[0].abs().max()), "dQ counted once per run"


def test_the_split_dq_kernel_autotunes_too(bwd, trials):
    args, oracle, plain = _case(40, 70, 16, F16, seed=2)
    got = _tuned_backward(bwd, args, dq_mode="split")
    lists = bwd.tuning_configs(16, F16)
    assert len(trials) == len(lists["dkdv_kernel"]) + len(lists["dq_kernel"])
    assert bwd.dq_tuned.best_config == lists["dq_kernel"][-1]
    assert max(_errors(got, oracle, plain, F16).values()) <= 1


def test_a_check_never_autotunes_the_backward(bwd, trials):
    args, _, _ = _case(20, 33, 16, torch.float32, seed=3)
    bwd.attention_backward_bhnd(*args, causal=True)
    with triton_track.autotune(False):
        bwd.attention_backward_bhnd(*args, causal=True)
    assert not trials


# Each regime of the tuning lists (head dims padded to 64, 128 and 256; 16-bit and fp32 tiles), at a head dim
# that is not a power of two, so the padded columns are exercised too.
REGIMES = [(40, torch.float16), (40, torch.float32), (72, torch.float16), (72, torch.float32),
           (136, torch.float16), (136, torch.float32)]


@pytest.mark.parametrize("d, dtype", REGIMES, ids=[f"D{d}-{str(t).split('.')[1]}" for d, t in REGIMES])
def test_every_tuning_config_is_right_on_the_interpreter(bwd, d, dtype):
    lists = bwd.tuning_configs(d, dtype)
    args, oracle, plain = _case(37, 70, d, dtype, seed=d)
    pairs = list(itertools.zip_longest(lists["dkdv_kernel"], lists["dq_kernel"]))
    for dkdv, dq in pairs:
        for mode in ("atomic", "split"):
            configs = {"dkdv_kernel": dkdv or lists["dkdv_kernel"][0], "dq_kernel": dq or lists["dq_kernel"][0]}
            got = bwd.attention_backward_bhnd(*args, causal=True, dq_mode=mode, configs=configs)
            ratios = _errors(got, oracle, plain, dtype)
            assert max(ratios.values()) <= 1, (mode, {k: str(c) for k, c in configs.items()}, ratios)


def test_the_capstone_autotunes_its_backward_inside_a_benchmark(trials):
    """Lesson 08 inside autotune(): the forward records the choice on ctx, so the backward (which autograd may
    run on another thread, outside the block) autotunes as well; the gradients stay right."""
    fa = load_triton_module("triton/08_flash_attention")
    (q, k, v, _, _, do), oracle, plain = _case(40, 70, 16, F16, heads=4, kv_heads=2, seed=4)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    with triton_track.autotune():
        o = fa.flash_attention(*leaves, causal=True)
    o.backward(do)  # outside the block, as a benchmark's autograd.grad may be
    assert fa._backward.bwd_tuned.best_config == fa._backward.tuning_configs(16, F16)[-1]  # the capstone's own backward
    assert max(_errors([t.grad for t in leaves], oracle, plain, F16).values()) <= 1


# Tuning configs that spill in the gate's sm_90 build and stay in the lists because a GPU timed them fastest all
# the same (the H200 backward sweep, docs/benchmarks.md): (kernel, head dim, config).
MEASURED_FASTEST_DESPITE_SPILLS = {("dkdv_kernel", 64, "M128 N128 w8 s2"), ("dkdv_kernel", 128, "M32 N64 w4 s2"),
                                   ("dkdv_kernel", 64, "M64 N64 w4 s2")}  # 64×64: 44 bytes with Triton 3.6, GQA


@pytest.mark.slow
def test_every_tuning_config_compiles_for_sm90_without_spills():
    """The compile gate on the launches a benchmark makes (fp16, D 64 and 128, causal, with and without grouped
    heads, atomic and split dQ): every config of the tuning lists compiles for sm_90, and none spills but those a
    GPU measured fastest anyway (MEASURED_FASTEST_DESPITE_SPILLS); the check configs never do."""
    from course.tracks.triton_compile import Matrix, run_gate
    report = run_gate(Matrix(lessons=("07_backward",), dtypes=("fp16",), head_dims=(64, 128), causal=(True,),
                             targets=(90,), gqa=True, tuned=True, all_configs=True))
    assert report.ok, report.summary() + "\n\n" + report.errors()
    rows = [r for r in report.results if r.kernel in ("dkdv_kernel", "dq_kernel")]
    if any(r.limit for r in rows):
        pytest.skip(f"this Triton's registers cannot be read: {next(r.limit for r in rows if r.limit)}")
    compiled = {(r.kernel, r.head_dim, r.variant.startswith("GQA"), r.config) for r in rows if r.status == "ok"}
    for d in (64, 128):
        for kernel, configs in load_triton_module("triton/07_backward").tuning_configs(d, torch.float16).items():
            for c in configs:
                label = f"M{c.kwargs['BLOCK_M']} N{c.kwargs['BLOCK_N']} w{c.num_warps} s{c.num_stages}"
                assert {(kernel, d, False, label), (kernel, d, True, label)} <= compiled, (kernel, d, label)
    spilling = [f"{r.label}: {r.spills} bytes" for r in rows
                if r.spills and (r.kernel, r.head_dim, r.config) not in MEASURED_FASTEST_DESPITE_SPILLS]
    assert not spilling and all(r.regs and r.regs <= 255 for r in rows), spilling
    check = load_triton_module("triton/07_backward").check_config
    checks = {(kernel, d, f"M{c.kwargs['BLOCK_M']} N{c.kwargs['BLOCK_N']} w{c.num_warps} s{c.num_stages}")
              for d in (64, 128) for kernel, c in check(d, torch.float16).items() if kernel != "preprocess_delta_kernel"}
    assert not [r.label for r in rows if r.spills and (r.kernel, r.head_dim, r.config) in checks]
